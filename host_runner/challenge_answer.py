"""A node's answers to its relay's challenges (protocol in web/proof/challenges.py), computed by the capsule's
reactor: each instance runs in its own wasm instance on its own thread (ctypes releases the GIL, as in
host_runner/cpu.py), so a challenge split over k instances uses k cores like the probe it checks."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from capsule.challenge import LLM_PER_SEQ, encode_row
from capsule.cpu_challenge import LEAF_FORM
from host_runner.wasm import CapsuleError, Reactor, default_engine

PROOF_BYTES = 32 * 32  # room for the sibling hashes of any tree a challenge can make (2^12 rows x 2^16 products)


class ReactorPool:
    """Reactor instances kept between challenges, one per instance index: a fresh instance's first touch of
    ~30 MiB of linear memory costs page faults inside the timed window (measured: a warm instance answers
    ~15% faster). Owned by one live session, so no two challenges share an instance."""

    def __init__(self, reactor_wasm: Path) -> None:
        self.wasm = reactor_wasm
        self._reactors: list[Reactor] = []

    def get(self, count: int) -> list[Reactor]:
        engine = default_engine()
        while len(self._reactors) < count:
            self._reactors.append(Reactor(self.wasm, engine))
        return self._reactors[:count]

    def warm(self, count: int, n: int, reps: int) -> None:
        """Instantiates `count` reactors and has each compute `reps` products of order n, so the first
        challenge's time holds no instantiation and no first touch of linear memory. Without it, a node on busy
        cores answered its first challenge at half its figure (16 instances: 32 GFLOP/s, then 49), and two
        reactors warmed with one product answered 16 at 51 GFLOP/s, then 60 (Xeon, 2026-12-04)."""
        SgemmAnswer(self.wasm, list(range(count)), n, reps, self).commit()


class SgemmAnswer:
    """One challenge: `commit` computes each instance's products one after another and returns the Merkle roots
    (hex) over the products done (`products`, per instance); `open` returns the named rows (leaves) with their
    proofs. Holds the reactors in between (each keeps its products' roots; an opened product is recomputed)."""

    def __init__(self, reactor_wasm: Path, seeds: list[int], n: int, reps: int = 1,
                 pool: ReactorPool | None = None) -> None:
        self.wasm = reactor_wasm
        self.seeds = seeds
        self.n = n
        self.reps = reps
        self.pool = pool or ReactorPool(reactor_wasm)
        self.reactors: list[Reactor] = []
        self.products: list[int] = []
        self.leaf = LEAF_FORM  # what the leaves hash ("fp32" for a relay that does not offer it): the commit says

    def commit(self, stop_at: float | None = None, halt: threading.Event | None = None) -> list[str]:
        """Every product, or with `stop_at` (a time.perf_counter() moment: the roll call's deadline as the
        relay's `stop_after_s` places it on this clock) those that end before it: a product is begun only if
        the last one's time still fits before stop_at (the first always is). Work that would end after the
        deadline counts nothing at the relay, so an instance stops there and commits what it finished.
        `halt` set: no product is begun after the one in progress (the relay withdrew the challenge)."""
        pooled = self.pool.get(len(self.seeds))  # instantiated before the threads: not in the compute window
        reactors: list[Reactor | None] = [None] * len(self.seeds)
        roots: list[str] = [""] * len(self.seeds)
        products = [0] * len(self.seeds)
        errors: list[str] = []

        def work(i: int) -> None:
            try:
                reactor = pooled[i]
                seed = self.seeds[i]
                reactor.call("ce_challenge_leaf_form", int(self.leaf == "high16"))
                rc = int(reactor.call("ce_challenge_begin", seed & 0xFFFFFFFF, seed >> 32, self.n, self.reps))
                if rc != 0:
                    raise CapsuleError(f"the capsule could not begin the challenge (code {rc}, n={self.n}, "
                                       f"reps={self.reps})")
                done, last_s = 0, 0.0
                while done < self.reps and (halt is None or done == 0 or not halt.is_set()) and (
                        stop_at is None or done == 0 or time.perf_counter() + last_s <= stop_at):
                    started = time.perf_counter()
                    done = int(reactor.call("ce_challenge_next", 1))
                    if done < 0:
                        raise CapsuleError(f"the capsule could not compute product {products[i]} (n={self.n})")
                    last_s = time.perf_counter() - started
                    products[i] = done
                if int(reactor.call("ce_challenge_commit", done)) != 0:
                    raise CapsuleError(f"the capsule could not commit to {done} product(s)")
                roots[i] = bytes(reactor.get(int(reactor.call("ce_challenge_root")), np.uint8, (32,))).hex()
                reactors[i] = reactor
            except (CapsuleError, OSError) as exc:  # reported by commit(), never lost in a thread
                errors.append(str(exc))

        threads = [threading.Thread(target=work, args=(i,), name=f"challenge-{i}") for i in range(len(self.seeds))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise CapsuleError(errors[0])
        self.reactors = [r for r in reactors if r is not None]
        self.products = products
        return roots

    def open(self, rows: list[Any]) -> list[dict[str, Any]]:
        """rows: [[instance, leaf], ...] as the relay named them; invalid entries raise ValueError."""
        out = []
        for item in rows:
            if (not isinstance(item, list) or len(item) != 2 or not all(type(v) is int for v in item)
                    or not 0 <= item[0] < len(self.reactors)
                    or not 0 <= item[1] < self.n * self.products[item[0]]):
                raise ValueError(f"not an [instance, leaf] of this challenge: {item!r:.60}")
            reactor = self.reactors[item[0]]
            row = reactor.get(int(reactor.call("ce_challenge_row", item[1])), np.float32, (self.n,))
            buf = int(reactor.call("ce_alloc", PROOF_BYTES))
            try:
                count = int(reactor.call("ce_challenge_proof", item[1], buf))
                proof = reactor.get(buf, np.uint8, (max(count, 0) * 32,)).tobytes()
            finally:
                reactor.call("ce_free", buf)
            out.append({"instance": item[0], "row": item[1], "values": encode_row(row),
                        "proof": [proof[i:i + 32].hex() for i in range(0, len(proof), 32)]})
        return out

    def release(self) -> None:
        for reactor in self.reactors:
            reactor.call("ce_challenge_release")
        self.reactors = []


def llm_answer(pool: ReactorPool, seed: int, decode: int, stop_at: float | None,
               halt: threading.Event | None = None) -> list[int]:
    """A one-stream reference-model challenge on the session's first pooled reactor (decode_stream)."""
    return decode_stream(pool.get(1)[0], seed, decode, stop_at, halt)


def llm_streams_answer(pool: ReactorPool, seeds: list[int], decode: int, stop_at: float | None,
                       halt: threading.Event | None = None) -> list[list[int]]:
    """A challenge of several streams (the claim is aggregate decode throughput): stream i on pooled reactor i,
    all at once on threads of their own (wasmtime-py releases the GIL inside wasm), each stopped by the same
    `stop_at`; one list of token ids per seed."""
    reactors = pool.get(len(seeds))
    out: list[list[int]] = [[] for _ in seeds]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            out[i] = decode_stream(reactors[i], seeds[i], decode, stop_at, halt)
        except BaseException as exc:  # raised below, never lost in a thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), name=f"llm-stream-{i}") for i in range(len(seeds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return out


def decode_stream(reactor: Reactor, seed: int, decode: int, stop_at: float | None,
                  halt: threading.Event | None = None) -> list[int]:
    """A reference-model challenge's stream of this seed on one reactor: the token ids it commits to, as
    ce_llmc_begin(seed) then ce_llmc_next() give them (the relay recomputes any of them: ce_llmc_expected).
    All `decode` tokens, or with `stop_at` (a time.perf_counter() moment: the roll call's deadline as the
    relay's `stop_after_s` places it on this clock) those that end before it, as SgemmAnswer.commit does with
    products: a token is begun only if its expected time still fits before stop_at, and the first always is.
    A sequence's first token (every LLM_PER_SEQ) also fills the cache with its 32-token prompt, ~5x a token's
    time (measured in wasmtime: 33-37 ms against 6.6 ms), so a token's expected time is that of its own kind:
    the last sequence start's (token 0's, first) or the last other token's (until there is one, token 0's: the
    safe side). With the last token's time alone a node would begin a sequence start with one token's time left
    and end it ~30 ms past the deadline, where its work counts nothing. `halt` set: no token is begun after
    the one in progress (the relay withdrew the challenge)."""
    if decode < 1:
        raise ValueError(f"a reference-model challenge decodes at least one token, not {decode}")
    reactor.llm_begin(seed)
    tokens: list[int] = []
    start_s = 0.0                # the last sequence start's time
    step_s: float | None = None  # the last other token's time
    while len(tokens) < decode and not (tokens and halt is not None and halt.is_set()):
        at_start = len(tokens) % LLM_PER_SEQ == 0
        if stop_at is not None and tokens:
            expected_s = start_s if at_start or step_s is None else step_s
            if time.perf_counter() + expected_s > stop_at:
                break
        started = time.perf_counter()
        token = reactor.llm_next()
        if at_start:
            start_s = time.perf_counter() - started
        else:
            step_s = time.perf_counter() - started
        tokens.append(token)
    return tokens


def warm_llm(pool: ReactorPool, streams: int = 1) -> None:
    """Makes the reference model on the reactors the answers use (the capsule keeps it between challenges), so
    the first timed challenge holds decoding only, not the weights' generation (15-150 ms by machine, up to
    ~20 forward passes: a node's first reference-model answer would observe fewer tokens/s than its next)."""
    for reactor in pool.get(max(1, streams)):
        reactor.llm_begin(0)
