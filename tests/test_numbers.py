"""The README's promises about trust, challenges and roll calls, each as the literal number the README states,
through the public behaviour of the pure cores (issue 30): a changed default fails here, not only the
documentation. Where a promise is a bound, both edges are tried (just inside holds, just outside does not)."""

from __future__ import annotations

import pytest

from web.config import RelayConfig
from web.map.stats import MICRO, MILLI, Contribution
from web.proof.challenges import net_time_s, new_challenge
from web.proof.rollcall import Proof, counted, on_time, shown, stop_after_s, work_s
from web.proof.trust import Trust

CONFIG = RelayConfig()
BEACON = {"round": 7, "value": "ab" * 32, "issued_at": 1_000}


def test_held_pongs_buy_at_most_1_11x() -> None:
    """"a node that holds its pongs back buys at most 1.11x": the RTT allowance is at most 10% of the time."""
    assert net_time_s(1.0, 10_000.0, CONFIG) == pytest.approx(0.9)
    assert 1.0 / net_time_s(1.0, 10_000.0, CONFIG) == pytest.approx(1.111, abs=0.001)
    assert net_time_s(1.0, 99.0, CONFIG) == pytest.approx(0.901)  # an RTT below 10%: taken in full


@pytest.mark.parametrize("target", [1.0, 2.0])
def test_the_common_deadline_is_1_25x_the_target(target: float) -> None:
    """"only an answer within the common deadline (1.25 s ...)": 1.25 x roll_call_target_s, at 1 s and 2 s."""
    config = RelayConfig(roll_call_target_s=target)
    assert on_time(1.25 * target, config) and not on_time(1.25 * target * 1.0001, config)
    assert stop_after_s(config) == pytest.approx(1.125 * target)  # "stop_after_s = 1.125 s" at 1 s
    assert work_s(config) == pytest.approx(1.5625 * target)       # "more work than 1.56 s at its claim"


@pytest.mark.parametrize("target", [1.0, 0.5])
def test_a_claim_counts_at_most_min_observed_x_1_15_and_work_over_the_target(target: float) -> None:
    """"its claim capped at min(observed x 1.15, committed work / 1 s)" (work over the target time)."""
    config = RelayConfig(roll_call_target_s=target)
    slow = 1.2 * target  # a slow answer: the observed rate x 1.15 binds
    assert shown(12.0, slow, config) == pytest.approx(12.0 / slow * 1.15)
    fast = 0.5 * target  # a fast one: the work over the target binds
    assert shown(12.0, fast, config) == pytest.approx(12.0 / target)
    assert shown(12.0, target, config) == pytest.approx(12.0 / target)


def test_one_machine_counts_at_most_1_25x_and_1_39x_with_held_pongs() -> None:
    """"one machine counts at most 1.25x itself ... (1.25 x 1.11 with the RTT allowance)": an answer whose
    work took the whole deadline counts work / target, and held pongs shrink its time by at most 10%."""
    machine = 40.0
    work = machine * 1.25  # all it can do by the deadline, over any number of identities
    assert shown(work, 1.25, CONFIG) <= 1.25 * machine + 1e-9
    # pongs held: an answer arriving 1.3889 s after the send nets 1.25 s, and the machine did 1.3889 s of work
    held = net_time_s(1.25 / 0.9, 10_000.0, CONFIG)
    assert on_time(held, CONFIG) and not on_time(net_time_s(1.25 / 0.9 * 1.001, 10_000.0, CONFIG), CONFIG)
    # it counts its observed rate x 1.15 (1.278x the machine), within the README's 1.25 x 1.11 = 1.389x
    assert shown(machine * 1.25 / 0.9, held, CONFIG) == pytest.approx(1.2778 * machine, rel=1e-3)
    assert shown(machine * 1.25 / 0.9, held, CONFIG) <= 1.25 / 0.9 * machine


