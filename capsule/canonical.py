"""Canonical bytes and the signed message, shared by servers (CPython) and browsers (Pyodide).

canonical bytes = RFC 8785 (JSON Canonicalization Scheme) of the object without its signature fields;
signed message = b"ce-bench/v1/" + KIND + b"\\n" + canonical bytes, KIND in KINDS (domain separation:
a signature over a Beacon can never pass as one over a NodeProfile).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping
from typing import Any

import rfc8785

KINDS = ("NodeProfile", "LinkSample", "Beacon", "Heartbeat", "JobReceipt")
SIGNATURE_FIELDS: dict[str, tuple[str, ...]] = {
    "NodeProfile": ("sig",), "LinkSample": ("sig_a", "sig_b"), "Beacon": ("sig",), "Heartbeat": ("sig",),
    "JobReceipt": ("sig",),
}


def _check_finite(value: Any, path: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path}: NaN and infinity have no canonical JSON form")
    if isinstance(value, Mapping):
        for k, v in value.items():
            _check_finite(v, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check_finite(v, f"{path}[{i}]")


def canonical_bytes(obj: Mapping[str, Any], without: Iterable[str] = ()) -> bytes:
    skip = set(without)
    body = {k: v for k, v in obj.items() if k not in skip}
    _check_finite(body, "$")
    return bytes(rfc8785.dumps(body))


def signing_message(kind: str, obj: Mapping[str, Any]) -> bytes:
    if kind not in SIGNATURE_FIELDS:
        raise ValueError(f"unknown signed kind {kind!r}; expected one of {', '.join(KINDS)}")
    return b"ce-bench/v1/" + kind.encode() + b"\n" + canonical_bytes(obj, SIGNATURE_FIELDS[kind])


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    if not isinstance(text, str) or any(c not in _B64URL for c in text) or len(text) % 4 == 1:
        raise ValueError("expected unpadded base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
