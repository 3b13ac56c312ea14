"""The relay process: wires the pure parts (ingest, atlas, beacon, liveness) to storage, time, tasks and
the cluster. The Starlette app (web/api/app.py) is a thin adapter over this object."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import deque
from typing import Any

from capsule.peerid import PeerIdError
from capsule.signing import SignatureError, sign, verify_record
from capsule.typed import ValidationError
from common.keys import load_or_create
from web.api.ingest import BeaconBook, Ingest, parse_json
from web.api.metrics import Metrics
from web.api.problems import Problem
from web.api.ratelimit import TokenBuckets
from web.api.summary import ProfileSummary
from web.api.verify_pool import VerifyPool
from web.beacon import next_round
from web.config import RelayConfig
from web.gc_policy import GcPolicy
from web.intake.profiles import Origin, ProfileIntake
from web.jobs.cluster_jobs import JobMirror
from web.jobs.desk import JobDesk
from web.jobs.job_store import JobStore
from web.jobs.relay_view import RelayNodeView
from web.map.atlas import Atlas
from web.map.links import LinkBook, fitted_book, worth_gossiping
from web.map.peer_desk import PeerDesk
from web.parts import Core, Outbox
from web.proof.challenge_desk import ChallengeDesk
from web.proof.roll_caller import STORE_KEY
from web.sessions.live_guard import AddressGuard
from web.sessions.loop_lag import LoopLag
from web.store import Store, StoreError

log = logging.getLogger("ce.relay")


class Relay:
    def __init__(self, config: RelayConfig) -> None:
        self.config = config
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.key = load_or_create(config.data_dir / "relay.key")
        self.relay_id = self.key.node_id
        self.store = Store(config.data_dir / "relay.sqlite")
        self.atlas = Atlas(config, self.relay_id)
        self.beacons = BeaconBook(self.relay_id, config.beacon_keep_rounds)
        self.ingest = Ingest(config, self.atlas, self.beacons)
        self.ip_limits = TokenBuckets(config.ip_rate_per_s, config.ip_burst)
        self.live_guard = AddressGuard(config)  # WS /v1/live: frame limits, sessions and bytes per address
        self.loop_lag = LoopLag(config.loop_lag_interval_s)  # this relay's own event-loop lag
        self.metrics = Metrics()
        self.links = LinkBook(self.relay_id, config)
        self.verifier = VerifyPool(config.verify_workers)
        self.multiaddrs: dict[str, list[str]] = {}  # node id -> the libp2p multiaddrs its live session announced
        # node id -> the live connection its signed heartbeat bound (web/sessions/live_endpoint.py: one key is
        # one node; a newer session supersedes an older one, and both are told)
        self.bound: dict[str, Any] = {}
        # the parts get the narrow things they need (web/parts.py), not this object
        self.core = Core(config, self.key, self.store, self.atlas, self.beacons, self.metrics)
        self.outbox = Outbox(self.relay_id)  # the cluster and the mesh, once each is up
        self.challenges = ChallengeDesk(self.core, self.outbox)
        self.intake = ProfileIntake(self.core, self.challenges.refresh, self.outbox)  # every way a profile comes in
        # dispatched work: its own SQLite file, and a NodeView of the map instead of the relay (web/jobs/ports.py)
        self.job_store = JobStore(config.data_dir / "jobs.sqlite")
        self.jobs = JobDesk(config.jobs, self.job_store,
                            RelayNodeView(self.atlas, self.challenges, self.links, self.beacons, config.region))
        self.peers = PeerDesk(config, self.links, self.multiaddrs, self.add_link)  # node-to-node probes
        self.metrics.peer_probes = self.peers.broker.outcomes
        # no burst: probes that leave together queue behind each other on the relay's uplink (measured: 64 at
        # once put 200 ms on the heartbeat acks of a 100-session relay)
        self.bw_probe_budget = TokenBuckets(config.bw_probes_per_s, 1)
        self.cluster: Any = None  # web.cluster.nats_cluster.Cluster when --nats is given
        self.mesh: Any = None  # web.mesh.relay_mesh.RelayMesh once its host listens (none with --no-libp2p)
        self.mesh_error: str | None = None  # why the libp2p host did not start, if it did not
        self.mesh_starting: asyncio.Task[None] | None = None  # the host coming up beside the relay (start())
        self._inflight: set[str] = set()
        self.epoch = secrets.token_hex(4)  # in ETags: versions restart with the process
        self._tasks: list[asyncio.Task[None]] = []
        self.stats_history: deque[dict[str, Any]] = deque(maxlen=config.stats_history_kept)
        self.gc = GcPolicy(config.gc_freeze_interval_s, config.gc_full_interval_s)
        self._refit_not_before = 0.0  # monotonic seconds: refits keep to link_refit_max_duty

    async def start(self) -> None:
        now = time.time()
        loaded = 0
        backfill = []
        for _node_id, measured_at, origin, body, _synced, stored in self.store.all_profiles():
            # stored summaries are this relay's own writing; a row of an older relay is parsed once and its
            # summary written back, so the next start reads it
            if stored is not None:
                summary = ProfileSummary.from_json(json.loads(stored))
            else:
                summary = ProfileSummary.of_profile(json.loads(body))
                backfill.append(Store.set_summary_op(summary.node_id, measured_at,
                                                     json.dumps(summary.to_json()).encode()))
            self.atlas.put(summary, origin, now, live=False)
            loaded += 1
        if backfill:
            await self.store.write(Store.all_of(*backfill))
        for body in self.store.beacons():
            self.beacons.add(json.loads(body))
        self.links.load([json.loads(body) for body in self.store.all_links()])
        replayed = self.challenges.load(
            [(n, json.loads(body)) for n, body in self.store.all_trust()],
            [(n, at, json.loads(body)) for n, at, body in self.store.challenges_without_trust()])
        if not self.store.trust_states_complete():  # a store of an older relay: replayed once, then states
            await self.store.write(Store.all_of(*self.challenges.trust_state_ops(replayed, time.time()),
                                                Store.trust_states_complete_op()))
        self.stats_history.extend(json.loads(b) for b in self.store.stats_points(self.config.stats_history_kept))
        self.challenges.roll.load([json.loads(body) for _, _, body in
                                   reversed(self.store.history(STORE_KEY, self.config.roll_calls_kept))])
        await self.issue_beacon()
        self.jobs.load(time.time())
        self._tasks = [asyncio.create_task(self.jobs.run()),
                       asyncio.create_task(self._every(self.config.beacon_interval_s, self.issue_beacon)),
                       asyncio.create_task(self._every(self.config.sweep_interval_s, self._sweep)),
                       asyncio.create_task(self._every(1.0, self.challenges.tick)),
                       asyncio.create_task(self._every(1.0, self.peers.tick)),
                       asyncio.create_task(self._every(self.config.landmark_mesh_interval_s, self.probe_peer_relays)),
                       asyncio.create_task(self._every(self.config.stats_history_interval_s, self.sample_stats)),
                       asyncio.create_task(self._every(self.config.link_refit_interval_s, self.refit_links)),
                       asyncio.create_task(self._every(self.config.gc_freeze_interval_s, self._collect)),
                       asyncio.create_task(self.loop_lag.run())]
        await self.sample_stats()
        if self.config.nats_url:
            from web.cluster.nats_auth import credentials
            from web.cluster.nats_cluster import Cluster, ClusterInbox

            inbox = ClusterInbox(self._peer_beacon, self.challenges.apply_transcript,
                                 lambda body, now: self.add_link(body, now, from_cluster=True),
                                 self.links.measured, self.challenges, self.intake)
            self.cluster = Cluster(self.core, inbox, self.config.nats_url, self.config.nats_bucket,
                                   credentials(self.config))
            self.outbox.cluster = self.cluster
            await self.cluster.start()
            cluster = self.cluster
            bucket = f"{self.config.nats_bucket}-jobs"
            self.jobs.mirror = JobMirror(self.relay_id, lambda: cluster.job_bucket(bucket), cluster.alive_peers,
                                         frozenset(self.config.jobs.submitters))
            self._tasks += [asyncio.create_task(self.jobs.mirror.write_loop()),
                            asyncio.create_task(self.jobs.adopt_loop())]
        if self.config.libp2p_listen:
            # in the background: the relay serves at once. Importing py-libp2p and listening took ~0.45 s of
            # every relay's start (0.86 s to the first answer, 0.41 s without a host; 2026-12-06, 2 vCPU), and
            # nothing HTTP serves needs the host. Until it listens the relay is as one off the mesh (nothing is
            # published, nothing taken) and GET /v1/libp2p answers 503 libp2p_starting.
            self.mesh_starting = asyncio.create_task(self._start_mesh())
        log.info("relay started", extra={"relay": self.relay_id, "profiles_loaded": loaded,
                                         "store": self.store.durability(),
                                         "beacon_round": self.beacons.latest and self.beacons.latest["round"]})

    async def _start_mesh(self) -> None:
        """The relay's libp2p host (docs/mesh.md), `self.mesh` once it listens. One that cannot start (its port
        taken, the library missing) is logged and said at GET /v1/libp2p; the relay serves on without the mesh."""
        from common.libp2p_host import Libp2pError  # neither imports py-libp2p: the host's thread does
        from web.mesh.relay_mesh import RelayMesh

        try:
            listen = self.config.libp2p_listen or ""
            mesh = RelayMesh(self.key.seed, listen, self.config.libp2p_announce, self.key,
                             lambda body: self.post_profile(body, from_mesh=True),
                             lambda body, now: self.add_link(body, now, from_mesh=True),
                             lambda sent, sample: worth_gossiping(sent, sample, self.config),
                             intake_rate_per_s=self.config.ip_rate_per_s, intake_burst=self.config.ip_burst)
            await mesh.start()
        except Libp2pError as exc:
            log.error("no libp2p host: the relay is not on the mesh", extra={"error": str(exc)})
            self.mesh_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - started in the background, a bug must still be said, not lost
            log.exception("no libp2p host: the relay is not on the mesh")
            self.mesh_error = f"{type(exc).__name__}: {exc}"
        else:
            self.mesh = self.outbox.mesh = mesh

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.cluster is not None:
            await self.cluster.stop()
        if self.mesh_starting is not None:
            # a host still coming up is let finish and then stopped: its thread cannot be cancelled, and left
            # behind it would listen on in this process (an in-process relay of the tests)
            await self.mesh_starting
        if self.mesh is not None:
            await self.mesh.stop()
        self.verifier.close()
        self.store.close()
        self.job_store.close()

    async def _collect(self) -> None:
        self.gc.tick(time.monotonic())

    async def _every(self, interval_s: float, job: Any) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await job()
            except Exception:  # a failed round must not stop the loop; it is logged and retried
                log.exception("periodic task failed")

    async def issue_beacon(self) -> None:
        beacon = next_round(self.beacons.latest, self.key)
        await self.store.write(Store.put_beacon_op(beacon["round"], json.dumps(beacon).encode(),
                                                   self.config.beacon_keep_rounds))
        self.beacons.add(beacon)
        if self.cluster is not None:
            self.cluster.publish_beacon(beacon)
        # in a cluster only the leader's rounds draw roll calls, so every relay calls at the same moments
        if self.cluster is None or self.cluster.leader(time.time()) == self.relay_id:
            self.challenges.roll.on_beacon(beacon)

    def _peer_beacon(self, beacon: dict[str, Any], leader: bool) -> None:
        """A peer relay's beacon round (over NATS): profiles may cite it here (a balancer, --processes), and the
        leader's rounds draw this relay's roll calls too."""
        self.ingest.peer_beacon(beacon)
        if leader:
            self.challenges.roll.on_beacon(beacon)

    async def sample_stats(self) -> None:
        """One point of the scoreboard over time: the verified and the claimed totals of the whole atlas."""
        keys = ("nodes", "cpu_cores", "cpu_gflops", "tokens_per_sec", "gpu_tflops")
        verified, claimed = self.atlas.global_verified.snapshot(), self.atlas.global_stats.snapshot()
        at = round(time.time(), 3)
        point = {"at": at, "verified_nodes": len(self.atlas.global_verified),  # cores: claimed only
                 "verified": {k: verified[k] for k in keys[2:]}, "claimed": {k: claimed[k] for k in keys}}
        self.stats_history.append(point)
        await self.store.write(Store.put_stats_point_op(at, json.dumps(point).encode(),
                                                        self.config.stats_history_kept))

    async def _sweep(self) -> None:
        keep = self.cluster.held_elsewhere if self.cluster is not None else None
        for node_id in self.atlas.sweep(time.time(), keep):
            log.info("node offline", extra={"node_id": node_id})

    def check_ip(self, ip: str) -> None:
        wait = self.ip_limits.take(ip, time.monotonic())
        if wait > 0:
            raise Problem(429, "rate_limited", "too many requests from this address", f"retry in {wait:.1f} s",
                          headers={"retry-after": str(max(1, round(wait)))})

    async def post_profile(self, body: bytes, from_mesh: bool = False) -> tuple[int, dict[str, Any]]:
        """POST /v1/profiles, a live session's profile, or one a peer published on the mesh (`from_mesh`: not
        published there again)."""
        started = time.perf_counter()
        try:
            status, result = await self._post_profile(body, from_mesh)
            self.metrics.ingest["replaced" if status == 200 else "stored"] += 1
            return status, result
        except Problem as problem:
            self.metrics.ingest[problem.code] += 1
            raise
        finally:
            self.metrics.ingest_seconds.observe(time.perf_counter() - started)

    async def _post_profile(self, body: bytes, from_mesh: bool) -> tuple[int, dict[str, Any]]:
        self.ingest.check_size(body)
        verified = await self.verifier.verify(body)
        moved = self.cluster.moved_away(verified.summary.node_id) if self.cluster is not None else None
        if moved is not None and verified.summary.measured_at < moved[1]:
            # a node is counted in one region at a time: a profile from before its move must not bring it back
            # here (issue 46: one posted 5 s before the move was "replaced" and counted in both regions)
            raise Problem(409, "moved_region", f"this node moved to region {moved[0]} at {moved[1]:.0f}; a profile "
                          "measured before that is refused here",
                          f"measured_at {verified.summary.measured_at}: measure again, or post to a relay of "
                          f"region {moved[0]}")
        now = time.time()
        _, replaced = self.ingest.admit(verified, now)
        summary = verified.summary
        node_id = summary.node_id
        if node_id in self._inflight:
            raise Problem(409, "concurrent_profile", "another profile of this node is being stored",
                          "retry after the first one is answered")
        self._inflight.add(node_id)
        origin = Origin("mesh" if from_mesh else "http", self.relay_id)
        try:
            await self.store.write(self.intake.write_op(summary, body, origin, now))
        except StoreError as exc:
            log.error("store failed", extra={"error": str(exc)})
            raise Problem(503, "store_unavailable", "the relay cannot store profiles right now", str(exc)) from None
        finally:
            self._inflight.discard(node_id)
        warnings = self.intake.keep(summary, body, origin, now)  # the atlas, the desk, the outbox
        log.debug("profile stored", extra={"node_id": node_id, "replaced": replaced})
        return (200 if replaced else 201), {"node_id": node_id, "measured_at": summary.measured_at,
                                            "status": "replaced" if replaced else "stored",
                                            **({"warnings": warnings} if warnings else {})}

    def history(self, node_id: str, limit: int) -> list[dict[str, Any]]:
        return [{**json.loads(body), "at": at, "event": kind} for at, kind, body in self.store.history(node_id, limit)]

    async def probe_peer_relays(self) -> None:
        """Asks every peer relay that announces a URL for a landmark probe (WS /v1/probe, as a node would):
        each stores and shares the co-signed relay <-> relay edge, the landmarks' mesh. A peer that cannot
        be reached is logged and tried again at the next interval."""
        from common.landmark_probe import ProbeError, probe  # the nodes' own client

        views = self.cluster.book.views if self.cluster is not None else {}
        for peer in self.config.cluster_peers:
            url = views[peer].url if peer in views else None
            if not url:
                continue
            try:
                await asyncio.to_thread(probe, url, self.key)
            except ProbeError as exc:
                log.warning("landmark probe of a peer relay failed", extra={"peer": peer, "error": str(exc)})

    def sign_link(self, body: dict[str, Any]) -> dict[str, Any]:
        return sign("LinkSample", body, self.key, "sig_b")

    async def refit_links(self) -> None:
        """Refits the coordinates from every sample held (web/map/links.py), beside the event loop, at most
        link_refit_max_duty of the time: a refit is pure Python, and while it holds the GIL the event loop
        gets about half of its core (at 10,000 sessions, refits back to back put seconds on heartbeat acks)."""
        if self.links.refit_due() and time.monotonic() >= self._refit_not_before:
            version, samples = self.links.version, list(self.links.shared.values())
            started = time.monotonic()
            fitted = await asyncio.to_thread(fitted_book, self.relay_id, self.config, samples)
            self.links.take_fit(fitted, version)
            took = time.monotonic() - started
            duty = min(1.0, max(self.config.link_refit_max_duty, 0.001))
            self._refit_not_before = time.monotonic() + took * (1 / duty - 1)

    async def add_link(self, body: bytes, now: float, from_cluster: bool = False,
                       from_mesh: bool = False) -> dict[str, Any]:
        """Verifies a co-signed LinkSample (POST /v1/links, the node's answer on a live session, or a peer
        relay's over NATS) and stores it; raises Problem naming what is wrong. Samples taken here are
        published to the cluster (each relay judges them against its own landmarks' edges)."""
        sample: dict[str, Any] = parse_json(body)
        try:
            verify_record("LinkSample", sample)
        except ValidationError as exc:
            raise Problem(422, "invalid_field", "a field of the link sample is invalid", str(exc), exc.path) from None
        except SignatureError as exc:
            raise Problem(422, "bad_signature", "both endpoints must sign the link sample", str(exc),
                          f"$.{exc.field}") from None
        except PeerIdError as exc:  # pragma: no cover - the schema checks NodeIds first
            raise Problem(422, "invalid_field", "not a NodeId", str(exc)) from None
        if sample["measured_at"] > now + self.config.clock_skew_s:
            raise Problem(422, "measured_in_future", "measured_at is in the future", str(sample["measured_at"]),
                          "$.measured_at")
        for end in ("a", "b"):
            if sample[end] not in self.links.landmarks and sample[end] not in self.atlas.nodes:
                raise Problem(422, "unknown_node", "an endpoint has no profile at this relay",
                              f"{sample[end]} (post its NodeProfile first)", f"$.{end}")
        confirmed = self.links.judge(sample)
        await self.store.write(Store.put_link_op(sample["a"], sample["b"], sample["measured_at"],
                                                 json.dumps(sample).encode()))
        send = self.cluster is not None and not from_cluster and self.cluster.worth_sending(sample)
        if not self.links.add(sample, confirmed, shared=self.cluster is None or from_cluster or send):
            return sample  # not newer than the one held (a sample seen twice, or out of order)
        if send and self.cluster is not None:
            self.cluster.publish_link(sample)
        if confirmed and self.mesh is not None and not (from_cluster or from_mesh):
            self.mesh.publish_link(sample)  # what this relay took and confirmed (its peers publish their own)
        return sample

    def new_session_id(self) -> str:
        return secrets.token_hex(16)
