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
    MAX_PRODUCTS,
    MIN_N,
    ChallengeError,
    decode_row,
    encode_row,
    instance_seed,
    order_of,
    reps_for,
)
from capsule.cpu_challenge import (
    check_entries,
    check_proof,
    commitment_root,
    inputs_of,
    leaf_form_offered,
    product_root,
)
from host_runner.challenge_answer import SgemmAnswer
from web.config import RelayConfig
from web.proof.challenges import check_opened, new_challenge, new_llm_challenge, on_commit, parse_opening
from web.proof.trust import Trust

BEACON: dict[str, Any] = {"round": 7, "value": "ab" * 32}
CONFIG = RelayConfig()


@pytest.fixture(scope="module")
def answered(artifacts: Any) -> tuple[SgemmAnswer, list[str]]:
    seeds = [instance_seed(BEACON["value"], "00ff", i) for i in range(2)]
    answer = SgemmAnswer(artifacts.reactor, seeds, 101, 3)  # 303 leaves: 4-lane hashing and 3 alone; width 512
    return answer, answer.commit()


def rows_of(answer: SgemmAnswer, instance: int) -> np.ndarray:
    """Every leaf of an instance: the rows of all its committed products, product-major (each product is
    recomputed when its first row is asked: only roots are kept)."""
    reactor = answer.reactors[instance]
    return np.stack([reactor.get(int(reactor.call("ce_challenge_row", i)), np.float32, (answer.n,)).copy()
                     for i in range(answer.n * answer.products[instance])])


def test_capsule_commitment_matches_reference(answered: tuple[SgemmAnswer, list[str]]) -> None:
    """The wasm trees over the products' rows (BLAKE3 leaves, keyed BLAKE3 nodes: the PyPI blake3 here)
    equal the Python reference, and each C_t is the product of the seed's inputs for t (so the relay's
    regeneration of A_t and B is the capsule's own)."""
    answer, roots = answered
    n = answer.n
    assert answer.products == [3, 3]
    for i in range(2):
        leaves = rows_of(answer, i)
        per_product = [product_root([row.astype("<f4").tobytes() for row in leaves[t * n:(t + 1) * n]])
                       for t in range(answer.reps)]
        assert commitment_root(per_product).hex() == roots[i]
        for t in range(answer.reps):
            a, b = inputs_of(answer.seeds[i], n, t)
            assert np.max(np.abs(a.astype(np.float64) @ b.astype(np.float64) - leaves[t * n:(t + 1) * n])) < 1e-3
    assert roots[0] != roots[1]
    assert not np.array_equal(rows_of(answer, 0)[:n], rows_of(answer, 0)[n:2 * n])  # each product its own


def test_openings_verify_and_tampering_is_caught(answered: tuple[SgemmAnswer, list[str]]) -> None:
    answer, roots = answered
    n, k = answer.n, answer.reps
    leaves = n * k
    (opened,) = answer.open([[1, leaves - 1]])  # the last real leaf, beside the padding
    raw = decode_row(opened["values"], n)
    proof = [bytes.fromhex(h) for h in opened["proof"]]
    root = bytes.fromhex(roots[1])
    check_proof(raw, leaves - 1, proof, root, n, k)
    assert check_entries(answer.seeds[1], n, leaves - 1, np.frombuffer(raw, "<f4"), range(n)) < 1.0
    flipped = bytearray(raw)
    flipped[7] ^= 1  # the high byte of entry 1: in its leaf
    with pytest.raises(ChallengeError, match="does not open") as exc:
        check_proof(bytes(flipped), leaves - 1, proof, root, n, k)
    assert exc.value.code == "wrong_proof"
    # a leaf hashes each entry's high half: a changed low half opens, and the entry check holds the value
    low = bytearray(raw)
    low[5] ^= 0x80  # entry 1's mantissa bit 15: 2^-8 of it, far beyond the fp32 bound
    check_proof(bytes(low), leaves - 1, proof, root, n, k)
    with pytest.raises(ChallengeError) as exc:
        check_entries(answer.seeds[1], n, leaves - 1, np.frombuffer(bytes(low), "<f4"), range(n))
    assert exc.value.code == "wrong_rows"
    # the same row under whole-row leaves (an older node's form) is another leaf: the form is part of the proof
    with pytest.raises(ChallengeError, match="does not open"):
        check_proof(raw, leaves - 1, proof, root, n, k, "fp32")
    with pytest.raises(ChallengeError):
        check_proof(raw, leaves - 2, proof, root, n, k)  # the right row claimed at another index
    with pytest.raises(ChallengeError):
        check_proof(raw, leaves - 1 - n, proof, root, n, k)  # ... or in another product
    with pytest.raises(ChallengeError, match="sibling"):
        check_proof(raw, leaves - 1, proof[:-1], root, n, k)
    with pytest.raises(ChallengeError, match="committed product"):
        check_proof(raw, leaves - 1, proof, root, n, k - 1)  # a row beyond the products committed


