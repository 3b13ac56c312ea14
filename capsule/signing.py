"""Signing and verifying records behind a small interface, so the same code signs with pynacl on servers
and with a WebCrypto key in browsers (ARCHITECTURE.md, "Canonical bytes and signatures")."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

from capsule.canonical import CanonicalError, b64url, b64url_decode, signing_message
from capsule.model import REGISTRY
from capsule.peerid import peer_id_from_public_key, public_key_from_peer_id
from capsule.typed import ValidationError, parse

T = TypeVar("T")

# (public_key, message, signature) -> valid?
Verify = Callable[[bytes, bytes, bytes], bool]


class Signer(Protocol):
    """An Ed25519 key that can sign; the private half may live anywhere (file, WebCrypto, HSM)."""

    @property
    def public_key(self) -> bytes: ...

    def sign(self, message: bytes) -> bytes: ...


class SignatureError(ValueError):
    """A signature that does not verify; `field` names which one."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"$.{field}: {message}")
        self.field = field


def node_id(signer: Signer) -> str:
    return peer_id_from_public_key(signer.public_key)


def sign(kind: str, obj: Mapping[str, Any], signer: Signer, field: str = "sig") -> dict[str, Any]:
    """A copy of obj with `field` set to the signer's signature over the canonical message."""
    signature = signer.sign(signing_message(kind, obj))
    if len(signature) != 64:
        raise ValueError(f"an Ed25519 signature is 64 bytes, the signer returned {len(signature)}")
    return {**obj, field: b64url(signature)}


@functools.cache
def default_verify() -> Verify:
    """pynacl's Ed25519 verification (servers). Browsers never verify; relays do."""
    try:
        from nacl.exceptions import BadSignatureError
        from nacl.signing import VerifyKey
    except ImportError as exc:  # pragma: no cover - only under Pyodide
        raise RuntimeError("Ed25519 verification needs pynacl (pip install pynacl)") from exc

    def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
        try:
            VerifyKey(public_key).verify(message, signature)
            return True
        except BadSignatureError:
            return False

    return verify


def check_signature(kind: str, obj: Mapping[str, Any], field: str, signer_id: str, verify: Verify) -> None:
    try:
        signature = b64url_decode(obj[field])
    except (KeyError, ValueError, TypeError):
        raise SignatureError(field, "missing or not unpadded base64url") from None
    if len(signature) != 64:
        raise SignatureError(field, f"expected a 64-byte Ed25519 signature, got {len(signature)} bytes")
    try:
        message = signing_message(kind, obj)
    except CanonicalError as exc:  # e.g. NaN or 2**53 inside evidence, which the schema leaves open
        raise ValidationError(exc.path, exc.reason) from None
    if not verify(public_key_from_peer_id(signer_id), message, signature):
        raise SignatureError(field, f"signature does not verify for {signer_id}")


def verify_record(kind: str, obj: Any, verify: Verify | None = None) -> Any:
    """Parses obj as a `kind` record (schema errors name the field) and checks every signature the registry
    names for it (capsule.model.REGISTRY: a NodeProfile by its node_id, a Beacon by its relay, a LinkSample
    by both a and b, who must differ). Returns the typed record."""
    record_kind = REGISTRY.get(kind)
    if record_kind is None:
        raise ValueError(f"unknown signed kind {kind!r}; expected one of {', '.join(REGISTRY)}")
    record: Any = parse(record_kind.cls, obj)
    signers = [signer for _, signer in record_kind.signatures]
    for i, field in enumerate(signers[1:], 1):
        if obj[field] in (obj[other] for other in signers[:i]):
            raise ValidationError(f"$.{field}", f"a {kind} needs {len(signers)} different signers; "
                                                f"{field} repeats {', '.join(signers[:i])}")
    check = verify or default_verify()
    for sig_field, signer_field in record_kind.signatures:
        check_signature(kind, obj, sig_field, obj[signer_field], check)
    return record
