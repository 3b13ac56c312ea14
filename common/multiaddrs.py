"""Multiaddrs as ce-bench takes them from operators (--libp2p-listen, --libp2p-announce) and from nodes (the
live session's `libp2p` message): TCP only, checked without the libp2p library so a bad one gets a clear
answer before anything starts."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from capsule.peerid import PeerIdError, public_key_from_peer_id

# RFC 1123 host names: dot-separated labels of letters, digits and inner hyphens, 1-63 each, 253 in all
DNS_NAME = re.compile(r"(?=.{1,253}\Z)(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*"
                      r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
MULTIADDRS_MAX = 8          # a node announces at most this many (one per interface, a public one or two)
MULTIADDR_MAX_CHARS = 200
# A node's libp2p host listens on loopback unless its operator says otherwise (--libp2p-listen/--libp2p-announce):
# a laptop or phone-tethered machine should open no port on every network it joins by default. Peers on other
# machines probe such a node over WebRTC (web/map/peer_probes.py hands loopback addresses to its own host only).
NODE_LIBP2P_LISTEN = "/ip4/127.0.0.1/tcp/0"


def multiaddr_problem(text: Any, need_peer_id: bool = True, peer_id: str | None = None) -> str | None:
    """What is wrong with a TCP multiaddr (None: nothing): /ip4|ip6|dns|dns4|dns6/HOST/tcp/PORT, then
    /p2p/PEER_ID where one is needed (the PeerId must be `peer_id` when given)."""
    if not isinstance(text, str) or not 0 < len(text) <= MULTIADDR_MAX_CHARS:
        return f"expected a multiaddr string of 1-{MULTIADDR_MAX_CHARS} characters, got {str(text)[:60]!r}"
    parts = text.split("/")
    if len(parts) < 5 or parts[0] != "" or parts[1] not in ("ip4", "ip6", "dns", "dns4", "dns6") or parts[3] != "tcp":
        return f"expected /ip4/ADDRESS/tcp/PORT[/p2p/PEER_ID], got {text!r}"
    if not (parts[4].isascii() and parts[4].isdigit()) or not 0 <= int(parts[4]) <= 65535:
        return f"the TCP port must be 0-65535, got {parts[4]!r}"
    if parts[1] in ("ip4", "ip6"):
        try:
            address = ipaddress.ip_address(parts[2])
        except ValueError:
            return f"not an IP address: {parts[2]!r}"
        if (address.version == 4) != (parts[1] == "ip4"):
            return f"{parts[2]!r} is not an {parts[1]} address"
    elif not DNS_NAME.fullmatch(parts[2]):
        return f"not a DNS name: {parts[2]!r}"
    rest = parts[5:]
    if not rest:
        return "expected /p2p/PEER_ID at the end" if need_peer_id else None
    if len(rest) != 2 or rest[0] != "p2p":
        return f"expected nothing after the port but /p2p/PEER_ID, got {'/'.join(rest)!r}"
    try:
        public_key_from_peer_id(rest[1])
    except (PeerIdError, ValueError) as exc:
        return f"not a PeerId: {exc}"
    if peer_id is not None and rest[1] != peer_id:
        return f"the multiaddr names {rest[1]}, not this node ({peer_id})"
    return None


def parse_multiaddrs(value: Any, peer_id: str) -> list[str]:
    """A live session's announced multiaddrs (hello's `multiaddrs`): a list of at most MULTIADDRS_MAX TCP
    multiaddrs, each ending in /p2p/ and the session's own NodeId. Raises ValueError saying what is wrong."""
    if not isinstance(value, list) or len(value) > MULTIADDRS_MAX:
        raise ValueError(f"multiaddrs is a list of at most {MULTIADDRS_MAX} strings")
    for text in value:
        problem = multiaddr_problem(text, peer_id=peer_id)
        if problem:
            raise ValueError(problem)
    return list(dict.fromkeys(value))


def is_loopback(text: str) -> bool:
    """A multiaddr that dials the dialer's own machine: loopback (/ip4/127.x, /ip6/::1, IPv4-mapped 127.x), the
    unspecified address (0.0.0.0, ::: Linux connects it locally), or a *.localhost name."""
    parts = text.split("/")
    if len(parts) < 3:
        return False
    if parts[1] in ("dns", "dns4", "dns6"):
        name = parts[2].lower().rstrip(".")
        return name == "localhost" or name.endswith(".localhost")
    try:
        address = ipaddress.ip_address(parts[2])
    except ValueError:
        return False
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return address.is_loopback or address.is_unspecified or (mapped is not None and mapped.is_loopback)
