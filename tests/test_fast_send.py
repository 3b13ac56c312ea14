"""A roll call's sends written straight to the socket (web/fast_send.py): found behind middleware's wrappers,
and refused (so the caller takes the ordinary ASGI path) wherever the server's own send would wait or fail."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.websockets import WebSocketState

from web.fast_send import server_protocol, write_now


class Conn:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send_text(self, data: bytes) -> None:
        self.sent.append(b"\x81" + bytes([len(data)]) + data)

    def data_to_send(self) -> list[bytes]:
        out, self.sent = self.sent, []
        return out


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closing


class Protocol:
    """The attributes uvicorn's sans-I/O websockets protocol has (uvicorn 0.55)."""

    def __init__(self) -> None:
        self.conn, self.transport = Conn(), Transport()
        self.writable = asyncio.Event()
        self.writable.set()
        self.close_sent = self.disconnected = False
        self.handshake_complete = True
        self.initial_response: Any = None

    async def asgi_send(self, message: Any) -> None:
        raise AssertionError("the direct path never awaits the ASGI send")


class Socket:
    def __init__(self, send: Any) -> None:
        self._send = send
        self.application_state = WebSocketState.CONNECTED


def wrapped(send: Any) -> Any:
    """What Starlette's exception handling does to every scope's send: a closure that passes messages on."""
    started = False

    async def sender(message: Any) -> None:
        nonlocal started
        started = True
        await send(message)

    return sender


def test_the_server_protocol_is_found_behind_wrappers_and_written_to_at_once() -> None:
    proto = Protocol()
    send = wrapped(wrapped(proto.asgi_send))
    assert server_protocol(send) is proto and server_protocol(proto.asgi_send) is proto
    assert server_protocol(send, depth=1) is None  # at most `depth` wrappers are followed
    assert server_protocol(print) is None and server_protocol(wrapped(print)) is None  # another server: none
    ws = Socket(send)
    assert write_now(ws, '{"type": "challenge"}', proto)  # type: ignore[arg-type]
    assert proto.transport.written == [b"\x81\x15" + b'{"type": "challenge"}']


def test_nothing_is_written_where_the_servers_own_send_would_wait_or_fail() -> None:
    for spoil in ("writable", "close_sent", "disconnected", "handshake", "initial_response", "closing", "state",
                  "none"):
        proto = Protocol()
        ws = Socket(proto.asgi_send)
        if spoil == "writable":
            proto.writable.clear()  # flow control: the transport's buffer is full
        elif spoil in ("close_sent", "disconnected"):
            setattr(proto, spoil, True)
        elif spoil == "handshake":
            proto.handshake_complete = False
        elif spoil == "initial_response":
            proto.initial_response = (403, [], b"")
        elif spoil == "closing":
            proto.transport.closing = True
        elif spoil == "state":
            ws.application_state = WebSocketState.DISCONNECTED
        assert not write_now(ws, "x", None if spoil == "none" else proto), spoil  # type: ignore[arg-type]
        assert proto.transport.written == [], spoil
