"""Tests that kill mutants of web/proof/challenges.py (scripts/mutants) that tests/test_challenges.py left alive:
the RTT allowance and the deadlines at their exact edges, the physics bound, and what the history keeps."""

from __future__ import annotations

import hashlib
import random
import re
from typing import Any

import numpy as np
import pytest

from capsule import plausibility
from capsule.challenge import ChallengeError, encode_row, instance_seed, product_seed, tree_width
from capsule.cpu_challenge import commitment_root, leaf_hash, node_hash, product_root
from web.config import RelayConfig
from web.proof.challenges import (
    Challenge,
    checked_stream,
    implausible,
    net_time_s,
    new_challenge,
    new_llm_challenge,
    next_gap_s,
    on_commit,
    parse_opening,
)

CONFIG = RelayConfig()
BEACON: dict[str, Any] = {"round": 7, "value": "ab" * 32}
NONCE = "0123456789abcdef" * 2  # 32 hex digits: the id is its first 16
SENT = 100.0


def test_the_rtt_allowance_is_the_rtt_capped_at_its_share_of_the_time() -> None:
    share = CONFIG.challenge_rtt_share_max
    assert net_time_s(1.0, 50.0, CONFIG) == pytest.approx(0.95)            # the RTT, below its cap
    assert net_time_s(1.0, 5000.0, CONFIG) == pytest.approx(1.0 - share)  # capped: held pongs buy that share
    assert net_time_s(1.0, None, CONFIG) == 1.0 and net_time_s(1.0, -20.0, CONFIG) == 1.0
    assert net_time_s(0.0, 10.0, CONFIG) == 1e-6                          # never zero: rates stay finite


def bare(kind: str = "sgemm", n: int = 1000, reps: int = 52, instances: int = 1, commit_s: float | None = None,
         decode: int = 0) -> Challenge:
    """A challenge as the relay holds it once answered: only the sizes and the net time matter to the rates."""
    return Challenge("id", "node", n, reps, list(range(instances)), 7, "nonce", 0.0, SENT, 0.0, kind=kind,
                     decode=decode, commit_s=commit_s, tokens=[0] * decode if kind == "llm" else None)


def small(instances: int = 2, n: int = 4, reps: int = 3, rtt_ms: float = 0.0) -> Challenge:
    """An sgemm challenge cut to tiny products (12 leaves of 4 values, padded to 16), so openings are cheap;
    parse_opening checks proofs, never the products."""
    ch = new_challenge("node", 40.0, instances, None, BEACON, NONCE, rtt_ms, SENT, CONFIG)
    ch.n, ch.reps = n, reps
    return ch


def tree(hashes: list[bytes]) -> list[list[bytes]]:
    """Every level of a capsule/cpu_challenge.py Merkle tree over these hashes (zero-padded to a power of
    two) first."""
    level = hashes + [bytes(32)] * (tree_width(len(hashes)) - len(hashes))
    levels = [level]
    while len(level) > 1:
        level = [node_hash(level[i], level[i + 1]) for i in range(0, len(level), 2)]
        levels.append(level)
    return levels


def proof(levels: list[list[bytes]], index: int) -> list[str]:
    siblings = []
    for level in levels[:-1]:
        siblings.append(level[index ^ 1].hex())
        index >>= 1
    return siblings


class Node:
    """An honest node's side of a small challenge: random rows per instance, committed by their Merkle roots
    (a tree per product, then the top tree over the product roots)."""

    def __init__(self, ch: Challenge) -> None:
        gen = np.random.default_rng(5)
        self.n = ch.n
        self.rows = [gen.standard_normal((ch.n * ch.reps, ch.n)).astype("<f4") for _ in ch.seeds]
        self.products = [[tree([leaf_hash(r.tobytes()) for r in rows[t * ch.n:(t + 1) * ch.n]])
                          for t in range(ch.reps)] for rows in self.rows]
        self.tops = [tree([p[-1][0] for p in products]) for products in self.products]
        for top, products, rows in zip(self.tops, self.products, self.rows, strict=True):  # capsule's roots
            assert [p[-1][0] for p in products] == [product_root([r.tobytes() for r in rows[t * ch.n:(t + 1) * ch.n]])
                                                   for t in range(ch.reps)]
            assert top[-1][0] == commitment_root([p[-1][0] for p in products])

    def roots(self) -> list[str]:
        return [t[-1][0].hex() for t in self.tops]

    def item(self, instance: int, row: int) -> dict[str, Any]:
        t, i = divmod(row, self.n)
        return {"instance": instance, "row": row, "values": encode_row(self.rows[instance][row]),
                "proof": proof(self.products[instance][t], i) + proof(self.tops[instance], t)}

    def opening(self, asked: list[list[int]]) -> list[dict[str, Any]]:
        return [self.item(i, row) for i, row in asked]


