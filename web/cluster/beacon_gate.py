"""Peer relays' beacon rounds, taken only fresh and in order (issue 46).

A beacon is signed by its relay, so nobody can forge one; anyone who can publish on the beacons' subject can
re-publish a genuine one. Taken again, an old round re-scheduled the roll call it drew (one relay user made
another relay run 14 roll calls in 36 s by re-publishing rounds every 3 s) and kept a stopped relay "alive",
pinning it as the leader whose rounds draw roll calls (0 roll calls in 60 s). So a round is taken only when it
was issued within `window_s` of this relay's clock and comes after the latest one taken from its relay, by
(issued_at, round): a relay that lost its rounds and starts again at 0 is taken by its newer issue time, a
replay never. The latest per relay is kept through `marks` (web/replay_marks.py): a restart forgets nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from web.replay_marks import Marks, NoMarks

MARK_KIND = "beacon"
Outcome = Literal["taken", "stale", "replayed"]


@dataclass
class BeaconGate:
    window_s: float  # issued more than this before or after this relay's clock: stale (clock skew + rounds)
    marks: Marks = field(default_factory=NoMarks)
    latest: dict[str, tuple[float, int]] = field(default_factory=dict)  # relay -> (issued_at, round) taken last

    def load(self, now: float) -> None:
        """The latest round taken from each relay before a restart (older ones would be stale anyway)."""
        for relay, issued_at, round_no in self.marks.load(MARK_KIND, now - self.window_s):
            self.latest[relay] = (issued_at, round_no)

    def take(self, relay: str, round_no: int, issued_at: float, now: float) -> Outcome:
        if not now - self.window_s <= issued_at <= now + self.window_s:
            return "stale"
        held = self.latest.get(relay)
        if held is not None and (issued_at, round_no) <= held:
            return "replayed"
        self.latest[relay] = (issued_at, round_no)
        self.marks.keep(MARK_KIND, relay, issued_at, round_no)
        return "taken"


def window_s(clock_skew_s: float, beacon_interval_s: float) -> float:
    """How far from this relay's clock a fresh round's issue time may be: the clocks' skew, two rounds in
    flight, and the second an issue time is truncated to."""
    return clock_skew_s + 2 * beacon_interval_s + 1.0
