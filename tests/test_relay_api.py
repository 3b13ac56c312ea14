"""The relay's API over real sockets: a `ce-bench relay` process on 127.0.0.1."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from capsule.signing import sign
from common.keys import NodeKey
from tests.relay_process import RelayProcess
from tests.samples import mutated, sample_profile


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    with RelayProcess(tmp_path_factory.mktemp("relay") / "data", "--ip-rate", "1000") as r:
        yield r


def beacon_of(relay: RelayProcess) -> dict[str, Any]:
    status, beacon, _ = relay.get("/beacon")
    assert status == 200
    return dict(beacon)


def test_store_replace_and_read_back(relay: RelayProcess) -> None:
    key, profile = sample_profile(beacon=beacon_of(relay), gflops=80.0, tps=200.0)
    status, body = relay.post("/v1/profiles", profile)
    assert (status, body["status"]) == (201, "stored"), body
    _, newer = sample_profile(key, beacon=beacon_of(relay), measured_at=profile["measured_at"] + 1, gflops=90.0)
    status, body = relay.post("/v1/profiles", newer)
    assert (status, body["status"]) == (200, "replaced"), body
    status, node, _ = relay.get(f"/v1/nodes/{key.node_id}")
    assert status == 200 and node["profile"] == newer
    assert node["status"]["online"] is True and node["status"]["last_seen"] > time.time() - 60
    _, stats, _ = relay.get("/stats")
    _, local, _ = relay.get("/fabric/stats")
    assert stats == local and stats["nodes"] >= 1
    status, page, headers = relay.get("/atlas?limit=1000")
    assert status == 200 and newer in page["nodes"] and page["next_cursor"] is None
    assert relay.get("/atlas?limit=1000", {"if-none-match": headers["etag"]})[0] == 304


def test_stats_sum_live_nodes_once(tmp_path: Path) -> None:
    with RelayProcess(tmp_path / "data") as r:
        keys = []
        for gflops in (10.0, 20.0, 30.0):
            key, profile = sample_profile(beacon=beacon_of(r), gflops=gflops, tps=100.0)
            assert r.post("/v1/profiles", profile)[0] == 201
            keys.append(key)
        _, again = sample_profile(keys[0], beacon=beacon_of(r), measured_at=int(time.time()) + 5, gflops=40.0,
                                  tps=100.0)
        assert r.post("/v1/profiles", again)[0] == 200  # replaced: counted once, with its new figure
        _, stats, _ = r.get("/stats")
        claimed = stats["claimed"]
        assert claimed["nodes"] == 3 and claimed["cpu_cores"] == 6
        assert claimed["cpu_gflops"] == 90.0 and claimed["tokens_per_sec"] == 300.0
        assert claimed["gpus"] == 3 and claimed["storage_free_gb"] == 240
        assert claimed["perf_score"] == pytest.approx(0.4 * 90 / 75 + 0.4 * 0.006 / 10 + 0.2 * 300 / 200)
        # no challenge observed any of them: the scoreboard itself counts nothing yet (tests/test_trust.py)
        assert stats["nodes"] == 3 and stats["verified_nodes"] == 0
        assert stats["cpu_cores"] is None and stats["cpu_gflops"] == 0 and stats["perf_score"] == 0
        assert stats["mesh"] == {"median_rtt_ms": None, "reachable_frac": None, "regions": None}


def refusal(relay: RelayProcess, data: bytes | dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, body = relay.post("/v1/profiles", data)
    assert body["status"] == status and body["type"].endswith(body["code"])
    return status, body


def test_refusals_have_stable_codes_and_fields(relay: RelayProcess) -> None:
    beacon = beacon_of(relay)
    key, good = sample_profile(beacon=beacon)
    assert refusal(relay, b"{not json")[:1] == (400,)
    assert refusal(relay, b"{not json")[1]["code"] == "invalid_json"
    status, body = refusal(relay, mutated(good, "cpu.cores", 0))
    assert (status, body["code"], body["field"]) == (422, "invalid_field", "$.cpu.cores")
    status, body = refusal(relay, {**good, "cpu": {**good["cpu"], "gflops_fp32": 1e6}})
    assert (status, body["code"], body["field"]) == (422, "bad_signature", "$.sig")
    _, foreign = sample_profile(key)  # cites a round of another relay
    assert refusal(relay, foreign)[1]["code"] == "unknown_beacon"
    _, unknown_round = sample_profile(key, beacon={**beacon, "round": beacon["round"] + 1000})
    status, body = refusal(relay, unknown_round)
    assert (body["code"], body["field"]) == ("unknown_beacon", "$.beacon.round")
    _, wrong_value = sample_profile(key, beacon={**beacon, "value": "00" * 32})
    assert refusal(relay, wrong_value)[1]["code"] == "beacon_mismatch"
    _, future = sample_profile(key, beacon=beacon, measured_at=int(time.time()) + 3600)
    assert refusal(relay, future)[1]["code"] == "measured_in_future"
    _, early = sample_profile(key, beacon=beacon, measured_at=beacon["issued_at"] - 3600)
    assert refusal(relay, early)[1]["code"] == "measured_before_beacon"
    assert relay.post("/v1/profiles", good)[0] == 201
    status, body = refusal(relay, good)
    assert (status, body["code"]) == (409, "replayed_profile")
    _, older = sample_profile(key, beacon=beacon, measured_at=good["measured_at"] - 1)
    assert refusal(relay, older)[1]["code"] == "stale_profile"
    status, body = refusal(relay, b"{" + b" " * 70_000 + b"}")
    assert (status, body["code"]) == (413, "body_too_large")


def test_verification_in_worker_processes_answers_the_same(tmp_path: Path) -> None:
    """--verify-workers moves JSON/schema/signature checks into worker processes (web/api/verify_pool.py): the
    answers must not change, refusals included, and nothing may hang when a worker is busy or gone."""
    with RelayProcess(tmp_path / "data", "--verify-workers", "1") as relay:
        beacon = beacon_of(relay)
        key, good = sample_profile(beacon=beacon)
        assert refusal(relay, b"{not json")[1]["code"] == "invalid_json"
        status, body = refusal(relay, mutated(good, "cpu.cores", 0))
        assert (status, body["code"], body["field"]) == (422, "invalid_field", "$.cpu.cores")
        status, body = refusal(relay, {**good, "cpu": {**good["cpu"], "gflops_fp32": 1e6}})
        assert (status, body["code"], body["field"]) == (422, "bad_signature", "$.sig")
        status, body = refusal(relay, mutated(good, "evidence", {"x": 2**53}))
        assert (status, body["code"], body["field"]) == (422, "invalid_field", "$.evidence.x")
        assert relay.post("/v1/profiles", good)[0] == 201
        assert refusal(relay, good)[1]["code"] == "replayed_profile"
        assert relay.proc is not None
        workers = psutil.Process(relay.proc.pid).children(recursive=True)
        assert workers, "no verification worker process"
        for worker in workers:  # failure injection: a worker killed under the relay
            worker.kill()
        psutil.wait_procs(workers, timeout=10)
        _, other = sample_profile(beacon=beacon)
        assert relay.post("/v1/profiles", other)[0] == 201  # verified in-process, the pool restarted
        _, third = sample_profile(beacon=beacon)
        assert relay.post("/v1/profiles", third)[0] == 201


def test_node_rate_limit(relay: RelayProcess) -> None:
    key = NodeKey.generate()
    codes = []
    for i in range(5):  # burst 3 per node, then 6/min
        _, p = sample_profile(key, beacon=beacon_of(relay), measured_at=int(time.time()) - 10 + i)
        codes.append(relay.post("/v1/profiles", p)[0])
    assert codes[:3] == [201, 200, 200] and codes[3:] == [429, 429]


def test_ip_rate_limit(tmp_path: Path) -> None:
    with RelayProcess(tmp_path / "data", "--ip-rate", "1") as r:
        statuses = [r.post("/v1/profiles", b"{}")[0] for _ in range(120)]
        assert 429 in statuses and statuses[0] == 422
        status, body = r.post("/v1/profiles", b"{}")
        assert body["code"] == "rate_limited"


def test_bad_read_parameters(relay: RelayProcess) -> None:
    assert relay.get("/v1/nodes/not-a-node")[1]["code"] == "invalid_node_id"
    missing = NodeKey.generate().node_id
    status, body, _ = relay.get(f"/v1/nodes/{missing}")
    assert (status, body["code"]) == (404, "unknown_node")
    for query in ("limit=0", "limit=abc", "limit=100000", "cursor=" + "x" * 200):
        status, body, _ = relay.get(f"/atlas?{query}")
        assert (status, body["code"]) == (400, "invalid_parameter"), query


def test_atlas_pages_cover_every_live_node(tmp_path: Path) -> None:
    with RelayProcess(tmp_path / "data") as r:
        ids = set()
        for _ in range(7):
            key, p = sample_profile(beacon=beacon_of(r))
            assert r.post("/v1/profiles", p)[0] == 201
            ids.add(key.node_id)
        seen, cursor, pages = [], "", 0
        while True:
            _, page, _ = r.get(f"/atlas?limit=3&cursor={cursor}")
            seen += [n["node_id"] for n in page["nodes"]]
            pages += 1
            if page["next_cursor"] is None:
                break
            cursor = page["next_cursor"]
            assert pages < 10
        assert sorted(seen) == sorted(ids) and pages == 3


def test_beacon_chain_is_signed_and_advances(tmp_path: Path) -> None:
    from capsule.signing import verify_record

    with RelayProcess(tmp_path / "data", "--beacon-interval", "0.3") as r:
        first = beacon_of(r)
        verify_record("Beacon", first)
        time.sleep(1.0)
        later = beacon_of(r)
        verify_record("Beacon", later)
        assert later["round"] > first["round"] and later["relay"] == first["relay"]
    with RelayProcess(tmp_path / "data") as r:  # restart: same relay key, the chain continues
        after = beacon_of(r)
        assert after["relay"] == first["relay"] and after["round"] > later["round"]
        assert after["prev"] != ""


def test_openapi_and_metrics(relay: RelayProcess) -> None:
    status, doc, _ = relay.get("/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.1") and "/v1/profiles" in doc["paths"]
    schema = doc["paths"]["/v1/profiles"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "gflops_fp32" in json.dumps(schema)
    import urllib.request

    text = urllib.request.urlopen(relay.url + "/metrics", timeout=5).read().decode()
    assert 'ce_relay_ingest_total{code="stored"}' in text and "ce_relay_ingest_seconds_bucket" in text
    assert "ce_relay_live_nodes" in text


def test_one_signed_heartbeat_then_pongs_keep_a_node_live(tmp_path: Path) -> None:
    """Liveness a phone can afford (issue 32): the welcome says "liveness": "pongs", the node signs one
    heartbeat (it binds the session to its key) and its pongs to the relay's pings keep it live."""
    from host_runner.live_client import LiveSession

    with RelayProcess(tmp_path / "data", "--heartbeat-interval", "0.5") as r:
        key, p = sample_profile(beacon=beacon_of(r))
        assert r.post("/v1/profiles", p)[0] == 201
        session = LiveSession(r.url, key).start()
        try:
            time.sleep(3.0)  # 6 intervals: without pongs the node would be offline after 1.5 s
            assert r.get("/stats")[1]["nodes"] == 1
            assert session.acks == 1 and not session.errors  # one heartbeat, then none
        finally:
            session.stop()
        deadline = time.monotonic() + 10
        while r.get("/stats")[1]["nodes"] != 0:
            assert time.monotonic() < deadline, "node never went offline"
            time.sleep(0.2)
        status, node, _ = r.get(f"/v1/nodes/{key.node_id}")
        assert node["status"]["online"] is False
        assert node["status"]["rtt_ms"] is not None and 0 < node["status"]["rtt_ms"] < 1000  # from ping/pong


