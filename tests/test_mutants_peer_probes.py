"""Tests that kill mutants of web/map/peer_probes.py (scripts/mutants) the broker's tests in test_peer_probes.py
left alive: limits at their exact edges and the codes and texts a node reads."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from web.config import RelayConfig
from web.map.peer_probes import MAX_SDP_CHARS, PeerBroker, PeerProbe
from web.sessions.live import LiveError

SDP = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\n"


def _broker(**changes: Any) -> PeerBroker:
    return PeerBroker(RelayConfig(**{"peer_probe_interval_s": 10.0, "peer_probe_pair_repeat_s": 0.0, **changes}))


def _none(a: str, b: str) -> float | None:
    return None


def _started(b: PeerBroker, nodes: int = 2, now: float = 0.0) -> PeerProbe:
    """`nodes` participants s0.. (nodes n0..) and one round of pairing at `now`; the first probe it started."""
    for i in range(nodes):
        b.peers(f"s{i}", f"n{i}", ["webrtc"])
    b.pair(now, random.Random(1), _none)
    return next(iter(b.probes.values()))


def _refused(call: Callable[[], object]) -> LiveError:
    with pytest.raises(LiveError) as refused:
        call()
    return refused.value


def test_an_sdp_of_exactly_the_limit_is_taken_and_one_more_character_is_refused() -> None:
    b = _broker()
    for i in range(2):
        b.peers(f"s{i}", f"n{i}", ["webrtc"])
    (offerer, _), = b.pair(0.0, random.Random(1), lambda a, c: None)
    probe = next(iter(b.probes.values()))
    sdp = "v=0" + "x" * (MAX_SDP_CHARS - 3)
    with pytest.raises(LiveError) as too_long:
        b.offer(offerer, {"probe": probe.probe, "sdp": sdp + "x"})
    assert too_long.value.code == "invalid_field" and f"at most {MAX_SDP_CHARS}" in str(too_long.value)
    assert f"got str of {MAX_SDP_CHARS + 1}" in str(too_long.value)
    (to, message), = b.offer(offerer, {"probe": probe.probe, "sdp": sdp})
    assert message["sdp"] == sdp and to != offerer


def test_peers_refusals_carry_their_codes_and_the_form_expected() -> None:
    b = _broker()
    for transports in ("webrtc", ["webrtc", 1]):
        with pytest.raises(LiveError) as refused:
            b.peers("s0", "n0", transports)
        bad = refused.value
        assert bad.code == "invalid_message"
        assert "transports this node probes over" in bad.detail and '{"transports": ["webrtc"]}' in bad.detail
    anonymous = _refused(lambda: b.peers("s0", None, ["webrtc"]))
    assert anonymous.code == "unknown_node" and "heartbeat" in anonymous.detail
    assert b.participants == {}


def test_taking_part_again_keeps_the_probe_in_flight_and_a_new_node_id_replaces_the_participant() -> None:
    b = _broker()
    probe = _started(b)
    # a page sends `peers` again on every visibility change: that must not drop the probe it is in
    assert b.peers(probe.offerer.session, probe.offerer.node_id, ["webrtc"]) == []
    assert b.participants[probe.offerer.session] is probe.offerer
    assert {to for to, _ in b.finish(probe, "measured")} == {"s0", "s1"}  # both are still the ones it paired
    # the relay keeps a session to one node (web/sessions/live.py's wrong_node), but the broker does not lean on it:
    # `peers` naming another node replaces the participant
    b.peers("s0", "n9", ["webrtc"])
    assert b.participants["s0"].node_id == "n9"


def test_leaving_says_nothing_when_the_session_is_unknown_or_idle() -> None:
    b = _broker()
    assert b.leave("nobody") == []
    b.peers("s0", "n0", ["webrtc"])
    assert b.leave("s0") == [] and b.participants == {}


def test_a_node_is_due_again_exactly_one_interval_after_its_last_offer() -> None:
    b = _broker(peer_probe_interval_s=10.0)
    b.peers("s0", "n0", ["webrtc"])
    b.peers("s1", "n1", ["webrtc"])
    b.participants["s1"].last_offered = 1e9  # idle but never due: only s0 offers
    [(_, m)] = b.pair(0.0, random.Random(1), _none)
    b.finish(b.probes[m["probe"]], "measured")
    assert b.pair(9.9, random.Random(1), _none) == []
    assert [to for to, _ in b.pair(10.0, random.Random(1), _none)] == ["s0"]


def test_a_pair_may_be_probed_again_exactly_its_repeat_time_later() -> None:
    b = _broker(peer_probe_pair_repeat_s=50.0)
    b.finish(_started(b), "measured")
    assert b.pair(49.9, random.Random(1), _none) == []  # both nodes are due, their pair is not
    assert len(b.pair(50.0, random.Random(1), _none)) == 1


def test_the_active_budget_caps_the_probes_and_each_round_it_stops_is_counted_once() -> None:
    b = _broker(peer_probe_max_active=1)
    for i in range(4):
        b.peers(f"s{i}", f"n{i}", ["webrtc"])
    assert len(b.pair(0.0, random.Random(1), _none)) == 1  # the probe started before the cap is still sent
    assert len(b.probes) == 1 and b.outcomes["over_budget"] == 1
    assert b.pair(0.0, random.Random(1), _none) == []  # the two idle nodes wait for the budget
    assert b.outcomes["over_budget"] == 2


def test_every_round_pairs_all_idle_nodes_whatever_the_shuffle() -> None:
    """An offerer taken as an answerer earlier in the round is skipped, not the end of the round."""
    for seed in range(16):
        b = _broker()
        for i in range(4):
            b.peers(f"s{i}", f"n{i}", ["webrtc"])
        assert len(b.pair(0.0, random.Random(seed), _none)) == 2, seed
        assert b.outcomes["brokered"] == 2 and all(p.probe is not None for p in b.participants.values())


def test_an_offerer_without_a_partner_does_not_end_the_round() -> None:
    for seed in range(12):
        b = _broker(peer_probe_pair_repeat_s=100.0)
        for i in range(3):
            b.peers(f"s{i}", f"n{i}", ["webrtc"])
        b.last_pair[("n0", "n1")] = b.last_pair[("n0", "n2")] = 50.0  # n0 measured both lately: no partner
        [(_, m)] = b.pair(60.0, random.Random(seed), _none)
        assert {m["peer"], b.probes[m["probe"]].offerer.node_id} == {"n1", "n2"}, seed


def test_a_nearest_share_of_zero_never_picks_by_prediction_even_on_a_zero_draw() -> None:
    class ZeroDraws(random.Random):
        def random(self) -> float:
            return 0.0  # the lowest draw random() can return

        def getrandbits(self, k: int) -> int:
            return super().getrandbits(k)  # so that choice() still draws from these bits, not from random()

    chosen = set()
    for seed in range(12):
        b = _broker(peer_probe_nearest_share=0.0)
        for i in range(3):
            b.peers(f"s{i}", f"n{i}", ["webrtc"])
        b.participants["s1"].last_offered = b.participants["s2"].last_offered = 1e9  # only n0 offers
        [(_, m)] = b.pair(0.0, ZeroDraws(seed), lambda a, c: 1.0 if "n1" in (a, c) else 50.0)
        chosen.add(m["peer"])
    assert chosen == {"n1", "n2"}  # a random idle node, not always the predicted nearest n1


def test_equal_predicted_distances_are_broken_at_random() -> None:
    far = {"n1": 10.0, "n2": 10.0, "n3": 40.0}
    chosen = set()
    for seed in range(12):
        b = _broker(peer_probe_nearest_share=1.0)
        for i in range(4):
            b.peers(f"s{i}", f"n{i}", ["webrtc"])
        for i in range(1, 4):
            b.participants[f"s{i}"].last_offered = 1e9  # only n0 offers
        [(_, m)] = b.pair(0.0, random.Random(seed), lambda a, c: far.get(c if a == "n0" else a))
        chosen.add(m["peer"])
    assert chosen == {"n1", "n2"}


def test_every_message_carries_the_fields_a_node_reads() -> None:
    b = _broker(peer_ice_servers=("stun:stun.example:3478",))
    b.peers("s0", "n0", ["webrtc"])
    b.peers("s1", "n1", ["webrtc"])
    [(to, told)] = b.pair(0.0, random.Random(1), _none)
    probe = b.probes[told["probe"]]
    a, z = probe.offerer, probe.answerer
    ice = ["stun:stun.example:3478"]
    assert (to, told) == (a.session, {"type": "peer_probe", "probe": probe.probe, "peer": z.node_id,
                                      "role": "offer", "transport": "webrtc", "ice_servers": ice})
    assert b.offer(a.session, {"probe": probe.probe, "sdp": SDP}) == [
        (z.session, {"type": "peer_probe", "probe": probe.probe, "peer": a.node_id, "role": "answer", "sdp": SDP,
                     "ice_servers": ice})]
    answer_sdp = SDP + "a=answer\r\n"
    assert b.answer(z.session, {"probe": probe.probe, "sdp": answer_sdp}) == [
        (a.session, {"type": "peer_answer", "probe": probe.probe, "sdp": answer_sdp})]
    linked = {"a": z.node_id, "b": a.node_id, "rtt_ms": 12.5}  # either node may be the sample's a
    assert b.sample(z.session, {"probe": probe.probe, "sample": linked}) == (probe, linked)
    done = {"type": "peer_done", "probe": probe.probe, "code": "measured", "rtt_ms": 12.5, "confirmed": False,
            "transport": "webrtc"}
    assert b.finish(probe, "measured", 12.5, False) == [(a.session, done), (z.session, done)]
    assert b.outcomes == {"brokered": 1, "measured": 1}


def test_a_sample_that_is_not_this_pairs_link_sample_is_invalid() -> None:
    b = _broker()
    probe = _started(b)
    b.offer(probe.offerer.session, {"probe": probe.probe, "sdp": SDP})
    b.answer(probe.answerer.session, {"probe": probe.probe, "sdp": SDP})
    for message in ({"probe": probe.probe}, {"probe": probe.probe, "sample": [probe.offerer.node_id]},
                    {"probe": probe.probe, "sample": {"a": probe.answerer.node_id, "b": probe.answerer.node_id}}):
        with pytest.raises(LiveError) as refused:
            b.sample(probe.answerer.session, message)
        bad = refused.value
        assert bad.code == "invalid_message" and "LinkSample of this probe's two nodes" in bad.detail
    assert probe.probe in b.probes  # a bad sample leaves the probe waiting for a good one


def test_a_step_from_the_wrong_side_or_out_of_turn_carries_its_code() -> None:
    b = _broker()
    probe = _started(b)
    a, z = probe.offerer.session, probe.answerer.session
    gone = _refused(lambda: b.offer(a, {"probe": "feedbeef", "sdp": SDP}))
    assert gone.code == "unknown_probe" and "no peer probe of that id is in flight" in gone.detail
    not_offerer = _refused(lambda: b.offer(z, {"probe": probe.probe, "sdp": SDP}))
    assert not_offerer.code == "not_your_probe" and "only the offerer" in not_offerer.detail
    early = _refused(lambda: b.answer(z, {"probe": probe.probe, "sdp": SDP}))
    assert early.code == "unexpected_message" and "at its offer step, not answer" in early.detail
    b.offer(a, {"probe": probe.probe, "sdp": SDP})
    not_answerer = _refused(lambda: b.answer(a, {"probe": probe.probe, "sdp": SDP}))
    assert not_answerer.code == "not_your_probe" and "only the answerer" in not_answerer.detail
    assert probe.stage == "answer"


def test_either_side_may_fail_the_probe_and_both_hear_peer_failed() -> None:
    b = _broker()
    for i in range(4):
        b.peers(f"s{i}", f"n{i}", ["webrtc"])
    b.pair(0.0, random.Random(1), _none)
    first, second = b.probes.values()
    outsider = second.offerer.session  # a live participant, but not of the first probe
    stranger = _refused(lambda: b.failed(outsider, {"probe": first.probe, "reason": "x"}))
    assert stranger.code == "unknown_probe" and "in flight for this session" in stranger.detail
    assert _refused(lambda: b.failed(outsider, {"reason": "x"})).code == "unknown_probe"
    for probe, side in ((first, first.answerer), (second, second.offerer)):
        done = {"type": "peer_done", "probe": probe.probe, "code": "peer_failed", "rtt_ms": None, "confirmed": None,
                "transport": "webrtc"}
        assert b.failed(side.session, {"probe": probe.probe, "reason": "ICE failed"}) == [
            (probe.offerer.session, done), (probe.answerer.session, done)]
    assert b.probes == {} and b.outcomes["peer_failed"] == 2


def test_a_probe_expires_only_once_more_than_the_timeout_has_passed_since_it_started() -> None:
    b = _broker(peer_probe_timeout_s=30.0)
    _started(b, nodes=4, now=100.0)
    assert b.expire(130.0) == []  # exactly the timeout: still in time
    ended = b.expire(130.5)
    assert len(ended) == 4 and {m["code"] for _, m in ended} == {"timeout"}  # both sides of both probes
    assert b.outcomes["timeout"] == 2 and b.probes == {}


def test_a_probe_ended_while_its_sample_was_judged_finishes_with_nothing_sent_and_counts_once() -> None:
    """web/map/peer_desk.py awaits the relay's judgement between sample() and finish(): a timeout may end it first."""
    b = _broker(peer_probe_timeout_s=30.0)
    probe = _started(b)
    b.offer(probe.offerer.session, {"probe": probe.probe, "sdp": SDP})
    b.answer(probe.answerer.session, {"probe": probe.probe, "sdp": SDP})
    b.sample(probe.answerer.session, {"probe": probe.probe, "sample": {"a": "n0", "b": "n1"}})
    assert len(b.expire(31.0)) == 2
    assert b.finish(probe, "measured", 5.0, True) == []
    assert b.outcomes["timeout"] == 1 and b.outcomes["measured"] == 0