def committed(rtt_ms: float = 0.0) -> tuple[Challenge, Node, list[list[int]]]:
    """A small challenge committed 0.5 s after it was sent: the challenge, its node and the rows asked."""
    ch = small(rtt_ms=rtt_ms)
    node = Node(ch)
    message = on_commit(ch, {"leaf": "high16", "roots": node.roots()}, SENT + 0.5, random.Random(1), CONFIG)
    assert message is not None
    return ch, node, message["rows"]


def refusal(code: str, phrase: str, ch: Challenge, message: dict[str, Any], now: float) -> None:
    """parse_opening refuses with this stable code and a detail naming what was expected."""
    with pytest.raises(ChallengeError) as exc:
        parse_opening(ch, message, now, CONFIG)
    assert exc.value.code == code and phrase in exc.value.detail, (exc.value.code, exc.value.detail)


def commit_refusal(code: str, phrase: str, ch: Challenge, message: dict[str, Any], now: float) -> None:
    with pytest.raises(ChallengeError) as exc:
        on_commit(ch, message, now, random.Random(1), CONFIG)
    assert exc.value.code == code and phrase in exc.value.detail, (exc.value.code, exc.value.detail)


# --- new challenges: sized to the claim, seeded from the beacon and the nonce --------------------------------


def test_an_sgemm_challenge_is_sized_per_instance_and_seeded_from_the_beacon() -> None:
    ch = new_challenge("node-a", 40.0, 2, 512, BEACON, NONCE, 12.5, SENT, CONFIG)
    # 20 GFLOP/s per instance for 0.5 s = 10 GFLOP; one product of order 512 is 2 x 512^3 = 0.268 GFLOP: 37 fit
    assert (ch.id, ch.node_id, ch.n, ch.reps, ch.kind) == (NONCE[:16], "node-a", 512, 37, "sgemm")
    assert ch.seeds == [instance_seed(BEACON["value"], NONCE, i) for i in range(2)]
    assert (ch.beacon_round, ch.nonce, ch.beacon_value) == (7, NONCE, BEACON["value"])
    assert (ch.claimed_gflops, ch.sent_at, ch.rtt_ms) == (40.0, SENT, 12.5)
    assert ch.roots is None and ch.commit_s is None and ch.rows == []
    # a target of its own (roll calls) sizes the work to it: half the time, 18 of the 18.6 products that fit
    assert new_challenge("node-a", 40.0, 2, 512, BEACON, NONCE, 12.5, SENT, CONFIG, target_s=0.25).reps == 18


def test_a_challenge_has_one_to_max_instances_and_no_rtt_means_none_allowed() -> None:
    one = new_challenge("node", 10.0, 1, None, BEACON, NONCE, None, SENT, CONFIG)
    assert len(one.seeds) == 1 and one.n == 1024 and one.rtt_ms == 0.0
    assert len(new_challenge("node", 10.0, 0, None, BEACON, NONCE, None, SENT, CONFIG).seeds) == 1
    many = new_challenge("node", 1000.0, 500, None, BEACON, NONCE, None, SENT, CONFIG)
    assert len(many.seeds) == CONFIG.challenge_max_instances


def test_a_tiny_claim_still_gets_the_core_floor_of_work_per_instance() -> None:
    # 0.5 GFLOP/s over 2 instances is below the 2 GFLOP/s floor: each instance gets 2 GFLOP/s x 0.5 s of
    # products of order 128 (2 x 128^3 flops each): 238 of them
    ch = new_challenge("node", 0.5, 2, 128, BEACON, NONCE, 0.0, SENT, CONFIG)
    assert CONFIG.core_floor_gflops == 2.0 and ch.reps == 238
    # above the floor the claim sets it: 8 GFLOP/s per instance is 4x the floor's work
    assert new_challenge("node", 16.0, 2, 128, BEACON, NONCE, 0.0, SENT, CONFIG).reps == 953


