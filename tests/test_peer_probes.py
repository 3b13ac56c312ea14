"""Node-to-node probes (issue 18, item 1): the pure broker (web/map/peer_probes.py), then real relays with real
aiortc peers (host_runner/peer_probe.py) over 127.0.0.1: the pair's sample is co-signed and confirmed by the
relay's own measurements, and every lie a pair can tell is refused or moves nothing."""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from capsule.signing import sign, verify_record
from common.keys import NodeKey
from common.multiaddrs import is_loopback
from host_runner.live_client import LiveSession
from host_runner.peer_probe import PeerProber, agrees, summarize
from tests.relay_process import RelayProcess
from tests.roll_call_helpers import until
from tests.test_links import register
from web.config import RelayConfig
from web.map.peer_probes import PeerBroker
from web.sessions.live import LiveError

# timed (tests/scheduling.py): both peers' RTTs must agree within 1.5x + 3 ms
pytestmark = pytest.mark.timed

SDP = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\n"
FAST = ["--heartbeat-interval", "0.3", "--peer-probe-interval-s", "1", "--peer-probe-pair-repeat-s", "0",
        "--ip-rate", "1000"]


def broker(**changes: Any) -> PeerBroker:
    config = RelayConfig(**{"peer_probe_interval_s": 10.0, "peer_probe_pair_repeat_s": 0.0, **changes})
    return PeerBroker(config)


def no_prediction(a: str, b: str) -> float | None:
    return None


def test_pairs_every_due_node_once_and_carries_the_signalling_to_the_right_side() -> None:
    b = broker()
    for i in range(4):
        assert b.peers(f"s{i}", f"n{i}", ["webrtc"]) == []
    out = b.pair(100.0, random.Random(1), no_prediction)
    assert len(out) == 2 and len(b.probes) == 2  # 4 idle nodes: two probes, nobody in two at once
    in_probes = [(p.offerer.node_id, p.answerer.node_id) for p in b.probes.values()]
    assert len({n for pair in in_probes for n in pair}) == 4
    assert b.pair(101.0, random.Random(1), no_prediction) == []  # all busy
    session, message = out[0]
    probe = b.probes[message["probe"]]
    assert (session, message["role"], message["peer"]) == (probe.offerer.session, "offer", probe.answerer.node_id)
    with pytest.raises(LiveError, match="only the offerer"):
        b.offer(probe.answerer.session, {"probe": probe.probe, "sdp": SDP})
    with pytest.raises(LiveError, match="sdp must be"):
        b.offer(probe.offerer.session, {"probe": probe.probe, "sdp": "<script>"})
    assert probe.stage == "offer"  # a bad offer changes nothing
    [(to, forwarded)] = b.offer(probe.offerer.session, {"probe": probe.probe, "sdp": SDP})
    assert (to, forwarded["role"], forwarded["peer"], forwarded["sdp"]) == (
        probe.answerer.session, "answer", probe.offerer.node_id, SDP)
    with pytest.raises(LiveError, match="at its answer step"):
        b.offer(probe.offerer.session, {"probe": probe.probe, "sdp": SDP})  # no second offer
    [(to, back)] = b.answer(probe.answerer.session, {"probe": probe.probe, "sdp": SDP})
    assert (to, back["type"]) == (probe.offerer.session, "peer_answer")
    with pytest.raises(LiveError, match="only the answerer"):
        b.sample(probe.offerer.session, {"probe": probe.probe, "sample": {}})
    with pytest.raises(LiveError, match="this probe's two nodes"):
        b.sample(probe.answerer.session, {"probe": probe.probe, "sample": {"a": probe.offerer.node_id, "b": "x"}})
    done = b.finish(probe, "measured", 1.5, True)
    assert {s for s, _ in done} == {probe.offerer.session, probe.answerer.session}
    assert all(m["code"] == "measured" for _, m in done) and b.outcomes["measured"] == 1


