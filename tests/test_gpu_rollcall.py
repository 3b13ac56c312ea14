"""GPU challenges at roll calls (issue 20, item 5), against a real relay process, the real capsule and a real
wgpu adapter (lavapipe: Mesa's Vulkan on the CPU): a node whose profile claims fp32 GPU TFLOP/s and whose
live session answers "gpu" (host_runner/live_client.py with a GpuContext) is sent a GPU challenge at every
roll call, at the same moment as its SGEMM challenge (issue 28), and answers both side by side; what it proved
there is counted on /stats (gpus, gpu_tflops, fp32) and on its node page, beside the CPU proven at the same
moment. A claim 3x the adapter's speed counts at most what was shown (and is not believed once the relay
observed it twice); a wrong GPU answer fails (wrong_proof) and flags.

lavapipe runs on the CPU: here the GPU answer and the SGEMM answer share the same 2 cores at that moment,
which is the point of the same moment (a CPU answering for a "GPU" spends what its SGEMM answer would show).
So an honest node here claims a smaller share of the GPU it measured alone (GPU_SHARE): beside the SGEMM answer
its "GPU" gets about half the cores until both stop (1.125 s: the GPU, too, commits the products it finished by
the deadline), where a real GPU would not slow down at all.

Every comparison first asserts its precondition: the node's GPU challenge at a roll call was recorded."""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from common.keys import NodeKey
from host_runner.gpu_answer import GpuAnswer, GpuContext, GpuError
from host_runner.live_client import LiveSession
from host_runner.node import RunOptions, measure
from host_runner.relay_client import fetch_beacon
from tests.relay_process import RelayProcess
from tests.roll_call_helpers import HONEST_SHARE, Identity, challenges, node, stats, until
from tests.roll_call_helpers import registered as proven_registered
from web.config import RelayConfig
from web.map.stats import Contribution
from web.proof.challenges import check_opened, on_commit, parse_opening
from web.proof.gpu_challenges import new_gpu_challenge
from web.proof.rollcall import Proof, counted
from web.proof.transcripts import TranscriptError, check_transcript, transcript_body

# timed (tests/scheduling.py): roll-call answers within a common deadline; the browser's test runs alone
pytestmark = pytest.mark.timed

# a roll call every 6 s (beacon rounds every 1 s): SGEMM and GPU at 0, the reference model at 3 s (each phase's
# answers are due 1.25 s after it starts), then 1.75 s of nothing before the next, as tests/test_proven.py and
# tests/test_flood.py leave. (It was 9 s while the GPU had a phase of its own at 5 s; the GPU answers at the
# SGEMM's moment since, and the 3 s more were only waited out, ~7 times in this module.)
ROLL = ["--challenge-first-after", "1", "--challenge-interval-unverified", "1", "--heartbeat-interval", "0.5",
        "--beacon-interval", "1", "--roll-call-interval-s", "6", "--roll-call-min-gap-s", "6",
        "--roll-call-llm-offset-s", "3", "--roll-call-target-s", "1",
        # lavapipe stands in for a GPU here: the default floor (0.1 fp32 TFLOP/s per GPU) counts no software
        # adapter (tests/test_numbers.py), so this relay's floor is below what it shows (~0.0002 at 0.6)
        "--gpu-floor-tflops", "0.000001"]
CAP = 1.15  # RelayConfig.trust_cap_factor: a roll call shows at most observed x this
# An honest node's GPU claim here, as a share of what the GPU probe measured with the CPU to itself: lavapipe
# shares the 2 cores with the SGEMM answer sent at the same moment, so it shows ~0.36 of that measurement there
# (0.43 x the probe at 0.3 x it: 1.197 of the claim, 2026-12-06). The GPU counts what it finished by the deadline
# (docs/protocol.md), but a claim more than trust_flag_factor (2x) above everything it ever showed is not believed
# (web/proof/trust.py): a software "GPU" claimed in full beside its own CPU would be, rightly.
GPU_SHARE = 0.3


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    with RelayProcess(tmp_path_factory.mktemp("gpu-rollcall") / "relay", *ROLL) as r:
        yield r