def test_row_check_catches_one_wrong_entry(answered: tuple[SgemmAnswer, list[str]]) -> None:
    answer, _ = answered
    leaf = answer.n + 17  # row 17 of the second product
    row = rows_of(answer, 0)[leaf].copy()
    every = range(answer.n)
    assert check_entries(answer.seeds[0], answer.n, leaf, row, every) < 0.1  # far inside the bound
    for wrong in (row * (1 + 1e-3), np.where(np.arange(answer.n) == 3, row + 0.01, row),
                  np.full_like(row, np.nan)):
        with pytest.raises(ChallengeError) as exc:
            check_entries(answer.seeds[0], answer.n, leaf, wrong.astype(np.float32), every)
        assert exc.value.code == "wrong_rows"
    # the same row of another product, or of another seed (work done, but not the work asked), fails too
    with pytest.raises(ChallengeError):
        check_entries(answer.seeds[0], answer.n, 17, row, every)
    with pytest.raises(ChallengeError):
        check_entries(answer.seeds[1], answer.n, leaf, row, every)
    # a sample of columns finds a row that is wrong in half its entries
    half = np.where(np.arange(answer.n) % 2 == 0, row, row + 1.0).astype(np.float32)
    with pytest.raises(ChallengeError):
        check_entries(answer.seeds[0], answer.n, leaf, half, random.Random(3).sample(every, 16))


def test_work_sized_to_the_claim() -> None:
    # reps products of 2 n^3 at the claimed per-instance speed take the target time or less, by under one product
    reps = reps_for(40.0, 2, 1024, 0.5)
    assert 0.5 - 2 * 1024**3 / 20e9 < reps * 2 * 1024**3 / 20e9 <= 0.5
    # the CI case (8 instances, 64.6 GFLOP/s claimed, 1 s): 3.76 products fit; 4 would need 1.06 s at the claim
    assert reps_for(64.6472, 8, 1024, 1.0) == 3
    assert reps_for(0.001, 1, 1024, 0.5) == 1
    assert reps_for(1e9, 1, 1024, 0.5) == MAX_PRODUCTS  # held within what the capsule keeps roots for
    assert reps_for(40.0, 4, 1024, 0.5) < reps_for(40.0, 2, 1024, 0.5)
    assert (order_of(512), order_of(None), order_of(10), order_of(10**6), order_of(True)) == (512, 1024, MIN_N,
                                                                                              MAX_N, 1024)


def test_decode_row_names_the_problem() -> None:
    assert decode_row(encode_row(np.ones(4, np.float32)), 4) == np.ones(4, "<f4").tobytes()
    for bad, what in ((42, "base64 text"), ("!!", "not valid base64"), (encode_row(np.ones(3, np.float32)), "12")):
        with pytest.raises(ChallengeError, match=what) as exc:
            decode_row(bad, 4)
        assert exc.value.code == "malformed_opening"


def challenge_for(answer: SgemmAnswer) -> Any:
    ch = new_challenge("node", 1.0, len(answer.seeds), answer.n, BEACON, "00ff", 0.0, 100.0, CONFIG)
    assert ch.seeds == answer.seeds
    ch.n, ch.reps = answer.n, answer.reps  # the fixture's small size, not a 1 GFLOP/s claim's
    return ch


