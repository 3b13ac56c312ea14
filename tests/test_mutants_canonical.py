"""capsule/canonical.py beyond tests/test_canonical.py's random documents: fixed cases at each edge of the ES6
number form, the fast path covering the common case on its own (the reference package is never called for
it), the slow path for what the fast one cannot write, the refusals' paths and reasons, the signed message's
prefix and base64url (mutation testing: scripts/mutants)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import rfc8785

from capsule.canonical import (
    CanonicalError,
    b64url,
    b64url_decode,
    canonical_bytes,
    es6_number,
    find_domain_error,
    signing_message,
)
from capsule.model import REGISTRY


@pytest.mark.parametrize(("value", "text"), [
    (1.5, "1.5"), (-2.5, "-2.5"), (100.0, "100"), (0.0, "0"), (-0.0, "0"),
    (1e20, "100000000000000000000"), (1.5e20, "150000000000000000000"), (1e21, "1e+21"), (1.5e21, "1.5e+21"),
    (1.25e22, "1.25e+22"), (123456.789, "123456.789"), (0.5, "0.5"), (0.001, "0.001"),
    (1e-6, "0.000001"), (1.5e-6, "0.0000015"), (1e-7, "1e-7"), (1.5e-7, "1.5e-7"), (-1.25e-8, "-1.25e-8"),
    (5e-324, "5e-324"), (1.7976931348623157e308, "1.7976931348623157e+308"),
])
def test_es6_number_at_each_edge_of_its_form(value: float, text: str) -> None:
    assert es6_number(value) == text == rfc8785.dumps(value).decode()


# A profile-like document: fractional, integral, tiny and huge floats, the ends of I-JSON's integers, a
# non-ASCII key of the Basic Multilingual Plane (U+FFFF included), lists, a tuple, booleans and null.
COMMON: dict[str, Any] = {
    "cpu": {"gflops_fp32": 71.5, "mem_bw_gbps": 29.0, "cores": 2, "tiny": 1e-7, "huge": 1.5e21, "zero": 0.0},
    "runs": [181.5, 0.0001, -3.25, 2**53 - 1, -(2**53) + 1],
    "pair": (1, 2.5),
    "flags": [True, False, None],
    "caf\u00e9": "na\u00efve \u00e9",
    "\uffff": "last of the BMP",
}


def test_the_fast_path_writes_the_common_case_without_the_reference_package(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = bytes(rfc8785.dumps(COMMON))

    def refuse(_: Any) -> bytes:
        raise AssertionError("the reference implementation was called for a common document")

    monkeypatch.setattr(rfc8785, "dumps", refuse)  # the module canonical.py imported
    assert canonical_bytes(COMMON) == expected


@pytest.mark.parametrize("doc", [
    {"text": "\x000\x00", "odd": 1e-7},             # a string that looks like the fast path's placeholder
    {"\x000\x00": 1e-7},                            # a key that does
    {"\uffff": 1, "\U0001f600": 2},                 # JCS orders keys by UTF-16 code units: U+1F600 first
    {"\uffff": 1, "\U00010000": 2},                 # the first code point beyond the BMP sorts first too
])
def test_what_the_fast_path_cannot_write_goes_the_exact_way(doc: dict[str, Any]) -> None:
    assert canonical_bytes(doc) == bytes(rfc8785.dumps(doc))


def test_keys_beyond_the_bmp_sort_by_utf16_code_units() -> None:
    assert canonical_bytes({"\uffff": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\uffff":1}'.encode()


def refusal(doc: Any) -> CanonicalError:
    with pytest.raises(CanonicalError) as refused:
        canonical_bytes(doc)
    return refused.value


@pytest.mark.parametrize(("doc", "path", "reason"), [
    ({"evidence": {"x": [1, math.nan]}}, "$.evidence.x[1]", "NaN and infinity have no canonical JSON form"),
    ({"a": 1.5, "b": None, "c": True, "d": -math.inf}, "$.d", "NaN and infinity have no canonical JSON form"),
    ({"a": "\ue000", "b": math.inf}, "$.b", "NaN and infinity have no canonical JSON form"),
    ({"a": "\udfff"}, "$.a", "a lone UTF-16 surrogate has no canonical JSON form"),
    ({"\ud800": 1}, "$", "key '\\ud800': a lone UTF-16 surrogate has no canonical JSON form"),
    ({"n": [2**53 - 1, 2**53]}, "$.n[1]",
     "the integer 9007199254740992 is beyond I-JSON's exact range (|n| <= 2**53 - 1)"),
    ({"ok": 1, "s": {1, 2}}, "$.s", "set is not a JSON value"),
    ({1: "a"}, "$", "object keys must be strings, got int"),
])
def test_a_refusal_names_the_path_and_the_reason(doc: Any, path: str, reason: str) -> None:
    refused = refusal(doc)
    assert (refused.path, refused.reason, str(refused)) == (path, reason, f"{path}: {reason}")


def test_find_domain_error_accepts_every_json_value() -> None:
    assert find_domain_error({"a": [None, True, False, 0, 2**53 - 1, -(2**53) + 1, 1.5, "\ue000", "\ud7ff"],
                              "b": {"c": ()}}) is None


def test_a_value_the_reference_package_cannot_write_is_refused_at_the_root() -> None:
    """A Mapping that is not a dict passes find_domain_error's walk, yet has no RFC 8785 form in rfc8785."""
    import types

    refused = refusal({"a": types.MappingProxyType({"b": 1})})
    assert refused.path == "$" and refused.reason.startswith("no canonical JSON form: ")
    assert "mappingproxy" in refused.reason


def test_the_signed_message_is_prefixed_with_its_kind() -> None:
    body = {"a": "n1", "b": "n2", "rtt_ms": 1.5, "sig_a": "x", "sig_b": "y"}
    assert signing_message("LinkSample", body) == b'ce-bench/v1/LinkSample\n{"a":"n1","b":"n2","rtt_ms":1.5}'


def test_an_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError) as refused:
        signing_message("Nope", {})
    expected = f"unknown signed kind 'Nope'; expected one of {', '.join(REGISTRY)}"
    assert str(refused.value) == expected and ", " in expected


@pytest.mark.parametrize(("data", "text"), [
    (b"", ""), (b"\x00", "AA"), (b"\x00\x00", "AAA"), (b"\x00\x00\x17", "AAAX"), (b"\xfb\xff", "-_8"),
    (bytes(range(10)), "AAECAwQFBgcICQ"),
])
def test_b64url_is_unpadded_and_round_trips(data: bytes, text: str) -> None:
    assert b64url(data) == text
    assert b64url_decode(text) == data


def test_b64url_round_trips_every_length() -> None:
    for n in range(40):
        data = bytes((7 * i + n) % 256 for i in range(n))
        assert b64url_decode(b64url(data)) == data


@pytest.mark.parametrize("bad", ["AAA+", "AA/A", "AA==", "AAAAA", "A", "AA A"])
def test_b64url_decode_refuses_what_is_not_unpadded_base64url(bad: str) -> None:
    with pytest.raises(ValueError) as refused:
        b64url_decode(bad)
    assert str(refused.value) == "expected unpadded base64url"
