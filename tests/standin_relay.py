"""A stand-in relay for failure injection in the server-node tests (an outage followed by recovery, a 5xx,
a chosen refusal): the real relay (tests/relay_process.py) is used wherever its own behaviour is under
test. It is a real HTTP server on 127.0.0.1 that serves a signed beacon and verifies posted profiles with
the same capsule.signing code; its mode decides the answer (201, a 4xx problem, or 503)."""

from __future__ import annotations

import json
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from capsule.signing import sign, verify_record
from common.keys import NodeKey


class StandinRelay:
    def __init__(self) -> None:
        self.key = NodeKey.generate()
        self.beacon = sign("Beacon", {"relay": self.key.node_id, "round": 42, "value": secrets.token_hex(32),
                                      "prev": secrets.token_hex(32), "issued_at": int(time.time())}, self.key)
        self.received: list[dict[str, Any]] = []
        self.mode = "ok"
        relay = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/beacon":
                    self._send(200, relay.beacon)
                else:
                    self._send(404, {"code": "not_found"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if relay.mode == "down":
                    self._send(503, {"code": "unavailable", "title": "relay overloaded"})
                    return
                if relay.mode == "refuse":
                    self._send(422, {"code": "stale_beacon", "title": "beacon round too old",
                                     "detail": "round 0 is not a round of this relay"})
                    return
                verify_record("NodeProfile", body)
                relay.received.append(body)
                self._send(201, {"status": "stored"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StandinRelay:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
