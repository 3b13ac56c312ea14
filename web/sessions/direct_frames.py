"""A roll call's challenges written straight to each session's socket, as WebSocket frames built beforehand.

Why: a roll call sends every live session its challenge back to back, and each answer is timed from its own
send, so the spread from the first send to the last is what identities sent late gain (docs/protocol.md). At
10,000 sessions on one core, with the load generator at idle priority beside it (2026-12-07, AMD EPYC family 26
model 2), the sends through ASGI (Starlette's send_text, uvicorn's send, websockets' framing) took 121 ms; the
same frames built beforehand and written straight to each transport took 76 ms, most of it the kernel's
loopback write. The frames, and whether each socket can take one now, are settled before the first send, with
the JSON, outside the spread; what is left between two sends is the clock read and the write.

Only for uvicorn's websockets-sansio protocol (what uvicorn runs when websockets is installed), recognised by
what it has; with any other server, or a socket that cannot take a frame now (closing, closed, its writes
paused by flow control), there is no writer and the caller sends through ASGI, which handles each case.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send
from websockets.protocol import State

SCOPE_KEY = "ce_bench.direct_frames"  # where a WebSocket scope carries its FrameWriter


def text_frame(text: str) -> bytes:
    """One unfragmented, unmasked text frame (RFC 6455 5.2: a server's frames are never masked). A frame without
    RSV1 is uncompressed, so it is valid whether or not permessage-deflate was negotiated (RFC 7692 6)."""
    payload = text.encode()
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", 0x81, n)
    elif n < 1 << 16:
        header = struct.pack("!BBH", 0x81, 126, n)
    else:
        header = struct.pack("!BBQ", 0x81, 127, n)
    return header + payload


class FrameWriter:
    """Writes built frames to one session's socket while its protocol says the socket may take one."""

    __slots__ = ("_protocol",)

    _NEEDS = ("transport", "conn", "handshake_complete", "close_sent", "disconnected", "initial_response", "writable")

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol

    @classmethod
    def of(cls, send: Send) -> FrameWriter | None:
        """The writer for the server's own `send` (uvicorn's protocol method), or None for anything else."""
        protocol = getattr(send, "__self__", None)
        if protocol is None or not all(hasattr(protocol, name) for name in cls._NEEDS):
            return None
        return cls(protocol)

    def writer(self) -> Callable[[bytes], object] | None:
        """The socket's write where it can take a frame now; None where ASGI must send it (see the module's
        docstring). Good until the event loop next runs: the caller writes before it awaits anything, so the
        socket's state cannot change in between, and uvicorn writes each of its frames in one step, so the two
        never interleave within a frame."""
        p = self._protocol
        if (not p.handshake_complete or p.close_sent or p.disconnected or p.initial_response is not None
                or not p.writable.is_set() or p.transport.is_closing() or p.conn.state is not State.OPEN):
            return None
        write: Callable[[bytes], object] = p.transport.write
        return write


class DirectFrames:
    """ASGI middleware, outermost: gives each WebSocket scope a FrameWriter for the server's socket (the `send`
    it is called with is uvicorn's own; Starlette wraps it further in)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            writer = FrameWriter.of(send)
            if writer is not None:
                scope[SCOPE_KEY] = writer
        await self.app(scope, receive, send)
