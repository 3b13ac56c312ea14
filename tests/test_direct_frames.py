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
from tests.test_gpu_same_moment import Node, in_relay
from tests.threaded import in_thread
from web.proof.challenge_desk import ChallengeDesk
from web.relay import Relay
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
    raw = text_frame(text)
    frame = parsed(raw)
    assert frame.opcode is Opcode.TEXT and frame.fin and not frame.rsv1
    assert bytes(frame.data).decode() == text
    # the shortest length encoding (RFC 6455 5.2: "the minimal number of bytes"); the parser accepts longer ones
    assert len(raw) - size == (2 if size < 126 else 4 if size < 65536 else 10)


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


# each roll call schedules its reference-model phase 32 s on; the loop ends long before it
@pytest.mark.filterwarnings("ignore:coroutine 'RollCaller.run_llm' was never awaited")
def test_a_roll_call_writes_direct_first_and_a_paused_socket_holds_up_nothing(tmp_path: Path) -> None:
    """In-process, through the roll call's own send loop: sessions whose socket takes a frame now get it straight
    away, first; the others go through ASGI after them, each on its own, so a client that stopped reading (its
    socket paused, its ASGI send waiting) holds up neither the other sends nor the roll call. Every challenge is
    registered and timed from its own send."""
    box: dict[str, Any] = {}

    async def script(relay: Relay, desk: ChallengeDesk) -> None:
        release = asyncio.Event()
        frames: dict[str, list[bytes]] = {}
        plan = [("a1", "198.51.100.1", "direct"), ("a2", "198.51.100.1", "direct"), ("b1", "198.51.100.2", "paused"),
                ("b2", "198.51.100.2", "direct"), ("c1", "198.51.100.3", "asgi")]
        nodes: dict[str, Node] = {}
        for name, host, path in plan:
            node = nodes[name] = Node(desk, name, host, {"sgemm"}, None)
            frames[name] = []
            if path == "direct":
                node.who.frame_writer = lambda got=frames[name]: got.append
            elif path == "paused":
                node.who.frame_writer = lambda: None  # the socket cannot take a frame now: ASGI, which waits

                async def waits(message: Any, node: Node = node) -> None:
                    await release.wait()
                    node.sent.append(json.loads(message))

                node.who.send = waits
        call = await asyncio.wait_for(desk.roll.run(relay.beacons.latest or {}), 5)  # never held up by b1
        box.update(nodes=nodes, frames=frames, call=call, sends=dict(desk.core.metrics.roll_call_sends),
                   b1_sent_before_release=list(nodes["b1"].sent))
        release.set()
        await asyncio.sleep(0.05)
        box["b1_sent"] = list(nodes["b1"].sent)

    in_relay(tmp_path, script)
    nodes, frames, call = box["nodes"], box["frames"], box["call"]
    assert call.challenged == {n.node_id for n in nodes.values()}  # the precondition: all five asked
    assert box["sends"] == {"direct": 3, "asgi": 2}
    for name in ("a1", "a2", "b2"):
        (frame,) = frames[name]
        message = json.loads(bytes(parsed(frame).data))
        assert message["id"] == nodes[name].challenge("sgemm").id and nodes[name].sent == []
    assert [m["type"] for m in nodes["c1"].sent] == ["challenge"]
    assert box["b1_sent_before_release"] == [] and [m["type"] for m in box["b1_sent"]] == ["challenge"]
    sent_at = {name: nodes[name].challenge("sgemm").sent_at for name in nodes}
    assert max(sent_at[n] for n in ("a1", "a2", "b2")) <= min(sent_at[n] for n in ("b1", "c1"))  # direct first
    assert all(t > 0 for t in sent_at.values()) and call.send_spread_ms is not None