def test_state_machine_refusals(answered: tuple[SgemmAnswer, list[str]]) -> None:
    answer, roots = answered
    rng = random.Random(1)
    ch = challenge_for(answer)
    for bad in ({"leaf": "high16", "roots": roots[:1]}, {"roots": ["zz" * 32, roots[1]]}, {"roots": "x"}):
        with pytest.raises(ChallengeError) as exc:
            on_commit(ch, bad, 100.5, rng, CONFIG)
        assert exc.value.code == "malformed_commit"
    with pytest.raises(ChallengeError) as exc:
        on_commit(challenge_for(answer), {"leaf": "high16", "roots": roots},
                  100 + CONFIG.challenge_commit_timeout_s + 1, rng, CONFIG)
    assert exc.value.code == "late"
    for products in ([3], [0, 3], [3, 4], [3, "3"], "3"):  # one per instance, each in [1, reps]
        with pytest.raises(ChallengeError, match="products") as exc:
            on_commit(challenge_for(answer), {"leaf": "high16", "roots": roots, "products": products}, 100.5, rng,
                      CONFIG)
        assert exc.value.code == "malformed_commit"
    opening = on_commit(ch, {"leaf": "high16", "roots": roots}, 100.5, rng, CONFIG)  # "products" absent: all of them
    assert opening is not None and ch.observed_gflops == pytest.approx(2 * 2 * 3 * 101**3 / 0.5 / 1e9)
    with pytest.raises(ChallengeError) as exc:
        on_commit(ch, {"leaf": "high16", "roots": roots}, 100.6, rng, CONFIG)
    assert exc.value.code == "replayed"
    rows = answer.open(opening["rows"])
    assert check_opened(ch, parse_opening(ch, {"rows": rows}, 100.7, CONFIG), rng, CONFIG) < 1.0
    with pytest.raises(ChallengeError) as exc:
        parse_opening(ch, {"rows": rows[::-1]}, 100.7, CONFIG)
    assert exc.value.code == "malformed_opening"
    with pytest.raises(ChallengeError) as exc:
        parse_opening(ch, {"rows": rows}, 100.5 + CONFIG.challenge_open_timeout_s + 1, CONFIG)
    assert exc.value.code == "late"


def test_a_commitment_to_the_products_finished_counts_their_work(artifacts: Any) -> None:
    """A node stopped by its deadline commits its first k products; the relay times and counts those k
    (not the reps it was given) and opens rows among them only, which the capsule opens by recomputing the
    product (only roots are kept)."""
    seeds = [instance_seed(BEACON["value"], "00ff", i) for i in range(2)]
    answer = SgemmAnswer(artifacts.reactor, seeds, 128, 50)
    roots = answer.commit(stop_at=0.0)  # already past: each instance does its first product only
    assert answer.products == [1, 1]
    rng = random.Random(4)
    ch = challenge_for(answer)
    opening = on_commit(ch, {"leaf": "high16", "roots": roots, "products": answer.products}, 100.5, rng, CONFIG)
    assert opening is not None and ch.products == [1, 1]
    assert ch.flops == 2 * 2 * 128**3  # two products' work, not 100
    assert all(leaf < 128 for _, leaf in ch.rows)
    rows = answer.open(opening["rows"])
    assert check_opened(ch, parse_opening(ch, {"rows": rows}, 100.6, CONFIG), rng, CONFIG) < 1.0
    # the same roots claimed as two products each: no proof opens them
    ch2 = challenge_for(answer)
    opening2 = on_commit(ch2, {"leaf": "high16", "roots": roots, "products": [2, 2]}, 100.5, random.Random(5), CONFIG)
    assert opening2 is not None
    claimed = answer.open([[i, r % 128] for i, r in opening2["rows"]])
    for item, (_, r) in zip(claimed, opening2["rows"], strict=True):
        item["row"] = r  # the rows it has, named as the rows asked
    with pytest.raises(ChallengeError) as exc:
        parse_opening(ch2, {"rows": claimed}, 100.6, CONFIG)
    assert exc.value.code == "wrong_proof"
    answer.release()


