"""The reactor's kernels through wasmtime-py, checked against numpy on seeded random inputs: each test's seed
comes from its name (the same inputs every run, so CI never passes or fails by luck) and every assertion
names it; CE_TEST_SEED=<int> replays or explores other inputs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from capsule.seeding import LLM_STREAM, PROMPT_STREAM, SGEMM_STREAM, SplitMix64, seed64
from host_runner.wasm import Reactor
from tests.conftest import Artifacts, run_cli


@pytest.fixture(scope="module")
def reactor(artifacts: Artifacts) -> Reactor:
    return Reactor(artifacts.reactor)


@pytest.fixture
def seeded(request: pytest.FixtureRequest) -> tuple[np.random.Generator, int]:
    """A numpy generator and its seed: CE_TEST_SEED when set, else one derived from the test's node id."""
    given = os.environ.get("CE_TEST_SEED")
    digest = hashlib.sha256(request.node.nodeid.encode()).digest()
    seed = int(given) if given else int.from_bytes(digest[:8], "big") >> 1
    return np.random.default_rng(seed), seed


# Shapes cross every blocking boundary of sgemm.c: MR=3, NR=12, KC=256, MC=96, NC=2052, plus ragged edges.
SHAPES = [(1, 1, 1), (3, 12, 1), (5, 7, 3), (4, 13, 11), (17, 33, 257), (97, 13, 300), (100, 2060, 40),
          (2, 5, 513), (64, 64, 64)]


@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_sgemm_matches_float64(reactor: Reactor, m: int, n: int, k: int,
                              seeded: tuple[np.random.Generator, int]) -> None:
    rng, seed = seeded
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    c = reactor.sgemm(a, b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = k * 2.0**-24 * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)) + 1e-30
    worst = float(np.max(np.abs(c - exact) / bound))
    assert worst < 1.0, f"shape {(m, n, k)}, CE_TEST_SEED={seed}: error ratio {worst}"


def test_sgemm_detects_a_wrong_operand(reactor: Reactor, seeded: tuple[np.random.Generator, int]) -> None:
    """The tolerance above is tight enough to notice a single wrong input element."""
    rng, seed = seeded
    a = rng.uniform(-1, 1, (20, 30)).astype(np.float32)
    b = rng.uniform(-1, 1, (30, 10)).astype(np.float32)
    c = reactor.sgemm(a, b)
    a[3, 4] += 0.5
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = 30 * 2.0**-24 * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    ratio = float(np.max(np.abs(c - exact) / bound))
    assert ratio > 1.0, f"CE_TEST_SEED={seed}: a changed operand left the error ratio at {ratio}"


@pytest.mark.parametrize("n", [1, 7, 1000, 131073])
def test_stream_kernels_match_numpy(reactor: Reactor, n: int, seeded: tuple[np.random.Generator, int]) -> None:
    rng, seed = seeded
    a0, b0, c0 = (rng.uniform(-10, 10, n) for _ in range(3))
    pa, pb, pc = reactor.put(a0), reactor.put(b0), reactor.put(c0)
    scalar = 3.0
    why = f"n={n}, CE_TEST_SEED={seed}"
    reactor.call("ce_stream_copy", n, pc, pa)
    assert np.array_equal(reactor.get(pc, np.float64, (n,)), a0), f"copy, {why}"
    reactor.call("ce_stream_scale", n, pb, pc, scalar)
    assert np.array_equal(reactor.get(pb, np.float64, (n,)), scalar * a0), f"scale, {why}"
    reactor.call("ce_stream_add", n, pc, pa, pb)
    assert np.array_equal(reactor.get(pc, np.float64, (n,)), a0 + scalar * a0), f"add, {why}"
    reactor.call("ce_stream_triad", n, pa, pb, pc, scalar)
    assert np.array_equal(reactor.get(pa, np.float64, (n,)), scalar * a0 + scalar * (a0 + scalar * a0)), f"triad, {why}"
    for p in (pa, pb, pc):
        reactor.call("ce_free", p)