def live_nodes(r: RelayProcess) -> int:
    return int(r.get("/stats")[1]["nodes"])


def next_text(ws: Any) -> dict[str, Any]:
    """The next JSON frame (the relay's binary bandwidth probes go unanswered here)."""
    while isinstance(frame := ws.recv(timeout=5), bytes):
        pass
    return dict(json.loads(frame))


def test_a_session_that_stops_answering_is_offline_in_three_intervals_and_no_forged_pong_helps(
        tmp_path: Path) -> None:
    """A session that signs its heartbeat and then answers no ping is offline within 3 intervals (9 s here,
    measured from its last sign of life), not at 4; pongs with made-up or replayed ids are refused and keep
    nothing live. A client of the older protocol (a heartbeat every interval / 2, no pongs) stays live. The
    interval is 3 s so that scheduling noise (this test runs at nice 19 beside timed ones) stays well inside
    the 3 s that separate 3 intervals from 4."""
    from websockets.sync.client import connect

    interval_s = 3.0
    with RelayProcess(tmp_path / "data", "--heartbeat-interval", str(interval_s)) as r:
        key, p = sample_profile(beacon=beacon_of(r))
        assert r.post("/v1/profiles", p)[0] == 201
        with connect(r.url.replace("http", "ws") + "/v1/live") as ws:
            welcome = json.loads(ws.recv(timeout=5))
            assert welcome["liveness"] == "pongs"
            body = {"node_id": key.node_id, "session": welcome["session"], "seq": 0, "sent_at": int(time.time())}
            ws.send(json.dumps({"type": "heartbeat", "heartbeat": sign("Heartbeat", body, key)}))
            bound = time.monotonic()
            first_ping = None
            while True:
                message = next_text(ws)
                if message["type"] == "ping" and first_ping is None:
                    first_ping = message["id"]
                    ws.send(json.dumps({"type": "pong", "id": first_ping}))  # one honest pong
                    bound = time.monotonic()
                    break
            assert live_nodes(r) == 1
            codes: list[str] = []
            for fake in (first_ping, first_ping + 1, 12345, True):  # replayed, guessed, made up, not an int
                ws.send(json.dumps({"type": "pong", "id": fake}))
            deadline = time.monotonic() + 20
            while live_nodes(r) != 0:
                assert time.monotonic() < deadline, "a session that answers no ping stayed live"
                time.sleep(0.05)
            went = time.monotonic() - bound
            while len(codes) < 4:
                message = next_text(ws)
                if message["type"] == "error":
                    codes.append(message["code"])
            assert codes == ["unknown_ping"] * 4, codes
            # 3 intervals (never sooner), the relay's 1 s sweep and slack; 4 intervals would be 12 s
            assert 3 * interval_s - 0.1 <= went <= 3 * interval_s + 1.0 + 1.9, went

        with connect(r.url.replace("http", "ws") + "/v1/live") as ws:  # an older client: heartbeats only
            welcome = json.loads(ws.recv(timeout=5))
            for seq in range(8):
                beat = {"node_id": key.node_id, "session": welcome["session"], "seq": seq, "sent_at": int(time.time())}
                ws.send(json.dumps({"type": "heartbeat", "heartbeat": sign("Heartbeat", beat, key)}))
                time.sleep(0.25)
                if seq >= 2:
                    assert live_nodes(r) == 1, seq


