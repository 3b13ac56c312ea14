"""What a relay took once from its peers (transcripts, handoff asks, beacon rounds), kept across restarts.

A relay takes a peer's record once and only while fresh; the set of what it took used to live in memory, so a
relay that restarted took a genuine record again when anyone re-published it within its freshness window (a
passed transcript counted twice; issue 46). The rules stay pure (web/proof/transcripts.py TranscriptLedger,
web/cluster/handoff.py Moves, web/cluster/beacon_gate.py BeaconGate); this is the narrow port they are loaded
from at start and written through as they take records. A write is queued, not awaited: the store's writer
commits it within its next group (milliseconds), and a record whose mark was lost to a crash in that window is
still refused as stale once its freshness window passes."""

from __future__ import annotations

from typing import Protocol

from web.store import Store


class Marks(Protocol):
    """The port: keep a mark, drop one or the old ones, and read those still fresh."""

    def keep(self, kind: str, key: str, at: float, n: int = 0) -> None: ...

    def drop(self, kind: str, key: str | None = None, before: float | None = None) -> None: ...

    def load(self, kind: str, since: float) -> list[tuple[str, float, int]]: ...


class StoreMarks:
    """Marks in the relay's SQLite file (table `taken`)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def keep(self, kind: str, key: str, at: float, n: int = 0) -> None:
        self.store.submit(Store.put_taken_op(kind, key, at, n))

    def drop(self, kind: str, key: str | None = None, before: float | None = None) -> None:
        self.store.submit(Store.drop_taken_op(kind, key, before))

    def load(self, kind: str, since: float) -> list[tuple[str, float, int]]:
        return self.store.taken(kind, since)


class NoMarks:
    """Nothing kept (a rule used alone, as the unit tests use them)."""

    def keep(self, kind: str, key: str, at: float, n: int = 0) -> None:
        return None

    def drop(self, kind: str, key: str | None = None, before: float | None = None) -> None:
        return None

    def load(self, kind: str, since: float) -> list[tuple[str, float, int]]:
        return []