def test_leaf_forms_are_offered_by_the_relay_and_named_by_the_node(artifacts: Any) -> None:
    """The relay's challenge offers the leaf forms it checks; a node answers in high halves where offered and in
    whole rows otherwise (an older relay names none, and checks whole rows: a node in high halves would fail
    there). A commit without "leaf" (an older node) is checked as whole rows: the capsule's whole-row answer
    passes so, and its high-half roots sent without "leaf" open nothing (the form is part of the proof)."""
    ch = new_challenge("node", 1.0, 1, 128, BEACON, "00ff", 0.0, 100.0, CONFIG)
    assert ch.message(CONFIG)["leaves"] == ["high16", "fp32"]
    assert "leaves" not in new_llm_challenge("node", 10.0, BEACON, "00ff", 0.0, 100.0, CONFIG).message(CONFIG)
    assert [leaf_form_offered(v) for v in (["high16", "fp32"], ["fp32"], None, "high16", [])] == \
        ["high16", "fp32", "fp32", "fp32", "fp32"]
    seeds = [instance_seed(BEACON["value"], "00ff", i) for i in range(2)]
    for form, said in (("fp32", None), ("fp32", "fp32"), ("high16", "high16"), ("high16", None)):
        answer = SgemmAnswer(artifacts.reactor, seeds, 128, 2)
        answer.leaf = form
        roots = answer.commit()
        rng = random.Random(6)
        ch = challenge_for(answer)
        opening = on_commit(ch, {"roots": roots} | ({"leaf": said} if said else {}), 100.5, rng, CONFIG)
        assert opening is not None and ch.leaf == (said or "fp32") and ch.record()["leaf"] == ch.leaf
        rows = answer.open(opening["rows"])
        if form == ch.leaf:
            assert check_opened(ch, parse_opening(ch, {"rows": rows}, 100.6, CONFIG), rng, CONFIG) < 1.0
        else:
            with pytest.raises(ChallengeError) as exc:
                parse_opening(ch, {"rows": rows}, 100.6, CONFIG)
            assert exc.value.code == "wrong_proof"
        answer.release()


def test_trust_states() -> None:
    config = RelayConfig()
    t = Trust(decayed_at=0.0)
    assert t.judge(50.0, 0.0, config)[0] == "unverified"
    t.record(True, "passed", 45.0, 10.0, config)
    assert t.judge(50.0, 10.0, config)[0] == "unverified"  # one pass is not enough
    assert t.judge(500.0, 10.0, config)[0] == "unverified"  # nor is one observation enough to flag a claim
    t.record(True, "passed", 30.0, 20.0, config)
    assert t.judge(50.0, 20.0, config)[0] == "verified"
    status, reason = t.judge(2 * 45.0 + 1, 20.0, config)  # more than 2x the best observed: not believed,
    assert status == "unverified" and "observed" in reason  # not flagged (load alone can do that)
    assert t.judge(2 * 45.0 - 1, 20.0, config)[0] == "verified"  # (just within it)
    t.record(False, "late", None, 30.0, config)  # one late answer: not yet a flag
    assert t.judge(50.0, 30.0, config)[0] == "verified"
    # verification is not permanent: without a pass for trust_fresh_s the node is unverified again
    stale = 20.0 + config.trust_fresh_s + 1
    status, reason = t.judge(50.0, stale, config)
    assert status == "unverified" and "no challenge passed" in reason
    t.record(True, "passed", 40.0, stale, config)
    assert t.judge(50.0, stale, config)[0] == "verified"
    t.record(False, "wrong_rows", None, stale + 10, config)  # a wrong answer flags at once ...
    assert t.judge(50.0, stale + 10, config)[0] == "flagged"
    assert t.score(stale + 10, config) < 0
    # ... and sticks for the hold whatever the decay (a weight of exactly 1.0 once unflagged in 0.25 s)
    for dt in (0.25, 60.0, config.trust_half_life_s, config.trust_flag_hold_s - 1):
        t.record(True, "passed", 40.0, stale + 10 + dt, config)
        status, reason = t.judge(50.0, stale + 10 + dt, config)
        assert status == "flagged" and "wrong_rows" in reason and "until" in reason, (dt, reason)
    after = stale + 10 + config.trust_flag_hold_s + 1
    t.record(True, "passed", 40.0, after, config)
    assert t.judge(50.0, after, config)[0] == "verified"  # the hold ends; the decayed weight no longer flags


def test_implausible_observation_flags_for_the_hold() -> None:
    config = RelayConfig()
    t = Trust(decayed_at=0.0)
    t.record(False, "implausible_observation", None, 10.0, config)
    assert t.judge(50.0, 10.0 + config.trust_flag_hold_s - 1, config)[0] == "flagged"


