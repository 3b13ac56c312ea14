"""Durable storage on SQLite (WAL, synchronous=FULL): a write returns only after its transaction is on
disk, so every 2xx the relay sends survives `kill -9`. Writes go through one thread that commits them in
groups (one fsync for everything queued meanwhile), which is what lets ingest scale with one disk."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS profiles (
    node_id TEXT PRIMARY KEY,
    measured_at INTEGER NOT NULL,
    origin TEXT NOT NULL,          -- NodeId of the relay that first accepted it
    body BLOB NOT NULL,            -- the signed profile as received (JSON)
    synced INTEGER NOT NULL DEFAULT 0, -- 1 once published to the cluster (NATS)
    summary BLOB                   -- web.api.summary.ProfileSummary (JSON); NULL in rows of older relays
);
CREATE TABLE IF NOT EXISTS links (
    a TEXT NOT NULL,
    b TEXT NOT NULL,
    measured_at INTEGER NOT NULL,
    body BLOB NOT NULL,        -- the co-signed LinkSample (JSON)
    PRIMARY KEY (a, b)
);
CREATE TABLE IF NOT EXISTS history (
    node_id TEXT NOT NULL,
    at REAL NOT NULL,              -- unix time of the event
    kind TEXT NOT NULL,            -- 'profile' (its figures) | 'challenge' (its result)
    body BLOB NOT NULL             -- JSON
);
CREATE INDEX IF NOT EXISTS history_by_node ON history (node_id, at);
CREATE TABLE IF NOT EXISTS beacons (
    round INTEGER PRIMARY KEY,
    body BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS trust (  -- each node's trust state (web/proof/trust.py), written with each result
    node_id TEXT PRIMARY KEY,
    at REAL NOT NULL,              -- unix time of the result it includes last
    body BLOB NOT NULL             -- JSON (Trust.to_state)
);
CREATE TABLE IF NOT EXISTS taken (  -- records taken once from peers, kept across restarts (web/replay_marks.py)
    kind TEXT NOT NULL,            -- 'transcript' | 'handoff' | 'beacon'
    key TEXT NOT NULL,
    at REAL NOT NULL,              -- the record's own time (unix s, the peer's clock)
    n INTEGER NOT NULL DEFAULT 0,  -- a beacon's round (0 for the others)
    PRIMARY KEY (kind, key)
);
CREATE TABLE IF NOT EXISTS stats_points (  -- the scoreboard over time (/stats/history)
    at REAL PRIMARY KEY,
    body BLOB NOT NULL
);
"""

Op = Callable[[sqlite3.Connection], Any]
TRUST_STATES_VERSION = 1  # PRAGMA user_version once every node's trust state is stored


class StoreError(Exception):
    """The store could not make a write durable (disk full, I/O error)."""


