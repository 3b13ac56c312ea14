"""GPU challenges (kind "gpu", issue 20 item 5) on real wgpu adapters: lavapipe (Mesa's Vulkan on the CPU) and
SwiftShader (Chromium's Vulkan ICD, reached by wgpu through VK_ICD_FILENAMES), and in headless Chromium's WebGPU
(browser_node/gpu-challenge.js). The node's answer
(host_runner/gpu_answer.py) against the relay's own checks (web/proof/challenges.py on_commit, parse_opening,
check_opened with a challenge from web/proof/gpu_challenges.py): a correct answer passes; a row altered after the
commitment, a wrong root and products of wrong inputs fail; a claim 3x the adapter's real speed shows ~1/3.
The GPU draws the sgemm challenge's own inputs bit for bit and builds capsule.challenge.merkle_root's tree on
both hashing paths."""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from capsule import challenge as cc
from capsule import gpu_challenge as gc
from capsule import plausibility
from capsule.challenge import ChallengeError
from host_runner import gpu, gpu_answer
from host_runner.gpu_answer import GpuAnswer, GpuContext, GpuError
from web.config import RelayConfig
from web.proof import gpu_challenges as wg
from web.proof.challenges import Challenge, check_opened, on_commit, parse_opening

BEACON: dict[str, Any] = {"round": 11, "value": "cd" * 32}
CONFIG = RelayConfig()
REPO = Path(__file__).resolve().parents[1]
SWIFTSHADER_ICD = Path("/usr/lib/chromium/vk_swiftshader_icd.json")  # Debian's chromium package ships it


@pytest.fixture(scope="module")
def ctx() -> GpuContext:
    """The adapter host_runner/gpu.py measures first here: lavapipe (a CPU adapter: rows hashed on the host)."""
    try:
        return GpuContext()
    except GpuError as exc:
        pytest.fail(f"no WebGPU adapter ({exc}): scripts/setup installs lavapipe (mesa-vulkan-drivers)")


@pytest.fixture(scope="module")
def ctx_gpu_hash(ctx: GpuContext) -> GpuContext:
    """The same adapter hashing on the GPU (the real-GPU path), two products side by side and batches of four
    products at n = 128, so the groups and batches of the commitment end mid-challenge."""
    saved = gpu_answer.ROWS_IN_FLIGHT, gpu_answer.LEAF_BUFFER_BYTES
    gpu_answer.ROWS_IN_FLIGHT, gpu_answer.LEAF_BUFFER_BYTES = 2 * 128, 4 * 32 * 128
    try:
        context = GpuContext(ctx.adapter, hash_on="gpu")
        context.buffers(128)
    finally:
        gpu_answer.ROWS_IN_FLIGHT, gpu_answer.LEAF_BUFFER_BYTES = saved
    assert (context._buffers[128].slots, context._buffers[128].batch) == (2, 4)
    return context


# Nonces of the challenges whose error ratio is held to gc.ERROR_RATIO_MEASURED: pinned, so CI never passes or
# fails by the draw (a drawn one gave 0.031 against the 0.03 then allowed: fresh-clone run #31). 09d6f1a5... is
# the worst of 400 nonces at n = 128 on lavapipe (0.0295, 2026-12-05); the others are the first two of them.
PINNED_NONCES = ("09d6f1a5fde239c88749e7cb9d4b9195", "1044454cc46a7e9aab38cf637a30cbe8",
                 "6c02d5ed6f23bb5159ceee74441cd387")


def challenge(claimed_tflops: float, gpus: int = 1, gpu_n: object = None, target_s: float = 0.2,
              nonce: str | None = None) -> Challenge:
    """A GPU challenge as the relay makes one; a fresh nonce unless one is pinned (the inputs follow from it)."""
    return wg.new_gpu_challenge("node", claimed_tflops, BEACON, nonce or os.urandom(16).hex(), 0.0, time.perf_counter(),
                                CONFIG, target_s, gpus=gpus, gpu_n=gpu_n)


def answer_for(ch: Challenge, context: GpuContext, seeds: list[int] | None = None) -> GpuAnswer:
    return GpuAnswer(seeds if seeds is not None else ch.seeds, ch.n, ch.reps, context)


