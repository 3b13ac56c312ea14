"""capsule/challenge.py without the wasm: the splitmix64 inputs against the capsule's C (capsule/kernels/rng.h,
probe_sgemm.c) written out on Python integers, the Merkle tree and its proofs against challenge.c's stated
layout (RFC 6962 tags, zero padding to a power of two) built by hand, the row check against an honest float32
product, the seeds, the sizes and the row codec (mutation testing: scripts/mutants). tests/test_challenges.py
compares the same with the capsule itself; scripts/mutants leaves those wasm tests out by -k words (commitment,
openings, row_check, state_machine_refusals, own_decode), so no test name here holds one of them."""

from __future__ import annotations

import base64
import hashlib

import numpy as np
import pytest

from capsule.challenge import (
    GOLDEN,
    LLM_MAX_TOKENS,
    MAX_PRODUCTS,
    ChallengeError,
    challenge_size,
    check_entries,
    check_proof,
    decode_row,
    encode_row,
    inputs_of,
    instance_seed,
    merkle_root,
    product_seed,
    reps_for,
    tokens_for,
)

M64 = (1 << 64) - 1


def splitmix64(state: int, count: int) -> list[int]:
    """rng.h's ce_rng_next, on Python integers."""
    out = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        out.append(z ^ (z >> 31))
    return out


def uniform(draws: list[int]) -> list[float]:
    """rng.h's ce_rng_uniform: 24 random bits, exactly representable, in [-1, 1)."""
    return [((z >> 40) - (1 << 23)) / (1 << 23) for z in draws]


def test_splitmix64_reference_matches_the_published_stream() -> None:
    assert [f"{z:016x}" for z in splitmix64(0, 3)] == ["e220a8397b1dcdaf", "6e789e6aa1b965f4", "06c45d188009454f"]


@pytest.mark.parametrize(("seed", "n", "t"), [(0, 3, 0), (12345, 4, 2), (M64, 5, 1), (0xDEADBEEF, 2, 7)])
def test_inputs_are_the_capsules_sgemm_inputs(seed: int, n: int, t: int) -> None:
    """ce_sgemm_inputs(seed + t * golden, n): A then B, row-major, from the stream of seed ^ "sgemm"."""
    state = ((seed + t * GOLDEN) & M64) ^ 0x7367656D6D
    draws = uniform(splitmix64(state, 2 * n * n))
    a, b = inputs_of(seed, n, t)
    assert a.dtype == b.dtype == np.float32 and a.shape == b.shape == (n, n)
    assert a.ravel().tolist() == draws[:n * n] and b.ravel().tolist() == draws[n * n:]


def test_product_seeds_step_by_the_golden_ratio_modulo_2_64() -> None:
    assert product_seed(5, 0) == 5 and product_seed(5, 2) == 5 + 2 * 0x9E3779B97F4A7C15 - (1 << 64)
    assert product_seed(M64, 1) == (M64 + 0x9E3779B97F4A7C15) & M64


def test_instance_seed_is_the_little_endian_head_of_its_sha256() -> None:
    beacon, nonce = "ab" * 32, "00ff"
    for i in (0, 1, 7):
        digest = hashlib.sha256(f"ce-bench/v1/challenge/{beacon}/{nonce}/{i}".encode()).digest()
        assert instance_seed(beacon, nonce, i) == int.from_bytes(digest[:8], "little") < 1 << 64
    assert instance_seed(beacon, nonce, 0) != instance_seed(beacon, "00fe", 0)


def leaf(row: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + row).digest()


def node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


ROWS = [bytes([i]) * 8 for i in range(5)]
L = [leaf(r) for r in ROWS]
Z = bytes(32)
# five leaves padded to eight with all-zero hashes
LEVEL1 = [node(L[0], L[1]), node(L[2], L[3]), node(L[4], Z), node(Z, Z)]
LEVEL2 = [node(LEVEL1[0], LEVEL1[1]), node(LEVEL1[2], LEVEL1[3])]
ROOT5 = node(LEVEL2[0], LEVEL2[1])


def test_merkle_root_by_hand() -> None:
    assert merkle_root(ROWS[:1]) == L[0]
    assert merkle_root(ROWS[:2]) == node(L[0], L[1])
    assert merkle_root(ROWS[:3]) == node(node(L[0], L[1]), node(L[2], Z))
    assert merkle_root(ROWS[:4]) == node(node(L[0], L[1]), node(L[2], L[3]))
    assert merkle_root(ROWS) == ROOT5