def test_live_session_refuses_forged_heartbeats(tmp_path: Path) -> None:
    from websockets.exceptions import ConnectionClosedError
    from websockets.sync.client import connect

    with RelayProcess(tmp_path / "data") as r:
        key, p = sample_profile(beacon=beacon_of(r))
        assert r.post("/v1/profiles", p)[0] == 201
        with connect(r.url.replace("http", "ws") + "/v1/live") as ws:
            welcome = json.loads(ws.recv(timeout=5))
            body = {"node_id": key.node_id, "session": welcome["session"], "seq": 0, "sent_at": int(time.time())}
            forged = sign("Heartbeat", body, NodeKey.generate())
            ws.send(json.dumps({"type": "heartbeat", "heartbeat": forged}))
            assert json.loads(ws.recv(timeout=5))["code"] == "bad_signature"
            other_session = sign("Heartbeat", {**body, "session": "0" * 32}, key)
            ws.send(json.dumps({"type": "heartbeat", "heartbeat": other_session}))
            assert json.loads(ws.recv(timeout=5))["code"] == "wrong_session"
            ws.send(json.dumps({"type": "heartbeat", "heartbeat": sign("Heartbeat", body, key)}))
            assert json.loads(ws.recv(timeout=5)) == {"type": "ack", "seq": 0}
            ws.send(json.dumps({"type": "heartbeat", "heartbeat": sign("Heartbeat", body, key)}))
            assert json.loads(ws.recv(timeout=5))["code"] == "replayed_heartbeat"
            ws.send("not json")
            assert json.loads(ws.recv(timeout=5))["code"] == "invalid_json"
            ws.send(json.dumps({"type": "teleport"}))  # the fifth invalid message: the relay closes (1008)
            assert json.loads(ws.recv(timeout=5))["code"] == "unknown_type"
            with pytest.raises(ConnectionClosedError) as closed:
                ws.recv(timeout=5)
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