def test_loopback_multiaddrs_are_offered_only_to_a_peer_on_the_same_host() -> None:
    """A node's libp2p host listens on loopback unless its operator announces another address (issue 47): a
    peer on another machine would dial its own loopback. Such a pair is probed over WebRTC; a pair on one host,
    or with an address the other can reach, over libp2p with only the addresses the dialer can use."""
    local = {"n0": ["/ip4/127.0.0.1/tcp/4001/p2p/n0"], "n1": ["/ip4/127.0.0.1/tcp/4002/p2p/n1"]}
    both = {n: [f"/ip4/10.0.0.{i + 1}/tcp/4001/p2p/{n}", *a] for i, (n, a) in enumerate(local.items())}

    def first_offer(hosts: tuple[str, str], addrs: dict[str, list[str]]) -> dict[str, Any]:
        b = broker()
        for i, host in enumerate(hosts):
            assert b.peers(f"s{i}", f"n{i}", ["libp2p", "webrtc"], host) == []
        [(_, message)] = b.pair(100.0, random.Random(1), no_prediction, lambda n: addrs[n])
        return message

    assert first_offer(("127.0.0.1", "::1"), local)["transport"] == "libp2p"  # on the relay's machine: it works
    assert first_offer(("10.0.0.1", "10.0.0.2"), local)["transport"] == "webrtc"  # two machines: it would not
    # one address is no proof of one machine (a NAT, a proxy the relay does not trust): no loopback there either
    assert first_offer(("10.0.0.1", "10.0.0.1"), local)["transport"] == "webrtc"
    offer = first_offer(("10.0.0.1", "10.0.0.1"), both)
    assert offer["transport"] == "libp2p" and not any("/127.0.0.1/" in a for a in offer["multiaddrs"]), offer
    assert first_offer(("127.0.0.1", "127.0.0.1"), both)["multiaddrs"] == both[offer["peer"]]
    for dials_itself in ("/ip4/0.0.0.0/tcp/1", "/ip6/::/tcp/1", "/ip6/::ffff:127.0.0.1/tcp/1",
                         "/dns4/a.localhost/tcp/1", "/ip6/::1/tcp/1", "/dns/localhost/tcp/1"):
        assert is_loopback(dials_itself), dials_itself
    assert not is_loopback("/ip4/10.0.0.1/tcp/1") and not is_loopback("/dns4/example.org/tcp/1")


def test_a_node_offers_at_most_once_per_interval_and_a_pair_waits_its_repeat_time() -> None:
    b = broker(peer_probe_pair_repeat_s=50.0)
    b.peers("s0", "n0", ["webrtc"])
    b.peers("s1", "n1", ["webrtc"])
    [(_, m)] = b.pair(0.0, random.Random(2), no_prediction)
    b.finish(b.probes[m["probe"]], "measured")
    assert b.pair(5.0, random.Random(2), no_prediction) == []   # the offerer is not due; the other one's pair
    assert b.pair(20.0, random.Random(2), no_prediction) == []  # ... is due but was measured 20 s ago (< 50)
    assert len(b.pair(51.0, random.Random(2), no_prediction)) == 1


def test_the_neighbour_rule_sends_some_offers_to_the_predicted_nearest() -> None:
    """With nearest share 1 every offer goes to the node predicted nearest; with 0, offers spread at random."""
    far = {"n1": 80.0, "n2": 5.0, "n3": 40.0, "n4": 60.0}

    def predict(a: str, b: str) -> float | None:
        return abs(far.get(a, 0.0) - far.get(b, 0.0)) if "n0" in (a, b) else None

    chosen: dict[float, set[str]] = {}
    for share in (1.0, 0.0):
        chosen[share] = set()
        for seed in range(12):
            b = broker(peer_probe_nearest_share=share)
            for i in range(5):
                b.peers(f"s{i}", f"n{i}", ["webrtc"])
            for i in range(1, 5):
                b.participants[f"s{i}"].last_offered = 1e9  # idle but not due: only n0 offers
            [(_, m)] = b.pair(100.0, random.Random(seed), predict)
            chosen[share].add(m["peer"])
    assert chosen[1.0] == {"n2"}
    assert len(chosen[0.0]) >= 3


def test_leaving_or_opting_out_ends_the_probe_for_the_other_side_and_silence_times_out() -> None:
    b = broker(peer_probe_timeout_s=30.0)
    for i in range(4):
        b.peers(f"s{i}", f"n{i}", ["webrtc"])
    out = b.pair(0.0, random.Random(3), no_prediction)
    first, second = (b.probes[m["probe"]] for _, m in out)
    [(to, done)] = b.leave(first.offerer.session)
    assert (to, done["code"]) == (first.answerer.session, "peer_left")
    [(to, done)] = b.peers(second.answerer.session, second.answerer.node_id, [])  # the tab went hidden
    assert (to, done["code"]) == (second.offerer.session, "opted_out")
    assert second.answerer.session not in b.participants and b.probes == {}
    b2 = broker(peer_probe_timeout_s=30.0)
    b2.peers("a", "na", ["webrtc"])
    b2.peers("b", "nb", ["webrtc"])
    b2.pair(0.0, random.Random(4), no_prediction)
    assert b2.expire(29.0) == []
    assert sorted(m["code"] for _, m in b2.expire(31.0)) == ["timeout", "timeout"]
    with pytest.raises(LiveError, match="transports"):
        b2.peers("a", "na", "webrtc")
    with pytest.raises(LiveError, match="heartbeat"):
        b2.peers("c", None, ["webrtc"])


