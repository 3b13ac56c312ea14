"""A self-signed TLS certificate for `ce-bench up --tls`: browsers expose WebCrypto and WebGPU only to
secure contexts, and a plain-http page on a LAN address is not one. Made once with the openssl CLI and
kept in the relay's data directory; phones accept it once."""

from __future__ import annotations

import ipaddress
import shutil
import socket
import subprocess
from pathlib import Path


class TlsError(Exception):
    """The certificate could not be made; the message says why."""


def lan_address() -> str | None:
    """This machine's address as other devices see it, from its host name (sends nothing)."""
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        return None
    return None if ipaddress.ip_address(address).is_loopback else address


def self_signed(data_dir: Path, host: str) -> tuple[Path, Path]:
    cert, key = data_dir / "tls-cert.pem", data_dir / "tls-key.pem"
    if cert.exists() and key.exists():
        return cert, key
    openssl = shutil.which("openssl")
    if openssl is None:
        raise TlsError("--tls needs the openssl command to make a certificate (apt-get install openssl)")
    names = ["DNS:localhost", "IP:127.0.0.1"]
    for extra in {host, lan_address() or ""} - {"", "0.0.0.0", "127.0.0.1", "::"}:
        try:
            ipaddress.ip_address(extra)
            names.append(f"IP:{extra}")
        except ValueError:
            names.append(f"DNS:{extra}")
    data_dir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "825", "-subj", "/CN=ce-bench relay",
         "-addext", "subjectAltName=" + ",".join(names)], capture_output=True, text=True)
    if result.returncode != 0:
        raise TlsError(f"openssl could not make a certificate: {result.stderr.strip()[-300:]}")
    key.chmod(0o600)
    return cert, key
