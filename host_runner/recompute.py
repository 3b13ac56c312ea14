"""`ce-bench verify --recompute`: re-run the capsule on the seeds a profile names and compare checksums.

Every checked figure of a NodeProfile names what reproduces it: `evidence.cpu.gflops_fp32` the seed and
checksum of each whole-CPU instance and of the solo run (with the SGEMM order n), `evidence.llm` the
seed and the hash of the decoded token ids. Running capsule.wasm with `--probes sgemm,llm --seed SEED
--sgemm-n N` must print the same values: the products and tokens are bit-exact in any build of the
capsule (browser reactor, server command, native), so a mismatch means the work was not done as claimed.
Timing is not recomputed: that is what the relay's challenges observe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host_runner.wasm import CapsuleError, run_command

# Enough for the minimum samples (3 SGEMM products, 1 decode run) with --soft-budget.
RECOMPUTE_BUDGET_MS = 200


@dataclass(frozen=True)
class Claim:
    what: str          # e.g. "cpu.gflops_fp32 instance 1"
    probe: str         # "sgemm" | "llm"
    seed: str
    sgemm_n: int | None
    key: str           # report key compared: "checksum" | "token_ids_sha256"
    expected: str


@dataclass(frozen=True)
class Outcome:
    claim: Claim
    actual: str | None
    error: str = ""

    @property
    def reproduced(self) -> bool:
        return self.actual is not None and self.actual == self.claim.expected


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def claims_of(profile: Mapping[str, Any]) -> list[Claim]:
    """What the profile's evidence says can be recomputed (entries without seed or checksum are skipped)."""
    evidence = profile.get("evidence")
    evidence = evidence if isinstance(evidence, Mapping) else {}
    cpu = evidence.get("cpu")
    gflops = cpu.get("gflops_fp32") if isinstance(cpu, Mapping) else None
    out: list[Claim] = []
    if isinstance(gflops, Mapping):
        n = gflops.get("n")
        instances = gflops.get("instances")
        for i, inst in enumerate(instances if isinstance(instances, list) else []):
            if isinstance(inst, Mapping) and _text(inst.get("seed")) and _text(inst.get("checksum")) \
                    and isinstance(n, int):
                out.append(Claim(f"cpu.gflops_fp32 instance {i}", "sgemm", inst["seed"], n, "checksum",
                                 inst["checksum"]))
        solo = gflops.get("solo")
        if isinstance(solo, Mapping) and _text(solo.get("seed")) and _text(solo.get("checksum")) \
                and isinstance(solo.get("n"), int):
            out.append(Claim("cpu single core", "sgemm", solo["seed"], solo["n"], "checksum", solo["checksum"]))
    llm = evidence.get("llm")
    if isinstance(llm, Mapping) and _text(llm.get("seed")) and _text(llm.get("token_ids_sha256")):
        out.append(Claim("llm.tokens_per_sec", "llm", llm["seed"], None, "token_ids_sha256", llm["token_ids_sha256"]))
    return out


def recompute(claims: Sequence[Claim], capsule: Path) -> list[Outcome]:
    """Runs capsule.wasm once per (seed, n) and compares each claimed value with what it printed."""
    outcomes: list[Outcome] = []
    groups: dict[tuple[str, int | None], list[Claim]] = {}
    for c in claims:
        groups.setdefault((c.seed, c.sgemm_n), []).append(c)
    for (seed, n), group in groups.items():
        probes = sorted({c.probe for c in group})
        args = ["--probes", ",".join(probes), "--seed", seed, "--budget-ms", str(RECOMPUTE_BUDGET_MS),
                "--soft-budget"]
        if n is not None:
            args += ["--sgemm-n", str(n)]
        try:
            report = run_command(capsule, args).probe_report("the recomputing capsule")
        except CapsuleError as exc:
            outcomes += [Outcome(c, None, str(exc)) for c in group]
            continue
        for c in group:
            probe = report.probes.sgemm if c.probe == "sgemm" else report.probes.llm
            outcomes.append(Outcome(c, _text(getattr(probe, c.key, None)) if probe is not None else None))
    return outcomes
