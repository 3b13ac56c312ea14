"""Data model v1 (ARCHITECTURE.md): NodeProfile, LinkSample, Beacon, JobReceipt.

Field names are the design card's (seed 000 §2.1, §2.2). A figure the platform cannot measure is null,
with the reason in `evidence`. Units are in the field names or the schema descriptions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capsule.job_records import JobCancel, JobRequest, TaskReceipt
from capsule.peerid import public_key_from_peer_id
from capsule.typed import I_JSON_MAX_INT, spec

HEX64 = "[0-9a-f]{64}"
HEX = "[0-9a-f]{2,256}"
NODE_ID = "12D3KooW[1-9A-HJ-NP-Za-km-z]{44}"  # base58btc of 00 24 08 01 12 20 + 32-byte key
B64URL_SIG = "[A-Za-z0-9_-]{86}"  # 64 bytes, unpadded base64url
# A node's name, as its operator chose it: 1-64 characters, none a control character (C0, DEL, C1: nothing a
# terminal acts on), an invisible format character (zero-width, bidirectional marks, overrides and isolates, line
# and paragraph separators: a name must not hide text or reorder what a page shows beside it), no space at either
# end, and not the beginning of a NodeId (a name must not pass for another node's id). A label, not an identity.
_NAME_NEVER = r"\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
NODE_NAME = rf"(?!12D3KooW)[^{_NAME_NEVER}\x20](?:[^{_NAME_NEVER}]{{0,62}}[^{_NAME_NEVER}\x20])?"
MAX_U32 = 2**32 - 1
MAX_TIME = 2**40  # unix seconds; far beyond any real date, rejects absurd values

# Physical bounds of a measured link, used by the model, the relay, the node and the browser (one constant
# each; browser_node/relay.js restates the RTT ceiling and a test holds it equal).
# Floor: no network round trip between two hosts beats ~2 us (InfiniBand/RDMA ping-pong); a WebSocket or
# HTTP round trip through two kernels takes tens of microseconds. A smaller figure is a timer artefact or a lie.
LINK_RTT_MIN_MS = 0.002
# Ceiling: one minute. TCP gives up on a connection well before (default SYN retries ~2 min, data much
# earlier in practice); a scheduler has no use for a slower link. Also the jitter ceiling.
LINK_RTT_MAX_MS = 60_000.0
# Ceiling: 1.6 Tbit/s, the fastest Ethernet link standard (IEEE 802.3dj); loopback probes stay far below.
LINK_BW_MAX_MBPS = 1_600_000.0


def _peer_id(value: str) -> None:
    public_key_from_peer_id(value)  # raises PeerIdError (a ValueError) with the reason


def node_id_field(description: str) -> Any:
    return spec(check=_peer_id, pattern=NODE_ID, max_length=100, description=description)


@dataclass(frozen=True)
class BeaconRef:
    relay: str = node_id_field("NodeId of the relay that issued the beacon round")
    round: int = spec(minimum=0, description="beacon round number")
    value: str = spec(pattern=HEX, description="the round's random value (hex); it seeds the capsule inputs")


@dataclass(frozen=True)
class CapsuleRef:
    version: str = spec(max_length=32)
    sha256: str = spec(pattern=HEX64, description="sha256 of capsule.wasm")


@dataclass(frozen=True)
class Cpu:
    cores: int = spec(minimum=1, maximum=MAX_U32, description="physical cores")
    threads: int = spec(minimum=1, maximum=MAX_U32, description="hardware threads")
    gflops_fp32: float | None = spec(minimum=0, unit="GFLOP/s",
                                     description="whole CPU, capsule wasm SIMD128 SGEMM on all cores at once")
    mem_bw_gbps: float | None = spec(minimum=0, unit="GB/s (1e9 B/s)", description="STREAM triad, all cores")


@dataclass(frozen=True)
class Gpu:
    model: str = spec(max_length=200)
    backend: str = spec(enum=("webgpu", "vulkan", "metal", "dx12", "cuda", "rocm", "gl"))
    vram_mb: int | None = spec(minimum=0, maximum=MAX_U32, unit="MiB",
                               description="see evidence vram_source: nvml, or a probe lower bound")
    fp16_tflops: float | None = spec(minimum=0, unit="TFLOP/s")
    fp32_tflops: float | None = spec(minimum=0, unit="TFLOP/s", default=None)


@dataclass(frozen=True)
class Memory:
    # null where the platform does not say (browsers: see evidence.memory)
    total_mb: int | None = spec(minimum=0, maximum=MAX_U32, unit="MiB")
    available_mb: int | None = spec(minimum=0, maximum=MAX_U32, unit="MiB")


@dataclass(frozen=True)
class Storage:
    total_gb: int | None = spec(minimum=0, maximum=MAX_U32, unit="GB (1e9 B)")
    free_gb: int | None = spec(minimum=0, maximum=MAX_U32, unit="GB (1e9 B)")
    read_mbps: float | None = spec(minimum=0, unit="MB/s (1e6 B/s)")
    write_mbps: float | None = spec(minimum=0, unit="MB/s (1e6 B/s)")


@dataclass(frozen=True)
class Llm:
    ref_model: str = spec(max_length=64)
    tokens_per_sec: float | None = spec(
        minimum=0, unit="tokens/s",
        description="aggregate decode throughput: `streams` decode streams at once, each tg128 with seeded rank "
                    "sampling, summed")
    streams: int | None = spec(minimum=1, maximum=256, default=None, unit="streams",
                               description="decode streams behind tokens_per_sec (absent: 1)")
    tokens_per_sec_one_stream: float | None = spec(
        minimum=0, default=None, unit="tokens/s",
        description="one stream decoding alone: the latency figure (1 / time per token)")


@dataclass(frozen=True)
class Runtime:
    os: str = spec(max_length=64)
    arch: str = spec(max_length=64)
    kind: str = spec(enum=("server", "browser"))
    docker: bool = spec()
    gvisor: bool = spec()
    wasm: bool = spec()
    engine: str = spec(max_length=200)


@dataclass(frozen=True)
class NodeProfile:
    v: int = spec(minimum=1, maximum=1, description="data model version")
    node_id: str = node_id_field("libp2p PeerId of the node's Ed25519 key")
    measured_at: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    beacon: BeaconRef = spec()
    capsule: CapsuleRef = spec()
    cpu: Cpu = spec()
    gpus: list[Gpu] = spec()
    memory: Memory = spec()
    storage: Storage = spec()
    llm: Llm = spec()
    runtime: Runtime = spec()
    evidence: dict[str, Any] = spec(description="per probe: n, median, spread, method, checksum")
    sig: str = spec(pattern=B64URL_SIG, description="Ed25519 over the canonical bytes, base64url")
    name: str | None = spec(default=None, absent_when_none=True, pattern=NODE_NAME, max_length=64,
                            description="the name its operator gave the node (signed with the rest; a label, not an "
                                        "identity: two nodes may carry one name, the NodeId tells them apart)")


@dataclass(frozen=True)
class LinkSample:
    a: str = node_id_field("one endpoint")
    b: str = node_id_field("the other endpoint")
    rtt_ms: float = spec(minimum=LINK_RTT_MIN_MS, maximum=LINK_RTT_MAX_MS, unit="ms")
    jitter_ms: float = spec(minimum=0, maximum=LINK_RTT_MAX_MS, unit="ms")
    loss: float = spec(minimum=0, maximum=1, description="fraction of probes lost")
    bw_mbps: float | None = spec(minimum=0, maximum=LINK_BW_MAX_MBPS, unit="Mbit/s")
    measured_at: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    sig_a: str = spec(pattern=B64URL_SIG)
    sig_b: str = spec(pattern=B64URL_SIG)


@dataclass(frozen=True)
class Beacon:
    relay: str = node_id_field("NodeId of the issuing relay")
    round: int = spec(minimum=0)
    value: str = spec(pattern=HEX64, description="sha256(prev value || round || relay secret), hex")
    prev: str = spec(pattern=f"(?:{HEX64})?", description="previous round's value, empty for round 0")
    issued_at: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    sig: str = spec(pattern=B64URL_SIG)


@dataclass(frozen=True)
class JobReceipt:
    v: int = spec(minimum=1, maximum=1)
    job_id: str = spec(pattern=HEX64, description="sha256 of the manifest's canonical bytes")
    node_id: str = node_id_field("the node that ran the job")
    capsule_sha256: str = spec(pattern=HEX64)
    status: str = spec(enum=("ok", "failed"))
    started_at: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    finished_at: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    wall_ms: float = spec(minimum=0, unit="ms")
    profile_sha256: str | None = spec(pattern=HEX64, description="sha256 of the signed profile's canonical bytes")
    error: str | None = spec(max_length=1000)
    sig: str = spec(pattern=B64URL_SIG)


@dataclass(frozen=True)
class Heartbeat:
    """A node's sign of life on a relay's live session (WS /v1/live); bound to the session the relay
    opened, so it cannot be replayed on another connection."""

    node_id: str = node_id_field("the node that is alive")
    session: str = spec(pattern="[0-9a-f]{32}", description="the session id from the relay's welcome")
    seq: int = spec(minimum=0, maximum=I_JSON_MAX_INT, description="increases with every heartbeat of a session")
    sent_at: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    sig: str = spec(pattern=B64URL_SIG)


@dataclass(frozen=True)
class Transcript:
    """A relay's record of one challenge it ran (web/proof/transcripts.py): what it asked, the node's commitment and
    openings, and its own timing, signed by the relay, so the other relays of a cluster re-check the work
    and keep the same trust. Only relays an operator names as peers are believed (they attest the timing)."""

    v: int = spec(minimum=1, maximum=1)
    relay: str = node_id_field("the relay that ran the challenge")
    node_id: str = node_id_field("the node challenged")
    roll_call: str | None = spec(max_length=100, description="the roll call it belonged to, if any")
    at: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds", description="when the result was recorded")
    challenge: dict[str, Any] = spec(description="the challenge, the node's answer and the relay's verdict")
    sig: str = spec(pattern=B64URL_SIG)


@dataclass(frozen=True)
class LiveEntry:
    node_id: str = node_id_field("a node with a live session on the relay")
    since: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds", description="live there since")


@dataclass(frozen=True)
class LiveDigest:
    """Which nodes are live on a relay (web/cluster/digests.py): the change since its previous digest, or (`full`) the
    whole set; signed by the relay, so the other relays of a cluster know who holds which node without one
    message per heartbeat. Believed only from relays an operator names as peers."""

    v: int = spec(minimum=1, maximum=1)
    relay: str = node_id_field("the relay the sessions are on")
    epoch: int = spec(minimum=0, maximum=I_JSON_MAX_INT, unit="unix ms", description="the relay's run (its start)")
    seq: int = spec(minimum=0, maximum=I_JSON_MAX_INT, description="digests of one run, in order from 0")
    at: int = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    full: bool = spec(description="true: `added` is the whole set; false: a change since seq - 1")
    added: list[LiveEntry] = spec(description="nodes live there (full) or that became live since seq - 1")
    removed: list[str] = spec(description="node ids no longer live there (empty in a full digest)")
    url: str | None = spec(pattern="https?://[^\\s]{1,200}", max_length=210,
                           description="where nodes reach the relay (its --public-url), for landmark probes")
    sig: str = spec(pattern=B64URL_SIG)


@dataclass(frozen=True)
class ProvenTotals:
    nodes: int = spec(minimum=0, maximum=I_JSON_MAX_INT, description="nodes with an SGEMM proof of the roll call")
    cpu_gflops: float = spec(minimum=0, unit="GFLOP/s")
    tokens_per_sec: float = spec(minimum=0, unit="tokens/s of the reference model")
    gpus: int = spec(minimum=0, maximum=I_JSON_MAX_INT)
    gpu_tflops: float = spec(minimum=0, unit="fp32 TFLOP/s")


@dataclass(frozen=True)
class Scoreboard:
    """A relay's verified scoreboard of one roll call: what every node it asked proved at that moment (GET
    /v1/roll-calls `proven`), signed by the relay when the next roll call begins and the totals are final.
    Published on the mesh (docs/mesh.md), so any libp2p peer checks it against the relay's PeerId alone."""

    v: int = spec(minimum=1, maximum=1)
    relay: str = node_id_field("the relay that ran the roll call")
    roll_call: str = spec(max_length=100, description="the roll call's id (the same on every relay of a cluster)")
    beacon_round: int = spec(minimum=0, maximum=I_JSON_MAX_INT, description="the beacon round that drew it")
    at: float = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds", description="when its challenges went out")
    sessions_challenged: int = spec(minimum=0, maximum=I_JSON_MAX_INT)
    proven: ProvenTotals = spec(description="the verified totals of the roll call")
    sig: str = spec(pattern=B64URL_SIG)
    region: str | None = spec(pattern=r"^[a-z][a-z0-9-]{0,31}$", default=None,
                              description="the relay's region (web/cluster/regions.py): its totals are that region's")