def relay_checks(ch: Challenge, answer: GpuAnswer, roots: list[str] | None = None,
                 tamper: Any = None) -> float:
    """The relay's side, as web/proof/challenge_desk.py runs it: commitment (timed from ch.sent_at), open, opening,
    recomputed entries. The worst error ratio; raises ChallengeError."""
    rng = random.Random(5)
    committed = answer.commit()
    opening = on_commit(ch, {"type": "commit", "id": ch.id, "roots": roots or committed}, time.perf_counter(), rng,
                        CONFIG)
    assert opening is not None and len(opening["rows"]) == len(ch.seeds) * CONFIG.challenge_rows_per_instance
    rows = answer.open(opening["rows"])
    if tamper is not None:
        tamper(rows)
    opened = parse_opening(ch, {"type": "opening", "id": ch.id, "rows": rows}, time.perf_counter(), CONFIG)
    return check_opened(ch, opened, rng, CONFIG)


# --- the node's arithmetic is the relay's -------------------------------------------------------------------

def test_gpu_draws_the_sgemm_challenges_inputs(ctx: GpuContext) -> None:
    """gen (splitmix64 on u32 pairs in WGSL) equals capsule/challenge.py's inputs bit for bit, so the relay
    recomputes entries with check_entries unchanged."""
    seed = 0xFEDCBA9876543210
    answer = GpuAnswer([seed], 128, 3, ctx)
    answer.commit()
    for t in (0, 2):
        answer.product(0, t)  # leaves A_t and B_t in the device's input buffers
        bufs = ctx.buffers(128)
        a = np.frombuffer(ctx.device.queue.read_buffer(bufs.a), "<f4").reshape(128, 128)
        b = np.frombuffer(ctx.device.queue.read_buffer(bufs.b), "<f4").reshape(128, 128)
        want_a, want_b = cc.inputs_of(seed, 128, t)
        assert np.array_equal(a, want_a) and np.array_equal(b, want_b)
    assert gc.product_state(seed, 1) == (cc.product_seed(seed, 1) ^ cc.SGEMM_STREAM)


@pytest.mark.parametrize("path", ["host", "gpu"])
def test_roots_are_the_capsules_merkle_roots(path: str, ctx: GpuContext, ctx_gpu_hash: GpuContext) -> None:
    """Both hashing paths commit to capsule.challenge.merkle_root over every row of every product (5 products:
    padded to 8; on the GPU path groups of 2 and batches of 4 end inside the challenge), two instances."""
    context = ctx if path == "host" else ctx_gpu_hash
    assert context.hash_on == path
    seeds = [instance_seed_of(i) for i in range(2)]
    answer = GpuAnswer(seeds, 128, 5, context)
    roots = answer.commit()
    for i in range(2):
        rows = [row.tobytes() for t in range(5) for row in answer.product(i, t)]
        assert roots[i] == cc.merkle_root(rows).hex()


def instance_seed_of(i: int) -> int:
    return cc.instance_seed(BEACON["value"], "0a0b", i)


