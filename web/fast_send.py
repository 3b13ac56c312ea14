"""A roll call's sends written straight to each socket (issue 32: the send spread at 10,000 sessions).

Through Starlette and uvicorn's ASGI `send`, one text frame cost ~24 us of coroutines on the event loop (242 ms
for 10,000 sessions, BENCHMARKS.md), and a machine whose identities were sent s apart has the deadline plus s
to answer them all. uvicorn's sans-I/O websockets protocol frames a message with `conn.send_text` and writes
it with `transport.write`, both synchronous; this does the same without the awaits, and only where that is
what the ASGI send would do now: the handshake done, nothing closed, the transport writable (no flow-control
pause). Anything else (another server, a full buffer, a closing socket) answers False, and the caller sends
the ordinary way. Frames never interleave: every write is one whole frame, on the loop's one thread.
"""

from __future__ import annotations

from typing import Any

from starlette.websockets import WebSocket, WebSocketState

NEEDED = ("conn", "transport", "writable", "close_sent", "disconnected", "handshake_complete", "initial_response")


def server_protocol(send: Any, depth: int = 6) -> Any | None:
    """The uvicorn protocol behind an ASGI send, when it is the sans-I/O one (else None). Middleware may wrap
    the server's send in a closure that only passes messages on (Starlette's exception handling does, for
    every scope): the callables such a closure holds are followed, `depth` wrappers at most."""
    proto = getattr(send, "__self__", None)
    if proto is not None and all(hasattr(proto, a) for a in NEEDED):
        return proto
    if depth <= 0:
        return None
    for cell in getattr(send, "__closure__", None) or ():
        inner = cell.cell_contents if callable(getattr(cell, "cell_contents", None)) else None
        found = server_protocol(inner, depth - 1) if inner is not None else None
        if found is not None:
            return found
    return None


def write_now(ws: WebSocket, text: str, proto: Any | None) -> bool:
    """Frames and writes `text` at once as the server's own send would (`proto`: server_protocol of the
    WebSocket's send); False where it cannot now."""
    if ws.application_state != WebSocketState.CONNECTED:
        return False
    if (proto is None or proto.disconnected or proto.close_sent or not proto.handshake_complete
            or proto.initial_response is not None or not proto.writable.is_set() or proto.transport.is_closing()):
        return False
    proto.conn.send_text(text.encode())
    proto.transport.write(b"".join(proto.conn.data_to_send()))
    return True
