"""What WS /v1/live lets in before it parses a frame (issue 28, attack 6): per-type size limits read from a
bounded prefix, and per-address sessions and bytes.

Eight clients sending ~2 MiB JSON frames once lagged the relay's event loop by 0.7 s (p50), and an honest node
missed both roll calls of the flood: every frame was parsed whole (27 ms for 2 MiB of small numbers) before its
type's limit applied. Now:

- The protocol layer refuses any frame beyond max_frame_bytes (uvicorn's ws_max_size, web/cli.py): close 1009,
  before the payload is read. That is the largest legitimate frame, a 64-instance opening (below).
- A frame of up to MAX_MESSAGE_BYTES is parsed whatever its key order (that costs microseconds). A larger one
  must begin with its type ({"type": "opening", ...: what every client sends), read from its first
  HEAD_CHARS characters, and is refused unparsed beyond that type's limit; an opening only while one is due
  on the session (the relay sent its open message and has not had the answer). A legitimate opening parses in
  ~1.2 ms (base64 strings): it is parsed on the event loop. Parsing off it (asyncio.to_thread) buys nothing:
  json.loads holds the GIL throughout (measured: the loop stalled the whole 29 ms of a 2 MiB parse in a thread).
- Per source address (an IPv6 /64 is one address): at most live_sessions_per_address sessions at once, and a
  token bucket of live_bytes_per_s_per_address (burst live_bytes_burst_per_address) over every frame received,
  a frame the protocol refused for its size counted at max_frame_bytes. Over the bytes, the session is closed
  (1013) and new ones are refused (HTTP 429, Retry-After) until the debt is paid back.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections import Counter
from dataclasses import dataclass

from capsule import gpu_challenge
from capsule.challenge import MAX_N, MAX_PRODUCTS, tree_width
from web.api.ratelimit import TokenBuckets
from web.config import RelayConfig
from web.proof.gpu_challenges import MAX_INSTANCES as GPU_MAX_INSTANCES
from web.sessions.live import (
    MAX_COMMIT_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_TASK_RESULT_BYTES,
    MAX_TOKENS_COMMIT_BYTES,
    LiveError,
)

HEAD_CHARS = 64  # where a large frame's type must be: {"type": "peer_answer", with room for whitespace
TYPE_HEAD = re.compile(r'\s*\{\s*"type"\s*:\s*"([A-Za-z_]{1,32})"')
# a commitment (64 roots: ~4.8 KB; a reference-model answer's token ids: ~57 KB) and a peer probe's session
# description (web/map/peer_probes.py) take up to 8 KiB
LARGE_TYPES = {"commit": MAX_TOKENS_COMMIT_BYTES, "peer_offer": MAX_COMMIT_BYTES, "peer_answer": MAX_COMMIT_BYTES,
               "task_result": MAX_TASK_RESULT_BYTES}
CHALLENGE_ID_CHARS = 16  # web/proof/challenges.py: a challenge's id is its nonce's first 16 hex digits
SLACK_BYTES = 1024
CLOSE_REASON_BYTES = 123  # RFC 6455: a close frame's reason fits in 125 bytes with its code


def _depth(leaves: int) -> int:
    return tree_width(leaves).bit_length() - 1


def max_opening_bytes(config: RelayConfig) -> int:
    """The largest opening a legitimate client sends under this config, in Python's default JSON separators
    (a browser's JSON.stringify is more compact): rows_per_instance rows of each of the most instances a
    challenge names (SGEMM: challenge_max_instances; GPU: 16), each row of the largest order (4 x 2048 bytes in
    base64: 10,924 characters) with a Merkle proof of the deepest tree (2048 rows x 65,536 products: 27
    hashes), plus SLACK_BYTES: 1,642,167 bytes at the defaults. Measured with the capsule (host_runner
    SgemmAnswer): a row of order 2048 with its 12-hash proof is 11,793 bytes, so 128 of them with 27-hash proofs
    are ~1.64 MB."""
    siblings = max(_depth(MAX_N) + _depth(MAX_PRODUCTS), _depth(gpu_challenge.N_MAX * gpu_challenge.MAX_REPS))
    item = {"instance": max(config.challenge_max_instances, GPU_MAX_INSTANCES) - 1,
            "row": max(MAX_N * MAX_PRODUCTS, gpu_challenge.N_MAX * gpu_challenge.MAX_REPS) - 1,
            "values": "A" * (4 * -(-4 * MAX_N // 3)), "proof": ["0" * 64] * siblings}
    count = config.challenge_rows_per_instance * max(config.challenge_max_instances, GPU_MAX_INSTANCES)
    empty = json.dumps({"type": "opening", "id": "0" * CHALLENGE_ID_CHARS, "rows": []})
    return len(empty) + count * len(json.dumps(item)) + 2 * (count - 1) + SLACK_BYTES


def max_frame_bytes(config: RelayConfig) -> int:
    """The protocol layer's limit (uvicorn's ws_max_size): nothing legitimate is larger."""
    return max(max_opening_bytes(config), MAX_COMMIT_BYTES, MAX_TOKENS_COMMIT_BYTES)


def frame_type(data: str | bytes) -> str | None:
    head = data[:HEAD_CHARS]
    text = head.decode("utf-8", "replace") if isinstance(head, bytes) else head
    found = TYPE_HEAD.match(text)
    return found.group(1) if found else None


def screen(data: str | bytes, opening_due: bool, max_opening: int) -> None:
    """Raises LiveError for a frame that is not to be parsed (see the module's docstring); the detail says what
    was expected and what arrived."""
    size = len(data)
    if size <= MAX_MESSAGE_BYTES:
        return
    kind = frame_type(data)
    if kind is None:
        head = data[:24].decode("utf-8", "replace") if isinstance(data, bytes) else data[:24]
        raise LiveError("message_too_large", f"a frame of {size} bytes; one over {MAX_MESSAGE_BYTES} bytes must "
                                             f"begin with its type ({{\"type\": \"opening\", ...), this one "
                                             f"begins {head!r}")
    if kind == "opening" and not opening_due:
        raise LiveError("unexpected_opening", f"an opening of {size} bytes, but none is due on this session (an "
                                              "opening answers the relay's open message, once)")
    limit = max_opening if kind == "opening" else LARGE_TYPES.get(kind, MAX_MESSAGE_BYTES)
    if size > limit:
        raise LiveError("message_too_large", f"a {kind!r} message of {size} bytes; at most {limit}")


def address_key(host: str) -> str:
    """What the per-address limits count: the IP address, an IPv6 one by its /64 (one subscriber's prefix: a
    host picks any of its 2^64 addresses), an IPv4-mapped IPv6 one as the IPv4 address."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def close_reason(text: str) -> str:
    """The reason of a close frame: at most CLOSE_REASON_BYTES of UTF-8."""
    return text.encode()[:CLOSE_REASON_BYTES].decode("utf-8", "ignore")


@dataclass(frozen=True)
class Refusal:
    code: str
    detail: str
    retry_after_s: float


class AddressGuard:
    """Live sessions and bytes per source address (keys from address_key); time passed in (monotonic s)."""

    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        self.max_opening = max_opening_bytes(config)
        self.max_frame = max_frame_bytes(config)
        self.sessions: Counter[str] = Counter()
        self.bytes = TokenBuckets(config.live_bytes_per_s_per_address, config.live_bytes_burst_per_address)

    def admit(self, address: str, now: float) -> Refusal | None:
        """Counts a new session of the address, or says why it is refused."""
        limit = self.config.live_sessions_per_address
        if self.sessions[address] >= limit:
            return Refusal("too_many_sessions", f"{self.sessions[address]} live sessions from this address already; "
                                                f"at most {limit} (live_sessions_per_address)", 10.0)
        debt_s = self.bytes.debt_s(address, now)
        if debt_s > 0:
            return Refusal("over_byte_budget", self._budget(f"retry in {debt_s:.0f} s"), debt_s)
        self.sessions[address] += 1
        return None

    def leave(self, address: str) -> None:
        self.sessions[address] -= 1
        if self.sessions[address] <= 0:
            del self.sessions[address]

    def charge(self, address: str, size: int, now: float) -> Refusal | None:
        """Charges a frame received (or refused for its size) to its address; a Refusal once over budget."""
        debt_s = self.bytes.charge(address, size, now)
        if debt_s <= 0:
            return None
        return Refusal("over_byte_budget", self._budget(f"paid back in {debt_s:.0f} s"), debt_s)

    def _budget(self, when: str) -> str:
        return (f"this address sent more than {self.config.live_bytes_per_s_per_address:.0f} B/s over its live "
                f"sessions (burst {self.config.live_bytes_burst_per_address} B); {when}")