@pytest.mark.parametrize("path", ["host", "gpu"])
def test_stopped_at_a_deadline_the_gpu_commits_the_products_it_finished(path: str, ctx: GpuContext,
                                                                       ctx_gpu_hash: GpuContext) -> None:
    """At a roll call the GPU stops at the deadline, as the SGEMM answer does, and commits its first k products
    of every instance: the root is merkle_root over their n k rows, the relay opens rows among them only and
    passes the answer, and counts k products of work. Claiming more products than it committed to fails."""
    context = ctx if path == "host" else ctx_gpu_hash
    reps = 400  # ~0.8 ms a product at n = 128 here: far beyond the stop
    ch = wg.new_gpu_challenge("node", 1.0, BEACON, "5e" * 16, 0.0, time.perf_counter(), CONFIG, 0.2, gpus=2,
                              gpu_n=128, work_s=10.0, stop_after_s=0.15)
    assert ch.reps > reps and ch.message(CONFIG)["stop_after_s"] == 0.15
    answer = GpuAnswer(ch.seeds, 128, reps, context)
    began = time.perf_counter()
    roots = answer.commit(began + 0.15)
    took = time.perf_counter() - began
    k = answer.products[0]
    # it stopped: fewer products than given (the proof that does not hang on how late a busy scheduler ran it)
    assert answer.products == [k, k] and 1 <= k < reps, answer.products
    assert took < 5.0, took  # (and not stuck)
    for i in range(2):
        rows = [row.tobytes() for t in range(k) for row in answer.product(i, t)]
        assert roots[i] == cc.merkle_root(rows).hex()
    ch.reps = reps
    rng = random.Random(3)
    opening = on_commit(ch, {"type": "commit", "id": ch.id, "roots": roots, "products": answer.products},
                        time.perf_counter(), rng, CONFIG)
    assert opening is not None and all(leaf < 128 * k for _, leaf in opening["rows"])
    assert ch.flops == 2 * 128**3 * 2 * k  # the work of the committed products only
    opened = parse_opening(ch, {"type": "opening", "id": ch.id, "rows": answer.open(opening["rows"])},
                           time.perf_counter(), CONFIG)
    assert check_opened(ch, opened, rng, CONFIG) <= gc.ERROR_RATIO_MEASURED
    # the same roots, claimed as the whole challenge: the rows drawn past k cannot be opened
    whole = wg.new_gpu_challenge("node", 1.0, BEACON, "5e" * 16, 0.0, time.perf_counter(), CONFIG, 0.2, gpus=2,
                                 gpu_n=128, work_s=10.0, stop_after_s=0.15)
    whole.reps = reps
    opening = on_commit(whole, {"type": "commit", "id": whole.id, "roots": roots, "products": [reps, reps]},
                        time.perf_counter(), random.Random(4), CONFIG)
    assert opening is not None and any(leaf >= 128 * k for _, leaf in opening["rows"]), opening
    with pytest.raises(ValueError):
        answer.open(opening["rows"])  # the honest answer refuses a row of a product it never computed
    # a liar answers those with rows and proofs it has (product 0's), under the rows' names
    lied = answer.open([[i, leaf % (128 * k)] for i, leaf in opening["rows"]])
    for item, (_, leaf) in zip(lied, opening["rows"], strict=True):
        item["row"] = leaf
    with pytest.raises(ChallengeError) as failed:
        parse_opening(whole, {"type": "opening", "id": whole.id, "rows": lied}, time.perf_counter(), CONFIG)
    assert failed.value.code == "wrong_proof"


@pytest.mark.parametrize("reps", [1, 2, 3, 5, 8])
def test_tree_in_parts_is_the_capsules_tree(reps: int) -> None:
    """Subtrees per product joined by upper_levels, and proofs from both parts, are merkle_root's and
    check_proof's (pure; n = 4 leaves per product to keep it small)."""
    n = 4
    rows = [bytes([t, r]) * 8 for t in range(reps) for r in range(n)]
    subs = [gc.levels([gc.leaf_hash(rows[t * n + r]) for r in range(n)]) for t in range(reps)]
    upper = gc.upper_levels([s[-1][0] for s in subs], n)
    root = upper[-1][0]
    assert root == cc.merkle_root(rows)
    for leaf in range(n * reps):
        t, r = divmod(leaf, n)
        cc.check_proof(rows[leaf], leaf, gc.proof(subs[t], upper, t, r), root, n * reps)


# --- the relay's checks -------------------------------------------------------------------------------------

def test_correct_answer_passes_well_inside_the_bound(ctx: GpuContext, ctx_gpu_hash: GpuContext) -> None:
    for context in (ctx, ctx_gpu_hash):
        ch = challenge(2e-4, gpus=2, gpu_n=128, nonce=PINNED_NONCES[0])
        assert (ch.kind, ch.n, len(ch.seeds)) == ("gpu", 128, 2) and ch.reps >= 2
        worst = relay_checks(ch, answer_for(ch, context))
        assert 0 < worst < gc.ERROR_RATIO_MEASURED
        assert ch.commit_s is not None and wg.observed_tflops(ch) == pytest.approx(ch.flops / ch.commit_s / 1e12)
        assert wg.gpu_implausible(ch) is None


def test_row_altered_after_the_commitment_fails(ctx: GpuContext) -> None:
    def alter(rows: list[dict[str, Any]]) -> None:
        values = np.frombuffer(base64.b64decode(rows[1]["values"]), "<f4").copy()
        values[7] += np.float32(0.5)
        rows[1]["values"] = cc.encode_row(values)

    ch = challenge(2e-4, gpu_n=128)
    with pytest.raises(ChallengeError) as caught:
        relay_checks(ch, answer_for(ch, ctx), tamper=alter)
    assert caught.value.code == "wrong_proof"


