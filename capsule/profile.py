"""Assembling an unsigned NodeProfile (data model v1) from measured figures. Shared by servers and
browsers; signing is separate (capsule.signing)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from capsule.aggregate import Figures


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def build_profile(
    *,
    node_id: str,
    measured_at: int,
    beacon: Mapping[str, Any],
    capsule: Mapping[str, str],
    cores: int,
    threads: int,
    memory: Mapping[str, int | None],
    storage_total_gb: int | None,
    storage_free_gb: int | None,
    figures: Figures,
    gpus: Sequence[Mapping[str, Any]],
    runtime: Mapping[str, Any],
    ref_model: str,
    evidence_extra: Mapping[str, Any] | None = None,
    name: str | None = None,
) -> dict[str, Any]:
    """The profile without `sig`. Figures are rounded to 4 decimals: more digits than any probe's spread. `name`
    (the operator's label) is left out when not given, so relays of before names take the profile."""
    profile = {
        "v": 1,
        "node_id": node_id,
        "measured_at": int(measured_at),
        "beacon": {"relay": beacon["relay"], "round": beacon["round"], "value": beacon["value"]},
        "capsule": dict(capsule),
        "cpu": {"cores": cores, "threads": threads, "gflops_fp32": _round(figures.gflops_fp32),
                "mem_bw_gbps": _round(figures.mem_bw_gbps)},
        "gpus": [{k: (_round(v, 6) if isinstance(v, float) else v) for k, v in g.items()} for g in gpus],
        "memory": {"total_mb": memory["total_mb"], "available_mb": memory["available_mb"]},
        "storage": {"total_gb": storage_total_gb, "free_gb": storage_free_gb,
                    "read_mbps": _round(figures.read_mbps, 1), "write_mbps": _round(figures.write_mbps, 1)},
        "llm": {"ref_model": ref_model, "tokens_per_sec": _round(figures.tokens_per_sec, 2),
                "streams": figures.llm_streams,
                "tokens_per_sec_one_stream": _round(figures.tokens_per_sec_one_stream, 2)},
        "runtime": dict(runtime),
        "evidence": {**figures.evidence, **(evidence_extra or {})},
    }
    if name is not None:
        profile["name"] = name
    return profile