@dataclass(frozen=True)
class TrustState:
    """A node's trust as a region's relays hold it (web/proof/trust.py Trust), carried to the region it moved to."""

    passed: float = spec(minimum=0, description="decayed count of passed challenges")
    failed: float = spec(minimum=0, description="decayed failure weight")
    decayed_at: float = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    passes_total: int = spec(minimum=0, maximum=I_JSON_MAX_INT)
    failures_total: int = spec(minimum=0, maximum=I_JSON_MAX_INT)
    last_at: float | None = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    last_code: str | None = spec(max_length=64)
    observed_gflops: list[float] = spec(unit="GFLOP/s")
    observed_tps: list[float] = spec(unit="tokens/s")
    observed_gpu_tflops: list[float] = spec(unit="fp32 TFLOP/s")
    flagged_until: float = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    last_pass_at: float | None = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds")
    tokens_checked: int = spec(minimum=0, maximum=I_JSON_MAX_INT)
    roll_call_tokens_checked: int = spec(minimum=0, maximum=I_JSON_MAX_INT)
    last_wrong_code: str | None = spec(max_length=64)
    solo_passes: int = spec(minimum=0, maximum=I_JSON_MAX_INT, default=0,
                            description="passed solo challenges (verified needs one; absent: an older relay's, 0)")


