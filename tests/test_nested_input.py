"""Deeply nested JSON (issue 46, "bad input, everywhere"): 3,000 nested arrays or objects at every JSON entry point
answer with a 4xx, an error frame or a one-line error; the session and the relay serve on; no traceback."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.sync.client import connect

from tests.cli_runs import ce_bench
from tests.relay_process import RelayProcess

DEEP_ARRAYS = b"[" * 3000 + b"]" * 3000
DEEP_OBJECTS = b'{"a":' * 3000 + b"1" + b"}" * 3000


@pytest.fixture(scope="module")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RelayProcess]:
    with RelayProcess(tmp_path_factory.mktemp("nested") / "relay") as r:
        yield r


@pytest.mark.parametrize("path", ["/v1/profiles", "/v1/links", "/v1/jobs"])
@pytest.mark.parametrize("body", [DEEP_ARRAYS, DEEP_OBJECTS], ids=["arrays", "objects"])
def test_http_bodies_nested_too_deep_are_a_400(relay: RelayProcess, path: str, body: bytes) -> None:
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(urllib.request.Request(relay.url + path, data=body, method="POST"), timeout=10)
    problem = json.loads(caught.value.read())
    # nested too deep (400), or over the route's body limit before it is parsed (413: /v1/links takes 8 KiB)
    assert (caught.value.code, problem["code"]) in ((400, "invalid_json"), (413, "body_too_large")), problem
    if len(body) <= 8192:
        assert caught.value.code == 400, problem


def test_a_nested_frame_is_an_error_frame_and_the_session_goes_on(relay: RelayProcess) -> None:
    with connect(relay.url.replace("http", "ws") + "/v1/live") as ws:
        assert json.loads(ws.recv(timeout=5))["type"] == "welcome"
        ws.send(DEEP_ARRAYS[:1990] + DEEP_ARRAYS[-1990:])  # 3,980 bytes: under the frame limit, 1,990 deep
        error = json.loads(ws.recv(timeout=5))
        assert error == {"type": "error", "code": "invalid_json", "detail": "the message is nested too deeply"}
        ws.send(json.dumps({"type": "hello", "answers": 5}))  # the session serves on: the next message is answered
        assert json.loads(ws.recv(timeout=5))["code"] == "invalid_message"
    assert relay.get("/beacon")[0] == 200


def test_the_cli_says_a_nested_file_is_nested(tmp_path: Path) -> None:
    nested = tmp_path / "nested.json"
    nested.write_bytes(DEEP_ARRAYS)
    for args in (["verify", str(nested)], ["job", "run", str(nested)], ["job", "submit", str(nested), "--relay",
                                                                          "http://127.0.0.1:9"]):
        result = ce_bench(tmp_path, *args)
        assert result.returncode == 1 and "nested too deeply" in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