def proof(index: int) -> list[bytes]:
    levels = [L + [Z, Z, Z], LEVEL1, LEVEL2]
    return [level[(index >> d) ^ 1] for d, level in enumerate(levels)]


@pytest.mark.parametrize("index", range(5))
def test_every_leaf_opens_the_root(index: int) -> None:
    check_proof(ROWS[index], index, proof(index), ROOT5, 5)


def refused(row: bytes, index: int, siblings: list[bytes], root: bytes = ROOT5, leaves: int = 5) -> ChallengeError:
    with pytest.raises(ChallengeError) as caught:
        check_proof(row, index, siblings, root, leaves)
    return caught.value


def test_wrong_proofs_are_refused_with_the_reason() -> None:
    wrong = refused(ROWS[1], 1, proof(2))  # another leaf's path
    assert (wrong.code, wrong.detail, str(wrong)) == ("wrong_proof", "row 1 does not open the committed root",
                                                      "row 1 does not open the committed root")
    assert refused(ROWS[2], 1, proof(1)).code == "wrong_proof"  # another row at this index
    assert refused(ROWS[1], 1, proof(1), root=merkle_root(ROWS[:4])).code == "wrong_proof"
    short = refused(ROWS[1], 1, proof(1)[:2])
    assert (short.code, short.detail) == ("wrong_proof", "row 1: expected 3 sibling hashes of 32 bytes")
    assert refused(ROWS[1], 1, [*proof(1), Z]).detail == "row 1: expected 3 sibling hashes of 32 bytes"
    truncated = [proof(1)[0], proof(1)[1][:31], proof(1)[2]]
    assert refused(ROWS[1], 1, truncated).detail == "row 1: expected 3 sibling hashes of 32 bytes"
    assert refused(ROWS[0], 0, [], root=L[0], leaves=2).detail == "row 0: expected 1 sibling hashes of 32 bytes"


def test_a_single_leaf_is_its_own_root() -> None:
    check_proof(ROWS[0], 0, [], L[0], 1)
    assert refused(ROWS[1], 0, [], root=L[0], leaves=1).code == "wrong_proof"


SEED, N = 0x1234_5678_9ABC_DEF0, 16


def honest_row(leaf_index: int) -> np.ndarray:
    """Row leaf % n of C_t = A_t B_t (t = leaf // n), computed in float32 as the node does."""
    t, i = divmod(leaf_index, N)
    a, b = inputs_of(SEED, N, t)
    row: np.ndarray = (a[i:i + 1] @ b)[0].astype(np.float32)
    return row


def test_an_honest_float32_row_passes_the_check() -> None:
    for leaf_index in (0, 5, N + 3, 2 * N + N - 1):
        row = honest_row(leaf_index)
        ratio = check_entries(SEED, N, leaf_index, row, [0, 3, 7, N - 1])
        assert 0.0 <= ratio < 1.0


def test_rows_of_another_product_or_row_are_caught() -> None:
    every = list(range(N))
    with pytest.raises(ChallengeError):
        check_entries(SEED, N, N + 3, honest_row(3), every)  # row 3 of C_0 opened as row 3 of C_1
    with pytest.raises(ChallengeError):
        check_entries(SEED, N, 4, honest_row(5), every)
    with pytest.raises(ChallengeError):
        check_entries(SEED + 1, N, 5, honest_row(5), every)


def test_one_wrong_entry_is_named() -> None:
    row = honest_row(N + 3).copy()
    row[6] += 0.01
    assert check_entries(SEED, N, N + 3, row, [1, 2, 5, 7]) < 1.0  # the sample misses it
    with pytest.raises(ChallengeError) as caught:
        check_entries(SEED, N, N + 3, row, [1, 6, 7])
    assert caught.value.code == "wrong_rows"
    assert caught.value.detail.startswith(f"leaf {N + 3}, column 6 differs from the product (error ratio ")