def test_an_llm_challenge_is_one_seed_and_decode_steps_for_the_claimed_tokens_per_sec() -> None:
    ch = new_llm_challenge("node-b", 100.0, BEACON, NONCE, 3.0, SENT, CONFIG)
    # 100 tokens/s for the solo target (0.5 s): 50 tokens
    assert (ch.id, ch.node_id, ch.kind, ch.decode, ch.claimed_tps) == (NONCE[:16], "node-b", "llm", 50, 100.0)
    assert ch.stop_after_s is None and ch.tokens is None and ch.checked_token is None
    assert ch.seeds == [instance_seed(BEACON["value"], NONCE, 0)]  # the sgemm recipe's instance 0
    assert (ch.beacon_round, ch.nonce, ch.beacon_value, ch.sent_at, ch.rtt_ms) == (7, NONCE, BEACON["value"],
                                                                                 SENT, 3.0)
    assert (ch.n, ch.reps, ch.claimed_gflops, ch.flops) == (0, 0, 0.0, 0.0)  # no products asked or claimed
    # 100 tokens/s for 1 s = 100 tokens (decoded tokens: the probe's unit); sequences follow one another, so a
    # fast claim is not held to one sequence's 224
    assert new_llm_challenge("node-b", 100.0, BEACON, NONCE, None, SENT, CONFIG, target_s=1.0).decode == 100
    assert new_llm_challenge("node-b", 500.0, BEACON, NONCE, None, SENT, CONFIG, target_s=1.0).decode == 500
    assert new_llm_challenge("node-b", 1.0, BEACON, NONCE, None, SENT, CONFIG).decode == 8
    assert new_llm_challenge("node-b", 1e6, BEACON, NONCE, None, SENT, CONFIG).decode == 8192
    roll = new_llm_challenge("node-b", 100.0, BEACON, NONCE, None, SENT, CONFIG, 1.5625, 1.125)
    assert (roll.decode, roll.stop_after_s) == (156, 1.125)
    assert new_llm_challenge("node-b", 100.0, BEACON, NONCE, None, SENT, CONFIG).rtt_ms == 0.0


# --- the messages on the wire ---------------------------------------------------------------------------------


def test_the_challenge_messages_carry_what_the_node_needs_and_nothing_of_the_claim() -> None:
    ch = new_challenge("node", 40.0, 2, 512, BEACON, NONCE, 12.5, SENT, CONFIG)
    seeds = [f"{s:016x}" for s in ch.seeds]
    assert all(len(s) == 16 for s in seeds)
    assert ch.message(CONFIG) == {"type": "challenge", "id": NONCE[:16], "kind": "sgemm", "n": 512, "reps": 37,
                                  "seeds": seeds, "beacon_round": 7, "nonce": NONCE,
                                  "commit_within_s": CONFIG.challenge_commit_timeout_s,
                                  "leaves": ["high16", "fp32"]}
    llm = new_llm_challenge("node", 100.0, BEACON, NONCE, 3.0, SENT, CONFIG)
    assert llm.message(CONFIG) == {"type": "challenge", "id": NONCE[:16], "kind": "llm", "decode": 50,
                                   "seeds": [f"{llm.seeds[0]:016x}"], "beacon_round": 7, "nonce": NONCE,
                                   "commit_within_s": CONFIG.challenge_commit_timeout_s}
    llm.stop_after_s = 1.123456
    assert llm.message(CONFIG)["stop_after_s"] == 1.1235  # a roll call's: the node stops then


# --- the commitment -------------------------------------------------------------------------------------------


def test_the_open_message_names_rows_per_instance_drawn_within_the_committed_leaves() -> None:
    ch = small()
    node = Node(ch)
    message = on_commit(ch, {"leaf": "high16", "roots": node.roots()}, SENT + 0.5, random.Random(1), CONFIG)
    per = CONFIG.challenge_rows_per_instance
    assert message is not None and message["type"] == "open" and message["id"] == NONCE[:16]
    assert [i for i, _ in message["rows"]] == [0] * per + [1] * per  # instance by instance, in order
    assert all(0 <= leaf < ch.n * ch.reps for _, leaf in message["rows"])
    assert set(message) == {"type", "id", "rows"} and message["rows"] == [list(r) for r in ch.rows]
    assert ch.roots == [bytes.fromhex(r) for r in node.roots()] and ch.open_sent_at == SENT + 0.5


