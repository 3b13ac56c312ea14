"""web/proof/trust.py at its edges: the decay, the failure weights, the kept observations, every branch of judge()
in its order, the score and the stored state (scripts/mutants mutates the module against these)."""

from __future__ import annotations

import json
import math
import time

import pytest

from web.config import RelayConfig
from web.proof.trust import WRONG_ANSWER_CODES, Trust, failure_weight

C = RelayConfig()
H = C.trust_half_life_s


def verified(now: float = 100.0, observed: float = 50.0) -> Trust:
    t = Trust(decayed_at=0.0)
    for i in range(C.trust_min_passes):
        t.record(True, "passed", observed, now - 1 + i, C)
    return t


def test_counters_halve_every_half_life_and_never_grow_backwards() -> None:
    t = Trust(decayed_at=0.0)
    t.record(True, "passed", 10.0, 0.0, C)
    t.record(False, "late", None, 0.0, C)
    t._decay(H, H)
    assert t.passed == pytest.approx(0.5) and t.failed == pytest.approx(0.5 * C.trust_soft_failure_weight)
    assert t.decayed_at == H
    t._decay(H / 2, H)  # an earlier time changes nothing
    assert t.passed == pytest.approx(0.5) and t.decayed_at == H
    t._decay(3 * H, H)
    assert t.passed == pytest.approx(0.125)


def test_failure_weights_and_the_codes_that_are_lies() -> None:
    for code in WRONG_ANSWER_CODES:
        assert failure_weight(code, C) == 1.0
    assert failure_weight("late", C) == C.trust_soft_failure_weight < 1.0
    assert {"wrong_proof", "wrong_rows", "wrong_tokens", "implausible_observation"} <= WRONG_ANSWER_CODES
    assert "late" not in WRONG_ANSWER_CODES and "after_deadline" not in WRONG_ANSWER_CODES
    # an old client's token hash: nothing proven, nothing held against the node, however many
    t = Trust(decayed_at=0.0)
    for i in range(10):
        t.record(False, "outdated_client", None, float(i), C)
    assert failure_weight("outdated_client", C) == 0.0 and t.failed == 0.0 and t.failures_total == 10
    assert t.judge(None, 10.0, C)[0] != "flagged" and t.flagged_until == 0.0


def test_record_counts_keeps_the_last_figures_and_ignores_non_finite_ones() -> None:
    t = Trust(decayed_at=0.0)
    for i in range(C.trust_observed_kept + 2):
        t.record(True, "passed", float(i), float(i), C, observed_tps=100.0 + i, tokens_checked=i % 2 == 0,
                 observed_gpu_tflops=1.0 + i)
    kept = C.trust_observed_kept
    assert t.observed_gflops == [float(i) for i in range(2, kept + 2)]
    assert t.observed_tps == [100.0 + i for i in range(2, kept + 2)]
    assert t.observed_gpu_tflops == [1.0 + i for i in range(2, kept + 2)]
    assert t.passes_total == kept + 2 and t.failures_total == 0 and t.tokens_checked == (kept + 3) // 2
    assert t.last_pass_at == t.last_at == float(kept + 1) and t.last_code == "passed"
    t.record(True, "passed", math.inf, 50.0, C, observed_tps=math.nan, observed_gpu_tflops=math.inf)
    assert len(t.observed_gflops) == kept and math.inf not in t.observed_gflops
    assert all(math.isfinite(v) for v in t.observed_tps + t.observed_gpu_tflops)
    t.record(False, "late", 99.0, 60.0, C, observed_tps=99.0)  # a failure records no figure
    assert 99.0 not in t.observed_gflops and 99.0 not in t.observed_tps
    assert t.failures_total == 1 and t.last_code == "late" and t.last_at == 60.0 and t.last_pass_at == 50.0
    assert t.best_gflops == max(t.observed_gflops) and t.median_gflops is not None
    assert Trust().best_gflops is None and Trust().median_gflops is None


def test_a_wrong_answer_holds_the_flag_and_a_later_one_extends_it() -> None:
    t = verified()
    t.record(False, "wrong_rows", None, 200.0, C)
    assert t.flagged_until == 200.0 + C.trust_flag_hold_s and t.last_wrong_code == "wrong_rows"
    t.record(False, "wrong_proof", None, 300.0, C)
    assert t.flagged_until == 300.0 + C.trust_flag_hold_s and t.last_wrong_code == "wrong_proof"
    status, reason = t.judge(50.0, 300.0 + C.trust_flag_hold_s - 0.5, C)
    assert status == "flagged" and reason.startswith("a wrong answer (wrong_proof); flagged until")
    t.record(False, "late", None, 400.0, C)  # a soft failure does not move the hold
    assert t.flagged_until == 300.0 + C.trust_flag_hold_s and t.last_wrong_code == "wrong_proof"


