"""What checking one token of a reference-model answer costs the relay, beside what the answer cost the node.

    .venv/bin/python bench/llm_check.py [--answers 12] [--tokens 224]

Method. Two capsule reactors (build/capsule-reactor.wasm) in this process: the node's decodes an answer of
`--tokens` tokens from a fresh seed (ce_llmc_begin, then ce_llmc_next per token: the same calls as
host_runner/challenge_answer.py; its model made beforehand, as a live node's is), timed; the relay's checks
one token at an index drawn uniformly over the answer (ce_llmc_expected: the prefill of that sequence up to
the token and one forward pass, as web/proof/challenge_desk.py does), timed, and compared with the node's token
(every check must agree: the answers are honest). Per answer, share = check time / answer time; the figure is
the median share with its interquartile range, beside the reference measured in the same run: one forward
pass and one prefill position. web/llm_checks.relay_cost_share gives the multiply-add model's share.
Target (issue 28): every answer checked, at a cost the relay can carry (the sampled hash it replaces cost
25% of the node's decode on average, 100% for a new node's first 16 roll calls).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernels_paired import cpu_model  # noqa: E402
from common.reactor import Reactor  # noqa: E402
from web.proof.llm_checks import relay_cost_share  # noqa: E402

REACTOR = ROOT / "build" / "capsule-reactor.wasm"


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], statistics.median(values), q[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--answers", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=224)
    args = parser.parse_args()
    node, relay = Reactor(REACTOR), Reactor(REACTOR)
    rng = random.Random(1)
    node.llm_begin(1)
    relay.llm_expected(1, [node.llm_next()], 0)  # both models made before anything is timed
    shares, answer_ms, check_ms = [], [], []
    for _ in range(args.answers):
        seed = rng.getrandbits(64)
        t0 = time.perf_counter()
        node.llm_begin(seed)
        tokens = [node.llm_next() for _ in range(args.tokens)]
        t1 = time.perf_counter()
        j = rng.randrange(len(tokens))
        expected = relay.llm_expected(seed, tokens, j)
        t2 = time.perf_counter()
        if expected != tokens[j]:
            print(f"FAIL: token {j} of an honest answer differs ({tokens[j]} vs {expected})")
            return 1
        answer_ms.append((t1 - t0) * 1000)
        check_ms.append((t2 - t1) * 1000)
        shares.append((t2 - t1) / (t1 - t0))
    # the reference, in the same run: one full pass and one prefill position at mid-sequence
    seed = rng.getrandbits(64)
    node.llm_begin(seed)
    tokens = [node.llm_next() for _ in range(120)]
    t0 = time.perf_counter()
    relay.llm_expected(seed, tokens, 0)  # 31 prefill positions + 1 pass
    t1 = time.perf_counter()
    relay.llm_expected(seed, tokens, 100)  # 131 prefill positions + 1 pass
    t2 = time.perf_counter()
    prefill_ms = ((t2 - t1) - (t1 - t0)) * 1000 / 100
    pass_ms = statistics.median(answer_ms) / args.tokens
    lo, mid, hi = quartiles(shares)
    print(f"{cpu_model()}; {time.strftime('%Y-%m-%d')}; {args.answers} answers of {args.tokens} tokens")
    print(f"answer (node): median {statistics.median(answer_ms):.0f} ms; check (relay): median "
          f"{statistics.median(check_ms):.0f} ms (min {min(check_ms):.0f}, max {max(check_ms):.0f})")
    print(f"check / answer: median {mid:.3f} (IQR {lo:.3f}-{hi:.3f}); multiply-add model "
          f"{relay_cost_share(args.tokens):.3f}")
    print(f"reference: one pass ~{pass_ms:.2f} ms (answer / tokens), one prefill position {prefill_ms:.2f} ms "
          f"(ratio {prefill_ms / pass_ms:.2f}; the model's {0.339:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
