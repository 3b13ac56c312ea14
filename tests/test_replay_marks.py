"""What a relay took once survives its restart (issue 46; web/replay_marks.py over a real SQLite store): the rules
(web/cluster/beacon_gate.py, web/proof/transcripts.py, web/cluster/handoff.py) taken one by one, each loaded into
a fresh instance from the same file as a restarted relay does."""

from __future__ import annotations

from pathlib import Path

import pytest

from web.cluster.beacon_gate import BeaconGate
from web.cluster.handoff import Moves
from web.proof.transcripts import TranscriptError, TranscriptLedger
from web.replay_marks import StoreMarks
from web.store import Store

NOW = 1_800_000_000.0


def flushed(store: Store) -> None:
    """Every queued write committed (the writer takes them in order)."""
    store.submit(lambda conn: None).result(timeout=10)


def test_beacon_rounds_fresh_and_in_order_across_a_restart(tmp_path: Path) -> None:
    store = Store(tmp_path / "relay.sqlite")
    gate = BeaconGate(63.0, StoreMarks(store))
    assert gate.take("A", 10, NOW - 1, NOW) == "taken"
    assert gate.take("A", 10, NOW - 1, NOW) == "replayed"
    assert gate.take("A", 9, NOW - 2, NOW) == "replayed"          # older: never again
    assert gate.take("A", 11, NOW - 100, NOW) == "stale"          # outside the window, whatever its round
    assert gate.take("A", 12, NOW + 100, NOW) == "stale"          # from the future
    assert gate.take("A", 0, NOW, NOW) == "taken"                 # a relay that lost its rounds: a newer issue
    assert gate.take("B", 3, NOW - 1, NOW) == "taken"             # each relay on its own
    flushed(store)
    store.close()
    again = Store(tmp_path / "relay.sqlite")
    restarted = BeaconGate(63.0, StoreMarks(again))
    restarted.load(NOW + 1)
    assert restarted.take("A", 0, NOW, NOW + 1) == "replayed"     # the latest taken before the restart
    assert restarted.take("B", 3, NOW - 1, NOW + 1) == "replayed"
    assert restarted.take("A", 1, NOW + 1, NOW + 1) == "taken"
    again.close()


def test_transcripts_taken_once_across_a_restart_and_released_ones_again(tmp_path: Path) -> None:
    store = Store(tmp_path / "relay.sqlite")
    ledger = TranscriptLedger(60.0, 60.0, marks=StoreMarks(store))
    ledger.take("A", "n1", NOW - 5, NOW)
    ledger.take("A", "n2", NOW - 5, NOW)
    ledger.release("A", "n2")  # refused for what it said: its peer may send the right one
    flushed(store)
    store.close()
    again = Store(tmp_path / "relay.sqlite")
    restarted = TranscriptLedger(60.0, 60.0, marks=StoreMarks(again))
    restarted.load(NOW + 1)
    with pytest.raises(TranscriptError) as caught:
        restarted.take("A", "n1", NOW - 5, NOW + 1)
    assert caught.value.code == "replayed"
    restarted.take("A", "n2", NOW - 5, NOW + 1)  # released before the restart: taken
    later = TranscriptLedger(60.0, 60.0, marks=StoreMarks(again))
    later.load(NOW + 500)  # long after: nothing fresh to remember (stale by its time anyway)
    assert later.seen == {}
    again.close()


def test_handoff_asks_and_homes_across_a_restart(tmp_path: Path) -> None:
    store = Store(tmp_path / "relay.sqlite")
    moves = Moves("eu", 120.0, marks=StoreMarks(store))
    assert moves.arrived("N", NOW - 50) is None  # first seen here
    assert moves.take_ask("R", "N", "us", NOW - 10, NOW) == "taken"
    assert moves.gone("N")
    flushed(store)
    store.close()
    again = Store(tmp_path / "relay.sqlite")
    restarted = Moves("eu", 120.0, marks=StoreMarks(again))
    restarted.load(NOW + 1)
    assert restarted.take_ask("R", "N", "us", NOW - 10, NOW + 1) == "replayed"
    assert restarted.gone("N") and restarted.home["N"] == ("us", NOW - 10)  # where it lives, after the restart too
    again.close()
