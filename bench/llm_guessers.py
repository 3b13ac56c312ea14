"""Guessers of reference-model tokens against the relay's own check, >= 1,000 answers each (issue 45).

    python bench/llm_guessers.py [--answers 1000] [--length 24]

Prints, per guesser, counted / decoded tokens beside the published odds' expectation for the same answers
(GET /v1/checks: 1 + p g / decoded, p = 1 / 31,744) and its sampling spread. The reference in the same run is
the honest decoder (the same answers, nothing guessed): 1.0 by construction, and its caught count is the honest
false-reject count. tests/llm_guessers.py holds the guessers and the relay's check; tests/test_llm_guessers.py
runs 100 answers each in the suite."""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common.reactor import Reactor  # noqa: E402
from tests.llm_guessers import Guess, honest_answers, previous_tail, random_tail, repeat, run  # noqa: E402


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=1000)
    parser.add_argument("--length", type=int, default=24)
    args = parser.parse_args()
    wasm = Path(__file__).resolve().parent.parent / "build" / "capsule-reactor.wasm"
    node, relay = Reactor(wasm), Reactor(wasm)
    t0 = time.perf_counter()
    answers = honest_answers(node, args.answers, args.length, salt=1045)
    print(f"{time.strftime('%Y-%m-%d')}  {cpu_model()}  {args.answers} answers of {args.length} tokens "
          f"(decoded in {time.perf_counter() - t0:.0f} s)")
    repeats = sum(h[i] == h[i - 1] for _, h in answers for i in range(1, len(h)))
    print(f"tokens equal to the one before: {repeats} of {args.answers * (args.length - 1)}")
    guessers: list[tuple[str, Guess]] = [
        ("honest (reference)", random_tail(0.0)), ("repeat R=3", repeat(3)), ("repeat R=6", repeat(6)),
        ("repeat R=10", repeat(10)), ("random 10%", random_tail(0.1)), ("random 50%", random_tail(0.5)),
        ("random 90%", random_tail(0.9)), ("previous 50%", previous_tail(0.5))]
    print(f"{'guesser':20}{'answers':>8}{'caught':>8}{'counted/decoded':>17}{'published':>11}{'spread (1 sd)':>15}")
    for i, (name, guess) in enumerate(guessers):
        t = run(relay, answers, guess, seed=100 + i)
        print(f"{name:20}{t.answers:>8}{t.caught:>8}{t.ratio:>17.4f}{t.published_ratio:>11.5f}"
              f"{t.sigma_ratio:>15.4f}")


if __name__ == "__main__":
    main()
