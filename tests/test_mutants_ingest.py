"""web/api/ingest.py beyond tests/test_relay_core.py: every refusal of POST /v1/profiles as a client reads it
(status, code, title, detail, field, headers), each time bound at its edge, what replaces a stored profile,
and the per-node rate limit (mutation testing: scripts/mutants)."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from capsule import plausibility
from capsule.model import NodeProfile
from capsule.signing import SignatureError, sign, verify_record
from capsule.typed import parse
from common.keys import NodeKey
from tests.samples import mutated, sample_profile
from web.api.ingest import BeaconBook, Ingest, VerifiedProfile, parse_json, verify_body, verify_profile
from web.api.problems import Problem
from web.api.summary import ProfileSummary
from web.beacon import next_round
from web.config import RelayConfig
from web.map.atlas import Atlas

ISSUED = 1_000_000
NOW = ISSUED + 20


class Relay:
    def __init__(self, config: RelayConfig | None = None) -> None:
        self.config = config or RelayConfig()
        self.key = NodeKey.generate()
        self.atlas = Atlas(self.config, self.key.node_id)
        self.book = BeaconBook(self.key.node_id, self.config.beacon_keep_rounds)
        self.beacon = next_round(None, self.key, now=ISSUED)
        self.book.add(self.beacon)
        self.ingest = Ingest(self.config, self.atlas, self.book)

    def profile(self, key: NodeKey | None = None, measured_at: int = ISSUED + 10, **figures: Any) -> dict[str, Any]:
        return sample_profile(key, beacon=self.beacon, measured_at=measured_at, **figures)[1]

    def admit(self, profile: dict[str, Any], now: float = NOW) -> tuple[VerifiedProfile, bool]:
        return self.ingest.admit(verify_profile(profile), now)

    def store(self, profile: dict[str, Any]) -> None:
        self.atlas.put(ProfileSummary.of_profile(profile), self.atlas.relay_id, now=NOW)


def problem(call: Callable[[], object]) -> tuple[Any, ...]:
    with pytest.raises(Problem) as refused:
        call()
    p = refused.value
    return p.status, p.code, p.title, p.detail, p.field, p.headers


def test_a_body_that_is_not_json() -> None:
    for body in (b"{", b"\xff\xfe\x00"):
        with pytest.raises(ValueError) as exc:  # JSONDecodeError, UnicodeDecodeError
            json.loads(body)
        detail = str(exc.value)
        assert problem(partial(parse_json, body)) == (400, "invalid_json", "the body is not JSON", detail, None, {})


def test_an_invalid_field() -> None:
    profile = mutated(Relay().profile(), "cpu.cores", -3)
    assert problem(lambda: verify_body(json.dumps(profile).encode())) == (
        422, "invalid_field", "a field of the profile is invalid",
        "$.cpu.cores: expected an integer in [1, 4294967295], got -3", "$.cpu.cores", {})


def test_a_signature_that_does_not_verify() -> None:
    profile = mutated(Relay().profile(), "cpu.gflops_fp32", 70.0)  # edited after signing
    with pytest.raises(SignatureError) as bad:
        verify_record("NodeProfile", profile)
    assert problem(lambda: verify_profile(profile)) == (422, "bad_signature", "the signature does not verify",
                                                         str(bad.value), f"$.{bad.value.field}", {})
    assert bad.value.field == "sig"


def test_a_figure_beyond_physics() -> None:
    relay = Relay()
    key = NodeKey.generate()
    profile = relay.profile(key)
    fast = sign("NodeProfile", {**{k: v for k, v in profile.items() if k != "sig"},
                                "cpu": {**profile["cpu"], "gflops_fp32": 1e6}}, key)
    beyond = plausibility.check(parse(NodeProfile, fast))
    assert beyond is not None
    assert problem(lambda: verify_profile(fast)) == (
        422, "implausible_figure", "a figure exceeds what any hardware of its kind can do", beyond.message(),
        "$.cpu.gflops_fp32", {})


def test_a_verified_profile_keeps_the_json_as_signed_and_its_summary() -> None:
    profile = Relay().profile()
    verified = verify_body(json.dumps(profile).encode())
    assert verified == VerifiedProfile(profile, ProfileSummary.of(verify_record("NodeProfile", profile)))


def test_the_body_size_limit_is_inclusive() -> None:
    relay = Relay()
    limit = relay.config.max_body_bytes
    relay.ingest.check_size(b"x" * limit)
    assert problem(lambda: relay.ingest.check_size(b"x" * (limit + 1))) == (
        413, "body_too_large", "the profile is too large", f"{limit + 1} bytes; this relay accepts at most {limit}",
        None, {})


def test_a_profile_from_the_future() -> None:
    relay = Relay()
    skew = int(relay.config.clock_skew_s)
    assert relay.admit(relay.profile(measured_at=NOW + skew))[1] is False  # at the allowed skew: taken
    late = relay.profile(measured_at=NOW + skew + 1)
    assert problem(lambda: relay.admit(late)) == (
        422, "measured_in_future", "measured_at is in the future",
        f"measured_at {NOW + skew + 1} is {skew + 1} s ahead of this relay's clock (allowed skew {skew} s)",
        "$.measured_at", {})


def test_a_beacon_of_another_relay() -> None:
    relay = Relay()
    other = NodeKey.generate().node_id
    profile = sample_profile(beacon={**relay.beacon, "relay": other}, measured_at=ISSUED + 10)[1]
    assert problem(lambda: relay.admit(profile)) == (
        422, "unknown_beacon", "the beacon was not issued by this relay nor a peer of its cluster",
        f"beacon.relay is {other}; this relay is {relay.key.node_id} (take the beacon from GET /beacon of the "
        "relay you report to)", "$.beacon.relay", {})


def test_an_unknown_round() -> None:
    relay = Relay()
    profile = sample_profile(beacon={**relay.beacon, "round": 99}, measured_at=ISSUED + 10)[1]
    assert problem(lambda: relay.admit(profile)) == (
        422, "unknown_beacon", "this relay has no such beacon round", "round 99 is unknown or expired",
        "$.beacon.round", {})


def test_a_round_with_another_value() -> None:
    relay = Relay()
    profile = sample_profile(beacon={**relay.beacon, "value": "00" * 32}, measured_at=ISSUED + 10)[1]
    assert problem(lambda: relay.admit(profile)) == (
        422, "beacon_mismatch", "the beacon value does not match the round", "round 0 has another value",
        "$.beacon.value", {})


def test_the_beacon_window_is_inclusive() -> None:
    relay = Relay()
    window = int(relay.config.beacon_window_s)
    assert relay.admit(relay.profile(), now=ISSUED + window)[1] is False
    assert problem(lambda: relay.admit(relay.profile(), now=ISSUED + window + 1)) == (
        422, "stale_beacon", "the beacon round is too old",
        f"round 0 was issued {window + 1} s ago; the window is {window} s", "$.beacon.round", {})


def test_a_profile_measured_before_its_beacon() -> None:
    relay = Relay()
    skew = int(relay.config.clock_skew_s)
    assert relay.admit(relay.profile(measured_at=ISSUED - skew))[1] is False  # within the skew: taken
    early = ISSUED - skew - 1
    assert problem(lambda: relay.admit(relay.profile(measured_at=early))) == (
        422, "measured_before_beacon", "the profile claims a time before its beacon round",
        f"measured_at {early} < round issued_at {ISSUED}", "$.measured_at", {})


def test_what_replaces_a_stored_profile() -> None:
    relay = Relay()
    key = NodeKey.generate()
    stored = relay.profile(key, measured_at=ISSUED + 10)
    assert relay.admit(stored)[1] is False  # nothing stored yet
    relay.store(stored)
    assert problem(lambda: relay.admit(stored)) == (409, "replayed_profile", "this exact profile is already stored",
                                                    f"measured_at {ISSUED + 10}", "$.measured_at", {})
    same_time = relay.profile(key, measured_at=ISSUED + 10, gflops=70.0)  # same time, another signature
    older = relay.profile(key, measured_at=ISSUED + 9)
    for profile, at in ((same_time, ISSUED + 10), (older, ISSUED + 9)):
        assert problem(partial(relay.admit, profile)) == (
            409, "stale_profile", "a newer profile of this node is stored",
            f"measured_at {at} is not after the stored {ISSUED + 10}", "$.measured_at", {})
    newer = relay.profile(key, measured_at=ISSUED + 11)
    verified, replaces = relay.admit(newer)
    assert verified.data == newer and replaces is True


def test_the_node_rate_limit_counts_per_minute_and_says_when_to_retry() -> None:
    relay = Relay(RelayConfig(node_rate_per_min=1.0, node_burst=1))
    key = NodeKey.generate()
    relay.admit(relay.profile(key, measured_at=ISSUED + 10))
    second = relay.profile(key, measured_at=ISSUED + 11)
    assert problem(lambda: relay.admit(second)) == (429, "node_rate_limited", "this node sends profiles too often",
                                                    "retry in 60 s", None, {"retry-after": "60"})
    assert relay.admit(second, now=NOW + 60)[1] is False  # a token a minute; nothing was stored in between
    relay.admit(relay.profile(measured_at=ISSUED + 11))  # another node has its own budget


def test_less_than_a_second_to_wait_is_still_a_wait() -> None:
    relay = Relay(RelayConfig(node_rate_per_min=60.0, node_burst=1))
    key = NodeKey.generate()
    relay.admit(relay.profile(key, measured_at=ISSUED + 10))
    for now in (NOW + 0.5, NOW + 0.75):  # half a token, then three quarters
        later = relay.profile(key, measured_at=ISSUED + 11)
        status, code, _, _, _, headers = problem(partial(relay.admit, later, now))
        assert (status, code, headers) == (429, "node_rate_limited", {"retry-after": "1"})  # never "retry after 0"