class Store:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._writer = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._writer.execute("PRAGMA journal_mode=WAL")
        self._writer.execute("PRAGMA synchronous=FULL")
        self._writer.executescript(SCHEMA)
        columns = {row[1] for row in self._writer.execute("PRAGMA table_info(profiles)")}
        if "summary" not in columns:  # a store written by an older relay: its rows get summaries as they change
            self._writer.execute("ALTER TABLE profiles ADD COLUMN summary BLOB")
        # user_version 1: every node's trust state is in the trust table (version 0: a store written before
        # it; its challenge history is replayed once at start). A store without history starts at 1.
        if self._writer.execute("PRAGMA user_version").fetchone()[0] == 0 and self._writer.execute(
                "SELECT 1 FROM history WHERE kind='challenge' LIMIT 1").fetchone() is None:
            self._writer.execute(f"PRAGMA user_version={TRUST_STATES_VERSION}")
        self._reader = sqlite3.connect(path, check_same_thread=False)
        self._queue: queue.Queue[tuple[Op, Future[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._write_loop, name="sqlite-writer", daemon=True)
        self._thread.start()

    def durability(self) -> dict[str, str]:
        """The settings an acknowledged write depends on, as the writer connection reports them: WAL with
        synchronous=FULL fsyncs the log before a commit returns (NORMAL or OFF would survive kill -9 through
        the page cache but lose acknowledged profiles on power loss)."""
        mode = self._writer.execute("PRAGMA journal_mode").fetchone()[0]
        sync = self._writer.execute("PRAGMA synchronous").fetchone()[0]
        return {"journal_mode": str(mode), "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[sync]}

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            batch = [item]
            while len(batch) < 2000:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)
                    break
                batch.append(nxt)
            results: list[tuple[Future[Any], Any, BaseException | None]] = []
            try:
                self._writer.execute("BEGIN IMMEDIATE")
                for op, fut in batch:
                    try:
                        results.append((fut, op(self._writer), None))
                    except sqlite3.Error as exc:
                        results.append((fut, None, exc))
                self._writer.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    self._writer.execute("ROLLBACK")
                for _, fut in batch:
                    fut.set_exception(StoreError(f"write not durable: {exc}"))
                continue
            for fut, value, error in results:
                if error is None:
                    fut.set_result(value)
                else:
                    fut.set_exception(StoreError(str(error)))

    def submit(self, op: Op) -> Future[Any]:
        fut: Future[Any] = Future()
        self._queue.put((op, fut))
        return fut

    async def write(self, op: Op) -> Any:
        """Runs op in the writer's next transaction; returns after the commit is durable."""
        return await asyncio.wrap_future(self.submit(op))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)
        self._writer.close()
        self._reader.close()

    # --- operations -------------------------------------------------------------------------------

    @staticmethod
    def all_of(*ops: Op) -> Op:
        """Several writes in one transaction (one fsync)."""
        def op(conn: sqlite3.Connection) -> None:
            for each in ops:
                each(conn)
        return op

    @staticmethod
    def put_profile_op(node_id: str, measured_at: int, origin: str, body: bytes, synced: bool,
                       summary: bytes | None = None) -> Op:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO profiles (node_id, measured_at, origin, body, synced, summary) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(node_id) DO UPDATE SET measured_at=excluded.measured_at, origin=excluded.origin, "
                "body=excluded.body, synced=excluded.synced, summary=excluded.summary "
                "WHERE excluded.measured_at > profiles.measured_at",
                (node_id, measured_at, origin, body, int(synced), summary))
        return op

    @staticmethod
    def set_summary_op(node_id: str, measured_at: int, summary: bytes) -> Op:
        """Writes the summary of a stored profile that has none (a row of an older relay)."""
        def op(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE profiles SET summary=? WHERE node_id=? AND measured_at=?",
                         (summary, node_id, measured_at))
        return op

    @staticmethod
    def mark_synced_op(node_id: str, measured_at: int) -> Op:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE profiles SET synced=1 WHERE node_id=? AND measured_at=?", (node_id, measured_at))
        return op

    @staticmethod
    def put_beacon_op(round_no: int, body: bytes, keep: int) -> Op:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO beacons (round, body) VALUES (?, ?)", (round_no, body))
            conn.execute("DELETE FROM beacons WHERE round <= ?", (round_no - keep,))
        return op

    @staticmethod
    def put_link_op(a: str, b: str, measured_at: int, body: bytes) -> Op:
        key = (a, b) if a < b else (b, a)

        def op(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO links (a, b, measured_at, body) VALUES (?, ?, ?, ?) ON CONFLICT(a, b) DO UPDATE SET "
                "measured_at=excluded.measured_at, body=excluded.body WHERE excluded.measured_at >= links.measured_at",
                (*key, measured_at, body))
        return op

    @staticmethod
    def put_history_op(node_id: str, at: float, kind: str, body: bytes, keep: int) -> Op:
        """Appends an event to a node's history and drops the oldest beyond `keep`."""
        def op(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO history (node_id, at, kind, body) VALUES (?, ?, ?, ?)", (node_id, at, kind, body))
            conn.execute("DELETE FROM history WHERE node_id=? AND rowid NOT IN (SELECT rowid FROM history "
                         "WHERE node_id=? ORDER BY at DESC LIMIT ?)", (node_id, node_id, keep))
        return op

    @staticmethod
    def put_trust_op(node_id: str, at: float, body: bytes) -> Op:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO trust (node_id, at, body) VALUES (?, ?, ?)", (node_id, at, body))
        return op

    def all_trust(self) -> Iterator[tuple[str, bytes]]:
        """Every node's stored trust state: what a relay reads at start (one row per node)."""
        for node_id, body in self._reader.execute("SELECT node_id, body FROM trust"):
            yield str(node_id), bytes(body)

    def trust_states_complete(self) -> bool:
        return bool(self._reader.execute("PRAGMA user_version").fetchone()[0] >= TRUST_STATES_VERSION)

    @staticmethod
    def trust_states_complete_op() -> Op:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute(f"PRAGMA user_version={TRUST_STATES_VERSION}")
        return op

    def challenges_without_trust(self) -> Iterator[tuple[str, float, bytes]]:
        """Challenge results, in time order, of nodes with no stored trust state (rows a relay wrote before it
        kept one): replayed once at start, after which the states are stored (trust_states_complete)."""
        if self.trust_states_complete():
            return
        yield from self._reader.execute(
            "SELECT node_id, at, body FROM history WHERE kind='challenge' AND node_id NOT IN "
            "(SELECT node_id FROM trust) ORDER BY at")

    @staticmethod
    def put_stats_point_op(at: float, body: bytes, keep: int) -> Op:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO stats_points (at, body) VALUES (?, ?)", (at, body))
            conn.execute("DELETE FROM stats_points WHERE at NOT IN (SELECT at FROM stats_points ORDER BY at DESC "
                         "LIMIT ?)", (keep,))
        return op

    def stats_points(self, limit: int) -> list[bytes]:
        rows = self._reader.execute("SELECT body FROM stats_points ORDER BY at DESC LIMIT ?", (limit,)).fetchall()
        return [bytes(r[0]) for r in reversed(rows)]

    def history(self, node_id: str, limit: int) -> list[tuple[float, str, bytes]]:
        """A node's latest events, oldest first."""
        rows = self._reader.execute("SELECT at, kind, body FROM history WHERE node_id=? ORDER BY at DESC LIMIT ?",
                                    (node_id, limit)).fetchall()
        return [(r[0], r[1], bytes(r[2])) for r in reversed(rows)]

    def all_links(self) -> list[bytes]:
        return [bytes(r[0]) for r in self._reader.execute("SELECT body FROM links ORDER BY measured_at")]

    def all_profiles(self) -> Iterator[tuple[str, int, str, bytes, bool, bytes | None]]:
        """(node_id, measured_at, origin, body, synced, summary or None) of every stored profile."""
        yield from self._reader.execute("SELECT node_id, measured_at, origin, body, synced, summary FROM profiles")

    def unsynced(self) -> list[tuple[str, int, bytes]]:
        return list(self._reader.execute("SELECT node_id, measured_at, body FROM profiles WHERE synced=0"))

    def profile(self, node_id: str) -> bytes | None:
        row = self._reader.execute("SELECT body FROM profiles WHERE node_id=?", (node_id,)).fetchone()
        return bytes(row[0]) if row else None

    def profiles(self, node_ids: Sequence[str]) -> dict[str, bytes]:
        if not node_ids:
            return {}
        marks = ",".join("?" * len(node_ids))
        rows = self._reader.execute(f"SELECT node_id, body FROM profiles WHERE node_id IN ({marks})", node_ids)
        return {r[0]: bytes(r[1]) for r in rows}

    @staticmethod
    def put_taken_op(kind: str, key: str, at: float, n: int = 0) -> Op:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT OR REPLACE INTO taken (kind, key, at, n) VALUES (?, ?, ?, ?)", (kind, key, at, n))
        return op

    @staticmethod
    def drop_taken_op(kind: str, key: str | None = None, before: float | None = None) -> Op:
        """Drops one mark (key) or every mark of the kind older than `before`."""
        def op(conn: sqlite3.Connection) -> None:
            if key is not None:
                conn.execute("DELETE FROM taken WHERE kind=? AND key=?", (kind, key))
            if before is not None:
                conn.execute("DELETE FROM taken WHERE kind=? AND at<?", (kind, before))
        return op

    def taken(self, kind: str, since: float) -> list[tuple[str, float, int]]:
        """(key, at, n) of the marks of a kind at or after `since`."""
        return [(str(k), float(a), int(n)) for k, a, n in
                self._reader.execute("SELECT key, at, n FROM taken WHERE kind=? AND at>=?", (kind, since))]

    def beacons(self) -> list[bytes]:
        return [bytes(r[0]) for r in self._reader.execute("SELECT body FROM beacons ORDER BY round")]