def test_stats_history_samples_the_scoreboard(tmp_path: Path) -> None:
    """GET /stats/history: the verified and claimed totals sampled at the configured interval, kept across
    a restart."""
    with RelayProcess(tmp_path / "data", "--stats-history-interval", "0.2") as r:
        key, profile = sample_profile(beacon=beacon_of(r), gflops=30.0)
        assert r.post("/v1/profiles", profile)[0] == 201
        deadline = time.monotonic() + 10
        while True:
            _, history, _ = r.get("/stats/history")
            points = history["points"]
            if len(points) >= 3 and points[-1]["claimed"]["cpu_gflops"] == 30.0:
                break
            assert time.monotonic() < deadline, history
            time.sleep(0.2)
        assert history["interval_s"] == 0.2
        assert points[0]["claimed"]["cpu_gflops"] == 0.0  # sampled at start, before the profile
        assert points[-1]["verified"]["cpu_gflops"] == 0.0 and points[-1]["verified_nodes"] == 0
        assert [p["at"] for p in points] == sorted(p["at"] for p in points)
    with RelayProcess(tmp_path / "data", "--stats-history-interval", "60") as r:  # the series survives a restart
        kept = r.get("/stats/history")[1]["points"]
        assert {p["at"] for p in points} <= {p["at"] for p in kept}, (points, kept)
        assert kept[-1]["claimed"]["cpu_gflops"] == 0.0  # sampled at start: the node is not live after it


