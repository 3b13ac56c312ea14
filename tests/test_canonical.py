"""canonical_bytes is RFC 8785: the fast path agrees with the reference rfc8785 package on random JSON."""

from __future__ import annotations

import math
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from capsule.canonical import canonical_bytes, es6_number

finite = st.floats(allow_nan=False, allow_infinity=False)
scalars = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | finite | st.text(max_size=12)
documents = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=8), inner, max_size=4), max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(max_size=8), documents, max_size=6))
def test_matches_reference_implementation(doc: dict[str, Any]) -> None:
    assert canonical_bytes(doc) == bytes(rfc8785.dumps(doc))


@settings(max_examples=2000, deadline=None)
@given(finite)
def test_es6_number_formatting(x: float) -> None:
    assert es6_number(x) == rfc8785.dumps(x).decode()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="NaN and infinity"):
        canonical_bytes({"evidence": {"x": [1, bad]}})


def test_signature_fields_are_left_out() -> None:
    expected = '{"a":[1e-7,"\u00e9"],"b":1}'.encode()
    assert canonical_bytes({"b": 1.0, "a": [1e-7, "\u00e9"], "sig": "x"}, ["sig"]) == expected


def test_integers_beyond_double_precision_are_refused() -> None:
    with pytest.raises(ValueError, match="exceeds safe integer domain"):
        canonical_bytes({"n": 2**53})
