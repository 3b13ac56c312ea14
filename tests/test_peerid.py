"""NodeId <-> Ed25519 public key, with known-answer vectors from the libp2p peer-id specification."""

from __future__ import annotations

import pytest
from nacl.signing import SigningKey

from capsule.peerid import PeerIdError, b58decode, b58encode, peer_id_from_public_key, public_key_from_peer_id

# libp2p specs, peer-ids/peer-ids.md, "Test vectors", Ed25519: the protobuf-encoded keys.
SPEC_PRIVATE = bytes.fromhex(
    "080112407e0830617c4a7de83925dfb2694556b12936c477a0e1feb2e148ec9da60fee7d"
    "1ed1e8fae2c4a144b8be8fd4b47bf3d3b34b871c3cacf6010f0e42d474fce27e")
SPEC_PUBLIC = bytes.fromhex("080112201ed1e8fae2c4a144b8be8fd4b47bf3d3b34b871c3cacf6010f0e42d474fce27e")
# Derived by hand from the spec's rules: identity multihash (0x00, length 0x24) of SPEC_PUBLIC, in
# base58btc (computed once with a digit-list long division, independent of capsule.peerid).
SPEC_PEER_ID = "12D3KooWBtg3aaRMjxwedh83aGiUkwSxDwUZkzuJcfaqUmo7R3pq"
# The same derivation for the all-zero and all-0xff keys: edge cases for leading zeros and carries.
ZERO_KEY_PEER_ID = "12D3KooW9pNAk8aiBuGVQtWRdbkLmo5qVL3e2h5UxbN2Nz9ttwiw"
FF_KEY_PEER_ID = "12D3KooWT3gYEvLJyx1FyyHqrmvdy1tMjpgxmu9aSeKMEuafQtyC"


def test_spec_vector_is_consistent() -> None:
    """The spec's private key (seed || public) really has the spec's public key (pynacl agrees)."""
    seed, public = SPEC_PRIVATE[4:36], SPEC_PRIVATE[36:]
    assert SPEC_PRIVATE[:4] == bytes([0x08, 0x01, 0x12, 0x40]) and SPEC_PUBLIC[:4] == bytes([0x08, 0x01, 0x12, 0x20])
    assert bytes(SigningKey(seed).verify_key) == public == SPEC_PUBLIC[4:]


@pytest.mark.parametrize(("key", "peer_id"), [
    (SPEC_PUBLIC[4:], SPEC_PEER_ID), (bytes(32), ZERO_KEY_PEER_ID), (b"\xff" * 32, FF_KEY_PEER_ID)])
def test_known_answers_both_directions(key: bytes, peer_id: str) -> None:
    assert peer_id_from_public_key(key) == peer_id
    assert public_key_from_peer_id(peer_id) == key


def test_round_trip_random_keys() -> None:
    for _ in range(50):
        key = bytes(SigningKey.generate().verify_key)
        pid = peer_id_from_public_key(key)
        assert pid.startswith("12D3KooW") and len(pid) == 52
        assert public_key_from_peer_id(pid) == key


def test_base58_leading_zeros() -> None:
    for data in (b"", b"\0", b"\0\0\x01", b"\x01\0"):
        assert b58decode(b58encode(data)) == data


@pytest.mark.parametrize(("text", "reason"), [
    ("12D3KooW0pNAk8aiBuGVQtWRdbkLmo5qVL3e2h5UxbN2Nz9ttwiw", "character '0' at position 8 is not base58btc"),
    ("QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N", "expected the identity multihash of an Ed25519 key"),
    ("12D3KooWBtg3aaRMjxwedh83aGiUkwSxDwUZkzuJcfaqUmo7R3p", "expected the identity multihash"),
    ("", "expected the identity multihash"),
])
def test_bad_peer_ids(text: str, reason: str) -> None:
    with pytest.raises(PeerIdError, match=reason.replace("(", r"\(")):
        public_key_from_peer_id(text)


def test_wrong_key_length() -> None:
    with pytest.raises(PeerIdError, match="32 bytes, got 31"):
        peer_id_from_public_key(bytes(31))
