"""No client input produces a 5xx or kills a live session (issue 11): hypothesis against a real relay
process on POST /v1/profiles, POST /v1/links and every WebSocket message type. Mutated records are signed
again where they still can be, so the fuzz reaches the checks behind the signature. Every input that once
broke the relay is pinned with @example, so CI never passes by luck."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from capsule.signing import sign
from common.keys import NodeKey
from host_runner.live_client import LiveSession
from tests.relay_process import RelayProcess
from tests.samples import mutated, sample_profile

# derandomize: CI runs the same 120 cases every time (plus the pinned ones), so it never passes or fails by
# luck; explore further locally with HYPOTHESIS_SEED unset and derandomize=False.
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
BIG = 2**53  # the first integer I-JSON cannot carry exactly


def json_values() -> st.SearchStrategy[Any]:
    """JSON values including what RFC 8785 cannot represent: huge integers, NaN, infinities, lone surrogates."""
    scalars = (st.none() | st.booleans() | st.integers() | st.integers(min_value=BIG - 2, max_value=2**70)
               | st.floats() | st.sampled_from([1e308, -1e308, 5e-324, float("nan"), float("inf")])
               | st.text(max_size=20) | st.sampled_from(["\ud800", "a\udfff"]))
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(max_size=10), inner, max_size=3), max_leaves=10)


def post(url: str, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(url + path, data=body, method="POST", headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status), json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), json.loads(exc.read() or b"{}")


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def resigned(kind: str, record: dict[str, Any], *signers: tuple[NodeKey, str]) -> dict[str, Any]:
    """The mutated record signed again, when it still has a canonical form; else as mutated (the relay must
    refuse it by the field at fault, not fail on it)."""
    try:
        for key, field in signers:
            record = sign(kind, record, key, field)
    except ValueError:
        pass
    return record


def dumps(obj: Any) -> bytes:
    return json.dumps(obj).encode()  # NaN and Infinity as Python writes them: json.loads at the relay takes them


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    data = tmp_path_factory.mktemp("relay") / "data"
    with RelayProcess(data, "--ip-rate", "100000", "--node-rate", "100000", "--heartbeat-interval", "0.5") as r:
        yield r
    log = r.log.read_text()
    assert "unhandled error" not in log and "Traceback" not in log, log[-3000:]


@pytest.fixture(scope="module")
def bystander(relay: RelayProcess) -> Iterator[LiveSession]:
    """Another node's live session: nothing the fuzz sends may disturb it."""
    key = register(relay)
    session = LiveSession(relay.url, key).start()
    yield session
    acks = session.acks
    time.sleep(1.2)
    session.stop()
    assert session.acks > acks and not session.errors, session.errors


def register(relay: RelayProcess) -> NodeKey:
    _, beacon, _ = relay.get("/beacon")
    key, profile = sample_profile(beacon=beacon)
    assert relay.post("/v1/profiles", profile)[0] == 201
    return key


def still_serving(relay: RelayProcess) -> None:
    assert relay.get("/beacon")[0] == 200


PROFILE_FIELDS = ["v", "node_id", "measured_at", "beacon.round", "beacon.value", "cpu.cores", "cpu.gflops_fp32",
                  "gpus", "memory.total_mb", "storage.free_gb", "llm.tokens_per_sec", "runtime.kind", "evidence",
                  "sig", "capsule"]


def test_profiles(relay: RelayProcess, bystander: LiveSession) -> None:
    _, beacon, _ = relay.get("/beacon")
    key, base = sample_profile(beacon=beacon)

    @FUZZ
    @given(field=st.sampled_from(PROFILE_FIELDS), value=json_values(), raw=st.binary(max_size=300),
           path=st.text(max_size=60), use_raw=st.booleans())
    # CI, 2026-12-02: canonicalisation raised a bare ValueError outside verify_profile's try -> 500
    @example(field="evidence", value={"x": BIG}, raw=b"", path="", use_raw=False)
    @example(field="beacon.round", value=BIG, raw=b"", path="", use_raw=False)
    @example(field="evidence", value=[float("nan")], raw=b"", path="", use_raw=False)
    @example(field="evidence", value={"\ud800": 1}, raw=b"", path="", use_raw=False)
    @example(field="runtime.kind", value="a\udfff", raw=b"", path="", use_raw=False)
    @example(field="cpu.gflops_fp32", value=float("inf"), raw=b"", path="", use_raw=False)
    def check(field: str, value: Any, raw: bytes, path: str, use_raw: bool) -> None:
        body = raw if use_raw else dumps(resigned("NodeProfile", mutated(base, field, value), (key, "sig")))
        status, answer = post(relay.url, "/v1/profiles", body)
        assert status < 500, answer
        if status >= 400:
            assert answer.get("code") and answer["code"] != "internal_error", answer
        quoted = urllib.parse.quote(path, safe="")
        for target in (f"/v1/nodes/{quoted}", f"/atlas?limit={quoted}", f"/atlas?cursor={quoted}"):
            assert status_of(relay.url + target) < 500, target

    check()
    still_serving(relay)