def test_wrong_root_fails(ctx: GpuContext) -> None:
    ch = challenge(2e-4, gpu_n=128)
    answer = answer_for(ch, ctx)
    root = bytearray(bytes.fromhex(answer.commit()[0]))
    root[0] ^= 1
    with pytest.raises(ChallengeError) as caught:
        relay_checks(ch, answer, roots=[root.hex()])
    assert caught.value.code == "wrong_proof"


def test_products_of_wrong_inputs_fail(ctx: GpuContext) -> None:
    """An answer computed for other seeds is self-consistent (its proofs open its roots), but its entries are
    not the products the relay recomputes."""
    ch = challenge(2e-4, gpu_n=128)
    with pytest.raises(ChallengeError) as caught:
        relay_checks(ch, answer_for(ch, ctx, [s ^ 1 for s in ch.seeds]))
    assert caught.value.code == "wrong_rows"


@pytest.mark.alone  # observed throughput compared between claims (tests/scheduling.py)
def test_overstated_claim_shows_a_third(ctx: GpuContext) -> None:
    """The adapter's real fp32 speed measured by the probe itself (host_runner/gpu.py, same shader); a challenge
    sized for 3x that takes ~3x the target, so observed/claimed is ~1/3, beside an honest claim's ~1 in the
    same run. The machine is shared and noisy, and noise only ever slows a run: each figure is the best of two."""
    probe = gpu._matmul(ctx.device, ctx.wgpu, np.float32, ctx.binding_limit, 1.0, "5eed")
    real, n = probe["tflops"], probe["n"]
    assert probe["verified"] and real > 0
    best = {1.0: 0.0, 3.0: 0.0}
    for _ in range(2):
        for factor in best:  # interleaved, so a busy moment of the machine falls on both alike
            ch = challenge(factor * real, gpu_n=n, target_s=0.5)
            relay_checks(ch, answer_for(ch, ctx))
            best[factor] = max(best[factor], wg.observed_tflops(ch) or 0.0)
    shown = {factor: observed / (factor * real) for factor, observed in best.items()}
    print(f"probe {real * 1e3:.3f} GFLOP/s at n={n}; observed/claimed: honest {shown[1.0]:.2f}, 3x {shown[3.0]:.2f}")
    assert 0.4 < shown[1.0] < 1.6
    # judged against the honest claim's figure of the same window, not the probe's of a moment before (the
    # machine's speed moves between the two: 2026-12-06 it read honest 1.11, 3x 0.55, a ratio of 0.495)
    assert 0.2 < shown[3.0] / shown[1.0] < 0.5  # flagged at trust_flag_factor 2; ~1/3


def test_recomputation_must_match_the_commitment(ctx: GpuContext) -> None:
    """An opening is recomputed on the device; a product that comes out differently (a non-deterministic
    device, or a root the node lied about) is an error of the node, not a proof it sends."""
    answer = GpuAnswer([3], 128, 2, ctx)
    answer.commit()
    answer.product_roots[0][1] = bytes(32)
    assert answer.open([[0, 5]])[0]["row"] == 5
    with pytest.raises(GpuError):
        answer.open([[0, 128 + 5]])
    with pytest.raises(ValueError):
        answer.open([[0, 256]])


def test_instances_on_several_devices_give_the_same_roots(ctx: GpuContext) -> None:
    seeds = [instance_seed_of(i) for i in range(3)]
    one = GpuAnswer(seeds, 128, 2, ctx).commit()
    two = GpuAnswer(seeds, 128, 2, [ctx, GpuContext(ctx.adapter)]).commit()
    assert one == two


# --- sizing and the relay's bookkeeping (pure) --------------------------------------------------------------

