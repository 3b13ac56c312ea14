"""Config mutants (issue 30): every numeric or boolean default of the config objects changed one at a time,
the fast tests run against each change; a change no fast test notices must be listed in FREE with the reason
it may move freely. mutmut mutates function bodies, not dataclass defaults, so this runs beside it.

    .venv/bin/python scripts/config_mutants.py                 # every field of every config object
    .venv/bin/python scripts/config_mutants.py roll_call_ trust_  # only fields whose names start so

The change: a float doubles (0 becomes 1), an int adds one, a bool flips. It reaches every
`RelayConfig()` built in the test process through tests/conftest.py (CE_CONFIG_MUTANT). Prints each field's
verdict; exits 1 when a field survives that FREE does not name (or FREE names one that is now killed).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS = ["web.config:RelayConfig"]

# the fast tests (no relay process, browser, wasm build or GPU): what a changed default must break
FAST = ["tests/test_numbers.py", "tests/test_rollcall.py", "tests/test_checks.py", "tests/test_llm_checks.py",
        "tests/test_mutants_trust.py", "tests/test_mutants_challenges.py", "tests/test_digests.py",
        "tests/test_live_guard.py", "tests/test_solo_moments.py", "tests/test_transcript_audit.py",
        "tests/test_mutants_links.py", "tests/test_mutants_peer_probes.py", "tests/test_gc_policy.py",
        "tests/test_relay_core.py", "tests/test_mutants_ingest.py", "tests/test_documented_defaults.py",
        "tests/test_gpu_same_moment.py"]

# Defaults that no fast test pins, on purpose: operational knobs whose value is a trade-off the README does not
# promise (ports, intervals of housekeeping, sizes of caches and histories), each with why.
FREE: dict[str, str] = {
    "port": "where the relay listens: any free port",
    "probe_ping_gap_s": "landmark probe pacing: changes time, not what is judged",
    "probe_step_timeout_s": "landmark probe patience",
    "landmark_mesh_interval_s": "how often relays probe each other: freshness, not correctness",
    "verify_workers": "processes beside the loop: throughput only",
    "beacon_keep_rounds": "history kept (a day of rounds)",
    "stats_history_interval_s": "sampling of /stats/history",
    "stats_history_kept": "history kept",
    "roll_calls_kept": "history kept",
    "gc_freeze_interval_s": "garbage-collector housekeeping",
    "sweep_interval_s": "how often silent nodes are swept: latency of going offline, stated in docs/manual.md",
    "max_body_bytes": "the largest profile accepted: a real one is ~6 KiB; the limit only bounds abuse",
    "gc_full_interval_s": "garbage-collector housekeeping",
    "ip_burst": "a token bucket's depth beside its documented rate",
    "node_burst": "a token bucket's depth beside its documented rate",
    "link_refit_updates": "a cap on one refit's work: CPU, not what is judged",
    "link_refit_max_duty": "the share of time refits may take: CPU, not what is judged",
    "peer_probe_max_active": "concurrent node-to-node probes a relay brokers: throughput",
    "challenge_spread": "the jitter of solo moments (drawn with a relay secret; their mean is pinned)",
    "challenge_commit_timeout_s": "patience with a slow network before `late`: far beyond any roll-call deadline",
    "challenge_open_timeout_s": "patience with a slow network before `late`: far beyond any roll-call deadline",
    "atlas_page_default": "page size of GET /atlas",
    "atlas_page_max": "page size of GET /atlas",
}


def mutated_value(value: object) -> object | None:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 if value else 1.0
    return None


def fields(prefixes: list[str]) -> list[tuple[str, str, object]]:
    out = []
    for spec in CONFIGS:
        module, cls = spec.split(":")
        klass = getattr(importlib.import_module(module), cls)
        for f in dataclasses.fields(klass):
            if not f.init or f.default is dataclasses.MISSING or isinstance(f.default, str | tuple | Path):
                continue
            if prefixes and not any(f.name.startswith(p) for p in prefixes):
                continue
            new = mutated_value(f.default)
            if new is not None:
                out.append((spec, f.name, new))
    return out


def killed(spec: str, name: str, value: object) -> bool:
    env = {**os.environ, "CE_CONFIG_MUTANT": f"{spec}:{name}:{value!r}"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-p", "no:randomly",
                          *FAST], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    return run.returncode != 0


def main(prefixes: list[str]) -> int:
    baseline = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FAST], cwd=ROOT,
                              capture_output=True, text=True, timeout=900)
    if baseline.returncode != 0:  # the precondition: unmutated, the fast tests pass
        print(baseline.stdout[-3000:])
        print("config mutants: the fast tests fail without a mutant", file=sys.stderr)
        return 2
    wrong: list[str] = []
    todo = fields(prefixes)
    for i, (spec, name, value) in enumerate(todo, 1):
        started = time.monotonic()
        dead = killed(spec, name, value)
        verdict = "killed" if dead else ("free: " + FREE[name] if name in FREE else "SURVIVED")
        print(f"[{i}/{len(todo)}] {name} -> {value!r}: {verdict} ({time.monotonic() - started:.0f} s)", flush=True)
        if not dead and name not in FREE:
            wrong.append(f"{name} survived (no fast test notices {value!r}; pin it or list it in FREE)")
        if dead and name in FREE:
            wrong.append(f"{name} is listed in FREE but a fast test pins it: take it out of FREE")
    for line in wrong:
        print(line)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