@pytest.fixture(scope="module")
def ctx() -> GpuContext:
    """The adapter host_runner/gpu.py measures first here (lavapipe), its pipelines compiled once."""
    try:
        return GpuContext()
    except GpuError as exc:
        pytest.fail(f"no WebGPU adapter ({exc}): scripts/setup installs lavapipe (mesa-vulkan-drivers)")


@pytest.fixture(scope="module")
def measured(relay: RelayProcess, artifacts: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A profile measured here with the GPU probe: gpus[0].fp32_tflops is lavapipe's real speed."""
    opts = RunOptions(capsule=artifacts.capsule, phase_budget_ms=500, gpu=True, jitter=False,
                      scratch=tmp_path_factory.mktemp("scratch"))
    profile = measure(NodeKey.generate(), fetch_beacon(relay.url), opts).profile
    assert profile["gpus"] and profile["gpus"][0]["fp32_tflops"], profile["evidence"]["gpu_notes"]
    return profile


def registered(relay: RelayProcess, measured: dict[str, Any], gpu_factor: float = 1.0, share: float = 1.0,
               gpu_share: float | None = None) -> NodeKey:
    """A fresh key whose profile (the measured one, its GPU's fp32 claim x gpu_factor x gpu_share (share when
    None); CPU GFLOP/s and tokens/s x share) the relay accepted. Honest GPU nodes claim HONEST_SHARE of the CPU
    and GPU_SHARE of the GPU: a GPU counts only beside a CPU proven at the same roll call (web/proof/rollcall.py
    counted), and here both share the same cores at that moment."""
    profile = json.loads(json.dumps(measured))
    gpu = share if gpu_share is None else gpu_share
    profile["gpus"][0]["fp32_tflops"] = round(profile["gpus"][0]["fp32_tflops"] * gpu_factor * gpu, 6)
    tokens = profile["llm"]["tokens_per_sec"]
    return proven_registered(relay, profile, tokens_per_sec=None if tokens is None else round(tokens * share, 3),
                             gflops_fp32=round(profile["cpu"]["gflops_fp32"] * share, 3))


def gpu_answers(relay: RelayProcess, key: Identity) -> list[dict[str, Any]]:
    """The node's GPU challenges at roll calls, as its history keeps them."""
    return [e for e in challenges(relay, key) if e["kind"] == "gpu" and e["roll_call"]]


def test_gpu_proven_and_counted_at_a_roll_call(relay: RelayProcess, measured: dict[str, Any], artifacts: Any,
                                               ctx: GpuContext) -> None:
    """An honest node with a GPU: its GPU challenge comes with its SGEMM challenge (one issued_at), both pass at
    a roll call, and /stats counts its GPU (fp32 TFLOP/s proven, at most its claim) beside its CPU, as does its
    node page. Prints both answers' times at the same moment beside the CPU's alone (its solo SGEMM challenges)
    and the GPU's alone (the probe)."""
    key = registered(relay, measured, share=HONEST_SHARE, gpu_share=GPU_SHARE)
    claim = node(relay, key)["profile"]["gpus"][0]["fp32_tflops"]
    lines: list[str] = []
    session = LiveSession(relay.url, key, reactor_wasm=artifacts.reactor, gpu=ctx, say=lines.append).start()
    try:
        def counted() -> dict[str, Any] | None:
            body = node(relay, key)["trust"]
            return body if body["counted"]["gpus"] >= 1 and body["counted"]["gpu_tflops"] > 0 else None

        def history() -> list[Any]:  # what each roll-call phase found, when the node was never counted
            verdicts = {r["id"]: r.get("verdict") for r in list(session.results) if r.get("roll_call")}
            return [(e["kind"], e["passed"], e.get("code"), verdicts.get(e["id"]), e.get("observed_gflops"),
                     e.get("observed_tflops"), e.get("commit_s"), e["roll_call"])
                    for e in challenges(relay, key) if e["roll_call"]][-12:] + [f"GPU claim {claim} TFLOP/s"]

        body = until("the node's GPU counted after a roll call", 90, counted, history)
        done = [e for e in gpu_answers(relay, key) if e["passed"]]
        assert done, gpu_answers(relay, key)  # the precondition: a GPU answer at a roll call
        observed = [e["observed_tflops"] for e in done]
        print(f"GPU claim {claim:.6f} TFLOP/s; observed at roll calls {observed}; counted "
              f"{body['counted']['gpu_tflops']}; observed/claimed {[round(o / claim, 3) for o in observed]}")
        # one moment: every GPU challenge went out with the SGEMM challenge of its roll call
        history_rows = challenges(relay, key)
        sgemm_at = {e["roll_call"]: e for e in history_rows if e["kind"] == "sgemm" and e["roll_call"]}
        assert all(e["roll_call"] in sgemm_at and e["issued_at"] == sgemm_at[e["roll_call"]]["issued_at"]
                   for e in gpu_answers(relay, key)), history_rows
        both = [(sgemm_at[e["roll_call"]], e) for e in done]
        solo = [e for e in history_rows if e["kind"] == "sgemm" and not e["roll_call"] and e["passed"]]
        print("same moment, (SGEMM commit_s, observed GFLOP/s, GPU commit_s, observed TFLOP/s): "
              f"{[(s['commit_s'], s['observed_gflops'], g['commit_s'], g['observed_tflops']) for s, g in both]}; "
              f"alone: SGEMM solo challenges {[(e['commit_s'], e['observed_gflops']) for e in solo]}, GPU probe "
              f"{measured['gpus'][0]['fp32_tflops']:.6f} TFLOP/s, CPU probe {measured['cpu']['gflops_fp32']:.1f}")
        assert body["counted"]["gpu_tflops"] <= claim + 1e-3
        assert body["proven"]["gpus"] == 1 and body["proven"]["gpu_tflops_fp32"] > 0
        assert body["observed"]["gpu_tflops_fp32"] > 0
        scoreboard = stats(relay)
        assert scoreboard["gpus"] >= 1 and scoreboard["gpu_tflops"] > 0, scoreboard
        assert "gpus" not in scoreboard["unproven"] and scoreboard["gpu_vram_mb"] is None
        calls = relay.get("/v1/roll-calls")[1]
        rows = calls["roll_calls"] if isinstance(calls, dict) else calls
        assert any(c["gpu"]["answered"] >= 1 for c in rows), rows
        assert any("(gpu): counted" in line for line in lines), lines  # the operator hears the verdict
    finally:
        session.stop()


def test_gpu_claim_3x_counts_only_what_was_shown(relay: RelayProcess, measured: dict[str, Any], artifacts: Any,
                                                 ctx: GpuContext) -> None:
    """A profile claiming 3x the GPU's real fp32 speed: its challenge is sized for the claim, takes ~3x the
    target and misses the common deadline, so nothing of the claim counts (at most what was shown); once the
    relay observed it twice, the claim is not believed: unverified, with the GPU named (not flagged: a
    machine under load also shows less than it claims, and it still counts what it shows)."""
    claim = 3 * measured["gpus"][0]["fp32_tflops"]
    key = registered(relay, measured, gpu_factor=3.0, share=HONEST_SHARE, gpu_share=1.0)
    session = LiveSession(relay.url, key, reactor_wasm=artifacts.reactor, gpu=ctx).start()
    try:
        until("a GPU answer at a roll call", 90, lambda: gpu_answers(relay, key))
        body = node(relay, key)["trust"]
        shown = max([e["observed_tflops"] or 0.0 for e in gpu_answers(relay, key)]) * CAP
        print(f"GPU claim 3x: {claim:.6f} TFLOP/s; observed {[e['observed_tflops'] for e in gpu_answers(relay, key)]}"
              f"; counted {body['counted']['gpu_tflops']}")
        assert body["counted"]["gpu_tflops"] <= shown + 1e-6 and body["counted"]["gpu_tflops"] < claim / 2, body
        assert stats(relay)["gpu_tflops"] < claim / 2

        def disbelieved() -> dict[str, Any] | None:
            body = node(relay, key)["trust"]
            return body if body["status"] == "unverified" and "GPU" in body["reason"] else None

        body = until("the GPU claim unverified once two GPU answers were observed", 90, disbelieved)
        assert len([e for e in gpu_answers(relay, key) if e["passed"]]) >= 2
        shown = max([e["observed_tflops"] or 0.0 for e in gpu_answers(relay, key)]) * CAP
        assert body["counted"]["gpu_tflops"] <= shown + 1e-6 and body["counted"]["gpu_tflops"] < claim / 2, body
    finally:
        session.stop()


class AlteredGpuRows(GpuAnswer):
    """Commits honestly, then opens the committed rows with one value changed."""

    def open(self, rows: list[Any]) -> list[dict[str, Any]]:
        out = super().open(rows)
        values = np.frombuffer(base64.b64decode(out[0]["values"]), "<f4").copy()
        values[0] += 1.0
        out[0]["values"] = base64.b64encode(values.tobytes()).decode()
        return out


def test_wrong_gpu_answer_fails_and_flags(relay: RelayProcess, measured: dict[str, Any], artifacts: Any,
                                          ctx: GpuContext) -> None:
    key = registered(relay, measured)
    session = LiveSession(relay.url, key, reactor_wasm=artifacts.reactor, gpu=ctx,
                          gpu_answer_factory=AlteredGpuRows).start()
    try:
        failures = until("a GPU answer at a roll call", 90,
                         lambda: [r for r in session.results if r.get("kind") == "gpu" and r.get("roll_call")])
        assert not failures[0]["passed"] and failures[0]["code"] == "wrong_proof", session.results
        body = node(relay, key)["trust"]
        assert body["status"] == "flagged" and "wrong_proof" in body["reason"], body
        assert body["counted"]["gpus"] == 0 and body["counted"]["gpu_tflops"] == 0
    finally:
        session.stop()


# --- the pure parts: what a proof counts, a transcript of a GPU answer re-checked by a peer relay -----------

def test_counted_gpus_are_the_fp32_claim_capped_at_what_was_shown() -> None:
    config = RelayConfig()
    proof = Proof("r", gflops=50.0, instances=2, gpu_tflops=12.0, gpus=2)
    c = counted(proof, 40.0, 2, None, config, claimed_gpu_tflops=10.0, claimed_gpus=2)
    assert (c.gpus, c.gpu_utflops) == (2, 10_000_000)
    c = counted(proof, 40.0, 2, None, config, claimed_gpu_tflops=30.0, claimed_gpus=4)  # overstated: what was shown
    assert (c.gpus, c.gpu_utflops) == (2, 12_000_000)
    assert counted(proof, 40.0, 2, None, config).gpus == 0  # no GPU claim: no GPU counted
    none = Proof("r", gflops=50.0, instances=2)  # the GPU phase showed nothing
    assert counted(none, 40.0, 2, None, config, 10.0, 2).gpu_utflops == 0
    assert counted(Proof("r", gpu_tflops=12.0, gpus=2), 40.0, 2, None, config, 10.0, 2) == Contribution()


def test_a_gpu_transcript_is_rechecked_by_peers(ctx: GpuContext) -> None:
    """A passed GPU answer's transcript re-checks (proofs, freshly drawn entries) on another relay; the same
    transcript with an opened row altered is refused (wrong_transcript)."""
    config = RelayConfig()
    beacon: dict[str, Any] = {"round": 7, "value": "ab" * 32}
    ch = new_gpu_challenge("node", 0.002, beacon, "cd" * 16, 0.0, time.perf_counter(), config, 0.2)
    ch.roll_call = "7-relay"
    answer = GpuAnswer(ch.seeds, ch.n, ch.reps, ctx)
    rng = random.Random(3)
    opening = on_commit(ch, {"roots": answer.commit()}, time.perf_counter(), rng, config)
    assert opening is not None
    rows = answer.open(opening["rows"])
    check_opened(ch, parse_opening(ch, {"rows": rows}, time.perf_counter(), config), rng, config)
    ch.opened_items = rows
    body = transcript_body("relay", ch, beacon["value"], True, "passed", "counted", False, time.time())
    again = check_transcript(body, random.Random(4), config)
    # the transcript keeps commit_s to the microsecond: the peer's figure is the work over that time, exactly
    assert ch.commit_s is not None and ch.observed_tflops is not None
    assert again.kind == "gpu" and again.observed_tflops == pytest.approx(ch.flops / round(ch.commit_s, 6) / 1e12,
                                                                          rel=1e-12)
    assert again.observed_tflops == pytest.approx(ch.observed_tflops, rel=0.6e-6 / ch.commit_s)
    altered = json.loads(json.dumps(body))
    values = np.frombuffer(base64.b64decode(altered["challenge"]["opened"][0]["values"]), "<f4").copy()
    values[1] += 0.5
    altered["challenge"]["opened"][0]["values"] = base64.b64encode(values.tobytes()).decode()
    with pytest.raises(TranscriptError) as err:
        check_transcript(altered, random.Random(4), config)
    assert err.value.code == "wrong_transcript"


@pytest.mark.alone  # a browser join: its CPU use moves what is judged (tests/scheduling.py)
def test_a_browser_answers_its_gpu_challenges_beside_its_sgemm_ones(page: Any, relay: RelayProcess,
                                                                    artifacts: Any) -> None:
    """The join page with WebGPU (SwiftShader here) says hello with "gpu" and answers the GPU challenges of
    roll calls with browser_node/gpu-challenge.js, side by side with its SGEMM answers (sent at the same
    moment; browser_node/relay.js keeps one opener per challenge id): its GPU answers pass the relay's checks
    (roots, proofs, recomputed entries) at two roll calls, each beside its SGEMM answer of the same roll call
    (one issued_at, both passed); whatever counts is at most its fp32 claim. (Whether a software GPU on the
    cores its SGEMM answer uses meets the common deadline is timing: counted or after_deadline, both
    printed.)"""
    from tests.browsers import join

    profile = join(page, relay)
    assert profile["gpus"], f"the page found no WebGPU adapter (SwiftShader): {profile.get('gpus')}"
    claim = profile["gpus"][0]["fp32_tflops"]
    assert claim > 0  # the precondition: the page measured a GPU and claims it

    class Key:
        node_id = profile["node_id"]

    def answered() -> list[dict[str, Any]]:
        done = [e for e in gpu_answers(relay, Key) if e["passed"]]
        return done if len({e["roll_call"] for e in done}) >= 2 else []

    try:
        done = until("the page's GPU answers passed at two roll calls", 150, answered)
    except AssertionError:
        history = [(e["kind"], e.get("code"), e.get("roll_call")) for e in challenges(relay, Key)]
        raise AssertionError(f"{history[-12:]}; page: {page.locator('#live').inner_text()}") from None
    def sgemm_judged() -> dict[str, Any]:  # the GPU answer may be judged first: both stop at the deadline
        found = {e["roll_call"]: e for e in challenges(relay, Key) if e["kind"] == "sgemm" and e["roll_call"]}
        return found if all(e["roll_call"] in found for e in done) else {}

    sgemm = until("the SGEMM answers of those roll calls judged", 30, sgemm_judged)
    rows = challenges(relay, Key)
    for e in done:  # the SGEMM answer of the same moment was opened and judged too, whichever came first
        assert e["roll_call"] in sgemm and sgemm[e["roll_call"]]["issued_at"] == e["issued_at"], rows
        assert sgemm[e["roll_call"]]["passed"], sgemm[e["roll_call"]]
    body = node(relay, Key)["trust"]
    calls = relay.get("/v1/roll-calls?limit=50")[1]["roll_calls"]
    codes = [c["gpu"]["failure_codes"] or ["counted"] for c in calls if c["id"] in {e["roll_call"] for e in done}]
    print(f"browser GPU claim {claim} TFLOP/s; observed {[e['observed_tflops'] for e in done]}; verdicts "
          f"{codes}; counted {body['counted']['gpu_tflops']} TFLOP/s")
    assert all(e["observed_tflops"] > 0 for e in done)
    assert body["counted"]["gpu_tflops"] <= claim + 1e-6
