"""The mesh's topics and what a message on each must be (pure: no I/O, no relay state).

Every message is one signed record as the HTTP API serves it (a profile byte for byte as its node posted it, the
others in RFC 8785 form), so a peer checks it with Ed25519 against the signer's PeerId alone (docs/mesh.md has
the signing rule). Gossip validation is deliberately state-free (schema, size, every signature): each relay of
the mesh then judges an accepted record by the rules that records arriving over HTTP and NATS meet (a profile
must cite a recent beacon round, a sample's endpoints must be known, a sample nobody measured moves nothing),
which depend on what that relay holds. A peer's gossip score falls only for what no relay could ever take.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from capsule.canonical import CanonicalError, canonical_bytes
from capsule.peerid import PeerIdError
from capsule.signing import SignatureError, verify_record
from capsule.typed import ValidationError

# Topic names: the seed's (000 §3) `ce-netgraph` for the network graph's co-signed LinkSamples; the other two
# are versioned ce-bench names, so a format change is a new topic and an old peer never misreads a new record.
TOPIC_PROFILES = "ce-bench/profiles/1"      # NodeProfile: the node's signed document as POSTed and served
TOPIC_NETGRAPH = "ce-netgraph"              # LinkSample: co-signed by both endpoints (sig_a, sig_b)
TOPIC_SCOREBOARD = "ce-bench/scoreboard/1"  # Scoreboard: a relay's verified totals of one roll call

KIND_OF_TOPIC = {TOPIC_PROFILES: "NodeProfile", TOPIC_NETGRAPH: "LinkSample", TOPIC_SCOREBOARD: "Scoreboard"}

TOPIC_DESCRIPTIONS = {
    TOPIC_PROFILES: "every NodeProfile a relay accepts, the signed document byte for byte as GET /v1/nodes/{id} "
                    "serves it (`profile`); signed by its node_id",
    TOPIC_NETGRAPH: "every co-signed LinkSample a relay confirms (seed 000 section 3); sig_a by a, sig_b by b",
    TOPIC_SCOREBOARD: "each roll call's verified totals, signed by the relay when they are final",
}

# A profile with full evidence is ~6 KiB and the relay takes up to 64 KiB over HTTP; nothing larger is valid.
MESSAGE_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class Judged:
    """The verdict on one mesh message: `record` is the parsed JSON when it is valid, else `reason` says why."""

    valid: bool
    kind: str
    record: dict[str, Any] | None = None
    reason: str = ""


def judge(topic: str, data: bytes) -> Judged:
    """Whether a message may travel on `topic`: within the size limit, one JSON object, the topic's record
    kind by its schema, every signature good. Never raises on a peer's bytes."""
    kind = KIND_OF_TOPIC.get(topic)
    if kind is None:
        return Judged(False, "", reason=f"unknown topic {topic!r}; expected one of {', '.join(KIND_OF_TOPIC)}")
    if len(data) > MESSAGE_MAX_BYTES:
        return Judged(False, kind, reason=f"{len(data)} bytes; at most {MESSAGE_MAX_BYTES}")
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as exc:
        return Judged(False, kind, reason=f"not JSON: {str(exc)[:100]}")
    if not isinstance(record, dict):
        return Judged(False, kind, reason=f"expected a JSON object, got {type(record).__name__}")
    try:
        verify_record(kind, record)
    except (ValidationError, SignatureError, PeerIdError, CanonicalError, ValueError, TypeError, KeyError,
            RecursionError) as exc:
        return Judged(False, kind, reason=f"not a valid {kind}: {str(exc)[:200]}")
    return Judged(True, kind, record)


def canonical_message(record: dict[str, Any]) -> bytes:
    """A signed record as mesh bytes: its RFC 8785 form, signatures included (any JCS library reproduces it)."""
    return canonical_bytes(record)


def scoreboard_body(relay_id: str, call: dict[str, Any]) -> dict[str, Any]:
    """The unsigned Scoreboard of a finished roll call (RollCall.to_json with its final `proven` totals)."""
    proven = call["proven"]
    return {"v": 1, "relay": relay_id, "roll_call": str(call["id"]), "beacon_round": int(call["beacon_round"]),
            "at": round(float(call["at"]), 3), "sessions_challenged": int(call["sessions_challenged"]),
            "proven": {"nodes": int(proven.get("nodes", 0)),
                       "cpu_gflops": round(float(proven.get("cpu_gflops", 0.0)), 3),
                       "tokens_per_sec": round(float(proven.get("tokens_per_sec", 0.0)), 3),
                       "gpus": int(proven.get("gpus", 0)),
                       "gpu_tflops": round(float(proven.get("gpu_tflops", 0.0)), 6)}}

