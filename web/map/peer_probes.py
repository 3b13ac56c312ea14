"""Node-to-node probes (issue 18, item 1), the relay's side as a pure broker: it pairs the live nodes that
take part and carries their WebRTC offer and answer over their live sessions; the pair measures its RTT on a
data channel and both sign the LinkSample, which the relay judges against its landmarks (web/map/links.py) like
any other sample. The relay never sees the probe's traffic, only ~2-3 KB of signalling per probe. No I/O here:
every method returns the messages to send, as (session, message) pairs; web/sessions/live_endpoint.py sends them.

    node  -> relay {"type": "peers", "transports": ["webrtc"]}   takes part; [] opts out (a hidden tab)
    relay -> A     {"type": "peer_probe", "probe": ID, "peer": B, "role": "offer", "ice_servers": [URL]}
    A     -> relay {"type": "peer_offer", "probe": ID, "sdp": SDP}      (candidates gathered: no trickle)
    relay -> B     {"type": "peer_probe", "probe": ID, "peer": A, "role": "answer", "sdp": SDP, "ice_servers": [..]}
    B     -> relay {"type": "peer_answer", "probe": ID, "sdp": SDP}
    relay -> A     {"type": "peer_answer", "probe": ID, "sdp": SDP}
      A opens the data channel "ce-probe": PEER_PINGS pings each way PEER_PING_GAP_MS apart, then A proposes
      the sample (median RTT of its pings, sig_a) and B co-signs it only if its own pings agree (sig_b)
    B     -> relay {"type": "peer_sample", "probe": ID, "sample": LinkSample}
    relay -> A, B  {"type": "peer_done", "probe": ID, "code": "measured" | why not, "rtt_ms": F | null,
                    "confirmed": bool | null, "transport": "webrtc" | "libp2p"}

Where both nodes take part with "libp2p" and announced their multiaddrs (the live session's `libp2p`
message: server nodes, docs/mesh.md), the probe is libp2p ping instead (seed 000 section 3), with no SDP:
    relay -> A     {"type": "peer_probe", "probe": ID, "peer": B, "role": "offer", "transport": "libp2p",
                    "multiaddrs": [B's]}
      A pings B (/ipfs/ping/1.0.0, PEER_PINGS times) and proposes the sample (sig_a):
    A     -> relay {"type": "peer_offer", "probe": ID, "sample": LinkSample}
    relay -> B     {"type": "peer_probe", "probe": ID, "peer": A, "role": "answer", "transport": "libp2p",
                    "multiaddrs": [A's], "sample": LinkSample}
      B pings A itself and co-signs only if its own pings agree: peer_sample as above.
    A | B -> relay {"type": "peer_failed", "probe": ID, "reason": TEXT}   ends the probe for both

Pairing follows Vivaldi's neighbour rule (Dabek et al. 2004, section 5.5: coordinates converge fastest and
stay accurate when each node measures some of its nearest nodes and some random ones): a node that is due
probes, with probability peer_probe_nearest_share, the idle participant predicted nearest among those whose
edge to it is oldest; otherwise a random idle one."""

from __future__ import annotations

import ipaddress
import random
import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from common.multiaddrs import is_loopback
from web.config import RelayConfig
from web.sessions.live import LiveError

Outgoing = list[tuple[str, dict[str, Any]]]  # (session id, message)
MAX_SDP_CHARS = 6000  # an offer with a dozen candidates is ~1.5 KB; the message limit is web/sessions/live.py's
TRANSPORTS = frozenset({"webrtc", "libp2p"})
MultiaddrsOf = Callable[[str], list[str]]  # node id -> the libp2p multiaddrs its live session announced


@dataclass
class Participant:
    session: str
    node_id: str
    transports: frozenset[str] = frozenset({"webrtc"})
    host: str = ""                # the address its session connects from: loopback multiaddrs serve only its host
    probe: str | None = None      # the probe it is in now (one at a time)
    last_offered: float = -1e18   # when it last started a probe as the offerer


@dataclass
class PeerProbe:
    probe: str
    offerer: Participant
    answerer: Participant
    started: float
    stage: str = "offer"  # offer (waiting for A's offer) -> answer (B's answer) -> measure (the sample)
    transport: str = "webrtc"
    multiaddrs: dict[str, list[str]] = field(default_factory=dict)  # libp2p: node id -> where it is pinged


