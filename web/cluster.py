"""A relay cluster on NATS JetStream (ARCHITECTURE.md: "NATS JetStream for a relay cluster").

- Durable shared state: a key-value bucket, key = NodeId, value = {"origin": relay id, "body": profile}.
- Live updates: every accepted profile is also published on SUBJECT_PROFILES, heartbeats on
  SUBJECT_HEARTBEATS, so other relays learn within milliseconds.
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
from typing import TYPE_CHECKING, Any

import nats
from nats.errors import Error as NatsError
from nats.js.errors import Error as JetStreamError

from capsule.signing import SignatureError, sign, verify_record
from capsule.typed import ValidationError
from web.ingest import verify_profile
from web.problems import Problem
from web.store import Store
from web.transcripts import TranscriptError

if TYPE_CHECKING:
    from web.relay import Relay

log = logging.getLogger("ce.relay.cluster")
SUBJECT_PROFILES = "ce.atlas.profiles"
SUBJECT_HEARTBEATS = "ce.atlas.heartbeats"
SUBJECT_BEACONS = "ce.relays.beacons"        # every relay's signed rounds: presence, and the leader's draw roll calls
SUBJECT_TRANSCRIPTS = "ce.trust.transcripts"  # signed challenge transcripts (web/transcripts.py)
RESYNC_INTERVAL_S = 1.0


class Cluster:
    def __init__(self, relay: Relay, url: str, bucket: str) -> None:
        self.relay = relay
        self.url = url
        self.bucket = bucket
        self.nc: Any = None
        self.kv: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        self._catch_up_needed = asyncio.Event()
        self.peers_seen: dict[str, float] = {}  # peer relay id -> unix time of its latest beacon round
        self.sessions_elsewhere: dict[str, dict[str, float]] = {}  # node id -> {relay id: last heartbeat there}

    async def start(self) -> None:
        self.nc = await nats.connect(
            self.url, name=f"ce-relay-{self.relay.relay_id[-8:]}", connect_timeout=2, reconnect_time_wait=0.5,
            max_reconnect_attempts=-1, allow_reconnect=True, error_cb=self._on_error,
            disconnected_cb=self._on_disconnected, reconnected_cb=self._on_reconnected)
        await self.nc.subscribe(SUBJECT_PROFILES, cb=self._on_profile_message)
        await self.nc.subscribe(SUBJECT_HEARTBEATS, cb=self._on_heartbeat_message)
        await self.nc.subscribe(SUBJECT_BEACONS, cb=self._on_beacon_message)
        await self.nc.subscribe(SUBJECT_TRANSCRIPTS, cb=self._on_transcript_message)
        self._catch_up_needed.set()
        self._tasks = [asyncio.create_task(self._sync_loop())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self.nc is not None:
            with contextlib.suppress(TimeoutError, NatsError):
                await asyncio.wait_for(self.nc.close(), timeout=5)

    async def _on_error(self, exc: Exception) -> None:
        log.warning("nats error", extra={"error": str(exc)})

    async def _on_disconnected(self) -> None:
        log.warning("nats disconnected; serving from the local store")

    async def _on_reconnected(self) -> None:
        log.info("nats reconnected; catching up")
        self.kv = None
        self._catch_up_needed.set()

    async def _bucket(self) -> Any:
        if self.kv is None:
            js = self.nc.jetstream(timeout=5)
            try:
                self.kv = await js.key_value(self.bucket)
            except JetStreamError:
                self.kv = await js.create_key_value(bucket=self.bucket, history=1)
        return self.kv

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

    async def _catch_up(self) -> None:
        kv = await self._bucket()
        watcher = await kv.watchall()
        applied = 0
        try:
            while True:
                entry = await watcher.updates(timeout=10)
                if entry is None:  # the end of the current values
                    break
                if entry.value:
                    applied += await self.apply(entry.value)
        finally:
            await watcher.stop()
        log.info("caught up from the bucket", extra={"applied": applied})

    async def _push_unsynced(self) -> None:
        for node_id, measured_at, body in self.relay.store.unsynced():
            await self._publish(node_id, measured_at, bytes(body))

    async def _publish(self, node_id: str, measured_at: int, body: bytes) -> None:
        envelope = json.dumps({"origin": self.relay.relay_id, "body": body.decode()}).encode()
        kv = await self._bucket()
        await kv.put(node_id, envelope)
        await self.nc.publish(SUBJECT_PROFILES, envelope)
        await self.relay.store.write(Store.mark_synced_op(node_id, measured_at))

    def publish_profile(self, node_id: str, measured_at: int, body: bytes) -> None:
        """Called after a local profile is durable; failures leave it unsynced for the resync loop."""
        async def publish() -> None:
            with contextlib.suppress(NatsError, JetStreamError, TimeoutError, OSError):  # the resync loop retries
                await self._publish(node_id, measured_at, body)

        self._tasks.append(asyncio.create_task(publish()))
        self._tasks = [t for t in self._tasks if not t.done()]

    def publish_heartbeat(self, node_id: str) -> None:
        if self.nc is not None and self.nc.is_connected:
            body = json.dumps({"node_id": node_id, "relay": self.relay.relay_id}).encode()
            self._tasks.append(asyncio.create_task(self._safe_publish(SUBJECT_HEARTBEATS, body)))
            self._tasks = [t for t in self._tasks if not t.done()]

    def publish_beacon(self, beacon: dict[str, Any]) -> None:
        if self.nc is not None and self.nc.is_connected:
            self._tasks.append(asyncio.create_task(self._safe_publish(SUBJECT_BEACONS, json.dumps(beacon).encode())))

    def publish_transcript(self, body: dict[str, Any]) -> None:
        """Signs and publishes a finished challenge's transcript (best effort: a missed one is a roll call
        the other relays do not count for that node, never a wrong count)."""
        if self.nc is not None and self.nc.is_connected:
            signed = sign("Transcript", body, self.relay.key)
            self._tasks.append(asyncio.create_task(self._safe_publish(SUBJECT_TRANSCRIPTS,
                                                                      json.dumps(signed).encode())))

    def leader(self, now: float) -> str:
        """The relay whose beacon draws roll calls: the lowest id among this one and the peers heard lately."""
        fresh = now - 3 * self.relay.config.beacon_interval_s - 2.0
        return min([self.relay.relay_id, *(p for p, at in self.peers_seen.items() if at >= fresh)])

    def held_by_lower_relay(self, node_id: str, now: float) -> bool:
        """Whether a relay with a lower id than this one holds a live session of the node: it challenges the
        node at roll calls, so the node answers once (this relay counts it from that relay's transcript)."""
        there = self.sessions_elsewhere.get(node_id, {})
        recent = now - self.relay.config.offline_after_s
        return any(r < self.relay.relay_id and at >= recent and r in self.peers_seen for r, at in there.items())

    async def _on_beacon_message(self, msg: Any) -> None:
        try:
            beacon = json.loads(msg.data)
            verify_record("Beacon", beacon)
        except (ValueError, TypeError, KeyError, ValidationError, SignatureError):
            self.relay.metrics.cluster_received["invalid"] += 1
            return
        relay = str(beacon["relay"])
        if relay == self.relay.relay_id or relay not in self.relay.config.cluster_peers:
            return  # our own, or not a relay of this cluster: draws nothing here
        now = time.time()
        self.peers_seen[relay] = now
        if self.leader(now) == relay:
            self.relay.challenges.roll.on_beacon(beacon)

    async def _on_transcript_message(self, msg: Any) -> None:
        metrics = self.relay.metrics.cluster_received
        try:
            transcript = json.loads(msg.data)
            verify_record("Transcript", transcript)
            await self.relay.challenges.apply_transcript(transcript)
            metrics["transcripts"] += 1
        except (ValueError, TypeError, KeyError, ValidationError, SignatureError, TranscriptError) as exc:
            metrics["invalid"] += 1
            log.warning("refused a transcript from the cluster", extra={"error": str(exc)[:200]})

    async def _safe_publish(self, subject: str, data: bytes) -> None:
        with contextlib.suppress(NatsError, OSError):
            await self.nc.publish(subject, data)

    async def _on_profile_message(self, msg: Any) -> None:
        await self.apply(msg.data)

    async def _on_heartbeat_message(self, msg: Any) -> None:
        now = time.time()
        try:
            beat = json.loads(msg.data)
            node_id, relay = str(beat["node_id"])[:100], str(beat["relay"])[:100]
        except (ValueError, TypeError, KeyError):
            return
        if relay == self.relay.relay_id:
            return
        self.sessions_elsewhere.setdefault(node_id, {})[relay] = now
        self.relay.atlas.heartbeat(node_id, now)

    async def apply(self, envelope_bytes: bytes) -> int:
        """Re-verifies a profile from another relay and keeps it when newer; 1 if applied."""
        metrics = self.relay.metrics.cluster_received
        try:
            envelope = json.loads(envelope_bytes)
            origin, body = str(envelope["origin"]), str(envelope["body"]).encode()
            verified = verify_profile(json.loads(body))
        except (ValueError, KeyError, TypeError, Problem):
            metrics["invalid"] += 1
            log.warning("refused a profile from the cluster that does not verify")
            return 0
        if origin == self.relay.relay_id:
            metrics["own"] += 1
            return 0
        summary = verified.summary
        stored = self.relay.atlas.nodes.get(summary.node_id)
        if stored is not None and stored.profile.measured_at >= summary.measured_at:
            metrics["not_newer"] += 1
            return 0
        await self.relay.store.write(Store.put_profile_op(summary.node_id, summary.measured_at, origin, body, True,
                                                          json.dumps(summary.to_json()).encode()))
        now = time.time()
        fresh = now - summary.measured_at <= self.relay.config.offline_after_s
        self.relay.atlas.put(summary, origin, now, live=fresh)
        metrics["applied"] += 1
        return 1
