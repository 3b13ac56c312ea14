"""Canonical bytes and the signed message, shared by servers (CPython) and browsers (Pyodide).

canonical bytes = RFC 8785 (JSON Canonicalization Scheme) of the object without its signature fields;
signed message = b"ce-bench/v1/" + KIND + b"\\n" + canonical bytes, KIND a key of capsule.model.REGISTRY
(domain separation: a signature over a Beacon can never pass as one over a NodeProfile).
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import rfc8785

from capsule.model import REGISTRY
from capsule.typed import I_JSON_MAX_INT


class _NeedsSlowPath(Exception):
    pass


class CanonicalError(ValueError):
    """A value with no RFC 8785 / I-JSON form (NaN, infinity, an integer beyond 2**53 - 1, a lone UTF-16
    surrogate, a non-JSON type); `path` is the JSON path of the first such value."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _string_problem(text: str) -> str | None:
    if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        return "a lone UTF-16 surrogate has no canonical JSON form"
    return None


def find_domain_error(value: Any, path: str = "$") -> CanonicalError | None:
    """The first value under `value` that RFC 8785 cannot represent, with its path; None if all can.
    Only called once canonicalisation failed, so it may be slow."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        if abs(value) > I_JSON_MAX_INT:
            return CanonicalError(path, f"the integer {value} is beyond I-JSON's exact range (|n| <= 2**53 - 1)")
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else CanonicalError(path, "NaN and infinity have no canonical JSON form")
    if isinstance(value, str):
        problem = _string_problem(value)
        return CanonicalError(path, problem) if problem else None
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                return CanonicalError(path, f"object keys must be strings, got {type(k).__name__}")
            problem = _string_problem(k)
            if problem:
                return CanonicalError(path, f"key {k!r}: {problem}")
            found = find_domain_error(v, f"{path}.{k}")
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = find_domain_error(v, f"{path}[{i}]")
            if found:
                return found
        return None
    return CanonicalError(path, f"{type(value).__name__} is not a JSON value")


def es6_number(value: float) -> str:
    """ECMAScript Number::toString of a finite float, as RFC 8785 requires. Python's repr gives the same
    shortest round-trip digits; only where the decimal point and exponent go differs."""
    if value == 0:
        return "0"
    text = repr(abs(value))
    mantissa, _, exp_text = text.partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    # value = 0.d1d2...dk x 10^n  (ES6's n)
    n = len(int_part.lstrip("0")) + (int(exp_text) if exp_text else 0)
    if int_part.strip("0") == "":  # 0.000ddd
        n = -(len(frac_part) - len(frac_part.lstrip("0"))) + (int(exp_text) if exp_text else 0)
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e > 0 else "-") + str(abs(e))
    return ("-" if value < 0 else "") + out


def _normalise(value: Any, path: str, odd: list[str]) -> Any:
    """A copy that json.dumps writes as exactly RFC 8785's text: integral floats become ints (ES6 prints
    100.0 as 100); floats whose Python and ES6 forms differ become placeholders, formatted into `odd`.
    Raises _NeedsSlowPath for what the fast path does not cover, ValueError for NaN/infinity.
    Dispatches on the exact type: this runs for every value of every profile a relay ingests."""
    t = type(value)
    if t is str:
        if "\0" in value:  # would collide with the placeholders
            raise _NeedsSlowPath
        return value
    if t is float:
        if 1e-4 <= abs(value) < 1e16:
            return int(value) if value.is_integer() else value
        if not math.isfinite(value):
            raise ValueError(f"{path}: NaN and infinity have no canonical JSON form")
        if value == 0:
            return 0
        odd.append(es6_number(value))
        return f"\0{len(odd) - 1}\0"
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str or "\0" in k or (not k.isascii() and any(ord(c) > 0xFFFF for c in k)):
                raise _NeedsSlowPath  # JCS sorts keys by UTF-16 code units, Python by code points
            out[k] = _normalise(v, path, odd)
        return out
    if t is list or t is tuple:
        return [_normalise(v, path, odd) for v in value]
    if t is int:
        if abs(value) > I_JSON_MAX_INT:
            raise _NeedsSlowPath
        return value
    if t is bool or value is None:
        return value
    if isinstance(value, Mapping | list | tuple | int | float | str):  # subclasses: take the exact path
        raise _NeedsSlowPath
    raise ValueError(f"{path}: {type(value).__name__} is not a JSON value")


_PLACEHOLDER = re.compile(r'"\\u0000(\d+)\\u0000"')


def canonical_bytes(obj: Mapping[str, Any], without: Iterable[str] = ()) -> bytes:
    """RFC 8785 bytes of obj minus the `without` fields. The common case goes through the C json encoder
    (sorted keys, no whitespace: JCS's text once numbers are in ES6 form), several times faster than the
    pure-Python rfc8785 package, which handles the rest. Tests check both agree on random documents.
    Raises CanonicalError naming the first value that has no canonical form (data from peers reaches here)."""
    skip = set(without)
    body = {k: v for k, v in obj.items() if k not in skip}
    try:
        return _canonical(body)
    except RecursionError:  # json.loads parses ~10^5 levels; the serialisers recurse once per level
        raise CanonicalError("$", "nested too deeply to serialise (hundreds of levels of arrays or "
                                  "objects)") from None
    except (ValueError, rfc8785.CanonicalizationError) as exc:  # UnicodeEncodeError is a ValueError too
        raise find_domain_error(body) or CanonicalError("$", f"no canonical JSON form: {exc}") from None


def _canonical(body: dict[str, Any]) -> bytes:
    odd: list[str] = []
    try:
        normal = _normalise(body, "$", odd)
    except _NeedsSlowPath:
        return bytes(rfc8785.dumps(body))
    text = json.dumps(normal, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if odd:
        text = _PLACEHOLDER.sub(lambda m: odd[int(m.group(1))], text)
    return text.encode()


def signing_message(kind: str, obj: Mapping[str, Any]) -> bytes:
    record_kind = REGISTRY.get(kind)
    if record_kind is None:
        raise ValueError(f"unknown signed kind {kind!r}; expected one of {', '.join(REGISTRY)}")
    return b"ce-bench/v1/" + kind.encode() + b"\n" + canonical_bytes(obj, record_kind.signature_fields)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    if not isinstance(text, str) or any(c not in _B64URL for c in text) or len(text) % 4 == 1:
        raise ValueError("expected unpadded base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