def test_soft_failures_flag_only_once_their_weight_reaches_the_threshold() -> None:
    t = verified(observed=50.0)
    n = math.ceil(C.trust_flag_failures / C.trust_soft_failure_weight)  # 3 late answers at 0.34 each
    for i in range(n - 1):
        t.record(False, "late", None, 100.0 + i, C)
        assert t.judge(50.0, 100.0 + i, C)[0] != "flagged", i
    t.record(False, "late", None, 100.0 + n, C)
    status, reason = t.judge(50.0, 100.0 + n, C)
    assert status == "flagged" and reason == "failed challenges recently (last: late)"
    assert t.judge(50.0, 100.0 + n + H, C)[0] != "flagged"  # halved below the threshold a half-life later


def test_claims_beyond_the_factor_of_the_best_observed_are_unverified_only_after_enough_passes() -> None:
    """Not believed, not flagged: a machine under load shows less than it measured idle (issue 29)."""
    f = C.trust_flag_factor
    t = Trust(decayed_at=0.0)
    t.record(True, "passed", 50.0, 1.0, C, observed_tps=100.0, observed_gpu_tflops=1.0)
    assert t.judge(50.0 * f * 10, 1.0, C, 100.0 * f * 10, 1.0 * f * 10)[0] == "unverified"  # one pass only
    t.record(True, "passed", 40.0, 2.0, C, observed_tps=90.0, observed_gpu_tflops=0.5)
    assert t.judge(50.0 * f, 2.0, C, 100.0 * f, 1.0 * f)[0] == "verified"  # exactly the factor is allowed
    status, reason = t.judge(50.0 * f + 0.1, 2.0, C)
    assert status == "unverified"
    assert reason == f"claims {50.0 * f + 0.1:.1f} GFLOP/s; the best the relay observed is 50.0 (more than {f:g}x " \
                     "apart)"
    status, reason = t.judge(50.0, 2.0, C, claimed_tps=100.0 * f + 0.1)
    assert status == "unverified" and "tokens/s" in reason and "100.0" in reason
    status, reason = t.judge(50.0, 2.0, C, claimed_gpu_tflops=1.0 * f + 0.01)
    assert status == "unverified" and "GPU TFLOP/s" in reason and "best the relay observed is 1 " in reason
    assert t.judge(None, 2.0, C, None, None) == ("unverified", "the profile claims no GFLOP/s figure to verify")


def test_tokens_and_gpu_need_their_own_observations_before_they_flag() -> None:
    t = Trust(decayed_at=0.0)
    t.record(True, "passed", 50.0, 1.0, C, observed_tps=100.0, observed_gpu_tflops=1.0)
    t.record(True, "passed", 50.0, 2.0, C)  # two passes, but one tokens/s and one GPU figure
    assert t.judge(50.0, 2.0, C, claimed_tps=1e6, claimed_gpu_tflops=1e6)[0] == "verified"


def test_the_gflops_claim_is_judged_on_as_many_cpu_challenges_as_passes() -> None:
    """One slow first SGEMM answer (reactors still cold) beside a reference-model pass is not yet a lie: an
    honest node on busy cores was flagged that way (CI, 2026-12-04). A second CPU answer decides."""
    t = Trust(decayed_at=0.0)
    t.record(True, "passed", 24.5, 1.0, C)
    t.record(True, "passed", None, 2.0, C, observed_tps=95.0, tokens_checked=True)
    assert t.passes_total == C.trust_min_passes == 2
    assert t.judge(51.9, 2.0, C) == ("unverified", "1 of 2 CPU (SGEMM) challenges passed so far")
    t.record(True, "passed", 25.0, 3.0, C)  # a second CPU answer as slow: the claim is more than 2x apart
    status, reason = t.judge(51.9, 3.0, C)
    assert status == "unverified" and reason.startswith("claims 51.9 GFLOP/s; the best the relay observed is 25.0")
    ok = Trust(decayed_at=0.0)
    for now, gflops in ((1.0, 24.5), (2.0, None), (3.0, 49.0)):
        ok.record(True, "passed", gflops, now, C)
    assert ok.judge(51.9, 3.0, C)[0] == "verified"


