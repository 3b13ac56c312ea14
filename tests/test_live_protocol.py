"""The live-session protocol as a pure state machine (web/sessions/live.py), time passed in: no sockets needed to
test RTT bookkeeping, the error budget or the bandwidth probe. The same code runs under the real relay in
tests/test_relay_api.py, tests/test_links.py and tests/test_no_5xx.py."""

from __future__ import annotations

import pytest

from web.sessions.live import MAX_ERRORS, PING_ID_LIMIT, PINGS_KEPT, SAMPLES_PER_LINK, LiveError, Session

NODE = "12D3KooWAbCdEfGhJkLmNpQrStUvWxYz1234567890abcdefghij"
RELAY = "12D3KooWRelayRelayRelayRelayRelayRelayRelayRelayRel"


def test_pong_measures_rtt_from_the_time_passed_in() -> None:
    s = Session("0" * 32)
    ping = s.ping(now=100.0)
    assert ping["type"] == "ping" and set(ping) == {"type", "id"}
    assert s.pong(ping["id"], now=100.020) == pytest.approx(20.0)
    second = s.ping(now=200.0)
    assert s.pong(second["id"], now=200.040) == pytest.approx(0.8 * 20.0 + 0.2 * 40.0)  # EWMA, alpha 0.2


def test_ping_ids_cannot_be_predicted() -> None:
    """A pong sent before its ping arrived would make the node look nearer (a link keeps its lowest RTT):
    ids are random integers, exact in JSON and JavaScript, never a sequence."""
    s = Session("0" * 32)
    ids = [s.ping(now=float(i))["id"] for i in range(200)]
    assert all(type(i) is int and 0 <= i < PING_ID_LIMIT for i in ids)
    assert len(set(ids)) == 200 and max(ids) > 2**40  # 200 draws below 2^53: all below 2^40 has odds 2^-2600
    assert sum(b > a for a, b in zip(ids, ids[1:], strict=False)) < 150  # not increasing


@pytest.mark.parametrize("ping_id", [1, True, 1.0, "1", None, [1]])
def test_a_pong_must_name_an_outstanding_ping_exactly(ping_id: object) -> None:
    s = Session("0" * 32)
    s.pings[1] = 0.0  # an outstanding ping of id 1 (ids are random; this one is set to show what names it)
    if type(ping_id) is int:
        s.pong(1, now=0.001)  # answered: once more is unknown
    with pytest.raises(LiveError) as refused:  # answered already, or not an integer id (True == 1 in a dict)
        s.pong(ping_id, now=0.002)
    assert (1 in s.pings) == (type(ping_id) is not int)
    assert refused.value.code == "unknown_ping"


def test_old_pings_are_forgotten() -> None:
    s = Session("0" * 32)
    ids = [s.ping(now=float(i))["id"] for i in range(PINGS_KEPT + 5)]
    assert list(s.pings) == ids[5:] and len(s.pings) == PINGS_KEPT
    with pytest.raises(LiveError):
        s.pong(ids[4], now=100.0)
    assert s.pong(ids[5], now=100.0) > 0


def test_error_budget_closes_after_max_errors() -> None:
    s = Session("0" * 32)
    verdicts = [s.refuse(LiveError("invalid_json", "x")) for _ in range(MAX_ERRORS)]
    assert [close for _, close in verdicts] == [False] * (MAX_ERRORS - 1) + [True]
    assert verdicts[0][0] == {"type": "error", "code": "invalid_json", "detail": "x"}


def test_bandwidth_probe_first_at_once_then_rarely_one_at_a_time() -> None:
    s = Session("0" * 32)
    assert not s.wants_bw_probe(draw=0.0, chance=1.0)  # no heartbeat yet: nobody to measure
    s.node_id = NODE
    assert s.wants_bw_probe(draw=0.99, chance=0.01)  # never measured: probe at the first chance
    s.start_bw_probe(now=1.0)
    assert not s.wants_bw_probe(draw=0.0, chance=1.0)  # one outstanding
    s.rtt_ms = 10.0
    assert s.bw_ack(256 * 1024, now=1.0 + 0.010 + 0.020) == pytest.approx(8 * 256 * 1024 / 0.020 / 1e6, rel=1e-3)
    with pytest.raises(LiveError):
        s.bw_ack(256 * 1024, now=2.0)
    assert not s.wants_bw_probe(draw=0.5, chance=0.0167)  # measured: the draw decides
    assert s.wants_bw_probe(draw=0.01, chance=0.0167)