def test_sgemm_checksum_recomputable_from_seed(wasmtime_cli: Path, artifacts: Artifacts, reactor: Reactor) -> None:
    """Anyone can regenerate the probe's inputs from the reported seed (capsule.seeding) and get its checksum."""
    n = 64
    report = json.loads(run_cli(wasmtime_cli, artifacts.capsule, ["--probes", "sgemm", "--seed", "5eed",
                                                                  "--sgemm-n", str(n)]).stdout)
    rng = SplitMix64(seed64("5eed") ^ SGEMM_STREAM)
    a = np.array([rng.uniform() for _ in range(n * n)], np.float32).reshape(n, n)
    b = np.array([rng.uniform() for _ in range(n * n)], np.float32).reshape(n, n)
    c = reactor.sgemm(a, b)
    assert hashlib.sha256(c.tobytes()).hexdigest() == report["probes"]["sgemm"]["checksum"]


def test_llm_tokens_recomputable_from_seed(wasmtime_cli: Path, artifacts: Artifacts, reactor: Reactor) -> None:
    """Replays the llm probe's prompt and seeded rank-sampling decode through the reactor: same token ids, same
    logits; each token is the one at its drawn rank of the logits (highest first, lower id on ties)."""
    seed_hex = "0123456789abcdef"
    report = json.loads(run_cli(wasmtime_cli, artifacts.capsule, ["--probes", "llm", "--seed", seed_hex]).stdout)
    llm = report["probes"]["llm"]
    s64 = seed64(seed_hex)
    assert (s64 ^ LLM_STREAM) != s64  # the model stream differs from the raw seed
    model = reactor.call("ce_llm_new", s64 & 0xFFFFFFFF, s64 >> 32)
    rng = SplitMix64(s64 ^ PROMPT_STREAM)
    prompt = [rng.next() % 32000 for _ in range(32)]
    for pos, t in enumerate(prompt):
        reactor.call("ce_llm_forward", model, t, pos)
    lo, hi = s64 & 0xFFFFFFFF, s64 >> 32
    token = reactor.call("ce_llm_token_at_rank", model, reactor.call("ce_llm_draw_rank", lo, hi, 0, 0))
    ids, ranks = [], []
    for i in range(128):
        reactor.call("ce_llm_forward", model, token, 32 + i)
        ranks.append(reactor.call("ce_llm_draw_rank", lo, hi, 0, i + 1))
        token = reactor.call("ce_llm_token_at_rank", model, ranks[-1])
        ids.append(token)
    logits = reactor.get(reactor.call("ce_llm_logits", model), np.float32, (32000,))
    reactor.call("ce_llm_free", model)
    assert ids[:8] == llm["token_ids_head"]
    assert hashlib.sha256(np.array(ids, "<u4").tobytes()).hexdigest() == llm["token_ids_sha256"]
    assert hashlib.sha256(logits.tobytes()).hexdigest() == llm["last_logits_sha256"]
    order = sorted(range(32000), key=lambda t: (-float(logits[t]), t))
    assert order[ranks[-1]] == ids[-1]  # the token at the drawn rank, recomputed here from the logits
    assert all(256 <= r < 32000 for r in ranks) and len(set(ranks)) > 100  # ranks spread over the floor..vocab
    assert len(set(ids)) > 100  # no token repeats in a run: the sequence never settles
    assert np.all(np.isfinite(logits))
    # activations stay in the normal float range (no denormals: see detmath.h)
    assert float(np.min(np.abs(logits[logits != 0]))) > np.finfo(np.float32).tiny


def test_llm_forward_rejects_bad_arguments(reactor: Reactor) -> None:
    model = reactor.call("ce_llm_new", 1, 0)
    assert reactor.call("ce_llm_forward", model, 32000, 0) == -1
    assert reactor.call("ce_llm_forward", model, 5, 256) == -1
    assert reactor.call("ce_llm_forward", model, -1, 0) == -1
    assert 0 <= reactor.call("ce_llm_forward", model, 5, 0) < 32000
    reactor.call("ce_llm_free", model)