def test_llm_answer_is_what_the_relay_recomputes(artifacts: Any) -> None:
    """The node's tokens (ce_llmc_begin/next on its pooled reactor) are those a relay's own reactor gives at
    any index (ce_llmc_expected), across a sequence boundary (224: a new prompt); at a roll call the node stops
    at its deadline with what it has, never with nothing."""
    import time

    from capsule.challenge import LLM_PER_SEQ
    from host_runner.challenge_answer import ReactorPool, llm_answer, warm_llm
    from host_runner.wasm import Reactor

    seed = 0x5EED_0000_1234_ABCD  # both halves of the u64 reach the capsule
    pool = ReactorPool(artifacts.reactor)
    tokens = llm_answer(pool, seed, LLM_PER_SEQ + 3, None)
    assert len(tokens) == LLM_PER_SEQ + 3
    relay = Reactor(artifacts.reactor)  # a separate instance: nothing shared with the node's but the capsule
    for j in (0, 1, 100, LLM_PER_SEQ - 1, LLM_PER_SEQ, LLM_PER_SEQ + 2):
        assert tokens[j] == relay.llm_expected(seed, tokens, j), j
    assert llm_answer(pool, seed, 5, None) == tokens[:5]  # begun afresh per challenge, model kept
    assert llm_answer(pool, seed ^ 1, 5, None) != tokens[:5]  # the seed names the prompts

    warm_llm(pool)  # (already made: the stop tests below time decoding only)
    assert len(llm_answer(pool, seed, 50, time.perf_counter() - 1.0)) == 1  # a deadline past: still one token
    # a deadline 0.2 s ahead stops well before the 224 tokens asked (wasmtime decodes ~100-300 tokens/s)
    stopped = llm_answer(pool, seed, LLM_PER_SEQ, time.perf_counter() + 0.2)
    assert 1 <= len(stopped) < LLM_PER_SEQ and stopped == tokens[:len(stopped)]
    with pytest.raises(ValueError):
        llm_answer(pool, seed, 0, None)