def test_live_sessions_are_not_compressed(tmp_path: Path) -> None:
    """The relay declines permessage-deflate (a client offers it by default): compressing every frame was a
    third of its CPU at 10,000 sessions, and a compressed bandwidth probe would not time the link."""
    from websockets.sync.client import connect

    with RelayProcess(tmp_path / "data") as r, connect(r.url.replace("http", "ws") + "/v1/live") as ws:
        assert ws.request is not None and "permessage-deflate" in ws.request.headers.get(
            "Sec-WebSocket-Extensions", "")  # the precondition: it was offered
        assert ws.response is not None and "Sec-WebSocket-Extensions" not in ws.response.headers
        assert json.loads(ws.recv(timeout=5))["type"] == "welcome"



def test_the_odds_are_served_from_the_relays_config(relay: RelayProcess) -> None:
    """GET /v1/checks: the published odds of this relay's own config (web/proof/checks.py), documented in the
    OpenAPI document; no roll call has judged an answer yet, so the false-reject rate is null with the reason."""
    status, body, _ = relay.get("/v1/checks")
    assert status == 200, body
    assert body["checks"]["sgemm"]["pass_chance_one_instance"]["0.1"] == pytest.approx(0.81)
    assert set(body["checks"]) == {"sgemm", "gpu", "llm", "links"}
    assert body["honest_false_reject"]["rate"] is None and body["honest_false_reject"]["why_null"]
    assert "/v1/checks" in relay.get("/openapi.json")[1]["paths"]
