"""canonical_bytes is RFC 8785: the fast path agrees with the reference rfc8785 package on random JSON."""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
import rfc8785
from hypothesis import example, given, settings
from hypothesis import strategies as st

from capsule.canonical import CanonicalError, canonical_bytes, es6_number

finite = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | finite | st.text(max_size=12)
documents = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=8), inner, max_size=4), max_leaves=30)


# Derandomized by the suite's hypothesis profile (tests/conftest.py); no case has failed here yet, so the
# examples pin the fast path's edges instead: where it hands over to the slow path, and where floats change form.
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=8), documents, max_size=6))
@example({"\ue000": 1, "\U0001f600": 2, "z": 3})  # UTF-16 order puts the astral key before U+E000
@example({"a\0b": "x\0y"})  # NUL: would collide with the placeholders
@example({"lo": 1e-4, "under": 9.999999999999999e-05, "hi": 1e16, "below": 9999999999999998.0, "int": 100.0})
@example({"e": [1e21, 1e-7, -1e-7, 5e-324, 1.7976931348623157e308, -0.0, 2**53 - 1, -(2**53) + 1]})
def test_matches_reference_implementation(doc: dict[str, Any]) -> None:
    assert canonical_bytes(doc) == bytes(rfc8785.dumps(doc))


@settings(max_examples=2000, deadline=None)
@given(finite)
@example(1e21)  # ES6 switches to exponent form at 10^21 and below 10^-6
@example(1e20)
@example(1e-6)
@example(1e-7)
@example(5e-324)
@example(-1.7976931348623157e308)
@example(0.30000000000000004)
@example(123e-20)
def test_es6_number_formatting(x: float) -> None:
    assert es6_number(x) == rfc8785.dumps(x).decode()


def test_hypothesis_runs_derandomized() -> None:
    """The suite's profile (tests/conftest.py): the same cases every run unless a person asks to explore."""
    exploring = os.environ.get("HYPOTHESIS_PROFILE") == "explore"
    assert settings.default is not None and settings.default.derandomize is not exploring


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="NaN and infinity"):
        canonical_bytes({"evidence": {"x": [1, bad]}})


def test_signature_fields_are_left_out() -> None:
    expected = '{"a":[1e-7,"\u00e9"],"b":1}'.encode()
    assert canonical_bytes({"b": 1.0, "a": [1e-7, "\u00e9"], "sig": "x"}, ["sig"]) == expected


def test_integers_beyond_double_precision_are_refused() -> None:
    with pytest.raises(CanonicalError, match=r"beyond I-JSON's exact range") as refused:
        canonical_bytes({"evidence": {"runs": [1, -(2**53)]}})
    assert refused.value.path == "$.evidence.runs[1]"
    assert canonical_bytes({"n": 2**53 - 1}) == b'{"n":9007199254740991}'


def test_lone_surrogates_are_refused_with_their_path() -> None:
    """json.loads accepts "\\ud800"; I-JSON does not, and encoding it used to escape as a bare ValueError."""
    for doc, path in (({"a": ["ok", "\ud800"]}, "$.a[1]"), ({"\udc00": 1}, "$")):
        with pytest.raises(CanonicalError, match="surrogate") as refused:
            canonical_bytes(doc)
        assert refused.value.path == path