def test_the_commit_time_is_net_of_the_sessions_rtt() -> None:
    ch, _, _ = committed(rtt_ms=40.0)
    assert ch.commit_s == pytest.approx(0.46)  # 0.5 s elapsed less the 40 ms RTT (below its 10 % cap)
    llm = new_llm_challenge("node", 100.0, BEACON, NONCE, 40.0, SENT, CONFIG)
    on_commit(llm, {"tokens": [5, 6, 7]}, SENT + 0.5, random.Random(1), CONFIG)
    assert llm.commit_s == pytest.approx(0.46) and llm.tokens == [5, 6, 7]
    assert llm.observed_tps == pytest.approx(3 / 0.46)  # the tokens committed over the net time


def test_the_commit_deadline_is_inclusive_and_a_late_commit_says_by_how_much() -> None:
    limit = CONFIG.challenge_commit_timeout_s
    commit = {"leaf": "high16", "roots": Node(small()).roots()}
    assert on_commit(small(), commit, SENT + limit, random.Random(1), CONFIG) is not None
    commit_refusal("late", f"committed after {limit + 0.5:.1f} s; the limit is {limit:g} s", small(),
                   {"leaf": "high16", "roots": Node(small()).roots()}, SENT + limit + 0.5)
    llm = new_llm_challenge("node", 100.0, BEACON, NONCE, 0.0, SENT, CONFIG)
    assert on_commit(llm, {"tokens": [1]}, SENT + limit, random.Random(1), CONFIG) is None
    llm = new_llm_challenge("node", 100.0, BEACON, NONCE, 0.0, SENT, CONFIG)
    commit_refusal("late", "committed after", llm, {"tokens": [1]}, SENT + limit + 0.01)


def test_a_second_commitment_is_refused_as_replayed() -> None:
    ch, node, _ = committed()
    commit_refusal("replayed", "already committed", ch, {"leaf": "high16", "roots": node.roots()}, SENT + 0.6)
    llm = new_llm_challenge("node", 100.0, BEACON, NONCE, 0.0, SENT, CONFIG)
    on_commit(llm, {"tokens": [1, 2]}, SENT + 0.5, random.Random(1), CONFIG)
    commit_refusal("replayed", "already committed", llm, {"tokens": [3, 4]}, SENT + 0.6)
    assert llm.tokens == [1, 2]


def test_malformed_roots_are_refused_and_the_detail_names_what_was_expected() -> None:
    roots = Node(small()).roots()
    for bad in (roots[:1], [roots[0][:62], roots[1]], [roots[0], 7], None):
        commit_refusal("malformed_commit", "expected 2 roots of 64 hex digits", small(), {"roots": bad}, SENT + 0.5)
    commit_refusal("malformed_commit", "not hex", small(), {"roots": [roots[0], "zz" * 32]}, SENT + 0.5)
    ch = small()
    with pytest.raises(ChallengeError):
        on_commit(ch, {"roots": [roots[0][:62], roots[1]]}, SENT + 0.5, random.Random(1), CONFIG)
    assert ch.roots is None and ch.commit_s is None  # a refused commitment leaves nothing behind


def test_an_llm_commitment_is_1_to_decode_token_ids_in_the_vocabulary() -> None:
    """50 tokens asked: 1 to 50 ids in [0, 32000); nothing else (no bools, floats, strings, negative or too
    large ids, no empty list, no more than asked); a refused one leaves nothing behind."""
    for bad in ([], [0] * 51, [32000], [-1], [1.0], [True], ["1"], "1,2", None, {"0": 1}):
        llm = new_llm_challenge("node", 100.0, BEACON, NONCE, 0.0, SENT, CONFIG)
        commit_refusal("malformed_commit", "expected tokens: 1 to 50 integers in [0, 32000)", llm,
                       {"tokens": bad}, SENT + 0.5)
        assert llm.tokens is None and llm.checked_token is None and llm.commit_s is None
    llm = new_llm_challenge("node", 100.0, BEACON, NONCE, 0.0, SENT, CONFIG)
    commit_refusal("outdated_client", "a token hash is no longer taken", llm, {"token_ids_sha256": "ab" * 32},
                   SENT + 0.5)
    for good in ([0], [31999] * 50):
        llm = new_llm_challenge("node", 100.0, BEACON, NONCE, 0.0, SENT, CONFIG)
        assert on_commit(llm, {"tokens": good}, SENT + 0.5, random.Random(1), CONFIG) is None
        assert llm.tokens == good and llm.checked_token is not None and 0 <= llm.checked_token < len(good)


