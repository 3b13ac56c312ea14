"""A live session keeps learning its cluster's relays (host_runner/live_client.py RELAYS_RELEARN_FIRST_S), so a node
whose relay dies can move even when it connected before its relay knew the other relays' URLs.

A relay hears a peer's URL with the peer's first view, seconds after both start; a node that connected in between
learned only its own relay at welcome, and in one CI run (2026-12-07) two of three such nodes stayed with a relay
killed under them. Here relay A starts alone (it names B as a cluster peer, but B is not running), the node
connects to A and learns no other relay (the precondition), then B starts: the node must learn B's URL while its
session with A holds, and move to B when A is killed with -9."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.relay_sessions import register_nodes
from common.keys import load_or_create
from host_runner.live_client import LiveSession
from tests.nats_process import NatsProcess
from tests.relay_process import RelayProcess, free_port
from tests.roll_call_helpers import until
from tests.threaded import in_thread

pytestmark = pytest.mark.timed  # waits on a relearn interval and a failover

OPTIONS = ["--heartbeat-interval", "2", "--beacon-interval", "1"]


def test_a_session_learns_a_relay_that_started_after_it_and_moves_there_when_its_relay_dies(tmp_path: Path) -> None:
    keys = [load_or_create(tmp_path / f"r{i}" / "relay.key") for i in range(2)]  # ids known before they start
    with NatsProcess(tmp_path / "nats") as nats:
        ports = [free_port() for _ in range(2)]
        a, b = (RelayProcess(tmp_path / f"r{i}", *OPTIONS, *nats.relay_args(), "--public-url",
                             f"http://127.0.0.1:{ports[i]}", "--cluster-peer", keys[1 - i].node_id, port=ports[i])
                for i in range(2))
        session: LiveSession | None = None
        try:
            a.start()
            (node_key, _), = in_thread(register_nodes, a, 1)[0]
            session = LiveSession(a.url, node_key)
            session.start()
            until("the session is live on A", 30, lambda: session is not None and session.acks > 0)
            assert session.relays == [a.url], session.relays  # the precondition: A knew no other relay's URL
            b.start()
            until("A lists B's URL", 30, lambda: b.url in [row["url"] for row in a.get("/v1/relays")[1]["relays"]])
            until("the live session learns B", 70,  # asked again 2, 4, 8, 16, 32 s apart while B has no URL
                  lambda: b.url in session.relays,
                  lambda: session.relays)
            # learned while its session with A held: no reconnect (which asks again at welcome) was needed
            assert session.relay_url == a.url and not session.errors, session.errors
            acks_from_a = session.acks
            a.kill9()

            def on_b() -> bool:  # B acknowledged a heartbeat of the moved session, and shows the node online
                status, body, _ = b.get(f"/v1/nodes/{node_key.node_id}")
                return (session is not None and session.relay_url == b.url and session.acks > acks_from_a
                        and status == 200 and body["status"]["online"])

            until("the node is live on B", 60, on_b, lambda: (session.relay_url, session.errors[-3:], session.acks))
        finally:
            if session is not None:
                session.stop()
            for r in (a, b):
                r.stop()


def test_a_relay_without_peers_or_public_url_is_not_asked_again(tmp_path: Path) -> None:
    """A lone relay started without --public-url lists itself with no URL: that row is no peer to wait for, so the
    session asks once, at welcome, and never again (before, every session of such a relay asked for its whole life:
    2 s, doubling to 300 s). Read from the session's next-ask time, the one place that decision shows."""
    with RelayProcess(tmp_path / "r", *OPTIONS) as relay:
        rows = relay.get("/v1/relays")[1]["relays"]
        assert [(r["self"], r["url"]) for r in rows] == [(True, None)]  # the precondition: its own row, no URL
        (node_key, _), = in_thread(register_nodes, relay, 1)[0]
        session = LiveSession(relay.url, node_key)
        session.start()
        try:
            until("the session is live", 30, lambda: session.acks > 0)
            assert session._relearn_at == math.inf, session._relearn_at  # noqa: SLF001 - no other trace of it
        finally:
            session.stop()
