"""Deciding whether a posted NodeProfile is accepted: the pure core behind POST /v1/profiles.

Order of checks: JSON -> schema (field path) -> signature by node_id -> physical bounds
(capsule/plausibility.py) -> beacon round (known, matching,
fresh) -> measured_at (not in the future, not before its beacon) -> newer than the stored profile
(replays and stale profiles have their own codes) -> per-node rate limit. Only signed, verified data can
spend a node's rate budget. No I/O here: the Starlette endpoint stores what this returns.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from capsule import plausibility
from capsule.peerid import PeerIdError
from capsule.signing import SignatureError, verify_record
from capsule.typed import ValidationError
from web.api.problems import Problem
from web.api.ratelimit import TokenBuckets
from web.api.summary import ProfileSummary
from web.config import RelayConfig
from web.map.atlas import Atlas


class BeaconBook:
    """The beacon rounds this relay issued and still honours, by round number."""

    def __init__(self, relay_id: str, keep: int) -> None:
        self.relay_id = relay_id
        self.keep = keep
        self.rounds: dict[int, dict[str, Any]] = {}
        self.latest: dict[str, Any] | None = None

    def add(self, beacon: dict[str, Any]) -> None:
        self.rounds[int(beacon["round"])] = beacon
        if self.latest is None or beacon["round"] > self.latest["round"]:
            self.latest = beacon
        for old in [r for r in self.rounds if r <= int(beacon["round"]) - self.keep]:
            del self.rounds[old]


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise Problem(400, "invalid_json", "the body is not JSON", str(exc)) from None
    except RecursionError:  # thousands of nested arrays or objects: a bad body, never a 500
        raise Problem(400, "invalid_json", "the body is nested too deeply") from None


@dataclass(frozen=True)
class VerifiedProfile:
    """A profile that passed schema, signature and physical bounds: the JSON as signed (stored and served as
    is) and its typed summary (what the atlas keeps)."""

    data: dict[str, Any]
    summary: ProfileSummary


def verify_profile(data: Any) -> VerifiedProfile:
    """Schema, signature and physical bounds; Problem naming the field otherwise."""
    try:
        record = verify_record("NodeProfile", data)
    except ValidationError as exc:
        raise Problem(422, "invalid_field", "a field of the profile is invalid", str(exc), exc.path) from None
    except SignatureError as exc:
        raise Problem(422, "bad_signature", "the signature does not verify", str(exc), f"$.{exc.field}") from None
    except PeerIdError as exc:  # pragma: no cover - node_id is validated by the schema first
        raise Problem(422, "invalid_field", "node_id is not an Ed25519 PeerId", str(exc), "$.node_id") from None
    beyond = plausibility.check(record)
    if beyond is not None:
        raise Problem(422, "implausible_figure", "a figure exceeds what any hardware of its kind can do",
                      beyond.message(), beyond.field)
    assert isinstance(data, dict)  # verify_record parsed it as an object
    return VerifiedProfile(data, ProfileSummary.of(record))


def verify_body(body: bytes) -> VerifiedProfile:
    """JSON, schema and signature of a posted profile: the CPU-heavy part, free of any relay state, so it can
    run in a worker process (web/api/verify_pool.py)."""
    return verify_profile(parse_json(body))


class Ingest:
    def __init__(self, config: RelayConfig, atlas: Atlas, beacons: BeaconBook) -> None:
        self.config = config
        self.atlas = atlas
        self.beacons = beacons
        # the rounds of the cluster's peer relays (verified on NATS, named peers only): a node behind a balancer
        # or `--processes` fetches /beacon from one relay and may post its profile to another
        self.peer_beacons: dict[str, BeaconBook] = {}
        self.node_limits = TokenBuckets(config.node_rate_per_min / 60.0, config.node_burst)

    def check(self, body: bytes, now: float) -> tuple[VerifiedProfile, bool]:
        """The verified profile and whether it replaces a stored one; raises Problem to refuse."""
        self.check_size(body)
        return self.admit(verify_body(body), now)

    def check_size(self, body: bytes) -> None:
        if len(body) > self.config.max_body_bytes:
            raise Problem(413, "body_too_large", "the profile is too large",
                          f"{len(body)} bytes; this relay accepts at most {self.config.max_body_bytes}")

    def admit(self, verified: VerifiedProfile, now: float) -> tuple[VerifiedProfile, bool]:
        """The checks after the signature, against this relay's state: beacon, time, newer than stored, rate."""
        profile = verified.data
        self._check_beacon(profile, now)
        measured_at = profile["measured_at"]
        if measured_at > now + self.config.clock_skew_s:
            raise Problem(422, "measured_in_future", "measured_at is in the future",
                          f"measured_at {measured_at} is {measured_at - now:.0f} s ahead of this relay's clock "
                          f"(allowed skew {self.config.clock_skew_s:.0f} s)", "$.measured_at")
        stored = self.atlas.nodes.get(profile["node_id"])
        if stored is not None:
            if measured_at == stored.profile.measured_at and profile["sig"] == stored.profile.sig:
                raise Problem(409, "replayed_profile", "this exact profile is already stored",
                              f"measured_at {measured_at}", "$.measured_at")
            if measured_at <= stored.profile.measured_at:
                raise Problem(409, "stale_profile", "a newer profile of this node is stored",
                              f"measured_at {measured_at} is not after the stored {stored.profile.measured_at}",
                              "$.measured_at")
        wait = self.node_limits.take(profile["node_id"], now)
        if wait > 0:
            raise Problem(429, "node_rate_limited", "this node sends profiles too often",
                          f"retry in {wait:.0f} s", headers={"retry-after": str(max(1, round(wait)))})
        return verified, stored is not None

    def _check_beacon(self, profile: dict[str, Any], now: float) -> None:
        cited = profile["beacon"]
        book = self.beacons if cited["relay"] == self.beacons.relay_id else self.peer_beacons.get(cited["relay"])
        if book is None:
            raise Problem(422, "unknown_beacon", "the beacon was not issued by this relay nor a peer of its cluster",
                          f"beacon.relay is {cited['relay']}; this relay is {self.beacons.relay_id} "
                          "(take the beacon from GET /beacon of the relay you report to)", "$.beacon.relay")
        beacon = book.rounds.get(cited["round"])
        if beacon is None:
            raise Problem(422, "unknown_beacon", "this relay has no such beacon round",
                          f"round {cited['round']} is unknown or expired", "$.beacon.round")
        if beacon["value"] != cited["value"]:
            raise Problem(422, "beacon_mismatch", "the beacon value does not match the round",
                          f"round {cited['round']} has another value", "$.beacon.value")
        if beacon["issued_at"] < now - self.config.beacon_window_s:
            raise Problem(422, "stale_beacon", "the beacon round is too old",
                          f"round {cited['round']} was issued {now - beacon['issued_at']:.0f} s ago; the window "
                          f"is {self.config.beacon_window_s:.0f} s", "$.beacon.round")
        if profile["measured_at"] < beacon["issued_at"] - self.config.clock_skew_s:
            raise Problem(422, "measured_before_beacon", "the profile claims a time before its beacon round",
                          f"measured_at {profile['measured_at']} < round issued_at {beacon['issued_at']}",
                          "$.measured_at")

    def peer_beacon(self, beacon: dict[str, Any]) -> None:
        """A verified round of a named peer relay of the cluster (web/cluster/nats_cluster.py)."""
        relay = str(beacon["relay"])
        if relay not in self.peer_beacons:  # only the rounds a profile may still cite (beacon_window_s)
            keep = math.ceil(self.config.beacon_window_s / self.config.beacon_interval_s) + 2
            self.peer_beacons[relay] = BeaconBook(relay, keep)
        self.peer_beacons[relay].add(beacon)
