"""A relay cluster on NATS JetStream (ARCHITECTURE.md: "NATS JetStream for a relay cluster").

- Durable shared state: a key-value bucket, key = WRITER.NodeId (WRITER: the relay's NATS user, or its id on a
  server without users; nats_auth.writer_prefix), value = {"origin": relay id, "body": profile}. Each relay user may
  write only its own keys, so none can overwrite or purge another's; a node posted to two relays has two keys and
  every reader keeps the newer profile (each verified before use: garbage under any key is skipped).
- Live updates: every accepted profile is also published on SUBJECT_PROFILES, so other relays learn within
  milliseconds; which nodes are live on each relay crosses as signed digests on SUBJECT_DIGESTS, one per
  heartbeat interval and only when something changed (web/cluster/digests.py), not one message per heartbeat.
- Catch-up: on start and after every reconnect the relay reads the whole bucket.
- Trust no relay: everything that arrives is re-verified (schema + signature) and kept only when newer.
- Outages: a relay keeps serving from its own SQLite store; profiles accepted while NATS is away stay
  marked unsynced and a resync loop pushes them once the server is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import nats
from nats.errors import Error as NatsError
from nats.js.errors import Error as JetStreamError

from capsule.signing import SignatureError, sign, verify_record
from capsule.typed import ValidationError
from web.api.ingest import verify_profile
from web.api.problems import Problem
from web.cluster.beacon_gate import BeaconGate
from web.cluster.beacon_gate import window_s as beacon_window_s
from web.cluster.buckets import Buckets
from web.cluster.digests import DigestBook, DigestWriter
from web.cluster.nats_auth import writer_prefix
from web.cluster.regional import Regional, TrustDesk
from web.cluster.regions import Subjects
from web.intake.profiles import Origin, ProfileIntake
from web.map.links import worth_gossiping
from web.mesh.messages import scoreboard_body
from web.parts import Core
from web.proof.transcripts import TranscriptError
from web.replay_marks import StoreMarks
from web.store import Store

log = logging.getLogger("ce.relay.cluster")
# The subjects (web/cluster/regions.py Subjects: with a region, digests, links and transcripts are the region's own):
# profiles; each relay's signed LiveDigest, who is live there (web/cluster/digests.py); every relay's signed beacon
# rounds (presence, and the leader's draw roll calls); signed challenge transcripts (web/proof/transcripts.py);
# co-signed LinkSamples each relay took (web/map/links.py); each region's signed roll-call totals.
FLAT = Subjects.of(None)
SUBJECT_PROFILES, SUBJECT_DIGESTS, SUBJECT_BEACONS = FLAT.profiles, FLAT.digests, FLAT.beacons
SUBJECT_TRANSCRIPTS, SUBJECT_LINKS = FLAT.transcripts, FLAT.links
RESYNC_INTERVAL_S = 1.0


@dataclass(frozen=True)
class ClusterInbox:
    """What the cluster hands to the rest of the relay (web/relay.py wires it)."""

    # a peer relay's beacon round: profiles may cite it here; True when it is the leader's (it draws roll calls)
    peer_beacon: Callable[[dict[str, Any], bool], None]
    # a peer's signed challenge transcript (ChallengeDesk.apply_transcript; raises TranscriptError)
    transcript: Callable[[dict[str, Any]], Awaitable[None]]
    # a link sample another relay took, judged as if posted here (Relay.add_link; raises Problem)
    link: Callable[[bytes, float], Awaitable[dict[str, Any]]]
    # the sample held for a pair of endpoints, if any (LinkBook.measured)
    link_held: Callable[[str, str], dict[str, Any] | None]
    # nodes' trust, carried between regions (web/cluster/regional.py)
    desk: TrustDesk
    # what follows a profile taken from a peer: store and history row, atlas, desk (web/intake/profiles.py)
    profiles: ProfileIntake


class Cluster:
    def __init__(self, core: Core, inbox: ClusterInbox, url: str, bucket: str,
                 auth: dict[str, str] | None = None) -> None:
        self.core = core
        self.inbox = inbox
        self.url = url
        self.bucket = bucket
        self.auth = auth or {}  # nats.connect's user and password (web/cluster/nats_auth.py credentials)
        self.nc: Any = None
        self.kv: Any = None
        self.kv_links: Any = None  # the link samples' bucket (key "WRITER.a.b"): a relay that starts later catches up
        self.key_prefix = writer_prefix(core.config, core.relay_id)  # this relay's keys in both buckets
        self.buckets = Buckets()
        self.kv_jobs: Any = None  # dispatched jobs (web/jobs/cluster_jobs.py)
        self.links_sent: dict[tuple[str, str], dict[str, Any]] = {}  # this relay's edges as last sent
        self._tasks: list[asyncio.Task[None]] = []
        self._catch_up_needed = asyncio.Event()
        self.peers_seen: dict[str, float] = {}  # peer relay id -> unix time of its latest beacon round
        # rounds taken only fresh and in order, across restarts (a replayed round draws and keeps alive nothing)
        self.beacon_gate = BeaconGate(beacon_window_s(core.config.clock_skew_s, core.config.beacon_interval_s),
                                      StoreMarks(core.store))
        self.beacon_gate.load(time.time())
        config = core.config
        self.subjects = Subjects.of(config.region)
        # a region's own part: the other regions' totals, and nodes moving between regions (web/cluster/regional.py)
        self.regions: Regional | None = None
        self.local: dict[str, tuple[int, float]] = {}  # node id -> (live here since, last heartbeat), unix s
        self.writer = DigestWriter(core.relay_id, config.digest_full_every, epoch=int(time.time() * 1000),
                                   url=config.public_url)
        # a digest older than two full-digest periods on arrival can only be a replay
        self.book = DigestBook(frozenset(config.cluster_peers),
                               max_age_s=2 * config.digest_full_every * config.heartbeat_interval_s + 5.0)

    async def start(self) -> None:
        self.nc = await nats.connect(
            self.url, name=f"ce-relay-{self.core.relay_id[-8:]}", connect_timeout=2, reconnect_time_wait=0.5,
            max_reconnect_attempts=-1, allow_reconnect=True, error_cb=self._on_error,
            disconnected_cb=self._on_disconnected, reconnected_cb=self._on_reconnected, **self.auth)
        subjects = self.subjects
        await self.nc.subscribe(subjects.profiles, cb=self._on_profile_message)
        await self.nc.subscribe(subjects.digests, cb=self._on_digest_message)
        await self.nc.subscribe(subjects.beacons, cb=self._on_beacon_message)
        await self.nc.subscribe(subjects.transcripts, cb=self._on_transcript_message)
        await self.nc.subscribe(subjects.links, cb=self._on_link_message)
        if self.core.config.region is not None:
            core = self.core
            self.regions = Regional(self.nc, core.relay_id, core.key, core.config, core.metrics.cluster_received,
                                    self.inbox.desk, StoreMarks(core.store))
            await self.regions.start()
        self._catch_up_needed.set()
        self._tasks = [asyncio.create_task(self._sync_loop()), asyncio.create_task(self._digest_loop())]
        if self.core.beacons.latest is not None:  # issued before NATS was up: peers honour profiles citing it
            self.publish_beacon(self.core.beacons.latest)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.regions is not None:
            self.regions.stop()
        if self.nc is not None:
            with contextlib.suppress(TimeoutError, NatsError):
                await asyncio.wait_for(self.nc.close(), timeout=5)

    async def _on_error(self, exc: Exception) -> None:
        log.warning("nats error", extra={"error": str(exc)})

    async def _on_disconnected(self) -> None:
        log.warning("nats disconnected; serving from the local store")

    async def _on_reconnected(self) -> None:
        log.info("nats reconnected; catching up")
        if self.core.beacons.latest is not None:  # issued while away: peers honour profiles citing it
            self.publish_beacon(self.core.beacons.latest)
        self.kv = self.kv_links = self.kv_jobs = None
        self._catch_up_needed.set()

    async def _kv(self, name: str) -> Any:
        """A bucket, made without rollups where missing and checked once (web/cluster/buckets.py)."""
        return await self.buckets.open(self.nc.jetstream(timeout=5, domain=self.core.config.nats_domain), name)

    async def _put(self, kv: Any, key: str, value: bytes) -> None:
        """A bucket write. Across a leaf connection (nats_domain) it goes to the hub's own prefix, as NATS's Go
        client does (nats.py writes to `$KV.<bucket>.<key>`, which a hub does not forward from a leaf)."""
        domain = self.core.config.nats_domain
        if domain is None:
            await kv.put(key, value)
            return
        js = self.nc.jetstream(timeout=5, domain=domain)
        await js.publish(f"$JS.{domain}.API.$KV.{kv._name}.{key}", value)

    async def job_bucket(self, name: str) -> Any:
        """The jobs' bucket (web/jobs/cluster_jobs.py), made on first use; again after a reconnect."""
        if self.kv_jobs is None:
            self.kv_jobs = await self._kv(name)
        return self.kv_jobs

    async def _bucket(self) -> Any:
        if self.kv is None:
            self.kv = await self._kv(self.bucket)
        return self.kv

    async def _links_bucket(self) -> Any:
        if self.kv_links is None:  # a region's samples in a bucket of its own: catch-up reads the region only
            region = self.core.config.region
            self.kv_links = await self._kv(f"{self.bucket}-links" + (f"-{region}" if region else ""))
        return self.kv_links

    async def _sync_loop(self) -> None:
        """Catches up from the bucket when needed and pushes unsynced local profiles, forever."""
        while True:
            try:
                if self.nc.is_connected:
                    if self._catch_up_needed.is_set():
                        await self._catch_up()
                        self._catch_up_needed.clear()
                    await self._push_unsynced()
            except (NatsError, JetStreamError, TimeoutError, OSError) as exc:
                log.warning("cluster sync failed; retrying", extra={"error": repr(exc)})
                self.kv = None
            await asyncio.sleep(RESYNC_INTERVAL_S)

    @staticmethod
    async def _apply_all(kv: Any, apply: Callable[[bytes], Awaitable[int]]) -> int:
        """Applies every current value of a bucket; how many were taken."""
        watcher = await kv.watchall()
        applied = 0
        try:
            while True:
                entry = await watcher.updates(timeout=10)
                if entry is None:  # the end of the current values
                    break
                if entry.value:
                    applied += await apply(entry.value)
        finally:
            await watcher.stop()
        return applied

    async def _catch_up(self) -> None:
        applied = await self._apply_all(await self._bucket(), self.apply)
        log.info("caught up from the bucket", extra={"applied": applied})
        # after the profiles: a sample needs both endpoints' profiles
        applied = await self._apply_all(await self._links_bucket(), self.apply_link)
        log.info("caught up link samples from the bucket", extra={"applied": applied})

    async def _push_unsynced(self) -> None:
        for node_id, measured_at, body in self.core.store.unsynced():
            await self._publish(node_id, measured_at, bytes(body))

    async def _publish(self, node_id: str, measured_at: int, body: bytes) -> None:
        envelope = json.dumps(sign("ClusterProfile", {"v": 1, "origin": self.core.relay_id,
                                                      "region": self.core.config.region, "body": body.decode()},
                                   self.core.key)).encode()
        await self._put(await self._bucket(), f"{self.key_prefix}.{node_id}", envelope)
        await self.nc.publish(self.subjects.profiles, envelope)
        await self.core.store.write(Store.mark_synced_op(node_id, measured_at))

    def publish_profile(self, node_id: str, measured_at: int, body: bytes, arrival: bool = True) -> None:
        """Called after a local profile is durable; failures leave it unsynced for the resync loop. `arrival`:
        the node posted it here itself (not a copy from the mesh)."""
        if self.regions is not None and arrival:
            # a profile posted here is an arrival, as a session is: from another region, its trust (flags
            # included) is asked for. Claiming the node without asking let a flagged node shed its flag by
            # posting a fresh profile here before opening its session (issue 46).
            self.regions.arrived(node_id, time.time())

        async def publish() -> None:
            with contextlib.suppress(NatsError, JetStreamError, TimeoutError, OSError):  # the resync loop retries
                await self._publish(node_id, measured_at, body)

        self._tasks.append(asyncio.create_task(publish()))
        self._tasks = [t for t in self._tasks if not t.done()]

    def local_heartbeat(self, node_id: str, now: float) -> None:
        """A heartbeat on one of this relay's sessions: the node is live here (the next digest says so). A node
        that arrives from another region brings its trust (web/cluster/handoff.py)."""
        if self.regions is not None and node_id not in self.local:
            self.regions.arrived(node_id, now)
        since = self.local.get(node_id, (int(now), now))[0]
        self.local[node_id] = (since, now)

    def live_here(self, now: float) -> dict[str, int]:
        """Nodes with a live session on this relay (node id -> since); forgets the silent ones."""
        cutoff = now - self.core.config.offline_after_s
        self.local = {n: v for n, v in self.local.items() if v[1] >= cutoff}
        return {n: since for n, (since, _) in self.local.items()}

    async def _digest_loop(self) -> None:
        """Every heartbeat interval: a signed digest of what changed here (or the whole set, when due)."""
        while True:
            await asyncio.sleep(self.core.config.heartbeat_interval_s)
            if self.nc is None or not self.nc.is_connected:
                continue  # the writer keeps its place: the next digest carries the change
            now = time.time()
            body = self.writer.next(self.live_here(now), now)
            if body is not None:  # a lost publish is a gap the peers see: they wait for the next full digest
                signed = sign("LiveDigest", body, self.core.key)
                await self._safe_publish(self.subjects.digests, json.dumps(signed).encode())
                self.core.metrics.cluster_sent["digests"] += 1

    def gone(self, node_id: str) -> bool:
        """Whether the node's home is another region now: it is neither asked nor counted here."""
        return self.regions is not None and self.regions.moves.gone(node_id)

    def moved_away(self, node_id: str) -> tuple[str, float] | None:
        """(region, unix s) when the node's home moved to another region at that moment (a relay of that region
        asked for its trust), else None."""
        if self.regions is None or not self.regions.moves.gone(node_id):
            return None
        return self.regions.moves.home[node_id]

    def alive_peers(self, now: float) -> set[str]:
        fresh = now - 3 * self.core.config.beacon_interval_s - 2.0
        return {p for p, at in self.peers_seen.items() if at >= fresh}

    def held_elsewhere(self, node_id: str, now: float) -> bool:
        """Whether a live peer's digest says it holds a live session of the node."""
        return self.book.held(node_id, self.alive_peers(now))

    def worth_sending(self, sample: dict[str, Any]) -> bool:
        """Whether a sample this relay took goes to the cluster (web/map/links.py worth_gossiping: its own edges
        only when they moved or aged since the one last sent; others always)."""
        key = (sample["a"], sample["b"]) if sample["a"] < sample["b"] else (sample["b"], sample["a"])
        return self.core.relay_id not in key or worth_gossiping(self.links_sent.get(key), sample,
                                                                  self.core.config)

    def publish_link(self, sample: dict[str, Any]) -> None:
        """A sample this relay took, to the bucket and the subject (best effort: a lost one is an edge the
        other relays lack until it is measured again)."""
        key = (sample["a"], sample["b"]) if sample["a"] < sample["b"] else (sample["b"], sample["a"])
        self.links_sent[key] = sample

        async def publish() -> None:
            data = json.dumps(sample).encode()
            a, b = sorted((sample["a"], sample["b"]))
            with contextlib.suppress(NatsError, JetStreamError, TimeoutError, OSError):
                await self._put(await self._links_bucket(), f"{self.key_prefix}.{a}.{b}", data)
                await self.nc.publish(self.subjects.links, data)
                self.core.metrics.cluster_sent["links"] += 1

        if self.nc is not None and self.nc.is_connected:
            self._tasks.append(asyncio.create_task(publish()))
            self._tasks = [t for t in self._tasks if not t.done()]

    async def _on_link_message(self, msg: Any) -> None:
        await self.apply_link(msg.data)

    async def apply_link(self, data: bytes) -> int:
        """A sample another relay took: judged here as if posted here (schema, both signatures, endpoints
        known, the landmarks' triangle); 1 if taken."""
        metrics = self.core.metrics.cluster_received
        try:
            sample = json.loads(data)
            held = self.inbox.link_held(str(sample["a"]), str(sample["b"]))
        except (ValueError, TypeError, KeyError):
            metrics["invalid"] += 1
            return 0
        if held == sample:
            return 0  # already held (our own, echoed back, or caught up twice)
        try:
            await self.inbox.link(data, time.time())
        except Problem as problem:
            metrics[f"link_{problem.code}"] += 1
            return 0
        metrics["links"] += 1
        return 1

    def publish_beacon(self, beacon: dict[str, Any]) -> None:
        if self.nc is not None and self.nc.is_connected:
            self._tasks.append(asyncio.create_task(self._safe_publish(self.subjects.beacons,
                                                                      json.dumps(beacon).encode())))

    def publish_transcript(self, body: dict[str, Any]) -> None:
        """Signs and publishes a finished challenge's transcript (best effort: a missed one is a roll call
        the other relays do not count for that node, never a wrong count)."""
        if self.nc is not None and self.nc.is_connected:
            signed = sign("Transcript", body, self.core.key)
            self._tasks.append(asyncio.create_task(self._safe_publish(self.subjects.transcripts,
                                                                      json.dumps(signed).encode())))

    def publish_scoreboard(self, call: dict[str, Any]) -> None:
        """A finished roll call's totals as this region's, signed, for the other regions (a flat cluster: none)."""
        if self.regions is not None:
            board = {**scoreboard_body(self.core.relay_id, call), "region": self.regions.region}
            self.regions.publish_scoreboard(sign("Scoreboard", board, self.core.key))

    def leader(self, now: float) -> str:
        """The relay whose beacon draws roll calls: the lowest id among this one and the peers heard lately."""
        return min([self.core.relay_id, *self.alive_peers(now)])

    def held_by_lower_relay(self, node_id: str, now: float) -> bool:
        """Whether a relay with a lower id than this one holds a live session of the node (its signed digest
        says so): it challenges the node at roll calls, so the node answers once (this relay counts it from
        that relay's transcript)."""
        return any(r < self.core.relay_id for r in self.book.holders(node_id, self.alive_peers(now)))

    async def _on_beacon_message(self, msg: Any) -> None:
        try:
            beacon = json.loads(msg.data)
            verify_record("Beacon", beacon)
        except (ValueError, TypeError, KeyError, ValidationError, SignatureError):
            self.core.metrics.cluster_received["invalid"] += 1
            return
        relay = str(beacon["relay"])
        if relay == self.core.relay_id or relay not in self.core.config.cluster_peers:
            return  # our own, or not a relay of this cluster: draws nothing here
        now = time.time()
        outcome = self.beacon_gate.take(relay, int(beacon["round"]), float(beacon["issued_at"]), now)
        if outcome != "taken":
            self.core.metrics.cluster_received[f"beacon_{outcome}"] += 1
            return
        self.peers_seen[relay] = now
        self.inbox.peer_beacon(beacon, self.leader(now) == relay)  # profiles may cite it (a balancer, --processes)

    async def _on_transcript_message(self, msg: Any) -> None:
        metrics = self.core.metrics.cluster_received
        try:
            transcript = json.loads(msg.data)
            verify_record("Transcript", transcript)
            await self.inbox.transcript(transcript)
            metrics["transcripts"] += 1
        except (ValueError, TypeError, KeyError, ValidationError, SignatureError, TranscriptError) as exc:
            # a replay or a stale one is counted by name (/metrics: ce_relay_cluster_received_total)
            metrics[f"transcript_{exc.code}" if isinstance(exc, TranscriptError) else "invalid"] += 1
            log.warning("refused a transcript from the cluster", extra={"error": str(exc)[:200]})

    async def _safe_publish(self, subject: str, data: bytes) -> None:
        with contextlib.suppress(NatsError, OSError):
            await self.nc.publish(subject, data)

    async def _on_profile_message(self, msg: Any) -> None:
        await self.apply(msg.data)

    async def _on_digest_message(self, msg: Any) -> None:
        metrics = self.core.metrics.cluster_received
        try:
            digest = verify_record("LiveDigest", json.loads(msg.data))
        except (ValueError, TypeError, KeyError, ValidationError, SignatureError):
            metrics["invalid"] += 1
            return
        if digest.relay == self.core.relay_id:
            return
        now = time.time()
        outcome, became_live = self.book.apply(digest, now)
        metrics[f"digest_{outcome}"] += 1
        for node_id in became_live:
            self.core.atlas.heartbeat(node_id, now)

    def _peer_signed(self, envelope: dict[str, Any]) -> bool:
        """Whether a named peer signed the envelope (its region is believed only then: ClusterProfile)."""
        try:
            verify_record("ClusterProfile", envelope)
        except (ValueError, TypeError, KeyError, ValidationError, SignatureError):
            self.core.metrics.cluster_received["envelope_unsigned"] += 1
            return False
        return envelope["origin"] in self.core.config.cluster_peers

    async def apply(self, envelope_bytes: bytes) -> int:
        """Re-verifies a profile from another relay and keeps it when newer; 1 if applied."""
        metrics = self.core.metrics.cluster_received
        try:
            envelope = json.loads(envelope_bytes)
            origin, body = str(envelope["origin"]), str(envelope["body"]).encode()
            verified = verify_profile(json.loads(body))
        except (ValueError, KeyError, TypeError, Problem):
            metrics["invalid"] += 1
            log.warning("refused a profile from the cluster that does not verify")
            return 0
        if origin == self.core.relay_id:
            metrics["own"] += 1
            return 0
        summary = verified.summary
        if self.regions is not None and self._peer_signed(envelope):
            self.regions.learn(summary.node_id, envelope.get("region"), float(summary.measured_at))
        stored = self.core.atlas.nodes.get(summary.node_id)
        if stored is not None and stored.profile.measured_at >= summary.measured_at:
            metrics["not_newer"] += 1
            return 0
        now = time.time()
        taken = Origin("cluster", origin)
        await self.core.store.write(self.inbox.profiles.write_op(summary, body, taken, now))
        self.inbox.profiles.keep(summary, body, taken, now)
        metrics["applied"] += 1
        return 1
