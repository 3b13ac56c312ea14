"""NodeId = the libp2p PeerId of a node's Ed25519 public key, in both directions.

Per the libp2p peer-id specification: the public key is encoded as the protobuf
`PublicKey{Type: Ed25519 (1), Data: key}` = 08 01 12 20 || key (36 bytes); being <= 42 bytes, the
PeerId is its *identity* multihash (code 0x00, length 0x24) and its text form is base58btc, which for
Ed25519 keys always starts with "12D3KooW". The verifier recovers the public key from the NodeId, so a
profile needs no separate key field.
"""

from __future__ import annotations

import functools

ALPHABET = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(ALPHABET)}
ED25519_PREFIX = bytes([0x00, 0x24, 0x08, 0x01, 0x12, 0x20])


class PeerIdError(ValueError):
    """A string that is not the PeerId of an Ed25519 key; the message says why."""


def b58encode(data: bytes) -> str:
    zeros = len(data) - len(data.lstrip(b"\0"))
    n = int.from_bytes(data, "big")
    digits = []
    while n:
        n, r = divmod(n, 58)
        digits.append(ALPHABET[r])
    return "1" * zeros + "".join(reversed(digits))


def b58decode(text: str) -> bytes:
    n = 0
    for pos, c in enumerate(text):
        if c not in _INDEX:
            raise PeerIdError(f"character {c!r} at position {pos} is not base58btc")
        n = n * 58 + _INDEX[c]
    zeros = len(text) - len(text.lstrip("1"))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * zeros + body


def peer_id_from_public_key(public_key: bytes) -> str:
    if len(public_key) != 32:
        raise PeerIdError(f"an Ed25519 public key is 32 bytes, got {len(public_key)}")
    return b58encode(ED25519_PREFIX + public_key)


@functools.lru_cache(maxsize=65536)  # ids recur (schema, signature, links); 10,000 sessions beat 4096
def public_key_from_peer_id(peer_id: str) -> bytes:
    if not isinstance(peer_id, str):
        raise PeerIdError(f"a PeerId is a string, got {type(peer_id).__name__}")
    if len(peer_id) > 100:
        raise PeerIdError(f"a PeerId is at most 100 characters, got {len(peer_id)}")
    raw = b58decode(peer_id)
    if len(raw) != len(ED25519_PREFIX) + 32 or not raw.startswith(ED25519_PREFIX):
        raise PeerIdError(
            f"expected the identity multihash of an Ed25519 key ({ED25519_PREFIX.hex()} + 32 bytes, text "
            f"starting '12D3KooW'), got {len(raw)} bytes starting {raw[:6].hex()}"
        )
    return raw[len(ED25519_PREFIX):]