@dataclass
class PeerBroker:
    config: RelayConfig = field(default_factory=RelayConfig)
    participants: dict[str, Participant] = field(default_factory=dict)  # by session
    probes: dict[str, PeerProbe] = field(default_factory=dict)
    last_pair: dict[tuple[str, str], float] = field(default_factory=dict)  # node pair -> when last probed
    outcomes: Counter[str] = field(default_factory=Counter)  # "brokered", "measured", and every failure code

    def peers(self, session: str, node_id: str | None, transports: Any, host: str = "") -> Outgoing:
        """A session's `peers` message: takes part with a transport this relay brokers, or opts out ([])."""
        if not isinstance(transports, list) or not all(isinstance(t, str) for t in transports):
            raise LiveError("invalid_message", 'peers names the transports this node probes over: '
                                               '{"transports": ["webrtc"]}')
        if node_id is None:
            raise LiveError("unknown_node", "send a heartbeat before taking part in peer probes")
        taken = TRANSPORTS.intersection(transports)
        if not taken:
            return self.leave(session, "opted_out")
        known = self.participants.get(session)
        if known is None or known.node_id != node_id:
            self.participants[session] = Participant(session, node_id, frozenset(taken), host)
        else:
            known.transports = frozenset(taken)
        return []

    def leave(self, session: str, code: str = "peer_left") -> Outgoing:
        """The session closed or opted out: its probe in flight ends for the other side."""
        gone = self.participants.pop(session, None)
        if gone is None or gone.probe is None:
            return []
        return self._end(self.probes[gone.probe], code)

    def pair(self, now: float, rng: random.Random, predict_ms: Callable[[str, str], float | None],
             multiaddrs_of: MultiaddrsOf = lambda _: []) -> Outgoing:
        """Starts the probes that are due: every idle participant whose last offer is peer_probe_interval_s
        old offers to a partner (neighbour rule above), within peer_probe_max_active probes at once; over
        libp2p ping where both take part with it and announced multiaddrs the other can dial, else over WebRTC."""
        config = self.config
        offerers = [p for p in self.participants.values()
                    if p.probe is None and now - p.last_offered >= config.peer_probe_interval_s]
        rng.shuffle(offerers)
        out: Outgoing = []
        for offerer in offerers:
            if len(self.probes) >= config.peer_probe_max_active:
                self.outcomes["over_budget"] += 1
                break
            if offerer.probe is not None:
                continue  # taken as an answerer earlier in this round
            partner = self._partner(offerer, now, rng, predict_ms)
            if partner is None:
                continue
            probe = PeerProbe(secrets.token_hex(8), offerer, partner, now)
            offerer.probe = partner.probe = probe.probe
            offerer.last_offered = now
            self.last_pair[_pair(offerer.node_id, partner.node_id)] = now
            self.probes[probe.probe] = probe
            self.outcomes["brokered"] += 1
            addrs = {p.node_id: dialable(multiaddrs_of(p.node_id), p, q)
                     for p, q in ((offerer, partner), (partner, offerer)) if "libp2p" in p.transports}
            if len(addrs) == 2 and all(addrs.values()):
                probe.transport, probe.multiaddrs = "libp2p", addrs
                out.append((offerer.session, {"type": "peer_probe", "probe": probe.probe, "peer": partner.node_id,
                                              "role": "offer", "transport": "libp2p",
                                              "multiaddrs": addrs[partner.node_id]}))
                continue
            if "webrtc" not in offerer.transports or "webrtc" not in partner.transports:
                out += self._end(probe, "no_common_transport")
                continue
            out.append((offerer.session, {"type": "peer_probe", "probe": probe.probe, "peer": partner.node_id,
                                          "role": "offer", "transport": "webrtc",
                                          "ice_servers": list(config.peer_ice_servers)}))
        return out

    def _partner(self, offerer: Participant, now: float, rng: random.Random,
                 predict_ms: Callable[[str, str], float | None]) -> Participant | None:
        repeat_s = self.config.peer_probe_pair_repeat_s
        idle = [p for p in self.participants.values() if p.probe is None and p.node_id != offerer.node_id
                and now - self.last_pair.get(_pair(offerer.node_id, p.node_id), -1e18) >= repeat_s]
        if not idle:
            return None
        if rng.random() >= self.config.peer_probe_nearest_share:
            return rng.choice(idle)
        predicted = [(d, rng.random(), p) for p in idle if (d := predict_ms(offerer.node_id, p.node_id)) is not None]
        return min(predicted, key=lambda x: (x[0], x[1]))[2] if predicted else rng.choice(idle)

    def _probe(self, session: str, message: dict[str, Any], stage: str, role: str) -> PeerProbe:
        probe = self.probes.get(str(message.get("probe")))
        if probe is None:
            raise LiveError("unknown_probe", "no peer probe of that id is in flight (it may have timed out)")
        side = probe.offerer if role == "offerer" else probe.answerer
        if side.session != session:
            raise LiveError("not_your_probe", f"only the {role} of probe {probe.probe} sends that")
        if probe.stage != stage:
            raise LiveError("unexpected_message", f"probe {probe.probe} is at its {probe.stage} step, not {stage}")
        return probe

    def offer(self, session: str, message: dict[str, Any]) -> Outgoing:
        probe = self._probe(session, message, "offer", "offerer")
        if probe.transport == "libp2p":  # the offerer pinged and proposes; the answerer pings and co-signs
            sample = self._of_pair(probe, message)
            probe.stage = "measure"
            return [(probe.answerer.session, {"type": "peer_probe", "probe": probe.probe,
                                              "peer": probe.offerer.node_id, "role": "answer", "transport": "libp2p",
                                              "multiaddrs": probe.multiaddrs[probe.offerer.node_id],
                                              "sample": sample})]
        sdp = _sdp(message)
        probe.stage = "answer"
        return [(probe.answerer.session, {"type": "peer_probe", "probe": probe.probe, "peer": probe.offerer.node_id,
                                          "role": "answer", "sdp": sdp,
                                          "ice_servers": list(self.config.peer_ice_servers)})]

    def answer(self, session: str, message: dict[str, Any]) -> Outgoing:
        probe, sdp = self._probe(session, message, "answer", "answerer"), _sdp(message)
        probe.stage = "measure"
        return [(probe.offerer.session, {"type": "peer_answer", "probe": probe.probe, "sdp": sdp})]

    def sample(self, session: str, message: dict[str, Any]) -> tuple[PeerProbe, dict[str, Any]]:
        """The answerer's co-signed sample, checked to be of this probe's pair (the signatures and the
        landmarks are the relay's add_link's to check); the caller ends the probe with finish()."""
        probe = self._probe(session, message, "measure", "answerer")
        return probe, self._of_pair(probe, message)

    @staticmethod
    def _of_pair(probe: PeerProbe, message: dict[str, Any]) -> dict[str, Any]:
        sample = message.get("sample")
        if not isinstance(sample, dict) or {sample.get("a"), sample.get("b")} != {probe.offerer.node_id,
                                                                                  probe.answerer.node_id}:
            raise LiveError("invalid_message", f"{message.get('type')} needs the LinkSample of this probe's two "
                                               "nodes")
        return sample

    def finish(self, probe: PeerProbe, code: str, rtt_ms: float | None = None,
               confirmed: bool | None = None) -> Outgoing:
        return self._end(probe, code, rtt_ms, confirmed)

    def failed(self, session: str, message: dict[str, Any]) -> Outgoing:
        probe = self.probes.get(str(message.get("probe")))
        if probe is None or session not in (probe.offerer.session, probe.answerer.session):
            raise LiveError("unknown_probe", "no peer probe of that id is in flight for this session")
        return self._end(probe, "peer_failed")

    def expire(self, now: float) -> Outgoing:
        """Ends the probes older than peer_probe_timeout_s (a side that went silent)."""
        out: Outgoing = []
        for probe in [p for p in self.probes.values() if now - p.started > self.config.peer_probe_timeout_s]:
            out += self._end(probe, "timeout")
        return out

    def _end(self, probe: PeerProbe, code: str, rtt_ms: float | None = None,
             confirmed: bool | None = None) -> Outgoing:
        if self.probes.pop(probe.probe, None) is None:
            return []
        self.outcomes[code] += 1
        done = {"type": "peer_done", "probe": probe.probe, "code": code, "rtt_ms": rtt_ms, "confirmed": confirmed,
                "transport": probe.transport}
        out: Outgoing = []
        for side in (probe.offerer, probe.answerer):
            side.probe = None
            if self.participants.get(side.session) is side:
                out.append((side.session, done))
        return out


def dialable(addrs: list[str], owner: Participant, dialer: Participant) -> list[str]:
    """The owner's multiaddrs the dialer can reach: loopback ones only where both sessions come from loopback
    (nodes on the relay's own machine). A node's libp2p host listens on loopback unless its operator announces
    another address, and one client address is no proof of one machine: nodes behind one NAT, or every node
    behind a proxy the relay does not trust, share it, and a loopback address there dials the dialer itself."""
    if _loopback_host(owner.host) and _loopback_host(dialer.host):
        return addrs
    return [a for a in addrs if not is_loopback(a)]


def _loopback_host(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _pair(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def _sdp(message: dict[str, Any]) -> str:
    sdp = message.get("sdp")
    if not isinstance(sdp, str) or not sdp.startswith("v=0") or len(sdp) > MAX_SDP_CHARS:
        raise LiveError("invalid_field", f"sdp must be a session description (v=0 ...) of at most {MAX_SDP_CHARS} "
                                         f"characters; got {type(sdp).__name__} of {len(str(sdp))}")
    return sdp