def test_the_answerer_agrees_only_with_what_it_measured_itself() -> None:
    # the lowest RTT (the others waited for something else too), not the median 2.0 nor the first or last
    assert summarize([3.0, 1.0, 2.0], 4) == {"rtt_ms": 1.0, "jitter_ms": 1.5, "loss": 0.25}
    assert agrees(30.0, 25.0) and agrees(1.0, 0.3)  # noise, and the slack at sub-ms RTTs
    assert not agrees(100.0, 25.0) and not agrees(5.0, 25.0)
    with pytest.raises(ValueError, match="no pong"):
        summarize([], 5)


def metrics_of(relay: RelayProcess) -> str:
    with urllib.request.urlopen(relay.url + "/metrics", timeout=10) as resp:
        return str(resp.read().decode())


def edges_of(relay: RelayProcess, a: str, b: str) -> list[dict[str, Any]]:
    graph = relay.get("/netgraph")[1]
    return [e for e in graph["edges"] if {e["a"], e["b"]} == {a, b}]


def confirmed(relay: RelayProcess, a: str, b: str) -> bool:
    graph = relay.get("/netgraph")[1]
    return bool(edges_of(relay, a, b)) and sorted([a, b]) not in [sorted(p) for p in graph["unconfirmed_edges"]]


def test_two_servers_measure_each_other_and_the_relay_confirms_it(tmp_path: Path) -> None:
    """Two `ce-bench node` live sessions taking part: the relay pairs them, they meet over WebRTC (aiortc,
    host candidates), and the LinkSample they both signed reaches /netgraph confirmed by the relay's own
    RTTs to each; the relay saw only the signalling."""
    with RelayProcess(tmp_path / "data", *FAST) as relay:
        keys = [register(relay), register(relay)]
        sessions = [LiveSession(relay.url, k, peer_probes=True).start() for k in keys]
        try:
            a, b = (k.node_id for k in keys)
            until("a node-to-node edge on /netgraph", 40, lambda: edges_of(relay, a, b))
            [edge] = edges_of(relay, a, b)
            verify_record("LinkSample", edge)  # both endpoints' signatures, neither is the relay
            assert relay.get("/beacon")[1]["relay"] not in (edge["a"], edge["b"])
            assert 0 < edge["rtt_ms"] < 50, edge  # loopback through aiortc's Python event loop
            until("the edge confirmed by the relay's own RTTs to both", 20, lambda: confirmed(relay, a, b))
            # the relay tells both sides; once its own edges to both exist, it says confirmed (before, the
            # sample waits unconfirmed for the next refit)
            until("a probe reported measured and confirmed to both sides", 20, lambda: all(
                any(m["code"] == "measured" and m["confirmed"] for m in s.peers.done) for s in sessions if s.peers))
            metrics = metrics_of(relay)
            assert 'ce_relay_peer_probes_total{outcome="measured"}' in metrics
        finally:
            for s in sessions:
                s.stop()


def test_two_servers_with_libp2p_hosts_measure_each_other_by_libp2p_ping(tmp_path: Path) -> None:
    """Both nodes announce a libp2p host: the relay brokers libp2p ping (docs/mesh.md), no SDP; each side
    pings the other itself, the answerer co-signs what its own pings agree with, and the sample is judged as
    any other."""
    from common.libp2p_host import Libp2pHost

    with RelayProcess(tmp_path / "data", *FAST) as relay:
        keys = [register(relay), register(relay)]
        hosts = [Libp2pHost(k.seed, "/ip4/127.0.0.1/tcp/0") for k in keys]
        sessions: list[LiveSession] = []
        try:
            for host in hosts:
                host.start()
            sessions = [LiveSession(relay.url, k, peer_probes=True, libp2p=h).start() for k, h in zip(keys, hosts,
                                                                                                      strict=True)]
            a, b = (k.node_id for k in keys)
            until("a node-to-node edge on /netgraph", 40, lambda: edges_of(relay, a, b))
            [edge] = edges_of(relay, a, b)
            verify_record("LinkSample", edge)
            assert 0 < edge["rtt_ms"] < 50, edge
            until("both sides told the probe was measured over libp2p", 20, lambda: all(
                any(m["code"] == "measured" and m["transport"] == "libp2p" for m in s.peers.done)
                for s in sessions if s.peers))
            assert not any(m["transport"] == "webrtc" for s in sessions if s.peers for m in s.peers.done)
        finally:
            for s in sessions:
                s.stop()
            for host in hosts:
                host.stop()