def test_the_checked_token_is_drawn_uniformly_over_the_answer() -> None:
    """Every index of an answer is drawn (the last one too), about equally often: a guess anywhere is caught
    with the chance of being drawn (web/proof/llm_checks.py)."""
    rng = random.Random(5)
    seen = [0] * 10
    for _ in range(5000):
        llm = new_llm_challenge("node", 100.0, BEACON, NONCE, 0.0, SENT, CONFIG)
        on_commit(llm, {"tokens": list(range(10))}, SENT + 0.5, rng, CONFIG)
        assert llm.checked_token is not None
        seen[llm.checked_token] += 1
    assert min(seen) > 400 and max(seen) < 600, seen


# --- the opening ----------------------------------------------------------------------------------------------


def test_an_honest_opening_yields_the_committed_rows_by_instance_and_row() -> None:
    ch, node, asked = committed()
    opened = parse_opening(ch, {"rows": node.opening(asked)}, SENT + 1.0, CONFIG)
    assert sorted(opened) == [0, 1]
    for i, row in asked:
        assert np.array_equal(opened[i][row], node.rows[i][row])


def test_the_open_deadline_is_inclusive_and_a_late_opening_says_how_late() -> None:
    ch, node, asked = committed()  # the open message went at SENT + 0.5
    limit = CONFIG.challenge_open_timeout_s
    assert parse_opening(ch, {"rows": node.opening(asked)}, SENT + 0.5 + limit, CONFIG)
    refusal("late", f"opened after {limit + 0.5:.1f} s", ch, {"rows": node.opening(asked)}, SENT + 1.0 + limit)


def test_an_opening_without_a_commitment_and_an_open_request_is_unknown() -> None:
    ch = small()
    refusal("unknown_challenge", "no commitment", ch, {"rows": []}, SENT + 1.0)
    ch.open_sent_at = SENT  # asked to open, but no roots to open against
    refusal("unknown_challenge", "no commitment", ch, {"rows": []}, SENT + 1.0)
    ch, node, asked = committed()
    ch.open_sent_at = None  # roots, but no rows were asked
    refusal("unknown_challenge", "no commitment", ch, {"rows": node.opening(asked)}, SENT + 1.0)


def test_an_opening_of_other_rows_or_in_another_order_is_malformed() -> None:
    ch, node, asked = committed()
    n_rows = len(asked)
    for bad in (None, node.opening(asked)[:-1], node.opening(asked) + node.opening(asked)[:1]):
        refusal("malformed_opening", f"expected {n_rows} opened rows", ch, {"rows": bad}, SENT + 1.0)
    (i, row), rest = asked[0], node.opening(asked)[1:]
    other = (row + 1) % (ch.n * ch.reps)
    # the right instance, another row (with a valid proof of that row); a row that is not an object at all
    for first in (node.item(i, other), [i, row], {"instance": 1 - i, "row": row}):
        refusal("malformed_opening", f"expected row {row} of instance {i} in the order asked", ch,
                {"rows": [first, *rest]}, SENT + 1.0)


def test_proofs_must_be_lists_of_64_hex_digit_hashes() -> None:
    ch, node, asked = committed()
    for bad in (None, "ab" * 32, [h[:62] for h in node.item(*asked[0])["proof"]], [5]):
        first = {**node.item(*asked[0]), "proof": bad}
        refusal("malformed_opening", "64-hex-digit hashes", ch, {"rows": [first, *node.opening(asked)[1:]]},
                SENT + 1.0)
    first = {**node.item(*asked[0]), "proof": ["zz" * 32] * 4}
    refusal("malformed_opening", "not hex", ch, {"rows": [first, *node.opening(asked)[1:]]}, SENT + 1.0)
    # well-formed but not the committed tree's: the proof itself fails
    wrong = {**node.item(*asked[0]), "proof": ["00" * 32] * 4}
    refusal("wrong_proof", "does not open", ch, {"rows": [wrong, *node.opening(asked)[1:]]}, SENT + 1.0)