@dataclass(frozen=True)
class Handoff:
    """A node's trust passing between regions (web/cluster/handoff.py). A relay of the region the node came to asks
    (`trust` null); a relay of the region it left answers with the trust that region holds, and stops counting
    the node there. Believed only from relays an operator names as peers."""

    v: int = spec(minimum=1, maximum=1)
    relay: str = node_id_field("the relay that asks (trust null) or answers")
    node_id: str = node_id_field("the node that moved")
    from_region: str = spec(pattern=r"^[a-z][a-z0-9-]{0,31}$", description="the region the node left")
    to_region: str = spec(pattern=r"^[a-z][a-z0-9-]{0,31}$", description="the region it came to")
    at: float = spec(minimum=0, maximum=MAX_TIME, unit="unix seconds", description="when its session arrived")
    trust: TrustState | None = spec(description="the trust the region it left holds (null: the ask)")
    sig: str = spec(pattern=B64URL_SIG)


@dataclass(frozen=True)
class RecordKind:
    """Everything the code needs to know about one signed record kind, in one place: its class (schema),
    and who signs it — each (signature field, field holding the signer's NodeId). The signed message leaves
    every signature field out (capsule/canonical.py) and starts with the kind's name (domain separation)."""

    cls: type
    signatures: tuple[tuple[str, str], ...]

    @property
    def signature_fields(self) -> tuple[str, ...]:
        return tuple(sig for sig, _ in self.signatures)