BEYOND_PHYSICS = {("rtt_ms", 0.0001), ("rtt_ms", 590_000.0), ("bw_mbps", 1e308)}
LINK_FIELDS = ["a", "b", "rtt_ms", "jitter_ms", "loss", "bw_mbps", "measured_at", "sig_a", "sig_b"]


def test_links(relay: RelayProcess, bystander: LiveSession) -> None:
    a, b = register(relay), register(relay)
    base = {"a": a.node_id, "b": b.node_id, "rtt_ms": 12.5, "jitter_ms": 0.4, "loss": 0.0, "bw_mbps": 940.0,
            "measured_at": int(time.time())}

    @FUZZ
    @given(field=st.sampled_from(LINK_FIELDS), value=json_values() | st.floats())
    # issue 11, 2026-12-02: accepted between two keys of one attacker
    @example(field="rtt_ms", value=0.0001)
    @example(field="rtt_ms", value=59_000.0 * 10)
    @example(field="bw_mbps", value=1e308)
    @example(field="bw_mbps", value=0.0001)  # 100 bit/s is slow, not impossible: accepted (a test bug, 2026-12-03)
    @example(field="measured_at", value=BIG)
    @example(field="jitter_ms", value=float("nan"))
    def check(field: str, value: Any) -> None:
        sample = resigned("LinkSample", mutated(base, field, value), (a, "sig_a"), (b, "sig_b"))
        status, answer = post(relay.url, "/v1/links", dumps(sample))
        assert status < 500, answer
        if isinstance(value, float) and (field, value) in BEYOND_PHYSICS:
            assert (status, answer["code"], answer["field"]) == (422, "invalid_field", f"$.{field}"), answer

    check()
    still_serving(relay)


ALIVE_PROBE = "ce-test-alive-probe"
MESSAGE_TYPES = ["heartbeat", "pong", "bw_ack", "cosigned", "unknown", "ack", "hello", "commit", "opening"]


def test_live_messages(relay: RelayProcess, bystander: LiveSession) -> None:
    """Each case on a fresh session: the bad message gets an error frame (or is served), and the same session
    still answers the next message afterwards."""
    key = register(relay)
    url = relay.url.replace("http://", "ws://") + "/v1/live"

    @FUZZ
    @given(kind=st.sampled_from(MESSAGE_TYPES),
           field=st.sampled_from(["heartbeat", "id", "n", "sample", "seq", "answers", "roots", "rows"]),
           value=json_values(), raw=st.binary(max_size=200) | st.text(max_size=200), use_raw=st.booleans())
    # issue 11, 2026-12-02: a canonicalisation ValueError in "cosigned" escaped the handler and closed the session
    @example(kind="cosigned", field="sample", value={"a": "x", "rtt_ms": float("nan")}, raw=b"", use_raw=False)
    @example(kind="heartbeat", field="heartbeat", value={"seq": BIG}, raw=b"", use_raw=False)
    @example(kind="heartbeat", field="heartbeat", value={"node_id": "\ud800"}, raw=b"", use_raw=False)
    @example(kind="pong", field="id", value=float("inf"), raw=b"", use_raw=False)
    # a valid heartbeat with the highest seq: the liveness check must not depend on acks (test bug, 2026-12-03)
    @example(kind="heartbeat", field="heartbeat", value={"seq": 2**53 - 1}, raw=b"", use_raw=False)
    def check(kind: str, field: str, value: Any, raw: bytes | str, use_raw: bool) -> None:
        with connect(url, open_timeout=10) as ws:
            welcome = json.loads(ws.recv(timeout=10))
            beat = {"node_id": key.node_id, "session": welcome["session"], "seq": 0, "sent_at": int(time.time())}
            if use_raw:
                ws.send(raw)
            else:
                message: dict[str, Any] = {"type": kind, field: value}
                if kind == "heartbeat" and isinstance(value, dict):
                    message["heartbeat"] = resigned("Heartbeat", {**beat, **value}, (key, "sig"))
                if kind == "cosigned" and isinstance(value, dict):
                    message["sample"] = {"b": welcome["relay"], **value}
                ws.send(json.dumps(message))
            # then a message only this test sends: its answer proves the session is still being served (a good
            # heartbeat would not do: the fuzzed one may be a valid heartbeat with a higher seq)
            ws.send(json.dumps({"type": ALIVE_PROBE}))
            deadline = time.monotonic() + 10
            while True:
                frame = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
                if isinstance(frame, str) and ALIVE_PROBE in json.loads(frame).get("detail", ""):
                    break

    check()
    still_serving(relay)
