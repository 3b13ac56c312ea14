"""What the relay keeps in memory of a verified NodeProfile: a typed summary made once from the typed record
(capsule.model.NodeProfile) when the profile is verified, and stored beside it, so a relay starting with
100,000 profiles reads summaries instead of parsing every profile again (a typed parse costs ~120 us per
profile here, 12 s at 100k). Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from capsule.gpu_challenge import BINDING_DEFAULT
from capsule.model import NodeProfile
from capsule.typed import parse
from web.map.stats import MICRO, MILLI, Contribution
from web.proof.gpu_challenges import gpu_claim


def _milli(value: float | None) -> int:
    return round(value * MILLI) if value is not None else 0


def _positive(value: float | None) -> float | None:
    return value if value is not None and value > 0 else None


def _sgemm_record(evidence: dict[str, Any]) -> dict[str, Any]:
    """evidence.cpu.gflops_fp32, or {} where a node's evidence has no such object. Evidence is an open object
    in the data model, so the fields the relay relies on are read with care."""
    cpu = evidence.get("cpu")
    record = cpu.get("gflops_fp32") if isinstance(cpu, dict) else None
    return record if isinstance(record, dict) else {}


def sgemm_order(evidence: dict[str, Any]) -> int | None:
    """The SGEMM order behind the whole-CPU figure (challenges reuse it); None where the evidence does not say."""
    n = _sgemm_record(evidence).get("n")
    return n if type(n) is int and n > 0 else None


def instance_count(evidence: dict[str, Any], cores: int) -> int:
    """How many capsule instances ran at once for the whole-CPU figure (challenges give each its share): the
    evidence's per-instance list where it has one, else cpu.cores (which ce-bench sets to that count)."""
    instances = _sgemm_record(evidence).get("instances")
    return len(instances) if isinstance(instances, list) and instances else cores


@dataclass(frozen=True)
class ProfileSummary:
    node_id: str
    measured_at: int              # unix seconds
    sig: str
    contribution: Contribution    # what the node adds to the claimed scoreboard while live
    gflops_fp32: float | None     # whole-CPU GFLOP/s as claimed
    instances: int                # concurrent capsule instances behind that figure
    sgemm_n: int | None           # the SGEMM order behind that figure
    tokens_per_sec: float | None  # reference-model tokens/s as claimed
    mem_bw_gbps: float | None
    gpu_fp16_tflops: float | None  # all GPUs together; None without GPUs
    storage_read_mbps: float | None
    # the GPU claim a GPU challenge is sized for (web/gpu_challenges.gpu_claim); defaults: summaries stored
    # before GPU challenges load as claiming none (until the node posts its next profile)
    gpu_fp32_tflops: float | None = None  # fp32 WGSL matmul TFLOP/s of all its GPUs together
    gpu_count: int = 0                    # GPUs with an fp32 figure: one challenge instance each
    gpu_n: int | None = None              # the probe's order
    gpu_binding_limit: int = BINDING_DEFAULT  # the smallest storage binding its adapters allow, bytes
    llm_streams: int = 1                  # decode streams behind tokens_per_sec (a challenge asks for each)

    @staticmethod
    def of(record: NodeProfile) -> ProfileSummary:
        gpus = record.gpus
        claim = gpu_claim([g.fp32_tflops for g in gpus], record.evidence)
        return ProfileSummary(
            node_id=record.node_id, measured_at=record.measured_at, sig=record.sig,
            contribution=Contribution(
                cores=record.cpu.cores, cpu_mgflops=_milli(record.cpu.gflops_fp32), gpus=len(gpus),
                gpu_vram_mb=sum(g.vram_mb or 0 for g in gpus),
                gpu_utflops=sum(round((g.fp16_tflops or 0.0) * MICRO) for g in gpus),
                mtokens_per_sec=_milli(record.llm.tokens_per_sec), storage_free_gb=record.storage.free_gb or 0),
            gflops_fp32=record.cpu.gflops_fp32, instances=instance_count(record.evidence, record.cpu.cores),
            sgemm_n=sgemm_order(record.evidence), tokens_per_sec=record.llm.tokens_per_sec,
            mem_bw_gbps=record.cpu.mem_bw_gbps,
            gpu_fp16_tflops=sum(g.fp16_tflops or 0.0 for g in gpus) if gpus else None,
            storage_read_mbps=record.storage.read_mbps,
            gpu_fp32_tflops=claim.tflops if claim else None, gpu_count=claim.gpus if claim else 0,
            gpu_n=claim.n if claim else None,
            gpu_binding_limit=claim.binding_limit if claim else BINDING_DEFAULT,
            llm_streams=record.llm.streams or 1)

    @staticmethod
    def of_profile(data: Any) -> ProfileSummary:
        """From profile JSON (a stored row written before summaries were stored): a full typed parse."""
        return ProfileSummary.of(parse(NodeProfile, data))

    @property
    def claimed_gflops(self) -> float | None:
        """The whole-CPU claim challenges are sized for and judged against (None: nothing to challenge)."""
        return _positive(self.gflops_fp32)

    @property
    def claimed_tps(self) -> float | None:
        return _positive(self.tokens_per_sec)

    @property
    def claimed_gpu_tflops(self) -> float | None:
        """The fp32 TFLOP/s GPU challenges are sized for and judged against (None: no GPU to challenge)."""
        return _positive(self.gpu_fp32_tflops) if self.gpu_count > 0 else None

    def figures(self) -> dict[str, Any]:
        """The headline figures, as a node's history keeps them (units in the names)."""
        return {"measured_at": self.measured_at, "cpu_gflops": self.gflops_fp32, "mem_bw_gbps": self.mem_bw_gbps,
                "tokens_per_sec": self.tokens_per_sec, "gpu_fp16_tflops": self.gpu_fp16_tflops,
                "storage_read_mbps": self.storage_read_mbps}

    def to_json(self) -> dict[str, Any]:
        # vars(), not dataclasses.asdict: asdict deep-copies and cost 36 us of a ~1 ms ingest
        return {**vars(self), "contribution": dict(vars(self.contribution))}

    @staticmethod
    def from_json(data: dict[str, Any]) -> ProfileSummary:
        """From what to_json wrote into this relay's own store (a summary written before GPU TFLOP/s were
        summed in micro-units has gpu_mtflops: converted)."""
        contribution = dict(data["contribution"])
        if "gpu_mtflops" in contribution:
            contribution["gpu_utflops"] = contribution.pop("gpu_mtflops") * (MICRO // MILLI)
        return ProfileSummary(**{**data, "contribution": Contribution(**contribution)})


# A profile whose figures fall below this share of the one it replaces is said to be lower (POST /v1/profiles
# "warnings"): a machine measured under load, or another machine using this key.
LOWER_SHARE = 0.8


def lower_figures(old: ProfileSummary, new: ProfileSummary) -> list[str]:
    """What the new profile claims below LOWER_SHARE of the profile it replaces, one line each (empty: none).
    The relay still takes it (a machine may have changed); the poster and the relay's log are told."""
    said = []
    for name, unit, before, after in (("CPU", "GFLOP/s", old.gflops_fp32, new.gflops_fp32),
                                      ("reference model", "tokens/s", old.tokens_per_sec, new.tokens_per_sec)):
        if before and after is not None and after < LOWER_SHARE * before:
            said.append(f"this profile claims {after:.1f} {unit} ({name}); it replaces one of {before:.1f} measured "
                        f"at {old.measured_at}: measured under load, or another machine using this key?")
    return said