@dataclass(frozen=True)
class ClusterProfile:
    """A profile as a relay shares it with its cluster (web/cluster/nats_cluster.py): the node's signed profile as
    posted (`body`), the relay it was posted to and that relay's region, signed by that relay. The profile is
    believed on its own signature; the region only from a relay an operator names as a peer (an unsigned region
    let any user of the cluster's NATS server name a region that never held the node, so the trust handoff asked
    there, got no answer, and the node started afresh: its flag shed)."""

    v: int = spec(minimum=1, maximum=1)
    origin: str = node_id_field("the relay the node posted the profile to")
    region: str | None = spec(pattern=r"^[a-z][a-z0-9-]{0,31}$", description="that relay's region (null: none)")
    body: str = spec(max_length=1 << 20, description="the NodeProfile as the node posted it (JSON text)")
    sig: str = spec(pattern=B64URL_SIG)


REGISTRY: dict[str, RecordKind] = {
    "NodeProfile": RecordKind(NodeProfile, (("sig", "node_id"),)),
    "LinkSample": RecordKind(LinkSample, (("sig_a", "a"), ("sig_b", "b"))),  # both endpoints sign
    "Beacon": RecordKind(Beacon, (("sig", "relay"),)),
    "Heartbeat": RecordKind(Heartbeat, (("sig", "node_id"),)),
    "JobReceipt": RecordKind(JobReceipt, (("sig", "node_id"),)),
    "Transcript": RecordKind(Transcript, (("sig", "relay"),)),
    "LiveDigest": RecordKind(LiveDigest, (("sig", "relay"),)),
    "Scoreboard": RecordKind(Scoreboard, (("sig", "relay"),)),
    "Handoff": RecordKind(Handoff, (("sig", "relay"),)),
    "ClusterProfile": RecordKind(ClusterProfile, (("sig", "origin"),)),
    "JobRequest": RecordKind(JobRequest, (("sig", "submitter"),)),  # dispatched work: capsule/job_records.py
    "JobCancel": RecordKind(JobCancel, (("sig", "submitter"),)),
    "TaskReceipt": RecordKind(TaskReceipt, (("sig", "node_id"),)),
}
