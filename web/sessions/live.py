"""The live-session protocol of WS /v1/live (JSON text frames), as pure functions.

relay -> node  {"type": "welcome", "relay": ID, "session": HEX32, "heartbeat_interval_s": S, "liveness": "pongs"}
node -> relay  {"type": "heartbeat", "heartbeat": Heartbeat}   signed (capsule.model.Heartbeat): the first binds
               the session to the node; with "liveness": "pongs" it is the only one needed (pongs keep the
               session live), without it one every S / 2 (relays before 2026-12-06)
relay -> node  {"type": "ack", "seq": N}
relay -> node  {"type": "ping", "id": N}          every heartbeat interval
node -> relay  {"type": "pong", "id": N}          the relay measures RTT (EWMA) from it
relay -> node  {"type": "cosign", "sample": LinkSample}   the node <-> relay edge measured from pings, signed
                                                        by the relay (sig_b); the node checks and signs it:
node -> relay  {"type": "cosigned", "sample": LinkSample} with sig_a: the relay stores the co-signed edge
relay -> node  a binary frame of BW_PROBE_BYTES, now and then (randomised): the bandwidth probe
node -> relay  {"type": "bw_ack", "n": BYTES}   at once; bw = 8 n / (time to ack - RTT)
relay -> node  {"type": "rebenchmark", "reason": "..."}   when the relay wants a fresh profile
relay -> node  {"type": "error", "code": CODE, "detail": "..."}   after MAX_ERRORS, the relay closes (1008)
relay closes   1009: a frame beyond the largest legitimate one; 1013: the source address sent more than its byte
               budget (web/sessions/live_guard.py); a session over its address's limits is refused with HTTP 429
node -> relay  {"type": "hello", "answers": ["sgemm"], "withdrawable": true} ... challenges: web/proof/challenges.py
               has that protocol ("withdrawable", optional: the client stops a challenge a roll call withdraws)
node -> relay  {"type": "peers", "transports": ["webrtc"]} ... node-to-node probes: web/map/peer_probes.py
node -> relay  {"type": "libp2p", "multiaddrs": [MULTIADDR]}   after a heartbeat: where the node's libp2p host
                                                        answers ping and identify, each ending in /p2p/NODE_ID

Session is the whole protocol state of one connection, with time passed in (h11's style): the Starlette
endpoint (web/sessions/live_endpoint.py) only moves frames and calls the relay. A bad message costs an error frame,
never the session, until MAX_ERRORS of them.
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass, field
from typing import Any

from capsule.challenge import LLM_MAX_ANSWER_TOKENS, LLM_VOCAB
from capsule.job_records import MAX_OUTPUT_BYTES
from capsule.model import LINK_BW_MAX_MBPS, Heartbeat
from capsule.signing import SignatureError, verify_record
from capsule.typed import ValidationError, parse

MAX_MESSAGE_BYTES = 4096
# A commitment names one 64-hex-digit root per instance: 64 instances (challenge_max_instances) take ~4.3 KB,
# which the 4 KiB limit refused, so no 64-instance challenge could ever be answered.
MAX_COMMIT_BYTES = 8 * 1024
# A reference-model answer carries its token ids (web/proof/challenges.py): the most a challenge asks over all its
# streams, each the largest id, in Python's default separators (~230 KB), plus a list per stream and slack.
MAX_TOKENS_COMMIT_BYTES = len(json.dumps({"type": "commit", "id": "0" * 16,
                                          "tokens": [LLM_VOCAB - 1] * LLM_MAX_ANSWER_TOKENS})) + 4096
# A challenge's opening may be larger (2 rows x 64 instances x 2048 fp32 in base64, plus proofs: 1.64 MB; the
# 512 KiB once set here refused the opening of every 64-instance challenge at n >= 1024): web/sessions/live_guard.py
# max_opening_bytes, checked with every other frame's size before it is parsed (web/sessions/live_guard.py screen).
# A dispatched task's result (web/jobs/): its stdout, at most MAX_OUTPUT_BYTES in base64, and its signed receipt.
MAX_TASK_RESULT_BYTES = (MAX_OUTPUT_BYTES + 2) // 3 * 4 + 8192
RTT_EWMA_ALPHA = 0.2  # weight of a new RTT sample (TCP's SRTT uses 1/8; pings here are sparser)


class LiveError(Exception):
    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail

    def message(self) -> dict[str, Any]:
        return {"type": "error", "code": self.code, "detail": self.detail}


SAMPLES_PER_LINK = 3  # pongs behind each co-signed LinkSample
MAX_ERRORS = 5  # bad messages a session may send before the relay closes it (1008): a broken client stops
# A link sample's RTT is the lowest of its window, not the median: queueing, a phone's radio waking up and
# a busy event loop at either end only ever add to a ping, so the least delayed one is the path's (Ledlie et
# al., "Network Coordinates in the Wild", NSDI 2007, filter with a low percentile for the same reason).
# Measured on the namespace world of tests/test_world.py under a CI run's load: medians of 3 pongs read
# 1.3-2.7x the path on a third of the edges, and the map's median error was 0.11 instead of 0.02-0.03.
PING_ID_LIMIT = 2**53  # ping ids are drawn below this (exact in JSON and JavaScript numbers)
RTT_RECENT_KEPT = 15  # pongs behind a challenge's RTT (its median): a few minutes at the heartbeat interval
FIRST_BW_TRIES = 3  # bandwidth probes at the first chances while none gave a figure (~770 KiB at most)
PINGS_KEPT = 10  # outstanding pings remembered; an older pong is unknown (its RTT would be stale anyway)
BW_PROBE_BYTES = 256 * 1024  # a timed transfer: big enough to dwarf the RTT on LANs, small for phones


@dataclass
class Session:
    session: str
    node_id: str | None = None
    last_seq: int = -1
    rtt_ms: float | None = None
    rtt_recent: list[float] = field(default_factory=list)  # the last RTT_RECENT_KEPT samples for challenges
    errors: int = 0
    rtt_samples: list[float] = field(default_factory=list)
    pings_sent: int = 0
    pongs: int = 0
    bw_sent_at: float | None = None
    bw_mbps: float | None = None
    bw_probes: int = 0
    pings: dict[int, float] = field(default_factory=dict)  # ping id -> sent at (perf_counter seconds)
    busy_pings: set[int] = field(default_factory=set)  # outstanding pings sent while the node was answering a challenge
    cosigns_asked: int = 0  # link samples of this session the relay asked the node to co-sign

    def ping(self, now: float, busy: bool = False) -> dict[str, Any]:
        """The next ping message; its send time is remembered for the pong. Its id is random: a node that
        could predict it would send the pong before the ping arrived and look nearer than it is (the
        lowest RTT of a window is what the link sample keeps). `busy`: the node is answering a challenge
        now, so its pong may wait behind that work (see pong)."""
        ping_id = secrets.randbelow(PING_ID_LIMIT)
        self.pings[ping_id] = now
        if busy:
            self.busy_pings.add(ping_id)
        self.pings_sent += 1
        while len(self.pings) > PINGS_KEPT:
            oldest = next(iter(self.pings))  # dicts keep insertion order
            del self.pings[oldest]
            self.busy_pings.discard(oldest)
        return {"type": "ping", "id": ping_id}

    def wants_bw_probe(self, draw: float, chance: float) -> bool:
        """Whether this session is due a bandwidth probe: only a known node, one at a time; the first at the
        first chance (up to FIRST_BW_TRIES while none gave a figure: a transfer within the RTT's noise gives
        none), later ones with probability `chance` per ping (`draw` uniform in [0, 1)). The relay's probe
        budget decides whether it is sent (web/sessions/live_endpoint.py)."""
        if self.node_id is None or self.bw_sent_at is not None:
            return False
        return (self.bw_mbps is None and self.bw_probes < FIRST_BW_TRIES) or draw < chance

    def start_bw_probe(self, now: float) -> None:
        self.bw_probes += 1
        self.bw_sent_at = now

    def refuse(self, error: LiveError) -> tuple[dict[str, Any], bool]:
        """The error frame for a bad message, and whether the session has now used up its MAX_ERRORS."""
        self.errors += 1
        return error.message(), self.errors >= MAX_ERRORS

    def heartbeat(self, heartbeat: Any) -> str:
        """Verifies a heartbeat for this session; returns the node id or raises LiveError. The first one's
        signature proves the node's key; later ones arrive over the same connection, so their schema,
        session, node and seq are checked and their signature is not: nothing else could have sent them, and
        no heartbeat leaves the relay (the cluster learns liveness from the relay's signed digests). Measured:
        Ed25519 was ~50 us of ~60 per heartbeat, 2,000 heartbeats/s at 10,000 sessions."""
        try:
            if self.node_id is None:
                verify_record("Heartbeat", heartbeat)
            else:
                parse(Heartbeat, heartbeat)
        except ValidationError as exc:
            raise LiveError("invalid_field", str(exc)) from None
        except SignatureError as exc:
            raise LiveError("bad_signature", str(exc)) from None
        if heartbeat["session"] != self.session:
            raise LiveError("wrong_session", "the heartbeat is signed for another session")
        if self.node_id is not None and heartbeat["node_id"] != self.node_id:
            raise LiveError("wrong_node", f"this session belongs to {self.node_id}")
        if heartbeat["seq"] <= self.last_seq:
            raise LiveError("replayed_heartbeat", f"seq {heartbeat['seq']} is not after {self.last_seq}")
        self.node_id = heartbeat["node_id"]
        self.last_seq = heartbeat["seq"]
        return str(heartbeat["node_id"])

    @property
    def rtt_median_ms(self) -> float | None:
        """What a challenge's timing may subtract for the network (web/proof/challenges.py caps it further)."""
        if not self.rtt_recent:
            return None
        ordered = sorted(self.rtt_recent)
        return ordered[len(ordered) // 2]

    def pong(self, ping_id: Any, now: float, busy: bool = False) -> float:
        """Completes a ping (now in perf_counter seconds); the smoothed RTT in ms. `busy`: the node is
        answering a challenge now. A pong that arrives then, or whose ping was sent then, may have waited for
        the node's own work and says nothing of the network: it is kept out of the RTT that challenges
        subtract and out of the link sample's window (ping and pong alike, so it is no loss either).
        Measured on tests/test_world.py, 2026-12-05: a roll call made nine nodes' pongs of one window wait
        0.9-5.4 s, and those windows' samples (the latest of their pairs) put the map 15x off."""
        sent = self.pings.pop(ping_id, None) if type(ping_id) is int else None  # True == 1 as a dict key
        if sent is None:
            raise LiveError("unknown_ping", "pong for no outstanding ping")
        if ping_id in self.busy_pings:
            self.busy_pings.discard(ping_id)
            busy = True
        rtt_ms = (now - sent) * 1000
        if busy:
            self.pings_sent = max(0, self.pings_sent - 1)
        else:
            self.pongs += 1
            self.rtt_samples.append(rtt_ms)
            self.rtt_recent = [*self.rtt_recent, rtt_ms][-RTT_RECENT_KEPT:]
        self.rtt_ms = rtt_ms if self.rtt_ms is None else (1 - RTT_EWMA_ALPHA) * self.rtt_ms + RTT_EWMA_ALPHA * rtt_ms
        return self.rtt_ms

    def bw_ack(self, n: Any, now: float) -> float | None:
        """Completes a bandwidth probe (now in perf_counter seconds); Mbit/s, or None if it makes no sense."""
        if self.bw_sent_at is None or n != BW_PROBE_BYTES:
            raise LiveError("unexpected_bw_ack", "no bandwidth probe of that size is outstanding")
        # the lowest recent RTT: the smoothed one is raised by a node that holds some pongs back, which would
        # shorten the transfer and raise the figure (a node cannot make a pong come back early)
        lowest_ms = min(self.rtt_recent) if self.rtt_recent else (self.rtt_ms or 0.0)
        transfer_s = now - self.bw_sent_at - lowest_ms / 1000
        self.bw_sent_at = None
        mbps = 8 * BW_PROBE_BYTES / transfer_s / 1e6 if transfer_s > 0 else math.inf
        if mbps > LINK_BW_MAX_MBPS:
            # faster than the timer can tell (loopback, where the RTT taken off is most of the time): no
            # figure rather than one beyond physics, which the link sample's schema would refuse
            return None
        self.bw_mbps = round(mbps, 1)
        return self.bw_mbps

    def link_body(self, relay_id: str, now: float) -> dict[str, Any] | None:
        """An unsigned LinkSample node <-> relay once enough pongs arrived (then the window restarts):
        rtt = the lowest (see PING_ID_LIMIT's comment), jitter = mean absolute difference of successive samples, loss =
        unanswered pings."""
        if self.node_id is None or len(self.rtt_samples) < SAMPLES_PER_LINK:
            return None
        samples = self.rtt_samples
        jitter = sum(abs(x - y) for x, y in zip(samples, samples[1:], strict=False)) / max(1, len(samples) - 1)
        loss = max(0.0, 1.0 - self.pongs / self.pings_sent) if self.pings_sent else 0.0
        self.rtt_samples, self.pongs, self.pings_sent = [], 0, 0
        bw = self.bw_mbps  # the latest estimate: bandwidth is probed less often than RTT
        return {"a": self.node_id, "b": relay_id, "rtt_ms": round(min(samples), 3),
                "jitter_ms": round(jitter, 3), "loss": round(min(loss, 1.0), 3), "bw_mbps": bw,
                "measured_at": int(now)}


def parse_message(text: str | bytes) -> dict[str, Any]:
    """One message, once web/sessions/live_guard.py screen let its frame in (its size and type are checked there before
    anything is parsed); only a challenge's opening (rows of a product) may exceed MAX_MESSAGE_BYTES."""
    try:
        message = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise LiveError("invalid_json", "messages are JSON objects") from None
    except RecursionError:  # a small frame of nested brackets: a bad message, never a dead session
        raise LiveError("invalid_json", "the message is nested too deeply") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise LiveError("invalid_message", "expected an object with a string 'type'")
    # a commitment (token ids: MAX_TOKENS_COMMIT_BYTES), and a peer probe's session description
    # (web/map/peer_probes.py), may take up to 8 KiB
    limit = (MAX_TOKENS_COMMIT_BYTES if message["type"] == "commit" else MAX_COMMIT_BYTES
             if message["type"] in ("peer_offer", "peer_answer") else MAX_TASK_RESULT_BYTES
             if message["type"] == "task_result" else MAX_MESSAGE_BYTES)
    if len(text) > limit and message["type"] != "opening":
        raise LiveError("message_too_large", f"{len(text)} bytes; at most {limit}")
    return message