def test_probe_chance_gives_the_configured_mean_interval() -> None:
    from web.config import RelayConfig

    config = RelayConfig(heartbeat_interval_s=10.0, bw_probe_interval_s=600.0)
    assert config.bw_probe_chance == pytest.approx(1 / 60)  # one ping in 60 on average: every 600 s


def test_link_body_after_enough_pongs() -> None:
    s = Session("0" * 32, node_id=NODE)
    for i, delay_ms in zip(range(SAMPLES_PER_LINK), (30.0, 12.0, 45.0), strict=True):
        ping = s.ping(now=float(i))
        assert s.link_body(RELAY, now=1e9) is None
        s.pong(ping["id"], now=i + delay_ms / 1000)
    body = s.link_body(RELAY, now=1e9)
    assert body is not None and body["a"] == NODE and body["b"] == RELAY
    # the lowest of the window: the other pongs waited for something else too (the median would say 30)
    assert body["rtt_ms"] == pytest.approx(12.0) and body["loss"] == 0.0
    assert body["jitter_ms"] == pytest.approx((18 + 33) / 2)
    assert s.link_body(RELAY, now=1e9) is None  # the window restarts


def test_a_probe_that_gave_no_figure_is_retried_at_the_next_chances_a_few_times() -> None:
    """A 256 KiB transfer within the RTT's noise gives no figure (loopback under load did, and the next probe
    came ~600 s later): the next chances probe again, up to FIRST_BW_TRIES, then only the draw decides."""
    from web.sessions.live import FIRST_BW_TRIES

    s = Session("0" * 32)
    s.node_id, s.rtt_ms = NODE, 50.0
    for i in range(FIRST_BW_TRIES):
        assert s.wants_bw_probe(draw=0.99, chance=0.01), i
        s.start_bw_probe(now=float(i))
        assert s.bw_ack(256 * 1024, now=float(i) + 0.001) is None  # faster than the RTT: no figure
    assert not s.wants_bw_probe(draw=0.99, chance=0.01)  # tried enough: a phone is not probed every ping
    assert s.wants_bw_probe(draw=0.001, chance=0.01)


def test_the_first_heartbeat_proves_the_key_and_later_ones_stay_with_that_node() -> None:
    """The session's first heartbeat is verified (a forged one is refused); later ones over the same
    connection are checked for schema, session, node and seq (web/sessions/live.py says why not their signature)."""
    from capsule.signing import sign
    from common.keys import NodeKey

    key, other = NodeKey.generate(), NodeKey.generate()
    s = Session("ab" * 16)

    def beat(seq: int, signer: NodeKey = key, **changes: object) -> dict[str, object]:
        return sign("Heartbeat", {"node_id": key.node_id, "session": s.session, "seq": seq, "sent_at": 1, **changes},
                    signer)

    for forged in (beat(0, other), {**beat(0), "sig": beat(0, other)["sig"]}):
        with pytest.raises(LiveError) as refused:
            s.heartbeat(forged)
        assert refused.value.code == "bad_signature" and s.node_id is None
    assert s.heartbeat(beat(0)) == key.node_id
    assert s.heartbeat(beat(1, other)) == key.node_id  # the connection is the proof now
    cases = [(beat(2, node_id=other.node_id), "wrong_node"),
             (sign("Heartbeat", {"node_id": other.node_id, "session": s.session, "seq": 2, "sent_at": 1}, other),
              "wrong_node"),
             (beat(2, session="cd" * 16), "wrong_session"), (beat(1), "replayed_heartbeat"),
             ({**beat(2), "seq": "2"}, "invalid_field"), ({k: v for k, v in beat(2).items() if k != "sig"},
                                                           "invalid_field")]
    for heartbeat, code in cases:
        with pytest.raises(LiveError) as refused:
            s.heartbeat(heartbeat)
        assert refused.value.code == code, (heartbeat, refused.value.code)
    assert s.last_seq == 1 and s.heartbeat(beat(2)) == key.node_id


