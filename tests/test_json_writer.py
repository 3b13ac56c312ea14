"""The capsule's JSON writer (capsule/kernels/json.c) built natively with a small harness: every double comes
back through Python's json as a float with exactly the same value, whatever its size or nearness to an integer.
(Found in a full run: `%.6g` wrote the figure 1196.0002 as the JSON integer 1196.)"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

import build

HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "json.h"
int main(int argc, char **argv) {
    ce_json j;
    ce_json_init(&j);
    ce_json_begin_array(&j);
    for (int i = 1; i < argc; ++i) ce_json_number(&j, strtod(argv[i], NULL));
    ce_json_end_array(&j);
    if (j.failed) return 2;
    puts(j.buf);
    ce_json_free(&j);
    return 0;
}
"""

# Integral values, values within 0.0005 of an integer, beyond 6 significant digits, beyond 1e5, tiny, huge,
# negative, negative zero, and doubles that need all 17 digits to round-trip.
VALUES = [0.0, -0.0, 1.0, 3.0, 1196.0, 1196.0002, 1195.9996, 123456.7, 99999.99999, 1e5, 1e20, 1.5e300,
          1e-7, 5e-324, -42.0, -0.001, 0.1, 0.1 + 0.2, 2 / 3, math.pi, 2.0**53, 2.0**53 + 2, 1.7976931348623157e308]


@pytest.fixture(scope="module")
def writer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.fail("no system C compiler (cc/gcc/clang) to build the JSON writer's harness")
    work = tmp_path_factory.mktemp("json_writer")
    (work / "harness.c").write_text(HARNESS)
    out = work / "harness"
    flags = [f for f in build.COMMON_FLAGS if f not in ("-msimd128", "-s")]
    subprocess.run([cc, *flags, f"-I{build.KERNELS}", str(work / "harness.c"), str(build.KERNELS / "json.c"),
                    "-lm", "-o", str(out)], check=True, capture_output=True, text=True)
    return out


def written(writer: Path, values: list[float]) -> list[object]:
    done = subprocess.run([str(writer), *(repr(v) for v in values)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    parsed: list[object] = json.loads(done.stdout)
    return parsed


def test_every_double_round_trips_as_a_json_float(writer: Path) -> None:
    back = written(writer, VALUES)
    assert len(back) == len(VALUES)
    for sent, got in zip(VALUES, back, strict=True):
        assert type(got) is float, f"{sent!r} came back as {type(got).__name__} {got!r}"
        assert got == sent and math.copysign(1, got) == math.copysign(1, sent), f"{sent!r} came back as {got!r}"


def test_non_finite_values_are_null_not_invalid_json(writer: Path) -> None:
    assert written(writer, [math.nan, math.inf, -math.inf, 2.5]) == [None, None, None, 2.5]


def test_short_values_stay_short(writer: Path) -> None:
    """The fewest digits that round-trip: a user reading the raw output sees 0.1, not 0.10000000000000001."""
    done = subprocess.run([str(writer), "0.1", "1196", "12.5"], capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "[0.1,1196.0,12.5]"