def test_llm_stop_expects_each_token_to_cost_what_its_kind_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a roll call a token is begun only if its expected time fits before the deadline: a sequence's first
    token (its prompt filled too) is expected to cost what the last sequence start did, any other what the
    last other token did (the second token, with none yet, what the first did). Here sequences of 12 tokens,
    60 ms for a start and 15 ms for the others: the node stops before a start that the last token's time alone
    would have begun (at 225 ms, ending at 285 ms), yet begins the last 15 ms token (at 210 ms), which a 60 ms
    expectation would not have."""
    import types

    from host_runner import challenge_answer

    # A clock of the test's own: each token advances it by exactly its cost, so the stop is decided by the rule
    # alone, not by how late a busy scheduler woke a sleep (CI once saw token 11 begun past the 260 ms deadline).
    now_s = [1000.0]
    clock = types.SimpleNamespace(perf_counter=lambda: now_s[0])

    class SlowStarts:
        made = 0

        def llm_begin(self, seed: int) -> None:
            self.made = 0

        def llm_next(self) -> int:
            now_s[0] += 0.06 if self.made % 12 == 0 else 0.015
            self.made += 1
            return self.made

    class Pool:
        def get(self, count: int) -> list[Any]:
            return [reactor]

    reactor = SlowStarts()
    pool: Any = Pool()
    monkeypatch.setattr(challenge_answer, "LLM_PER_SEQ", 12)
    monkeypatch.setattr(challenge_answer, "time", clock)
    # the 12th token is begun at 210 ms and ends at 225 (15 ms expected: fits before 260); the 13th, a sequence
    # start, would begin at 225 and, expected at the 60 ms of the last start, end at 285: not begun. With the last
    # token's 15 ms alone it would have been; with a 60 ms expectation for every token, the 12th would not.
    assert challenge_answer.llm_answer(pool, 1, 100, now_s[0] + 0.26) == list(range(1, 13))
    # the edge: a deadline at 284 ms still stops before the start, one just past 285 begins it (and no more)
    assert challenge_answer.llm_answer(pool, 1, 100, now_s[0] + 0.284) == list(range(1, 13))
    assert challenge_answer.llm_answer(pool, 1, 100, now_s[0] + 0.2851) == list(range(1, 14))
    assert challenge_answer.llm_answer(pool, 1, 14, None) == list(range(1, 15))


def test_live_session_answers_llm_challenges_in_the_new_format(artifacts: Any) -> None:
    """The server node's side of the wire (host_runner/live_client.py), without a relay: {"tokens": [...]},
    the roll call's deadline counted from the message's arrival, and any malformed challenge refused as
    bad_challenge without an exception or an answer."""
    import json
    import math
    import threading
    import time

    from capsule.challenge import LLM_MAX_TOKENS
    from common.keys import NodeKey
    from host_runner.challenge_answer import ReactorPool, llm_answer
    from host_runner.live_client import LiveSession

    asked: list[tuple[int, int, float | None]] = []

    def fake(pool: ReactorPool, seed: int, decode: int, stop_at: float | None, halt: Any) -> list[int]:
        asked.append((seed, decode, stop_at))
        return [7] * decode

    class Ws:
        def __init__(self) -> None:
            self.sent: list[dict[str, Any]] = []
            self.done = threading.Event()

        def send(self, text: str) -> None:
            self.sent.append(json.loads(text))
            self.done.set()

    session = LiveSession("http://127.0.0.1:9", NodeKey.generate(), reactor_wasm=artifacts.reactor, llm=fake)
    good = {"type": "challenge", "id": "ab12", "kind": "llm", "decode": 3, "seeds": ["f00dface5eed0123"],
            "beacon_round": 7, "nonce": "cd" * 16, "commit_within_s": 5.0}
    ws = Ws()
    before = time.perf_counter()
    session._llm_challenge(ws, {**good, "stop_after_s": 0.5})
    after = time.perf_counter()
    assert ws.done.wait(10)
    assert ws.sent == [{"type": "commit", "id": "ab12", "tokens": [7, 7, 7]}]
    (seed, decode, stop_at), = asked
    assert seed == 0xF00DFACE5EED0123 and decode == 3 and stop_at is not None
    assert before + 0.5 <= stop_at <= after + 0.5
    ws = Ws()
    session._llm_challenge(ws, good)
    assert ws.done.wait(10) and asked[-1][2] is None  # no stop_after_s: every token asked

    malformed: list[dict[str, Any]] = [
        {"decode": "3"}, {"decode": True}, {"decode": 3.0}, {"decode": 0}, {"decode": LLM_MAX_TOKENS + 1},
        {"seeds": []}, {"seeds": "f00d"}, {"seeds": ["zz"]}, {"seeds": [17]}, {"seeds": ["1" * 17]},
        {"seeds": ["-1"]}, {"id": 5}, {"stop_after_s": "0.5"}, {"stop_after_s": True}, {"stop_after_s": -1.0},
        {"stop_after_s": math.nan}, {"stop_after_s": math.inf}]
    for bad in malformed:
        errors, ws = len(session.errors), Ws()
        session._llm_challenge(ws, {**good, **bad})
        assert [e["code"] for e in session.errors[errors:]] == ["bad_challenge"], bad
    for missing in ("decode", "seeds", "id"):
        errors = len(session.errors)
        session._llm_challenge(Ws(), {k: v for k, v in good.items() if k != missing})
        assert [e["code"] for e in session.errors[errors:]] == ["bad_challenge"], missing
    time.sleep(0.2)
    assert len(asked) == 2  # none of them reached the answer

    real = LiveSession("http://127.0.0.1:9", NodeKey.generate(), reactor_wasm=artifacts.reactor)
    ws = Ws()
    real._llm_challenge(ws, good)
    assert ws.done.wait(30)
    assert ws.sent[0]["tokens"] == llm_answer(ReactorPool(artifacts.reactor), 0xF00DFACE5EED0123, 3, None)


def test_llm_state_machine() -> None:
    rng = random.Random(2)
    ch = new_llm_challenge("node", 100.0, BEACON, "00ff", 1.0, 100.0, CONFIG)
    assert ch.decode == 50 and ch.message(CONFIG)["kind"] == "llm"  # 100 tokens/s x 0.5 s = 50 tokens
    bads: list[dict[str, Any]] = [{}, {"token_ids_sha256": "ab" * 32}, {"tokens": []}, {"tokens": [0] * 51}]
    for bad in bads:
        with pytest.raises(ChallengeError) as exc:
            on_commit(ch, bad, 100.4, rng, CONFIG)
        # an old client's token hash proves nothing but flags nothing (web/proof/trust.py NO_WEIGHT_CODES)
        assert exc.value.code == ("outdated_client" if "token_ids_sha256" in bad else "malformed_commit")
    assert on_commit(ch, {"tokens": list(range(50))}, 100.501, rng, CONFIG) is None  # no opening
    assert ch.observed_tps == pytest.approx(50 / 0.5) and ch.observed_gflops is None
    with pytest.raises(ChallengeError) as exc:
        on_commit(ch, {"tokens": list(range(50))}, 100.6, rng, CONFIG)
    assert exc.value.code == "replayed"
