"""A node's live session with its relay (WS /v1/live, protocol in web/live.py): signed heartbeats at
the interval the relay asks for, answers to RTT pings. Runs in a background thread."""

from __future__ import annotations

import json
import ssl
import threading
import time
from typing import Any

from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from capsule.model import LINK_RTT_MAX_MS, LINK_RTT_MIN_MS
from capsule.signing import Signer, check_signature, default_verify, node_id, sign


class LiveSession:
    def __init__(self, relay_url: str, signer: Signer, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.url = relay_url.replace("http://", "ws://").replace("https://", "wss://").rstrip("/") + "/v1/live"
        self.signer = signer
        self.acks = 0
        self.links = 0
        self.errors: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-session", daemon=True)

    def start(self) -> LiveSession:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._session()
            except (OSError, WebSocketException) as exc:
                self.errors.append({"type": "error", "code": "connection", "detail": str(exc)})
            self._stop.wait(2.0)  # reconnect after a pause

    def _cosign(self, ws: Any, sample: Any, relay_id: str) -> None:
        """Signs the relay's measurement of this node's link after checking it describes that link."""
        me = node_id(self.signer)
        if (not isinstance(sample, dict) or sample.get("a") != me or sample.get("b") != relay_id
                or not isinstance(sample.get("rtt_ms"), int | float)
                or not LINK_RTT_MIN_MS <= sample["rtt_ms"] <= LINK_RTT_MAX_MS):
            self.errors.append({"type": "error", "code": "refused_cosign", "detail": "not a sample of my link"})
            return
        try:  # the relay's half first: never co-sign what the relay did not sign
            check_signature("LinkSample", sample, "sig_b", relay_id, default_verify())
        except ValueError as exc:
            self.errors.append({"type": "error", "code": "refused_cosign", "detail": str(exc)})
            return
        ws.send(json.dumps({"type": "cosigned", "sample": sign("LinkSample", sample, self.signer, "sig_a")}))
        self.links += 1

    def _session(self) -> None:
        with connect(self.url, open_timeout=10, ssl=self.ssl_context) as ws:
            welcome = json.loads(ws.recv(timeout=10))
            interval = float(welcome["heartbeat_interval_s"])
            seq, next_beat = 0, 0.0
            while not self._stop.is_set():
                if time.monotonic() >= next_beat:
                    beat = sign("Heartbeat", {"node_id": node_id(self.signer), "session": welcome["session"],
                                              "seq": seq, "sent_at": int(time.time())}, self.signer)
                    ws.send(json.dumps({"type": "heartbeat", "heartbeat": beat}))
                    seq += 1
                    next_beat = time.monotonic() + interval / 2  # two beats per interval: one may be late
                try:
                    frame = ws.recv(timeout=0.5)
                except TimeoutError:
                    continue
                if isinstance(frame, bytes):  # the relay's bandwidth probe: acknowledge at once
                    ws.send(json.dumps({"type": "bw_ack", "n": len(frame)}))
                    continue
                message = json.loads(frame)
                if message.get("type") == "ping":
                    ws.send(json.dumps({"type": "pong", "id": message["id"]}))
                elif message.get("type") == "ack":
                    self.acks += 1
                elif message.get("type") == "cosign":
                    self._cosign(ws, message.get("sample"), welcome["relay"])
                elif message.get("type") == "error":
                    self.errors.append(message)