# --- the physics bound ----------------------------------------------------------------------------------------


def test_an_observation_beyond_one_core_per_instance_is_implausible_and_at_it_is_not() -> None:
    per_core = plausibility.CORE_GFLOPS_MAX
    at = bare(commit_s=1.0)  # 2 x 1000^3 x 52 flops in 1 s: 104 GFLOP/s, the bound itself
    assert at.observed_gflops == per_core and implausible(at) is None
    assert implausible(bare(instances=2, commit_s=1.0)) is None  # 208 over 2 instances: 104 each
    reason = implausible(bare(commit_s=0.99))
    assert reason is not None and "observed 105.1 GFLOP/s over 1 instance(s)" in reason
    assert f"exceeds {per_core:g}" in reason
    reason = implausible(bare(instances=2, commit_s=0.99))
    assert reason is not None and f"exceeds {2 * per_core:g}" in reason
    assert implausible(bare()) is None  # not committed: nothing observed


def test_tokens_per_sec_beyond_one_core_on_the_reference_model_is_implausible() -> None:
    bound = plausibility.TOKENS_PER_SEC_MAX
    at = bare("llm", 0, 0, decode=40, commit_s=40 / bound)  # 40 tokens at exactly the bound
    assert at.observed_tps == bound and at.observed_gflops is None and implausible(at) is None
    reason = implausible(bare("llm", 0, 0, decode=40, commit_s=0.01))  # 4000 tokens/s
    assert reason is not None and "observed 4000.0 tokens/s" in reason and f"{bound:.0f}" in reason
    assert "reference model" in reason


def test_a_gpu_answer_is_held_to_the_gpu_bound_not_the_cpu_one() -> None:
    gpu_max = plausibility.GPU_FP32_TFLOPS_MAX
    # 2 x 1000^3 x 52 flops in 1 ms: 104 TFLOP/s, far beyond a CPU core, within one GPU
    assert implausible(bare("gpu", commit_s=1e-3)) is None
    assert implausible(bare("sgemm", commit_s=1e-3)) is not None
    beyond = 2 * 1000**3 * 52 / (gpu_max * 1.1e12)  # 1.1x the bound
    reason = implausible(bare("gpu", commit_s=beyond))
    assert reason is not None and "TFLOP/s" in reason


# --- what the history keeps -----------------------------------------------------------------------------------


def recipe(method: str) -> tuple[str, int | None]:
    """The sha256 text template and the per-product constant that a record's seed_method names."""
    template = re.search(r"first 8 bytes LE of sha256\('([^']*)'\)", method)
    golden = re.search(r"t \* (0x[0-9a-f]+) \(mod 2\^64\)", method)
    assert template is not None, method
    return template.group(1), int(golden.group(1), 16) if golden else None


def test_an_sgemm_record_lets_anyone_recompute_the_challenge() -> None:
    ch = new_challenge("node", 40.0, 2, None, BEACON, NONCE, 12.3456789, SENT, CONFIG)
    ch.issued_at, ch.roll_call = 1.7e9, "rc-1"
    before = ch.record()
    assert before["commit_s"] is None and before["observed_gflops"] is None and before["rows"] == []
    message = on_commit(ch, {"roots": ["ab" * 32, "cd" * 32]}, SENT + 0.7654321, random.Random(1), CONFIG)
    assert message is not None
    record = ch.record()
    assert {k: v for k, v in record.items() if k not in ("seed_method", "rtt_ms", "commit_s", "observed_gflops")} \
        == {"id": NONCE[:16], "kind": "sgemm", "issued_at": 1.7e9, "n": 1024, "reps": 4, "instances": 2,
            "beacon_round": 7, "nonce": NONCE, "claimed_gflops": 40.0, "rows": message["rows"], "roll_call": "rc-1",
            "products": [4, 4], "leaf": "fp32", "stop_after_s": None}
    # the times and the rate, to the microsecond, the 0.1 ms and the 0.001 GFLOP/s
    assert record["rtt_ms"] == pytest.approx(12.3456789, abs=5e-4)
    assert record["commit_s"] == pytest.approx(0.7654321 - 0.0123456789, abs=5e-5)
    assert ch.observed_gflops is not None and record["observed_gflops"] == pytest.approx(ch.observed_gflops, abs=5e-4)
    work = record["instances"] * record["reps"] * 2 * record["n"] ** 3
    assert work / record["commit_s"] / 1e9 == pytest.approx(record["observed_gflops"], rel=1e-4)
    # the seeds, from the beacon's value, the nonce and the recipe as written
    template, golden = recipe(record["seed_method"])
    for i, seed in enumerate(ch.seeds):
        text = template.format(beacon=BEACON["value"], nonce=record["nonce"], i=i)
        assert int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") == seed
        assert golden is not None and (seed + 3 * golden) % 2**64 == product_seed(seed, 3)