def test_unverified_reasons_name_what_is_missing() -> None:
    assert Trust().judge(50.0, 0.0, C) == ("unverified",
                                           "no challenge answered yet (a client must say hello to be challenged)")
    t = Trust(decayed_at=0.0)
    t.record(True, "passed", 50.0, 1.0, C)
    assert t.judge(50.0, 1.0, C) == ("unverified", f"1 of {C.trust_min_passes} challenges passed so far")
    f = Trust(decayed_at=0.0)
    f.record(False, "late", None, 1.0, C)
    assert f.judge(50.0, 1.0, C) == ("unverified", f"0 of {C.trust_min_passes} challenges passed so far")
    v = verified(now=10.0)
    assert v.judge(50.0, 10.0 + C.trust_fresh_s, C)[0] == "verified"  # exactly fresh_s after the last pass
    status, reason = v.judge(50.0, 10.0 + C.trust_fresh_s + 1, C)
    assert status == "unverified" and reason.startswith(f"no challenge passed in the last {C.trust_fresh_s:g} s")
    within = f"the claim is within {C.trust_flag_factor:g}x of the throughput the relay observed"
    assert v.judge(50.0, 10.0, C)[1] == within


def test_score_weighs_failures_by_the_penalty() -> None:
    t = Trust(decayed_at=0.0)
    t.record(True, "passed", 50.0, 0.0, C)
    t.record(True, "passed", 50.0, 0.0, C)
    t.record(False, "late", None, 0.0, C)
    assert t.score(0.0, C) == round(2.0 - C.trust_failure_penalty * C.trust_soft_failure_weight, 3)
    assert t.score(H, C) == round((2.0 - C.trust_failure_penalty * C.trust_soft_failure_weight) / 2, 3)


def test_to_json_reports_best_median_and_reasons() -> None:
    t = verified(observed=40.0)
    t.record(True, "passed", 60.0, 101.0, C, observed_tps=120.0, observed_gpu_tflops=1.5)
    body = t.to_json(50.0, 101.0, C)
    obs = body["observed"]
    assert obs["gflops_fp32"] == 60.0 and obs["gflops_fp32_median"] == 40.0
    assert obs["tokens_per_sec"] == 120.0 == obs["tokens_per_sec_median"] and obs["tokens_per_sec_reason"] is None
    assert obs["gpu_tflops_fp32"] == 1.5 == obs["gpu_tflops_fp32_median"]
    assert body["challenges"] == {"passed": 3, "failed": 0, "last_at": 101.0, "last_code": "passed"}
    assert body["status"] == "verified" and body["score"] == t.score(101.0, C)
    empty = Trust().to_json(None, 0.0, C)["observed"]
    assert empty["gflops_fp32"] is None and empty["gflops_fp32_median"] is None and empty["tokens_per_sec"] is None
    assert empty["gpu_tflops_fp32"] is None and "no reference-model challenge" in empty["tokens_per_sec_reason"]


def test_state_survives_json_and_ignores_fields_it_does_not_know() -> None:
    t = verified()
    t.record(False, "wrong_rows", None, 150.0, C, observed_tps=3.0)
    state = json.loads(json.dumps(t.to_state()))
    back = Trust.from_state({**state, "a_field_of_a_later_version": 1})
    assert back == t
    assert back.judge(50.0, 151.0, C) == t.judge(50.0, 151.0, C)