def test_an_error_within_the_fp32_bound_passes_and_beyond_it_fails() -> None:
    """The bound: n * 2^-24 * sum_p |a_ip b_pj| per entry (1.0 = at the bound)."""
    a, b = inputs_of(SEED, N, 0)
    ref = a[2].astype(np.float64) @ b.astype(np.float64)
    bound = N * 2.0**-24 * (np.abs(a[2].astype(np.float64)) @ np.abs(b.astype(np.float64)))
    within = (ref + 0.5 * bound).astype(np.float32)
    assert check_entries(SEED, N, 2, within, [4]) == pytest.approx(0.5, abs=0.1)
    for ratio in (1.5, 3.0):
        beyond = (ref + ratio * bound).astype(np.float32)
        with pytest.raises(ChallengeError):
            check_entries(SEED, N, 2, beyond, [4])


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_row_holding_nan_or_infinity_fails_even_outside_the_sample(bad: float) -> None:
    row = honest_row(2).copy()
    row[N - 1] = bad
    with pytest.raises(ChallengeError) as caught:
        check_entries(SEED, N, 2, row, [0])
    assert (caught.value.code, caught.value.detail) == ("wrong_rows", "row 2 holds NaN or infinity")


def test_decode_steps_follow_the_claim_within_their_range() -> None:
    assert tokens_for(100.0, 1.0) == 100 and tokens_for(100.0, 1.5625) == 156  # decoded tokens, the probe's unit
    assert tokens_for(1.0, 1.0) == 8 and tokens_for(1e6, 1.0) == LLM_MAX_TOKENS == 8192


def test_work_is_sized_per_instance_for_slow_claims_too() -> None:
    # 2 * 128^3 = 2^22 flop per product; 0.5 GFLOP/s for 1 s on one instance: 119.2 -> 119 products
    assert reps_for(0.5, 1, 128, 1.0) == 119
    assert reps_for(0.5, 0, 128, 1.0) == 119  # no instances counts as one
    assert reps_for(2.0, 2, 128, 1.0) == 238
    assert reps_for(-5.0, 1, 128, 1.0) == 1


def test_rows_travel_as_little_endian_float32() -> None:
    values = np.array([1.5, -2.0, 0.1], dtype=np.float64)
    text = encode_row(values)
    assert base64.b64decode(text) == np.array([1.5, -2.0, 0.1], dtype="<f4").tobytes()
    assert decode_row(text, 3) == base64.b64decode(text)


@pytest.mark.parametrize(("text", "n", "detail"), [
    (42, 4, "a row's values are base64 text"),
    ("!!", 4, "a row's values are not valid base64"),
    (base64.b64encode(bytes(12)).decode(), 4, "a row holds 12 bytes; expected 16 (4 fp32)"),
])
def test_malformed_rows_are_refused_with_the_reason(text: object, n: int, detail: str) -> None:
    with pytest.raises(ChallengeError) as caught:
        decode_row(text, n)
    assert (caught.value.code, caught.value.detail) == ("malformed_opening", detail)


def test_the_cap_holds_for_any_order() -> None:
    assert reps_for(1e9, 1, 1000, 1.0) == MAX_PRODUCTS == 65536  # CE_CHALLENGE_MAX_PRODUCTS (challenge.h)
    assert reps_for(1e9, 1, 128, 1.0) == 65536


def test_challenge_size_caps_instances_holds_the_order_and_floors_each_instance() -> None:
    # 60 GFLOP/s on 3 instances of n=512 for 1 s: 20 per instance, 74.5 products fit: 74 (rounded down)
    assert challenge_size(60.0, 3, 512, 1.0, 64, 2.0) == (3, 512, reps_for(60.0, 3, 512, 1.0)) == (3, 512, 74)
    assert challenge_size(6400.0, 100, 1024, 1.0, 64, 2.0)[0] == 64  # at most max_instances
    assert challenge_size(50.0, 0, 1024, 1.0, 64, 2.0)[0] == 1        # at least one
    assert challenge_size(50.0, 2, 99_999, 1.0, 64, 2.0)[1] == 2048   # the order held in range (order_of)
    assert challenge_size(50.0, 2, None, 1.0, 64, 2.0)[1] == 1024     # no order named: the default
    # a tiny claim is given the core floor's work per instance: 2 GFLOP/s each for 1 s at n=128 is 476 products
    floored = challenge_size(0.01, 4, 128, 1.0, 64, 2.0)
    assert floored == (4, 128, reps_for(8.0, 4, 128, 1.0)) == (4, 128, 476)
    assert challenge_size(8.0, 4, 128, 1.0, 64, 2.0) == floored   # a claim of exactly the floor: the same
    assert challenge_size(12.0, 4, 128, 1.0, 64, 2.0)[2] == 715   # above the floor: the claim's own work
    assert challenge_size(0.01, 4, 128, 1.0, 64, 3.0)[2] == 715   # a higher floor: more work
    assert challenge_size(12.0, 4, 128, 0.5, 64, 2.0)[2] == 357   # half the target: half the products