def test_sizing_follows_claim_probe_and_adapter() -> None:
    assert gc.order_for(1024, 10.0, 1.0) == 1024                     # the probe's order
    assert gc.order_for(1000, 10.0, 1.0) == gc.DEFAULT_N             # not one of the probe's orders
    assert gc.order_for(2048, 10.0, 1.0, 8 << 20) == 1024            # 16 MiB per matrix does not bind in 8 MiB
    assert gc.order_for(2048, 6e-4, 1.0) == 256                      # lavapipe: 1/16 s per product at most
    assert gc.order_for(2048, 1e-4, 1.0) == 128                      # (2 x 256^3 = 34 MFLOP: 0.34 s here)
    assert gc.reps_for(6e-4, 1, 256, 1.0) == 18                      # 600 MFLOP / 33.5 MFLOP = 17.9
    assert gc.reps_for(5.8e-4, 1, 256, 1.0) == 17                    # 17.3: to the nearest
    assert gc.reps_for(2 * 2 * 256**3 / 1e12, 1, 256, 1.0) == 2      # exactly two products stays two
    assert gc.reps_for(0.0, 1, 256, 1.0) == 1 and gc.reps_for(1e9, 1, 2048, 1.0) == gc.MAX_REPS
    ch = wg.new_gpu_challenge("n", 20.0, BEACON, "ff" * 16, 1.0, 0.0, CONFIG, 1.0, gpus=2, gpu_n=2048)
    assert (ch.n, len(ch.seeds), ch.claimed_gflops) == (2048, 2, 20_000.0)
    assert abs(ch.flops - 20e12) <= 2 * 2048**3  # within half a product per GPU of claim x target
    assert len(set(ch.seeds)) == 2 and ch.seeds[0] == cc.instance_seed(BEACON["value"], "ff" * 16, 0)


def test_message_record_claim_and_physics() -> None:
    ch = wg.new_gpu_challenge("n", 1.0, BEACON, "ee" * 16, 2.0, 0.0, CONFIG, 1.0, gpu_n=1024)
    message = wg.gpu_message(ch, CONFIG)
    assert message["kind"] == "gpu" and (message["n"], message["reps"]) == (ch.n, ch.reps)
    assert message["seeds"] == [f"{s:016x}" for s in ch.seeds]
    ch.commit_s = ch.flops / 0.5e12  # 0.5 TFLOP/s
    record = wg.gpu_record(ch)
    assert json.loads(json.dumps(record))["observed_tflops"] == pytest.approx(0.5)
    assert record["claimed_tflops"] == 1.0 and ch.observed_gflops is None  # not an sgemm figure
    ch.commit_s = ch.flops / (plausibility.GPU_FP32_TFLOPS_MAX * 1.01e12)
    assert "no GPU exceeds" in (wg.gpu_implausible(ch) or "")
    evidence = {"gpus": [{"fp32_matmul": {"n": 1024}, "max_storage_buffer_binding_size": 1 << 27}, "junk"]}
    claim = wg.gpu_claim([1.5, None, 0.5], evidence)
    assert claim == wg.GpuClaim(2.0, 2, 1024, 1 << 27)
    assert wg.gpu_claim([None], evidence) is None and wg.gpu_claim([1.0], {"gpus": 3}) == wg.GpuClaim(
        1.0, 1, None, gc.BINDING_DEFAULT)


# --- SwiftShader --------------------------------------------------------------------------------------------

def swiftshader_main() -> None:
    """Run in a process whose Vulkan loader sees only SwiftShader (VK_ICD_FILENAMES): a correct answer passes,
    a row altered after the commitment and wrong inputs fail. Prints one JSON line."""
    context = GpuContext(gpu_answer.pick_adapter("SwiftShader"))
    out: dict[str, Any] = {"adapter": context.name, "hash_on": context.hash_on}
    ch = challenge(2e-3, gpus=2, gpu_n=256, nonce=PINNED_NONCES[1])
    out["worst"] = relay_checks(ch, answer_for(ch, context))
    out["n"], out["reps"], out["observed_tflops"] = ch.n, ch.reps, wg.observed_tflops(ch)

    def alter(rows: list[dict[str, Any]]) -> None:
        values = np.frombuffer(base64.b64decode(rows[0]["values"]), "<f4").copy()
        values[0] = -values[0] + np.float32(1)
        rows[0]["values"] = cc.encode_row(values)

    for name, shift, tamper in (("altered", 0, alter), ("wrong_inputs", 1, None)):
        bad = challenge(2e-3, gpu_n=256)
        try:
            relay_checks(bad, answer_for(bad, context, [(s + shift) & cc.MASK64 for s in bad.seeds]), tamper=tamper)
            out[name] = "passed"
        except ChallengeError as exc:
            out[name] = exc.code
    print(json.dumps(out))