def test_a_transfer_faster_than_physics_gives_no_figure() -> None:
    """On loopback the RTT taken off can leave a few microseconds for 256 KiB: the figure would exceed the
    link schema's bound (capsule.model LINK_BW_MAX_MBPS) and every link sample after it would be refused."""
    from capsule.model import LINK_BW_MAX_MBPS

    s = Session("0" * 32)
    s.node_id, s.rtt_ms = NODE, 1.0
    s.start_bw_probe(now=10.0)
    seconds_at_max = 8 * 256 * 1024 / (LINK_BW_MAX_MBPS * 1e6)
    assert s.bw_ack(256 * 1024, now=10.0 + 0.001 + seconds_at_max / 2) is None and s.bw_mbps is None
    s.start_bw_probe(now=20.0)
    assert s.bw_ack(256 * 1024, now=20.0 + 0.001 + seconds_at_max * 2) == pytest.approx(LINK_BW_MAX_MBPS / 2, rel=1e-3)


def test_bandwidth_takes_off_the_lowest_rtt_not_one_a_node_can_raise() -> None:
    """A node that holds some pongs back raises the smoothed RTT; taking that off would shorten the transfer
    and raise its bandwidth. The lowest recent RTT is taken off instead (a pong cannot come back early)."""
    s = Session("0" * 32, node_id=NODE)
    for delay_ms in (10.0, 400.0, 400.0, 400.0):
        ping = s.ping(now=0.0)
        s.pong(ping["id"], now=delay_ms / 1000)
    assert s.rtt_ms is not None and s.rtt_ms > 100  # the smoothed RTT the holding-back raised
    s.start_bw_probe(now=50.0)
    # 256 KiB in 100 ms after the 10 ms the path takes: 21 Mbit/s (taking off the smoothed RTT would say more)
    assert s.bw_ack(256 * 1024, now=50.0 + 0.010 + 0.100) == pytest.approx(8 * 256 * 1024 / 0.100 / 1e6, abs=0.1)


def test_pongs_that_waited_for_a_challenge_stay_out_of_the_link_sample() -> None:
    """A node answering a challenge (a roll call asks every node at once) may answer pings only after its
    work: such pongs say nothing of the network. Kept out of the link window, ping and pong alike, whether the
    challenge was outstanding when the pong arrived or when its ping was sent."""
    s = Session("0" * 32, node_id=NODE)
    waited = s.ping(now=0.0, busy=True)            # sent during the challenge, answered after it
    before = s.ping(now=0.5)                       # sent before it, answered during it
    s.pong(before["id"], now=2.4, busy=True)
    s.pong(waited["id"], now=2.5)
    assert s.link_body(RELAY, now=1e9) is None     # neither pong counts towards the window
    assert s.rtt_median_ms is None                 # nor towards the RTT a challenge subtracts
    for i, delay_ms in enumerate((21.0, 20.0, 22.0)):
        ping = s.ping(now=10.0 + i)
        s.pong(ping["id"], now=10.0 + i + delay_ms / 1000)
    body = s.link_body(RELAY, now=1e9)
    assert body is not None
    assert body["rtt_ms"] == pytest.approx(20.0) and body["jitter_ms"] == pytest.approx(1.5)
    assert body["loss"] == 0.0                     # the two pings that waited are not lost either
    assert not s.busy_pings


def test_a_ping_sent_busy_and_forgotten_leaves_no_mark() -> None:
    s = Session("0" * 32, node_id=NODE)
    first = s.ping(now=0.0, busy=True)["id"]
    for i in range(PINGS_KEPT):
        s.ping(now=1.0 + i)
    assert first not in s.pings and first not in s.busy_pings