def test_cores_are_never_counted_and_gpus_only_at_0_1_tflops_each() -> None:
    """"Cores are shown as claimed only" (instances time-sliced on 2 cores each showed the 2 GFLOP/s
    floor: 10x the cores from 10 identities); "a GPU counts only at 0.1 fp32 TFLOP/s each": a software
    rasterizer (lavapipe here: 0.00027) or a CPU answering the GPU challenge with numpy counts no GPU."""
    assert counted(Proof("r", gflops=80.0, instances=4), 80.0, 4, None, CONFIG).cores == 0
    assert counted(Proof("r", gflops=80.0, instances=64), 80.0, 2**32 - 1, None, CONFIG).cores == 0
    gpu = Proof("r", gflops=10.0, instances=1, gpu_tflops=0.2, gpus=2)
    both = counted(gpu, 10.0, 1, None, CONFIG, claimed_gpu_tflops=0.2, claimed_gpus=2)
    assert (both.gpus, both.gpu_utflops) == (2, 200_000)  # 0.1 each: two GPUs
    one = counted(Proof("r", gflops=10.0, instances=1, gpu_tflops=0.199, gpus=2), 10.0, 1, None, CONFIG, 0.2, 2)
    assert (one.gpus, one.gpu_utflops) == (1, 199_000)
    three = counted(Proof("r", gflops=10.0, instances=1, gpu_tflops=0.3, gpus=3), 10.0, 1, None, CONFIG, 0.3, 3)
    assert three.gpus == 3  # exactly at the floor each (0.3 / 0.1 is 2.9999999999999996 in floats)
    # 16 "GPUs" of 0.000005 TFLOP/s each (numpy): none, and no TFLOP/s without a GPU
    fake = counted(Proof("r", gflops=10.0, instances=1, gpu_tflops=16 * 5e-6, gpus=16), 10.0, 1, None, CONFIG,
                   16 * 5e-6, 16)
    assert (fake.gpus, fake.gpu_utflops) == (0, 0)
    lavapipe = counted(Proof("r", gflops=10.0, instances=1, gpu_tflops=0.00027, gpus=1), 10.0, 1, None, CONFIG,
                       0.0003, 1)
    assert (lavapipe.gpus, lavapipe.gpu_utflops) == (0, 0)


def test_unclaimed_figures_and_gpus_count_nothing() -> None:
    """A figure the profile does not claim counts 0 whatever was shown; GPU TFLOP/s count only with a GPU
    claimed and proven; a claim of 0 GPUs counts none."""
    proof = Proof("r", gflops=10.0, instances=1, tps=0.9, gpu_tflops=5.0, gpus=2)
    assert counted(proof, 10.0, 1, None, CONFIG).mtokens_per_sec == 0
    assert counted(proof, 10.0, 1, 0.5, CONFIG).mtokens_per_sec == 0.5 * MILLI
    none = counted(proof, 10.0, 1, None, CONFIG, claimed_gpu_tflops=4.0, claimed_gpus=0)
    assert (none.gpus, none.gpu_utflops) == (0, 0)
    one = counted(proof, 10.0, 1, None, CONFIG, claimed_gpu_tflops=4.0, claimed_gpus=1)
    assert (one.gpus, one.gpu_utflops) == (1, 4 * MICRO)
    unclaimed = counted(proof, 10.0, 1, None, CONFIG, claimed_gpu_tflops=None, claimed_gpus=2)
    assert (unclaimed.gpus, unclaimed.gpu_utflops) == (0, 0)
    nothing = counted(Proof("r", gpu_tflops=5.0, gpus=2), 10.0, 1, None, CONFIG, 4.0, 2)
    assert nothing == Contribution()  # no CPU shown at this roll call: nothing at all


