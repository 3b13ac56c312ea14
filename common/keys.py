"""The node's Ed25519 key: generated on first use, stored 0600 under the user's config directory, never
given to the capsule. File format: JSON {"v": 1, "type": "ed25519", "seed": base64url(32 bytes)}."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from nacl.signing import SigningKey

from capsule.canonical import b64url, b64url_decode
from capsule.peerid import peer_id_from_public_key
from common.files import write_atomic


class KeyFileError(Exception):
    """The key file cannot be used; the message says why and what to do."""


def config_dir() -> Path:
    base = os.environ.get("CE_BENCH_HOME")
    if base:
        return Path(base)
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "ce-bench"


def key_path() -> Path:
    return config_dir() / "node.key"


class NodeKey:
    """A pynacl Ed25519 signing key, satisfying capsule.signing.Signer."""

    def __init__(self, signing_key: SigningKey) -> None:
        self._key = signing_key

    @property
    def public_key(self) -> bytes:
        return bytes(self._key.verify_key)

    @property
    def node_id(self) -> str:
        return peer_id_from_public_key(self.public_key)

    def sign(self, message: bytes) -> bytes:
        return bytes(self._key.sign(message).signature)

    @property
    def seed(self) -> bytes:
        """The 32-byte private seed: for a libp2p host that must have the same PeerId (common/libp2p_host.py)."""
        return bytes(self._key)

    @classmethod
    def generate(cls) -> NodeKey:
        return cls(SigningKey.generate())

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, json.dumps({"v": 1, "type": "ed25519", "seed": b64url(bytes(self._key))}).encode(), 0o600)

    @classmethod
    def load(cls, path: Path) -> NodeKey:
        try:
            data = json.loads(path.read_text())
        except OSError as exc:
            raise KeyFileError(f"cannot read the key file {path}: {exc.strerror}") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise KeyFileError(f"the key file {path} is corrupt (not JSON)") from None
        if not isinstance(data, dict) or data.get("v") != 1 or data.get("type") != "ed25519":
            raise KeyFileError(f"the key file {path} is not a ce-bench v1 ed25519 key file")
        try:
            seed = b64url_decode(data.get("seed", ""))
        except ValueError:
            seed = b""
        if len(seed) != 32:
            raise KeyFileError(f"the key file {path} is corrupt: 'seed' must be 32 bytes of base64url")
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise KeyFileError(f"the key file {path} is readable by others (mode {mode:o}); run chmod 600 {path}")
        return cls(SigningKey(seed))


def load_or_create(path: Path | None = None) -> NodeKey:
    path = path or key_path()
    if path.exists():
        return NodeKey.load(path)
    key = NodeKey.generate()
    key.save(path)
    return key


def rotate(path: Path | None = None) -> tuple[NodeKey, Path | None]:
    """Replaces the key; the old file (if any) is kept beside it as node.key.<unix time>.old."""
    path = path or key_path()
    backup = None
    if path.exists():
        backup = path.with_name(f"{path.name}.{int(time.time())}.old")
        os.replace(path, backup)
    key = NodeKey.generate()
    key.save(path)
    return key, backup