def test_to_json_rounds_each_figure_to_its_own_precision_and_says_how_it_was_measured() -> None:
    t = Trust(decayed_at=0.0)
    for v, tps, gpu in ((12.34567, 101.23456, 0.00123456789), (23.45678, 202.34567, 0.00234567891)):
        t.record(True, "passed", v, 1.0, C, observed_tps=tps, observed_gpu_tflops=gpu)
    obs = t.to_json(20.0, 1.0, C)["observed"]
    assert (obs["gflops_fp32"], obs["gflops_fp32_median"]) == (23.457, round((12.34567 + 23.45678) / 2, 3))
    assert (obs["tokens_per_sec"], obs["tokens_per_sec_median"]) == (202.346, round((101.23456 + 202.34567) / 2, 3))
    gpu_median = round((0.00123456789 + 0.00234567891) / 2, 6)
    assert (obs["gpu_tflops_fp32"], obs["gpu_tflops_fp32_median"]) == (0.002346, gpu_median)
    method = obs["method"]
    assert method.startswith(f"best and median of the last {C.trust_observed_kept} challenges: 2 n^3 x instances flop")
    assert "(commitment received - challenge sent - the session's median RTT" in method
    assert ("tokens/s likewise: the tokens the answer committed (decoded by the reference model, one drawn and "
            "checked)") in method
    assert method.endswith("GPU TFLOP/s likewise: 2 n^3 x instances flop of the GPU challenge (the probe's fp32 WGSL "
                           "matmul)")
    assert set(t.to_json(20.0, 1.0, C)) == {"status", "reason", "score", "observed", "challenges"}
    empty = Trust().to_json(None, 0.0, C)["observed"]["tokens_per_sec_reason"]
    assert empty == "no reference-model challenge answered yet (only clients that offer 'llm-rank' get them)"


def test_to_json_judges_every_claim_it_is_given() -> None:
    t = verified(observed=50.0)
    t.record(True, "passed", 50.0, 100.0, C, observed_tps=10.0, observed_gpu_tflops=0.1)
    t.record(True, "passed", 50.0, 100.0, C, observed_tps=10.0, observed_gpu_tflops=0.1)
    assert t.to_json(50.0, 100.0, C, claimed_tps=1000.0)["status"] == "unverified"
    assert t.to_json(50.0, 100.0, C, claimed_gpu_tflops=10.0)["status"] == "unverified"
    assert t.to_json(50.0, 100.0, C)["reason"].startswith("the claim is within")


def test_the_flag_names_its_end_in_utc_and_counts_every_failure() -> None:
    t = verified()
    t.record(False, "wrong_rows", None, 0.0, C)
    t.record(False, "late", None, 1.0, C)
    assert t.failures_total == 2 and t.tokens_checked == 0  # tokens are counted only when the relay says so
    until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(C.trust_flag_hold_s))
    assert t.judge(50.0, 2.0, C)[1] == f"a wrong answer (wrong_rows); flagged until {until}"


def test_a_failure_weight_exactly_at_the_threshold_flags() -> None:
    config = RelayConfig(trust_soft_failure_weight=0.5, trust_flag_failures=1.0)
    t = Trust(decayed_at=0.0)
    t.record(False, "late", None, 5.0, config)
    t.record(False, "late", None, 5.0, config)
    assert t.failed == 1.0 and t.judge(50.0, 5.0, config)[0] == "flagged"


def test_score_keeps_three_decimals() -> None:
    t = Trust(decayed_at=0.0)
    t.record(True, "passed", 50.0, 0.0, C)
    assert t.score(1234.5, C) == round(0.5 ** (1234.5 / H), 3) != round(0.5 ** (1234.5 / H), 4)


def test_roll_calls_alone_do_not_verify_a_node_that_never_answered_a_solo_challenge() -> None:
    """Issue 45: a withdrawable client that let roll calls withdraw every solo challenge it held (unjudged) was
    verified on roll-call passes alone, each of which takes the work done by its deadline. Now verified needs
    one passed solo challenge (the whole claim); one is enough, and it survives the state's JSON."""
    t = Trust(decayed_at=0.0)
    for i in range(5):
        t.record(True, "passed", 50.0, 10.0 + i, C, roll_call=True)
    assert t.judge(50.0, 15.0, C) == ("unverified", "no solo challenge passed yet (roll calls alone do not verify "
                                                    "a node)")
    t.record(False, "late", None, 16.0, C)  # a solo challenge held back: a failure, still no solo pass
    assert t.judge(50.0, 16.0, C)[0] == "unverified"
    t.record(True, "passed", None, 16.5, C, observed_tps=300.0)  # a solo reference-model answer: not the claim
    assert t.judge(50.0, 16.5, C)[0] == "unverified"
    t.record(True, "passed", 50.0, 17.0, C)  # a solo SGEMM challenge answered
    assert t.judge(50.0, 17.0, C)[0] == "verified"
    assert Trust.from_state(json.loads(json.dumps(t.to_state()))).judge(50.0, 17.0, C)[0] == "verified"
    assert Trust.from_state({k: v for k, v in t.to_state().items() if k != "solo_passes"}).solo_passes == 0