class Liar(PeerProber):
    """Proposes ten times the RTT it measured (to look far from a rival, or to drag the map)."""

    def proposal(self, own: dict[str, float]) -> dict[str, float]:
        return {**own, "rtt_ms": round(own["rtt_ms"] * 10 + 20, 3)}


def test_an_honest_answerer_refuses_to_cosign_an_inflated_rtt(tmp_path: Path) -> None:
    with RelayProcess(tmp_path / "data", *FAST) as relay:
        liar_key, honest_key = register(relay), register(relay)
        liar = LiveSession(relay.url, liar_key, peer_probes=True)
        assert liar.peers is not None
        liar.peers.stop()
        liar.peers = Liar(liar_key, liar._send_current)
        honest = LiveSession(relay.url, honest_key, peer_probes=True)
        sessions = [liar.start(), honest.start()]
        try:
            assert honest.peers is not None
            refused = until("the honest side refuses the liar's proposal", 40, lambda: [
                f for f in honest.peers.failures if "the peer proposed" in f] if honest.peers else [])
            assert "this side measured" in refused[0]
            # the liar proposes whenever it offers; when it answers, the honest offerer's figure is signed
            edges = until("an edge between them (the honest side offered)", 40,
                          lambda: edges_of(relay, liar_key.node_id, honest_key.node_id))
            assert edges and all(e["rtt_ms"] < 20 for e in edges), edges
            assert "peer_failed" in metrics_of(relay)
        finally:
            for s in sessions:
                s.stop()


def hello(ws: Any, key: NodeKey) -> str:
    welcome = json.loads(ws.recv(timeout=10))
    beat = sign("Heartbeat", {"node_id": key.node_id, "session": welcome["session"], "seq": 0,
                              "sent_at": int(time.time())}, key)
    ws.send(json.dumps({"type": "heartbeat", "heartbeat": beat}))
    ws.send(json.dumps({"type": "peers", "transports": ["webrtc"]}))
    return str(welcome["relay"])


