"""A roll call's challenges written straight to each socket (web/sessions/direct_frames.py, issue 32): the frames
are valid WebSocket frames by the websockets library's own parser, a real relay under uvicorn sends its roll-call
challenges that way (by /metrics) and real clients read them, and a socket that cannot take a frame now gets no
writer (the roll call then sends through ASGI)."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.streams import StreamReader

from bench.relay_sessions import beats, register_nodes
from common.keys import NodeKey
from tests.relay_process import RelayProcess
from tests.threaded import in_thread
from web.sessions.direct_frames import FrameWriter, text_frame

# a roll call every 3 s (rounds of 1 s); no solo challenges
RELAY = ["--ip-rate", "100000", "--beacon-interval", "1", "--roll-call-interval-s", "3", "--roll-call-min-gap-s", "3",
         "--roll-call-target-s", "1", "--challenge-first-after", "100000"]


def parsed(frame: bytes) -> Frame:
    """The frame as websockets parses what a client receives (unmasked, no extensions)."""
    reader = StreamReader()
    reader.feed_data(frame)
    parser = Frame.parse(reader.read_exact, mask=False)
    try:
        next(parser)
    except StopIteration as done:
        result: Frame = done.value
        assert not reader.buffer, f"{len(reader.buffer)} bytes left after the frame"
        return result
    raise AssertionError("the parser wants more bytes than the frame has")


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
def test_text_frames_parse_whole_at_every_length_encoding(size: int) -> None:
    """7-bit, 16-bit and 64-bit lengths (RFC 6455 5.2), each at its edges."""
    text = "x" * size
    frame = parsed(text_frame(text))
    assert frame.opcode is Opcode.TEXT and frame.fin and not frame.rsv1
    assert bytes(frame.data).decode() == text


def test_a_text_frame_carries_its_utf8_bytes() -> None:
    text = json.dumps({"type": "challenge", "note": "naïve ✓"}, ensure_ascii=False)
    assert parsed(text_frame(text)).data == text.encode()
    assert len(text.encode()) > len(text)  # the precondition: the length is of the bytes, not the characters


class _Protocol:
    """Failure injection: uvicorn's protocol in each state a real socket passes through only by chance."""

    def __init__(self) -> None:
        self.handshake_complete, self.close_sent, self.disconnected = True, False, False
        self.initial_response: Any = None
        self.writable, self.transport, self.conn = asyncio.Event(), self, self
        self.writable.set()
        self.state, self.closing, self.written = State.OPEN, False, [b""][:0]

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        self.written.append(data)

    async def send(self, message: Any) -> None:  # what DirectFrames finds as the server's `send`
        pass


@pytest.mark.parametrize("state", ["handshake", "close_sent", "disconnected", "denial", "paused", "closing",
                                   "peer_closed"])
def test_a_socket_that_cannot_take_a_frame_now_gets_nothing(state: str) -> None:
    protocol = _Protocol()
    writer = FrameWriter.of(protocol.send)
    assert writer is not None
    write = writer.writer()
    assert write is not None  # the precondition: an open socket takes a frame
    write(b"open")
    assert protocol.written == [b"open"]
    if state == "handshake":
        protocol.handshake_complete = False
    elif state == "close_sent":
        protocol.close_sent = True
    elif state == "disconnected":
        protocol.disconnected = True
    elif state == "denial":
        protocol.initial_response = (403, [], b"")
    elif state == "paused":
        protocol.writable.clear()
    elif state == "closing":
        protocol.closing = True
    else:
        protocol.state = State.CLOSING
    assert writer.writer() is None


def test_a_server_without_the_protocol_gets_no_writer() -> None:
    async def send(message: Any) -> None:
        pass

    assert FrameWriter.of(send) is None


async def _sessions(url: str, keys: list[NodeKey], got: dict[str, dict[str, Any]], within_s: float) -> None:
    """Live sessions that say hello and keep the first challenge each receives (never answered)."""

    async def one(key: NodeKey) -> None:
        async with connect(url, open_timeout=30, max_size=2**22, ping_interval=None) as ws:
            welcome = json.loads(await ws.recv())
            beat = asyncio.create_task(beats(ws, key, welcome["session"], None, {}, asyncio.Event()))
            await ws.send(json.dumps({"type": "hello", "answers": ["sgemm"]}))
            try:
                async for frame in ws:
                    message = json.loads(frame)
                    if message.get("type") == "ping":
                        await ws.send(json.dumps({"type": "pong", "id": message["id"]}))
                    elif message.get("type") == "challenge":
                        got[key.node_id] = message
                        return
            finally:
                beat.cancel()

    await asyncio.wait_for(asyncio.gather(*(one(k) for k in keys)), within_s)


def test_a_real_relay_writes_roll_call_challenges_straight_to_the_sockets(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path / "relay", *RELAY).start(timeout=60)
    try:
        pairs, _ = in_thread(register_nodes, relay, 3)
        keys = [key for key, _ in pairs]
        got: dict[str, dict[str, Any]] = {}
        started = time.monotonic()
        in_thread(lambda: asyncio.run(_sessions(relay.url.replace("http://", "ws://") + "/v1/live", keys, got, 60)))
        assert sorted(got) == sorted(k.node_id for k in keys), f"challenged: {sorted(got)}"
        with urllib.request.urlopen(relay.url + "/metrics", timeout=10) as resp:
            text = resp.read().decode()
        sends = {path: int(n) for path, n in re.findall(r'ce_relay_roll_call_sends_total\{path="(\w+)"\} (\d+)', text)}
        # every challenge a client read went straight to its socket (a roll call may have begun since: >=)
        assert sends.get("direct", 0) >= 3 and sends.get("asgi", 0) == 0, (sends, time.monotonic() - started)
    finally:
        relay.stop()
