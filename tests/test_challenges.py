"""Challenge arithmetic and protocol, without a relay: the capsule's commitment (reactor wasm) against the
Python reference, proofs and row checks that catch each kind of wrong answer, and the state machine's
refusals. tests/test_trust.py runs the same against a real relay and real nodes."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from capsule.challenge import (
    MAX_N,
    MIN_N,
    ChallengeError,
    check_proof,
    check_rows,
    decode_row,
    encode_row,
    inputs_rows,
    instance_seed,
    merkle_root,
    order_for,
)
from host_runner.challenge_answer import SgemmAnswer
from web.challenges import check_opened, new_challenge, on_commit, parse_opening
from web.config import RelayConfig
from web.trust import Trust

BEACON: dict[str, Any] = {"round": 7, "value": "ab" * 32}
CONFIG = RelayConfig()


@pytest.fixture(scope="module")
def answered(artifacts: Any) -> tuple[SgemmAnswer, list[str]]:
    seeds = [instance_seed(BEACON["value"], "00ff", i) for i in range(2)]
    answer = SgemmAnswer(artifacts.reactor, seeds, 200)  # 200 leaves: a padded tree (width 256)
    return answer, answer.commit()


def rows_of(answer: SgemmAnswer, instance: int) -> np.ndarray:
    reactor = answer.reactors[instance]
    return np.stack([reactor.get(int(reactor.call("ce_challenge_row", i)), np.float32, (answer.n,))
                     for i in range(answer.n)])


def test_capsule_commitment_matches_reference(answered: tuple[SgemmAnswer, list[str]]) -> None:
    """The wasm tree over C's rows equals the Python reference, and C is the product of the seed's inputs
    (so the relay's regeneration of A and B is the capsule's own)."""
    answer, roots = answered
    for i in range(2):
        c = rows_of(answer, i)
        assert merkle_root([row.astype("<f4").tobytes() for row in c]).hex() == roots[i]
        a, b = inputs_rows(answer.seeds[i], answer.n, list(range(answer.n)))
        assert np.max(np.abs(a.astype(np.float64) @ b.astype(np.float64) - c)) < 1e-3
    assert roots[0] != roots[1]


def test_openings_verify_and_tampering_is_caught(answered: tuple[SgemmAnswer, list[str]]) -> None:
    answer, roots = answered
    (opened,) = answer.open([[1, 199]])  # the last real leaf, beside the padding
    raw = decode_row(opened["values"], answer.n)
    proof = [bytes.fromhex(h) for h in opened["proof"]]
    root = bytes.fromhex(roots[1])
    check_proof(raw, 199, proof, root, answer.n)
    assert check_rows(answer.seeds[1], answer.n, {199: np.frombuffer(raw, "<f4")}) < 1.0
    flipped = bytearray(raw)
    flipped[5] ^= 1
    with pytest.raises(ChallengeError, match="does not open") as exc:
        check_proof(bytes(flipped), 199, proof, root, answer.n)
    assert exc.value.code == "wrong_proof"
    with pytest.raises(ChallengeError):
        check_proof(raw, 198, proof, root, answer.n)  # the right row claimed at another index
    with pytest.raises(ChallengeError, match="sibling"):
        check_proof(raw, 199, proof[:-1], root, answer.n)


def test_row_check_catches_one_wrong_entry(answered: tuple[SgemmAnswer, list[str]]) -> None:
    answer, _ = answered
    row = rows_of(answer, 0)[17].copy()
    assert check_rows(answer.seeds[0], answer.n, {17: row}) < 0.01  # a correct row is far inside the bound
    for wrong in (row * (1 + 1e-3), np.where(np.arange(answer.n) == 3, row + 0.01, row), np.full_like(row, np.nan)):
        with pytest.raises(ChallengeError) as exc:
            check_rows(answer.seeds[0], answer.n, {17: wrong.astype(np.float32)})
        assert exc.value.code == "wrong_rows"
    # the product of a different seed (work done, but not the work asked) fails too
    with pytest.raises(ChallengeError):
        check_rows(answer.seeds[1], answer.n, {17: row})


def test_order_sized_to_the_claim() -> None:
    # 2 n^3 at the claimed per-instance speed takes the target time
    n = order_for(40.0, 2, 0.5)
    assert abs(2 * n**3 / 20e9 - 0.5) < 0.05
    assert order_for(0.001, 1, 0.5) == MIN_N
    assert order_for(1e6, 1, 0.5) == MAX_N
    assert order_for(40.0, 4, 0.5) < order_for(40.0, 2, 0.5)


def test_decode_row_names_the_problem() -> None:
    assert decode_row(encode_row(np.ones(4, np.float32)), 4) == np.ones(4, "<f4").tobytes()
    for bad, what in ((42, "base64 text"), ("!!", "not valid base64"), (encode_row(np.ones(3, np.float32)), "12")):
        with pytest.raises(ChallengeError, match=what) as exc:
            decode_row(bad, 4)
        assert exc.value.code == "malformed_opening"


def challenge_for(answer: SgemmAnswer) -> Any:
    ch = new_challenge("node", 1.0, len(answer.seeds), BEACON, "00ff", 0.0, 100.0, CONFIG)
    assert ch.seeds == answer.seeds
    ch.n = answer.n  # sized for the fixture's product
    return ch


def test_state_machine_refusals(answered: tuple[SgemmAnswer, list[str]]) -> None:
    answer, roots = answered
    rng = random.Random(1)
    ch = challenge_for(answer)
    for bad in ({"roots": roots[:1]}, {"roots": ["zz" * 32, roots[1]]}, {"roots": "x"}):
        with pytest.raises(ChallengeError) as exc:
            on_commit(ch, bad, 100.5, rng, CONFIG)
        assert exc.value.code == "malformed_commit"
    with pytest.raises(ChallengeError) as exc:
        on_commit(challenge_for(answer), {"roots": roots}, 100 + CONFIG.challenge_commit_timeout_s + 1, rng, CONFIG)
    assert exc.value.code == "late"
    opening = on_commit(ch, {"roots": roots}, 100.5, rng, CONFIG)
    assert ch.observed_gflops == pytest.approx(2 * 2 * 200**3 / 0.5 / 1e9)
    with pytest.raises(ChallengeError) as exc:
        on_commit(ch, {"roots": roots}, 100.6, rng, CONFIG)
    assert exc.value.code == "replayed"
    rows = answer.open(opening["rows"])
    assert check_opened(ch, parse_opening(ch, {"rows": rows}, 100.7, CONFIG)) < 1.0
    with pytest.raises(ChallengeError) as exc:
        parse_opening(ch, {"rows": rows[::-1]}, 100.7, CONFIG)
    assert exc.value.code == "malformed_opening"
    with pytest.raises(ChallengeError) as exc:
        parse_opening(ch, {"rows": rows}, 100.5 + CONFIG.challenge_open_timeout_s + 1, CONFIG)
    assert exc.value.code == "late"


def test_trust_states() -> None:
    config = RelayConfig()
    t = Trust(decayed_at=0.0)
    assert t.judge(50.0, 0.0, config)[0] == "unverified"
    t.record(True, "passed", 45.0, 10.0, config)
    assert t.judge(50.0, 10.0, config)[0] == "unverified"  # one pass is not enough
    assert t.judge(500.0, 10.0, config)[0] == "unverified"  # nor is one observation enough to flag a claim
    t.record(True, "passed", 30.0, 20.0, config)
    assert t.judge(50.0, 20.0, config)[0] == "verified"
    assert t.counted_gflops(40.0, config) == 40.0        # within 1.25 x the median observed (37.5)
    assert t.counted_gflops(80.0, config) == 37.5 * 1.25  # an overstatement counts only what was seen
    status, reason = t.judge(3 * 45.0 + 1, 20.0, config)
    assert status == "flagged" and "observed" in reason
    t.record(False, "late", None, 30.0, config)  # one late answer: not yet a flag
    assert t.judge(50.0, 30.0, config)[0] == "verified"
    t.record(False, "wrong_rows", None, 40.0, config)  # a wrong answer flags at once
    assert t.judge(50.0, 40.0, config)[0] == "flagged"
    assert t.score(40.0, config) < 0
    # and decays: three half-lives later the failure no longer flags, the passes decayed too
    later = 40.0 + 3 * config.trust_half_life_s
    assert t.judge(50.0, later, config)[0] == "verified"
    assert t.score(later, config) < 2.0

