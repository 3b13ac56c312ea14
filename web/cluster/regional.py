"""A relay's part in a cluster that grows by region (web/cluster/regions.py, web/cluster/handoff.py): it publishes this
region's
signed roll-call totals and sums the other regions', and it carries a node's trust between regions. What it
needs from the rest of the relay is narrow: the NATS connection, the relay's identity and config, a metrics
counter, and the challenge desk's trust (TrustDesk)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any, Protocol

from nats.errors import Error as NatsError

from capsule.signing import SignatureError, sign, verify_record
from capsule.typed import ValidationError
from common.keys import NodeKey
from web.cluster import handoff
from web.cluster.regions import REGION, RegionBoard, Subjects
from web.config import RelayConfig
from web.proof.trust import Trust
from web.replay_marks import Marks, NoMarks

log = logging.getLogger("ce.relay.cluster")
ASK_TIMEOUT_S = 2.0  # a handoff ask waits this long for the region the node left (none: it starts afresh)


class TrustDesk(Protocol):
    """What the handoff needs of the challenge desk (web/proof/challenge_desk.py ChallengeDesk)."""

    trust: dict[str, Trust]

    async def adopt_trust(self, node_id: str, state: dict[str, Any]) -> None: ...

    def moved_away(self, node_id: str) -> None: ...


class Regional:
    def __init__(self, nc: Any, relay_id: str, key: NodeKey, config: RelayConfig, metrics: Any,
                 desk: TrustDesk, marks: Marks | None = None) -> None:
        if config.region is None:
            raise ValueError("a relay without a region has no regional part")
        self.nc, self.relay_id, self.key, self.config = nc, relay_id, key, config
        self.region = config.region
        self.metrics = metrics  # Counter of records received, by outcome (the relay's cluster_received)
        self.desk = desk
        self.tasks: set[asyncio.Task[None]] = set()  # publications and asks in flight (cancelled by stop())
        self.subjects = Subjects.of(config.region)
        # a region whose relays fell silent for two roll-call gaps counts nothing
        self.board = RegionBoard(config.region, 2 * max(config.roll_call_interval_s, config.roll_call_min_gap_s))
        self.moves = handoff.Moves(config.region, config.transcript_max_age_s + config.clock_skew_s,
                                   marks=marks or NoMarks())
        self.moves.load(time.time())

    async def start(self) -> None:
        await self.nc.subscribe(self.subjects.scoreboards, cb=self._on_scoreboard)
        await self.nc.subscribe(handoff.subject(self.region), cb=self._on_ask)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()

    def _signed(self, data: bytes, kind: str) -> dict[str, Any] | None:
        """A signed record of `kind` from NATS, or None (counted invalid) when it is not one."""
        try:
            record = json.loads(data)
            verify_record(kind, record)
        except (ValueError, TypeError, KeyError, ValidationError, SignatureError):
            self.metrics["invalid"] += 1
            return None
        return record if isinstance(record, dict) else None

    # --- totals ---

    def publish_scoreboard(self, signed: dict[str, Any]) -> None:
        """This region's totals of a finished roll call (a Scoreboard naming the region, signed)."""
        if self.nc.is_connected:
            self._spawn(self._publish(self.subjects.scoreboards, json.dumps(signed).encode()))

    async def _publish(self, subject: str, data: bytes) -> None:
        with contextlib.suppress(NatsError, OSError):
            await self.nc.publish(subject, data)

    async def _on_scoreboard(self, msg: Any) -> None:
        board = self._signed(msg.data, "Scoreboard")
        if board is None:
            return
        relay, region = str(board["relay"]), board.get("region")
        if relay == self.relay_id:
            return
        if relay not in self.config.cluster_peers or region is None:
            self.metrics["scoreboard_refused"] += 1
            return
        self.metrics[f"scoreboard_{self.board.take(str(region), board, time.time())}"] += 1

    # --- nodes moving between regions ---

    def learn(self, node_id: str, region: object, at: float) -> None:
        """A profile's region as its cluster envelope names it (anything else is ignored)."""
        if isinstance(region, str) and REGION.fullmatch(region):
            self.moves.learn(node_id, region, at)

    def arrived(self, node_id: str, now: float) -> None:
        """A session of the node arrived here: from another region, its trust is asked for."""
        home = self.moves.arrived(node_id, now)
        if home is not None and self.nc.is_connected:
            self._spawn(self._ask(node_id, home, now))

    async def _ask(self, node_id: str, home: str, at: float) -> None:
        """Asks the region the node came from for its trust and adopts the first signed answer (none: the
        node starts afresh here, which never counts more)."""
        ask = sign("Handoff", handoff.ask_body(self.relay_id, node_id, home, self.region, at), self.key)
        try:
            reply = await self.nc.request(handoff.subject(home), json.dumps(ask).encode(), timeout=ASK_TIMEOUT_S)
            answer = json.loads(reply.data)
            verify_record("Handoff", answer)
        except (NatsError, TimeoutError, OSError):
            self.metrics["handoff_no_answer"] += 1
            return
        except (ValueError, TypeError, KeyError, ValidationError, SignatureError):
            self.metrics["invalid"] += 1
            return
        if (answer["relay"] not in self.config.cluster_peers or answer["node_id"] != node_id
                or answer["at"] != ask["at"] or answer.get("trust") is None):
            self.metrics["handoff_refused"] += 1
            return
        await self.desk.adopt_trust(node_id, answer["trust"])
        self.metrics["handoff_adopted"] += 1

    async def _on_ask(self, msg: Any) -> None:
        """A relay of another region holds a node whose home was here: the node stops counting here, and this
        relay answers with the trust it holds."""
        ask = self._signed(msg.data, "Handoff")
        if ask is None:
            return
        to_region = str(ask["to_region"])
        if (ask["relay"] not in self.config.cluster_peers or ask.get("trust") is not None
                or ask["from_region"] != self.region or to_region == self.region):
            self.metrics["handoff_refused"] += 1
            return
        node_id = str(ask["node_id"])
        outcome = self.moves.take_ask(str(ask["relay"]), node_id, to_region, float(ask["at"]), time.time())
        self.metrics[f"handoff_{outcome}"] += 1
        if outcome != "taken":
            return
        self.desk.moved_away(node_id)
        trust = self.desk.trust.get(node_id)
        if trust is not None and msg.reply:
            answer = sign("Handoff", handoff.answer_body(self.relay_id, ask, trust), self.key)
            with contextlib.suppress(NatsError, OSError):
                await msg.respond(json.dumps(answer).encode())
