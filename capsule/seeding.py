"""The capsule's seed derivation and random stream, in Python.

Mirrors capsule/kernels (main.c seed64_of, rng.h) so anyone can regenerate a probe's inputs from the
seed a report names and check its checksums: seed64 = the first 8 bytes (little-endian) of
sha256(seed bytes); each probe XORs its own constant in; splitmix64 draws the stream.
Pure stdlib: it runs unchanged under Pyodide.
"""

from __future__ import annotations

import hashlib

MASK64 = (1 << 64) - 1

# Per-probe stream constants (the ASCII of the probe's name, as in the C sources).
SGEMM_STREAM = 0x7367656D6D  # "sgemm"
LLM_STREAM = 0x6C6C6D2D72656631  # "llm-ref1"
PROMPT_STREAM = 0x70726F6D7074  # "prompt"


def seed64(seed_hex: str) -> int:
    """The 64-bit seed the capsule derives from `--seed HEX`."""
    try:
        raw = bytes.fromhex(seed_hex)
    except ValueError as exc:
        raise ValueError(f"seed must be hex digits, got {seed_hex!r}") from exc
    if not 1 <= len(raw) <= 64:
        raise ValueError(f"seed must be 1 to 64 bytes, got {len(raw)}")
    return int.from_bytes(hashlib.sha256(raw).digest()[:8], "little")


class SplitMix64:
    """splitmix64 (Steele, Lea, Flood 2014), integer-only and identical in C and Python."""

    def __init__(self, state: int) -> None:
        self.state = state & MASK64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self) -> float:
        """Uniform in [-1, 1) with 24 random bits, exactly the float the C side draws."""
        return ((self.next() >> 40) - (1 << 23)) / float(1 << 23)
