"""`ce-bench node`: a server that stays a node. Measures against the relay's beacon, registers, keeps the
live session (signed heartbeats, co-signed link samples, answers to the relay's challenges;
host_runner/live_client.py reconnects by itself),
re-measures on a schedule drawn from the beacon, resends its outbox, backs off while the relay is away, and
stops cleanly when asked (SIGTERM/SIGINT set the stop event; a measurement in progress finishes first).

The loop is written against small callables so a test can drive it with the real relay and real capsule;
the defaults are in AgentConfig, each with its unit and reason.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from capsule.claim_drift import DriftConfig, drift
from common.keys import NodeKey
from common.multiaddrs import NODE_LIBP2P_LISTEN, is_loopback
from host_runner.live_client import LiveSession
from host_runner.node import RunOptions, measure
from host_runner.relay_client import (
    RelayError,
    fetch_beacon,
    forget_superseded,
    post_profile_told,
    resend_outbox,
    save_to_outbox,
)
from host_runner.wasm import CapsuleError, default_engine, load_module

if TYPE_CHECKING:
    from host_runner.landmarks import Landmark


@dataclass(frozen=True)
class AgentConfig:
    # Mean time between re-measurements, s: a machine's figures change with its load and its upgrades, not
    # by the minute; 6 h keeps the atlas fresh at ~0.01% of the machine's time (a run takes ~15 s).
    remeasure_s: float = 6 * 3600.0
    # The actual interval is remeasure_s x (1 +- spread), drawn from the beacon and NodeId, so nodes that
    # start together do not measure together, and no node can pick its own moment.
    remeasure_spread: float = 0.25
    # Backoff while the relay is unreachable, s: doubling from the first to the last.
    backoff_first_s: float = 2.0
    backoff_max_s: float = 300.0
    # Landmark probes (host_runner/landmarks.py): every this many seconds, the other relays of the cluster
    # (at most landmarks_per_round) measure their RTT to this node, ~1.5 KB each way per probe: at 10 min,
    # ~27 KB per hour with three landmarks. 0: never.
    landmark_interval_s: float = 600.0
    landmarks_per_round: int = 3
    # Seconds a landmark probe waits at most while the node computes a challenge (each phase of a roll call
    # asks ~1 s of work at the claimed speed); after that it goes ahead.
    landmark_hold_s: float = 30.0
    # Node-to-node probes the relay brokers (host_runner/peer_probe.py: WebRTC over aiortc): a server's RTT
    # to other nodes, the map's edges; the relay paces them (peer_probe_interval_s).
    peer_probes: bool = True
    # Measure again at once when the roll calls keep showing another speed than the claim (claim_drift.py).
    drift: DriftConfig = DriftConfig()
    # The node's libp2p host (docs/mesh.md): where it listens (a TCP multiaddr; port 0: one the OS picks) and
    # what it announces instead (a public address in front of NAT); None: no libp2p host. It answers ping
    # and identify for any peer; its multiaddrs go to the relay on the live session.
    libp2p_listen: str | None = NODE_LIBP2P_LISTEN
    libp2p_announce: tuple[str, ...] = ()
    # Dispatched work (docs/jobs.md): tasks of CE jobs the relay places on this node run in this many threads at
    # once (each a core at most), under the limits of their manifest; 0: the node takes no work.
    job_slots: int = 1
    # The address the live session connects from (a host with several addresses; None: the system's choice)
    source_address: str | None = None


def remeasure_after_s(beacon_value: str, node_id: str, config: AgentConfig) -> float:
    digest = hashlib.sha256(f"ce-bench/v1/remeasure/{beacon_value}/{node_id}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64  # uniform in [0, 1)
    return config.remeasure_s * (1 + config.remeasure_spread * (2 * u - 1))


# How a relay sizes a roll-call challenge (web/config.py; web/proof/challenges.py new_challenge): warmed the same.
CHALLENGE_MAX_INSTANCES = 64     # challenge_max_instances
ROLL_CALL_TARGET_S = 1.0         # roll_call_target_s: the work is sized for this long at the claim
CORE_FLOOR_GFLOPS = 2.0          # core_floor_gflops: no instance is given less work than this per second


def llm_streams(profile: dict[str, Any]) -> int:
    """The decode streams a relay's reference-model challenge to this profile asks for (its claim's streams:
    web/proof/challenges.py new_llm_challenge), so the session warms that many models; 0 without a tokens/s
    claim."""
    llm = profile.get("llm") or {}
    if not llm.get("tokens_per_sec"):
        return 0
    streams = llm.get("streams")
    return min(streams, CHALLENGE_MAX_INSTANCES) if type(streams) is int and streams > 0 else 1


def challenge_shape(profile: dict[str, Any]) -> tuple[int, int, int] | None:
    """(instances, SGEMM order, products per instance) of a relay's roll-call challenge to this profile, sized
    as web/proof/challenges.py new_challenge sizes it from the same evidence (web/api/summary.py), so the session can
    warm that many reactors with that much memory first; None where the profile claims no GFLOP/s."""
    from capsule.challenge import challenge_size

    sgemm = ((profile.get("evidence") or {}).get("cpu") or {}).get("gflops_fp32") or {}
    listed = sgemm.get("instances")
    instances = len(listed) if isinstance(listed, list) and listed else profile["cpu"].get("cores")
    claimed = profile["cpu"].get("gflops_fp32")
    if type(instances) is not int or instances <= 0 or not isinstance(claimed, int | float) or claimed <= 0:
        return None
    return challenge_size(float(claimed), instances, sgemm.get("n"), ROLL_CALL_TARGET_S, CHALLENGE_MAX_INSTANCES,
                          CORE_FLOOR_GFLOPS)


class Agent:
    def __init__(self, relay: str, key: NodeKey, opts: RunOptions, config: AgentConfig = AgentConfig(),
                 say: Callable[[str], None] = print) -> None:
        self.relay = relay
        self.key = key
        self.opts = opts
        self.config = config
        self.say = say
        self.stop = threading.Event()
        self.session: LiveSession | None = None
        self.superseded: str | None = None  # set when a newer session of this node's key closed ours
        self.registered = 0  # profiles the relay accepted
        self.probes = 0      # landmark probes completed
        self.claimed_gflops: float | None = None  # the CPU claim of the profile last published
        self.results_seen = 0                     # the session's results read when that claim was made
        self.drift_at = float("-inf")             # monotonic time of the last measurement drift started
        self.answers_instances: int | None = None  # the instances a roll call's challenge splits over
        self.keep_instances: int | None = None    # set by a drift: that count, for the measurement to keep
        self.libp2p: Any = None                   # common.libp2p_host.Libp2pHost once started

    def start_libp2p(self) -> list[str]:
        """Starts the node's libp2p host (ping, identify) with its own key: PeerId = NodeId. A host that
        cannot start is said and skipped: the node measures and counts without it."""
        if not self.config.libp2p_listen:
            return []
        from common.libp2p_host import Libp2pError, Libp2pHost

        host = Libp2pHost(self.key.seed, self.config.libp2p_listen, announce=self.config.libp2p_announce)
        try:
            host.start()
        except Libp2pError as exc:
            self.say(f"no libp2p host: {exc}")
            return []
        self.libp2p = host
        only_here = all(is_loopback(a) for a in host.multiaddrs)
        self.say(f"libp2p host {host.peer_id} on {', '.join(host.multiaddrs)}"
                 + (" (this machine only: peers elsewhere probe it over WebRTC; --libp2p-listen /ip4/0.0.0.0/tcp/PORT "
                    "or --libp2p-announce to be dialled)" if only_here else ""))
        return host.multiaddrs

    def run(self) -> None:
        backoff = self.config.backoff_first_s
        self.start_libp2p()
        try:
            while not self.stop.is_set():
                wait = self._round()
                if wait is None:  # the relay is away: try again later, less often each time
                    wait, backoff = backoff, min(backoff * 2, self.config.backoff_max_s)
                else:
                    backoff = self.config.backoff_first_s
                self._wait(wait)
        finally:
            if self.session is not None:
                self.session.stop()
            if self.libp2p is not None:
                self.libp2p.stop()
            self.say("node stopped")

    def _round(self) -> float | None:
        """One measure-and-register round; the seconds until the next, or None when the relay was away."""
        sent, problems = resend_outbox(self.relay)
        if sent:
            self.say(f"resent {sent} waiting profile(s)")
        for problem in problems:
            self.say(f"outbox: {problem}")
        try:
            beacon = fetch_beacon(self.relay)
        except RelayError as exc:
            self.say(f"{exc}; retrying")
            return None
        self.say(f"measuring against beacon round {beacon['round']}")
        try:
            # after a drift the answers' count is kept unless fewer instances do more (capsule/scaling.py); a
            # step the session's answers overlapped runs again (host_runner/step_guard.py)
            opts = replace(self.opts, keep_instances=self.keep_instances, answers=self.session)
            result = measure(self.key, beacon, opts)
        except CapsuleError as exc:
            self.say(f"measurement failed: {exc}; retrying after the next interval")
            return remeasure_after_s(beacon["value"], self.key.node_id, self.config)
        if self.stop.is_set():  # asked to stop while measuring: do not publish half a decision
            self.say("asked to stop during the measurement: it is not published")
            return 0.0
        if not self._publish(result.profile):
            return None
        self.claimed_gflops = result.profile["cpu"].get("gflops_fp32")
        self.keep_instances = None
        shape = challenge_shape(result.profile)
        self.answers_instances = shape[0] if shape is not None else None  # what a roll call splits over
        self.results_seen = len(self.session.results) if self.session is not None else 0
        if self.session is None and self.registered:  # heartbeats need a profile the relay accepted
            reactor = self.opts.capsule.with_name("capsule-reactor.wasm")
            if reactor.exists():
                load_module(default_engine(), reactor)  # compiled now, not inside the first challenge's time
            else:
                self.say(f"{reactor} is missing: this node cannot answer challenges and stays unverified")
            gpu = None
            if self.opts.gpu:  # compiled now, once, not inside a GPU challenge's time (--no-gpu: none)
                from host_runner.gpu_answer import context_for

                gpu, line = context_for(result.profile)
                self.say(line)
            self.session = LiveSession(self.relay, self.key, reactor_wasm=reactor if reactor.exists() else None,
                                       say=self.say, gpu=gpu, peer_probes=self.config.peer_probes,
                                       warm=challenge_shape(result.profile),
                                       warm_llm=llm_streams(result.profile),
                                       libp2p=self.libp2p, job_slots=self.config.job_slots,
                                       connect_options={"source_address": (self.config.source_address, 0)}
                                       if self.config.source_address else None).start()
            if self.config.landmark_interval_s > 0:
                threading.Thread(target=self._probe_landmarks, name="landmarks", daemon=True).start()
        wait = remeasure_after_s(beacon["value"], self.key.node_id, self.config)
        state = f"registered ({self.registered} profile(s) accepted), live" if self.registered else "not registered"
        self.say(f"{state}; next measurement in " + (f"{wait / 3600:.1f} h" if wait >= 360 else f"{wait:.0f} s"))
        return wait

    def _wait(self, wait_s: float) -> None:
        """Until the next scheduled measurement, or sooner when the roll calls keep showing another speed
        than the claim (capsule/claim_drift.py)."""
        until = time.monotonic() + wait_s
        while not self.stop.is_set() and (left := until - time.monotonic()) > 0:
            self.stop.wait(min(left, 1.0))
            session = self.session
            if session is not None and session.superseded is not None:
                self.superseded = session.superseded  # one key is one node: the other process keeps it
                self.stop.set()
                return
            if session is None or time.monotonic() - self.drift_at < self.config.drift.min_gap_s:
                continue
            reason = drift(list(session.results)[self.results_seen:], self.claimed_gflops, self.config.drift)
            if reason is not None:
                self.drift_at = time.monotonic()
                self.keep_instances = self.answers_instances
                self.say(f"{reason}: measuring again now")
                return

    def _probe_landmarks(self) -> None:
        """Now and every landmark_interval_s: the other relays of the cluster probe this node (one line each)."""
        from host_runner.landmarks import landmarks

        wait = 0.0
        while not self.stop.wait(wait):
            wait = self.config.landmark_interval_s
            try:
                home = self.session.relay_url if self.session is not None else self.relay  # where it is live now
                found = landmarks(home, limit=self.config.landmarks_per_round)
            except (OSError, ValueError, KeyError) as exc:
                self.say(f"landmarks: could not list the relays ({exc})")
                found = []
            for landmark in found:
                self._probe_landmark(landmark)

    def _probe_landmark(self, landmark: Landmark) -> None:
        """One landmark's probe, asked again shortly while it does not hold this node's profile yet."""
        from host_runner.landmarks import UNKNOWN_NODE_RETRY_S, UNKNOWN_NODE_TRIES, ProbeError, probe

        for attempt in range(1, UNKNOWN_NODE_TRIES + 1):
            self._wait_until_not_answering()
            try:
                rtt_ms = probe(landmark.url, self.key)
            except ProbeError as exc:
                self.say(f"landmark {landmark.relay[-8:]} ({landmark.url}): probe failed: {exc}")
                if exc.not_known_yet and attempt < UNKNOWN_NODE_TRIES and not self.stop.wait(UNKNOWN_NODE_RETRY_S):
                    continue  # the profile is still on its way there (common/landmark_probe.py)
                return
            self.probes += 1
            self.say(f"landmark {landmark.relay[-8:]} ({landmark.url}): {rtt_ms:.2f} ms")
            return

    def _wait_until_not_answering(self) -> None:
        """Holds a landmark probe back while the live session computes a challenge (up to
        config.landmark_hold_s): the probe's pongs would wait behind that work, and its sample, the latest of
        its pair, would put this node seconds away on the map until the next probe."""
        deadline = time.monotonic() + self.config.landmark_hold_s
        while (self.session is not None and self.session.answering and time.monotonic() < deadline
               and not self.stop.is_set()):
            self.stop.wait(0.1)

    def _publish(self, profile: dict[str, Any]) -> bool:
        try:
            for warning in post_profile_told(self.relay, profile)[1]:
                self.say(f"the relay says: {warning}")
        except RelayError as exc:
            if exc.retryable:
                kept = save_to_outbox(profile)
                self.say(f"{exc}; kept in {kept}")
                return False
            self.say(f"{exc}; the profile is dropped from this round (the next round measures again)")
            return True  # a refusal is an answer: go live and measure again on schedule
        self.registered += 1
        for line in forget_superseded(profile):
            self.say(f"outbox: {line}")
        return True