def test_verified_needs_2_passes_one_within_30_min_and_a_claim_within_2x() -> None:
    t = Trust(decayed_at=0.0)
    t.record(True, "passed", 40.0, 0.0, CONFIG)
    assert t.judge(40.0, 0.0, CONFIG)[0] == "unverified"  # one pass
    t.record(True, "passed", 40.0, 10.0, CONFIG)
    assert t.judge(40.0, 10.0, CONFIG)[0] == "verified"
    assert t.judge(40.0, 10.0 + 1800.0, CONFIG)[0] == "verified"       # 30 min after the last pass
    assert t.judge(40.0, 10.0 + 1800.5, CONFIG)[0] == "unverified"     # just beyond
    assert t.judge(80.0, 20.0, CONFIG)[0] == "verified"                # 2x the best observed
    assert t.judge(80.5, 20.0, CONFIG)[0] == "unverified"              # beyond 2x: not believed, not flagged


def test_three_late_replies_at_once_flag_and_two_do_not() -> None:
    """"late, unknown_challenge, replayed weigh a third each (0.34)": a decayed failure weight of 1 flags, so three
    at once flag and two do not (web/config.py trust_flag_failures)."""
    two, three = Trust(decayed_at=0.0), Trust(decayed_at=0.0)
    for t, n in ((two, 2), (three, 3)):
        for _ in range(3):
            t.record(True, "passed", 40.0, 0.0, CONFIG)
        for _ in range(n):
            t.record(False, "late", None, 1.0, CONFIG)
    assert two.judge(40.0, 1.0, CONFIG)[0] == "verified"
    assert three.judge(40.0, 1.0, CONFIG)[0] == "flagged"


def test_a_wrong_answer_flags_for_24_h_and_failures_halve_every_6_h() -> None:
    t = Trust(decayed_at=0.0)
    for at in (0.0, 1.0, 2.0):
        t.record(True, "passed", 40.0, at, CONFIG)
    t.record(False, "wrong_rows", None, 10.0, CONFIG)
    t.record(True, "passed", 40.0, 10.0 + 24 * 3600 - 1, CONFIG)
    assert t.judge(40.0, 10.0 + 24 * 3600 - 1, CONFIG)[0] == "flagged"
    assert t.judge(40.0, 10.0 + 24 * 3600 + 1, CONFIG)[0] == "verified"
    soft = Trust(decayed_at=0.0)
    soft.record(False, "late", None, 0.0, CONFIG)  # "late ... weigh a third each (6 h half-life)"
    assert soft.failed == pytest.approx(0.34)
    assert soft.score(6 * 3600.0, CONFIG) == pytest.approx(-4 * 0.34 / 2, abs=1e-3)  # score = passes - 4 x failures


def test_solo_challenges_are_sized_for_half_a_second_and_roll_calls_beyond_the_deadline() -> None:
    """Solo: "as many per instance as the claimed speed needs in 0.5 s" (rounded down); roll calls: 1.5625 s."""
    solo = new_challenge("n", 42.9497, 1, 1024, BEACON, "00" * 16, 0.0, 0.0, CONFIG)
    assert solo.reps == 10 and solo.stop_after_s is None  # 2.147 GFLOP each: 10 fit in 0.5 s at 42.95
    roll = new_challenge("n", 42.9497, 1, 1024, BEACON, "00" * 16, 0.0, 0.0, CONFIG, work_s(CONFIG),
                         stop_after_s(CONFIG))
    assert roll.reps == 31 and roll.message(CONFIG)["stop_after_s"] == 1.125  # 31.25 fit in 1.5625 s


def test_a_node_counted_at_its_full_claim_never_shows_above_it() -> None:
    """The scoreboard sums milli-units: a claim of 29.8936 GFLOP/s counted in full is 29.893, not 29.894 (a
    busy honest node counted at its claim once showed 29.894 > 29.8936)."""
    c = counted(Proof("r", gflops=40.0, instances=1, tps=12.3456, gpu_tflops=1.0000005, gpus=1), 29.8936, 1, 12.3456,
                CONFIG, 1.0000005, 1)
    assert (c.cpu_mgflops, c.mtokens_per_sec, c.gpu_utflops) == (29893, 12345, 1000000)