class RawNode:
    """A hand-driven live session (the cheater's client): answers pings, co-signs the relay's samples of its
    own link (so the relay measures it, as an honest node's would be), and hands back the other messages."""

    def __init__(self, ws: Any, key: NodeKey) -> None:
        self.ws, self.key = ws, key
        self.relay = hello(ws, key)
        self.held: list[dict[str, Any]] = []
        # pings answered at once from a thread of its own: a pong held back makes the relay's own edge long,
        # and a long edge loosens what the triangle allows between two nodes (web/map/links.py)
        self._closed = threading.Event()
        threading.Thread(target=self._pump_forever, daemon=True).start()

    def _pump_forever(self) -> None:
        while not self._closed.is_set():
            try:
                self.pump(0.05)
            except (OSError, EOFError, ConnectionClosed):
                return

    def close(self) -> None:
        self._closed.set()

    def pump(self, timeout_s: float = 0.1) -> None:
        try:
            frame = self.ws.recv(timeout=timeout_s)
        except TimeoutError:
            return
        if isinstance(frame, bytes):  # the relay's bandwidth probe
            self.ws.send(json.dumps({"type": "bw_ack", "n": len(frame)}))
            return
        message = json.loads(frame)
        if message.get("type") == "ping":
            self.ws.send(json.dumps({"type": "pong", "id": message["id"]}))
        elif message.get("type") == "cosign":
            self.ws.send(json.dumps({"type": "cosigned", "sample": sign("LinkSample", message["sample"], self.key,
                                                                        "sig_a")}))
        elif message.get("type") not in ("ack",):
            self.held.append(message)

    def take(self, kind: str) -> dict[str, Any] | None:
        for i, message in enumerate(self.held):
            if message.get("type") == kind:
                return self.held.pop(i)
        return None

    def expect(self, kind: str, within_s: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + within_s
        while (found := self.take(kind)) is None:
            assert time.monotonic() < deadline, f"no {kind} within {within_s} s: {self.held[-3:]}"
            time.sleep(0.01)
        return found


def test_colluding_identities_cannot_sign_a_distance_nobody_observed(tmp_path: Path) -> None:
    """Two identities of one attacker, both taking part, skip the measurement and sign 400 ms between them
    (both signatures valid): the relay measured both at ~1 ms, so the triangle through it refuses the sample
    (inconsistent_rtt) and both sides hear so in peer_done (not as an error frame: an honest pair's noisy sample
must not use up its session's error budget); a sample handed in by the wrong side, or after the probe, is an
    error frame, and nothing reaches /netgraph."""
    url = "ws://127.0.0.1:{port}/v1/live"
    with RelayProcess(tmp_path / "data", *FAST) as relay:
        one, two = register(relay), register(relay)
        with connect(url.format(port=relay.port)) as ws1, connect(url.format(port=relay.port)) as ws2:
            nodes = [RawNode(ws1, one), RawNode(ws2, two)]

            def offered() -> RawNode | None:
                both_measured = all(edges_of(relay, n.key.node_id, n.relay) for n in nodes)
                return next((n for n in nodes if any(m.get("role") == "offer" for m in n.held)), None) \
                    if both_measured else None

            offerer = until("the relay measured both and paired them", 30, offered)
            answerer = nodes[1] if offerer is nodes[0] else nodes[0]
            probe = offerer.expect("peer_probe")
            offerer.ws.send(json.dumps({"type": "peer_offer", "probe": probe["probe"], "sdp": SDP}))
            forwarded = answerer.expect("peer_probe")
            assert (forwarded["role"], forwarded["sdp"], forwarded["peer"]) == ("answer", SDP, offerer.key.node_id)
            answerer.ws.send(json.dumps({"type": "peer_answer", "probe": probe["probe"], "sdp": SDP}))
            assert offerer.expect("peer_answer")["sdp"] == SDP
            body = {"a": offerer.key.node_id, "b": answerer.key.node_id, "rtt_ms": 400.0, "jitter_ms": 0.1,
                    "loss": 0.0, "bw_mbps": None, "measured_at": int(time.time())}
            forged = sign("LinkSample", sign("LinkSample", body, offerer.key, "sig_a"), answerer.key, "sig_b")
            offerer.ws.send(json.dumps({"type": "peer_sample", "probe": probe["probe"], "sample": forged}))
            assert offerer.expect("error")["code"] == "not_your_probe"  # only the answerer hands it in
            answerer.ws.send(json.dumps({"type": "peer_sample", "probe": probe["probe"], "sample": forged}))
            for node in nodes:
                assert node.expect("peer_done")["code"] == "inconsistent_rtt"
            answerer.ws.send(json.dumps({"type": "peer_sample", "probe": probe["probe"], "sample": forged}))
            assert answerer.expect("error")["code"] == "unknown_probe"  # the probe is over
            for node in nodes:
                node.close()
            assert max(edges_of(relay, n.key.node_id, n.relay)[0]["rtt_ms"] for n in nodes) < 50  # what it judged by
        assert edges_of(relay, one.node_id, two.node_id) == []


def test_a_peer_that_goes_silent_costs_the_other_side_one_timeout(tmp_path: Path) -> None:
    """A node takes part, then ignores the probe it is given (opting out in all but name): the relay ends
    it after peer_probe_timeout_s and tells the honest side, which is paired again later."""
    url = "ws://127.0.0.1:{}/v1/live"
    with RelayProcess(tmp_path / "data", *FAST, "--peer-probe-timeout-s", "4") as relay:
        silent, honest_key = register(relay), register(relay)
        honest = LiveSession(relay.url, honest_key, peer_probes=True).start()
        try:
            with connect(url.format(relay.port)) as ws:
                node = RawNode(ws, silent)
                node.expect("peer_probe")  # and never answered (pings are, so the session stays)
                node.close()
                assert honest.peers is not None
                timed_out = until("the honest side hears the timeout", 45,
                                  lambda: [m for m in honest.peers.done if m["code"] == "timeout"] if honest.peers
                                  else [])
                assert timed_out
        finally:
            honest.stop()