def test_an_llm_record_lets_anyone_recompute_the_challenge() -> None:
    ch = new_llm_challenge("node", 100.0, BEACON, NONCE, 12.3456789, SENT, CONFIG)
    ch.issued_at = 1.7e9
    before = ch.record()
    assert before["commit_s"] is None and before["observed_tokens_per_sec"] is None
    assert before["tokens"] is None and before["checked_token"] is None and before["roll_call"] is None
    on_commit(ch, {"tokens": [11, 12, 13, 14]}, SENT + 0.7654321, random.Random(1), CONFIG)
    record = ch.record()
    j = record["checked_token"]
    assert {k: v for k, v in record.items() if k not in ("seed_method", "rtt_ms", "commit_s",
                                                         "observed_tokens_per_sec")} \
        == {"id": NONCE[:16], "kind": "llm", "issued_at": 1.7e9, "decode": 50, "beacon_round": 7, "nonce": NONCE,
            "stop_after_s": None, "claimed_tokens_per_sec": 100.0, "tokens": 4, "checked_token": j,
            "token": 11 + j, "roll_call": None, "streams": 1, "stream_tokens": None}
    assert record["rtt_ms"] == pytest.approx(12.3456789, abs=5e-4)
    assert record["commit_s"] == pytest.approx(0.7654321 - 0.0123456789, abs=5e-5)
    assert ch.observed_tps is not None
    assert record["observed_tokens_per_sec"] == pytest.approx(ch.observed_tps, abs=5e-4)
    assert record["tokens"] / record["commit_s"] == pytest.approx(record["observed_tokens_per_sec"], rel=1e-4)
    template, _ = recipe(record["seed_method"])
    text = template.format(beacon=BEACON["value"], nonce=record["nonce"], i=0)
    assert [int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")] == ch.seeds


def test_a_challenge_of_several_streams_asks_each_its_share_and_checks_one_token_of_all() -> None:
    """Tokens/s is aggregate decode throughput: a claim of 400 tokens/s over 4 streams asks each stream for its
    100 tokens/s share, one seed per stream (the record's recipe, stream i); the answer is one list per
    stream, the checked index is drawn over all of them and located in its stream; a flat list, a missing
    stream or an empty answer is malformed."""
    ch = new_llm_challenge("node", 400.0, BEACON, NONCE, 0.0, SENT, CONFIG, streams=4)
    one = new_llm_challenge("node", 400.0, BEACON, NONCE, 0.0, SENT, CONFIG)
    assert len(ch.seeds) == 4 and ch.decode == 50 and one.decode == 200 and ch.seeds[0] == one.seeds[0]
    template, _ = recipe(ch.record()["seed_method"])
    assert [int.from_bytes(hashlib.sha256(template.format(beacon=BEACON["value"], nonce=NONCE, i=i).encode())
                           .digest()[:8], "little") for i in range(4)] == ch.seeds
    assert ch.message(CONFIG)["seeds"] == [f"{s:016x}" for s in ch.seeds]
    streams = [[1, 2, 3], [], [4, 5], [6]]
    seen = set()
    for draw in range(40):
        c = new_llm_challenge("node", 400.0, BEACON, NONCE, 0.0, SENT, CONFIG, streams=4)
        on_commit(c, {"tokens": streams}, SENT + 1.0, random.Random(draw), CONFIG)
        assert c.tokens == [1, 2, 3, 4, 5, 6] and c.stream_tokens == [3, 0, 2, 1]
        seed, stream, at = checked_stream(c)
        s = c.seeds.index(seed)
        assert streams[s] == stream and stream[at] == c.tokens[c.checked_token or 0]
        seen.add(s)
        assert c.observed_tps == pytest.approx(6 / net_time_s(1.0, 0.0, CONFIG))
    assert seen == {0, 2, 3}  # every stream with tokens is drawn, the empty one never
    bads: list[list[Any]] = [[1, 2, 3], [[1], [2], [3]], [[], [], [], []], [[1], [2], [3], [51] * 51],
                             [[1], [2], [3], [-1]]]
    for bad in bads:
        c = new_llm_challenge("node", 400.0, BEACON, NONCE, 0.0, SENT, CONFIG, streams=4)
        with pytest.raises(ChallengeError) as exc:
            on_commit(c, {"tokens": bad}, SENT + 1.0, random.Random(1), CONFIG)
        assert exc.value.code == "malformed_commit"
    capped = new_llm_challenge("node", 1e6, BEACON, NONCE, 0.0, SENT, CONFIG, streams=1000)
    assert len(capped.seeds) == CONFIG.challenge_max_instances
    assert capped.decode * len(capped.seeds) <= 32768  # LLM_MAX_ANSWER_TOKENS: one frame's worth of ids in all
    big = new_llm_challenge("node", 64 * 400.0, BEACON, NONCE, 0.0, SENT, CONFIG, target_s=1.0, streams=64)
    assert big.decode == 400  # a 64-core server's streams each asked their share (not 8192 / 64 = 128)


def test_the_seed_recipes_of_all_kinds_are_one() -> None:
    """The llm seed is the sgemm recipe's instance 0, and a GPU challenge's seeds are the sgemm ones: the
    published recipes say so word for word."""
    sgemm = new_challenge("node", 40.0, 2, None, BEACON, NONCE, 0.0, SENT, CONFIG).record()["seed_method"]
    llm = new_llm_challenge("node", 100.0, BEACON, NONCE, 0.0, SENT, CONFIG).record()["seed_method"]
    instance_clause = sgemm.split("; ")[0]
    assert llm.split("; ")[0].removeprefix("stream i: ") == instance_clause.removeprefix("instance i: ")
    gpu = bare("gpu", commit_s=1e-3)
    record = gpu.record()
    assert record["kind"] == "gpu" and record["claimed_tflops"] == 0.0 and "observed_tflops" in record
    # the same seeds and product seeds; the inputs drawn from them differ by kind (each names its recipe)
    prefix = sgemm.split("; inputs:")[0]
    assert record["seed_method"].startswith(prefix) and record["seed_method"] != sgemm


# --- when the next solo challenge comes ----------------------------------------------------------------------


def test_the_gap_to_the_next_challenge_is_the_interval_plus_or_minus_its_spread() -> None:
    interval, spread = CONFIG.challenge_interval_unverified_s, CONFIG.challenge_spread
    gaps = [next_gap_s(b"relay secret", BEACON["value"], "node", count, CONFIG) for count in range(2000)]
    assert all(interval * (1 - spread) <= g <= interval * (1 + spread) for g in gaps)
    assert min(gaps) < interval * (1 - 0.9 * spread) and max(gaps) > interval * (1 + 0.9 * spread)  # both ends
    assert sum(gaps) / len(gaps) == pytest.approx(interval, abs=0.03 * interval)  # centred on the interval
    flat = RelayConfig(challenge_interval_unverified_s=10.0, challenge_spread=0.0)
    assert next_gap_s(b"relay secret", BEACON["value"], "node", 3, flat) == 10.0


def test_the_gap_is_fixed_by_secret_beacon_node_and_count_and_each_of_them_moves_it() -> None:
    gap = next_gap_s(b"relay secret", BEACON["value"], "node", 3, CONFIG)
    assert next_gap_s(b"relay secret", BEACON["value"], "node", 3, CONFIG) == gap
    assert next_gap_s(b"other secret", BEACON["value"], "node", 3, CONFIG) != gap  # not from public data alone
    assert next_gap_s(b"relay secret", "cd" * 32, "node", 3, CONFIG) != gap
    assert next_gap_s(b"relay secret", BEACON["value"], "node-2", 3, CONFIG) != gap
    assert next_gap_s(b"relay secret", BEACON["value"], "node", 4, CONFIG) != gap