@pytest.mark.skipif(not SWIFTSHADER_ICD.exists(), reason="no SwiftShader Vulkan ICD (Debian's chromium ships one)")
def test_swiftshader() -> None:
    env = {**os.environ, "VK_ICD_FILENAMES": str(SWIFTSHADER_ICD)}
    proc = subprocess.run([sys.executable, "-c", "from tests.test_gpu_challenge import swiftshader_main as m; m()"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["adapter"].startswith("SwiftShader") and result["hash_on"] == "host"
    assert 0 < result["worst"] < gc.ERROR_RATIO_MEASURED and result["observed_tflops"] > 0
    assert (result["altered"], result["wrong_inputs"]) == ("wrong_proof", "wrong_rows")


# --- the browser (WebGPU in headless Chromium) --------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")
ORIGIN = "http://localhost:8931"  # routed by playwright, never listened on; localhost: a secure context (WebGPU)
PAGE = "<!doctype html><script type=module>import { gpuChallengeAnswerer } from '/gpu-challenge.js'; " \
       "window.answerer = gpuChallengeAnswerer('/shaders/'); window.loaded = true;</script>"


def serve(route: Any) -> None:
    """browser_node/gpu-challenge.js and capsule/shaders, as the relay serves them (build.py copies the shaders)."""
    path = route.request.url.removeprefix(ORIGIN)
    if path == "/":
        route.fulfill(body=PAGE, content_type="text/html")
    elif path == "/gpu-challenge.js":
        route.fulfill(body=(REPO / "browser_node" / "gpu-challenge.js").read_text(), content_type="text/javascript")
    elif path.startswith("/shaders/") and (gpu.SHADERS / path.removeprefix("/shaders/")).is_file():
        route.fulfill(body=(gpu.SHADERS / path.removeprefix("/shaders/")).read_text(), content_type="text/wgsl")
    else:
        route.fulfill(status=404, body="")


def test_browser_answer_passes_the_relays_checks() -> None:
    """browser_node/gpu-challenge.js on Chromium's WebGPU (SwiftShader here; rows hashed in WGSL) against the
    relay's checks: a correct answer passes, a row altered after the commitment fails. (In its own thread:
    pytest-playwright's loop may be running in the main one.)"""
    from tests.threaded import in_thread

    in_thread(_browser_answer_passes_the_relays_checks)


def _browser_answer_passes_the_relays_checks() -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--headless=new", "--no-sandbox", "--enable-unsafe-webgpu", "--disable-background-networking"])
        try:
            page = browser.new_page()
            page.route(f"{ORIGIN}/**", serve)
            page.goto(f"{ORIGIN}/")
            page.wait_for_function("() => window.loaded === true")
            results: list[float | str] = []
            for tamper, nonce in ((False, PINNED_NONCES[0]), (True, PINNED_NONCES[2])):
                ch = challenge(2e-4, gpus=2, gpu_n=128, nonce=nonce)
                ch.sent_at = time.perf_counter()
                commit = page.evaluate("(m) => window.answerer.commit(m)", wg.gpu_message(ch, CONFIG))
                opening = on_commit(ch, commit, time.perf_counter(), random.Random(1), CONFIG)
                assert opening is not None
                answer = page.evaluate("(m) => window.answerer.open(m)", opening)
                if tamper:
                    values = np.frombuffer(base64.b64decode(answer["rows"][0]["values"]), "<f4").copy()
                    values[3] *= np.float32(2)
                    answer["rows"][0]["values"] = cc.encode_row(values)
                try:
                    opened = parse_opening(ch, answer, time.perf_counter(), CONFIG)
                    results.append(check_opened(ch, opened, random.Random(2), CONFIG))
                except ChallengeError as exc:
                    results.append(exc.code)
            page.evaluate("() => window.answerer.stop()")
        finally:
            browser.close()
    worst, code = results
    assert isinstance(worst, float) and 0 < worst < gc.ERROR_RATIO_MEASURED
    assert code == "wrong_proof"
