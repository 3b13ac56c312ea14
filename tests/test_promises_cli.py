"""README promises of `ce-bench run` and `ce-bench verify` that had no test (issue 17), each against the real
CLI, the real capsule and, where a relay is involved, the real relay process (tests/relay_process.py):

- `verify --recompute` reproduces a server profile and, on a profile whose claims the capsule does not
  reproduce, exits 1 naming each figure that differs;
- the outbox: a 429 from the relay's own rate limit keeps the profile for the run after (on the post and on
  the resend), a real refusal for another reason keeps it as NAME.refused with the reason, and a profile
  superseded by a newer accepted one is removed (relay down -> run -> up -> run leaves nothing behind);
- `ce-bench run` refuses to publish a profile beyond physics (capsule/plausibility.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common.keys import NodeKey
from tests.conftest import Artifacts
from tests.relay_process import RelayProcess, free_port
from tests.samples import sample_profile

CLI = str(Path(sys.executable).parent / "ce-bench")
FAST = ["--no-jitter", "--no-gpu", "--budget-ms", "500"]


def ce_bench(home: Path, *args: str, cwd: Path, env: dict[str, str] | None = None,
             timeout: float = 300) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, CE_BENCH_HOME=str(home), COLUMNS="200", **(env or {}))
    return subprocess.run([CLI, *args], capture_output=True, text=True, env=full_env, cwd=cwd, timeout=timeout)


def said(result: subprocess.CompletedProcess[str]) -> str:
    """stdout + stderr with the console's line wrapping undone."""
    return " ".join((result.stdout + result.stderr).split())


def outbox(home: Path) -> list[str]:
    folder = home / "outbox"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def spend_burst(relay: RelayProcess, key: NodeKey) -> None:
    """Three earlier profiles of the node (the relay's per-node burst), measured a minute ago."""
    _, beacon, _ = relay.get("/beacon")
    now = int(time.time())
    for i in range(3):
        status, body = relay.post("/v1/profiles", sample_profile(key, beacon, measured_at=now - 50 + i)[1])
        assert status in (200, 201), body


def test_verify_recompute_reproduces_a_server_profile_and_names_each_mismatch(tmp_path: Path,
                                                                               artifacts: Artifacts) -> None:
    home = tmp_path / "home"
    out = tmp_path / "profile.json"
    run = ce_bench(home, "run", "--out", str(out), *FAST, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    profile: dict[str, Any] = json.loads(out.read_text())
    instances = len(profile["evidence"]["cpu"]["gflops_fp32"]["instances"])
    assert instances == profile["cpu"]["cores"] >= 1

    good = ce_bench(home, "verify", "--recompute", str(out), cwd=tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    reproduced = [line for line in good.stdout.splitlines() if line.strip().startswith("reproduced")]
    assert len(reproduced) == instances + 2, good.stdout  # every instance, the solo SGEMM, the token hash
    assert f"all {instances + 2} recomputed value(s) match" in good.stdout

    # The node's own key signs claims the capsule does not reproduce: the signature is valid, the work is not.
    ev = profile["evidence"]
    forged = json.loads(out.read_text())
    del forged["sig"]
    checksum = ev["cpu"]["gflops_fp32"]["instances"][0]["checksum"]
    forged["evidence"]["cpu"]["gflops_fp32"]["instances"][0]["checksum"] = checksum[::-1]
    forged["evidence"]["llm"]["token_ids_sha256"] = "0" * 64
    from capsule.signing import sign

    bad = tmp_path / "forged.json"
    bad.write_text(json.dumps(sign("NodeProfile", forged, NodeKey.load(home / "node.key"))))
    result = ce_bench(home, "verify", "--recompute", str(bad), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "valid NodeProfile signed by" in result.stdout  # the signature was not what failed
    lines = result.stdout.splitlines()
    assert any(line.strip().startswith("MISMATCH    cpu.gflops_fp32 instance 0: checksum") and checksum[::-1][:16]
               in line and f"got {checksum[:16]}" in line for line in lines), result.stdout
    assert any(line.strip().startswith("MISMATCH    llm.tokens_per_sec: token_ids_sha256") and
               f"got {ev['llm']['token_ids_sha256'][:16]}" in line for line in lines), result.stdout
    assert any(line.strip().startswith("reproduced  cpu single core") for line in lines), result.stdout
    assert f"2 of {instances + 2} recomputed value(s) differ" in said(result)


def test_outbox_keeps_a_rate_limited_profile_for_the_run_after_and_a_refused_one_as_refused(tmp_path: Path) -> None:
    """The relay's own per-node limit (web/api/ratelimit.py, --node-rate 0.1: one profile per 10 min after a burst of
    3) is really reached; a 429 keeps the profile in the outbox both when the run posts it and when the next
    run resends it. The relay's buckets live in memory, so a restart stands in for the ten minutes. A kept
    profile that the relay then refuses for another reason (a newer profile of the node reached it meanwhile:
    409 stale_profile) is kept as NAME.refused with the relay's reason."""
    home = tmp_path / "home"
    key = NodeKey.generate()
    key.save(home / "node.key")
    relay = RelayProcess(tmp_path / "relay", "--node-rate", "0.1").start()
    try:
        spend_burst(relay, key)

        first = ce_bench(home, "run", "--out", str(tmp_path / "p1.json"), "--relay", relay.url, *FAST, cwd=tmp_path)
        assert first.returncode == 1, first.stderr
        assert "refused the profile (429): node_rate_limited" in said(first) and "the profile is kept in" in said(first)
        p1 = json.loads((tmp_path / "p1.json").read_text())
        [kept1] = outbox(home)
        assert kept1.endswith(".json") and json.loads((home / "outbox" / kept1).read_text()) == p1

        second = ce_bench(home, "run", "--out", str(tmp_path / "p2.json"), "--relay", relay.url, *FAST, cwd=tmp_path)
        assert second.returncode == 1, second.stderr
        assert f"outbox: {kept1}: relay {relay.url} refused the profile (429): node_rate_limited" in said(second)
        p2 = json.loads((tmp_path / "p2.json").read_text())
        assert p2["measured_at"] > p1["measured_at"] + 1
        assert outbox(home) == sorted([kept1, f"{p2['measured_at']}-{key.node_id[-8:]}.json"])  # both wait

        relay.stop()
        relay.start()  # the limit has passed (the buckets are in memory)
        # a newer profile of this node than the first kept one reaches the relay another way
        _, beacon, _ = relay.get("/beacon")
        assert relay.post("/v1/profiles", sample_profile(key, beacon, measured_at=p1["measured_at"] + 1)[1])[0] == 200

        third = ce_bench(home, "run", "--out", str(tmp_path / "p3.json"), "--relay", relay.url, *FAST, cwd=tmp_path)
        assert third.returncode == 0, third.stderr
        text = said(third)
        assert "resent 1 waiting profile(s)" in text, text
        refused = kept1.replace(".json", ".refused")
        assert (f"outbox: {kept1}: relay {relay.url} refused the profile (409): stale_profile - a newer profile of "
                f"this node is stored") in text and f"kept as {refused}" in text, text
        assert outbox(home) == [refused]  # nothing deleted unsent
        assert json.loads((home / "outbox" / refused).read_text()) == p1
        p3 = json.loads((tmp_path / "p3.json").read_text())
        status, node, _ = relay.get(f"/v1/nodes/{key.node_id}")
        assert status == 200 and node["profile"] == p3
        _, history, _ = relay.get(f"/v1/nodes/{key.node_id}/history?limit=50")
        delivered = {e["measured_at"] for e in history["events"] if e["event"] == "profile"}
        assert p2["measured_at"] in delivered and p1["measured_at"] not in delivered, history
    finally:
        relay.stop()


def test_relay_down_run_up_run_leaves_nothing_in_the_outbox(tmp_path: Path) -> None:
    """The journey of issue 17: relay down -> run (local beacon, kept) -> relay up -> run. The kept profile
    cannot be accepted (its beacon is not the relay's) and is kept as NAME.superseded; once the run's fresh
    profile is accepted it has nothing left to deliver: it is removed, and the run says so."""
    home = tmp_path / "home"
    port = free_port()
    down = ce_bench(home, "run", "--out", str(tmp_path / "p0.json"), "--relay", f"http://127.0.0.1:{port}", *FAST,
                    cwd=tmp_path)
    assert down.returncode == 1 and "unreachable" in said(down), down.stderr
    [kept] = outbox(home)
    other_key, other = sample_profile()  # another node's superseded profile (e.g. from before a key rotation)
    other_name = f"{other['measured_at']}-{other_key.node_id[-8:]}.superseded"
    (home / "outbox" / other_name).write_text(json.dumps(other))
    with RelayProcess(tmp_path / "relay", port=port) as relay:
        up = ce_bench(home, "run", "--out", str(tmp_path / "p1.json"), "--relay", relay.url, *FAST, cwd=tmp_path)
        assert up.returncode == 0, up.stderr
        text = said(up)
        superseded = kept.replace(".json", ".superseded")
        assert f"{kept}: the relay cannot accept its beacon (unknown_beacon); kept as {superseded}" in text, text
        fresh = json.loads((tmp_path / "p1.json").read_text())
        assert relay.get(f"/v1/nodes/{fresh['node_id']}")[1]["profile"] == fresh
        assert (f"outbox: {superseded}: removed; the relay accepted a newer profile of this node (measured_at "
                f"{fresh['measured_at']})") in text, text
        assert text.index("reported to") < text.index(f"outbox: {superseded}: removed")  # only after acceptance
    assert outbox(home) == [other_name]  # another node's is not this acceptance's to remove


def test_superseded_profile_stays_until_a_newer_one_is_accepted(tmp_path: Path) -> None:
    """The other side of the removal: while the relay has accepted nothing newer (it refuses the fresh
    profile too), the superseded profile stays, and so does another node's."""
    home = tmp_path / "home"
    port = free_port()
    down = ce_bench(home, "run", "--out", str(tmp_path / "p0.json"), "--relay", f"http://127.0.0.1:{port}", *FAST,
                    cwd=tmp_path)
    assert down.returncode == 1, down.stderr
    [kept] = outbox(home)
    other_key, other = sample_profile()
    other_name = f"{other['measured_at']}-{other_key.node_id[-8:]}.superseded"
    (home / "outbox" / other_name).write_text(json.dumps(other))
    key = NodeKey.load(home / "node.key")
    with RelayProcess(tmp_path / "relay", "--node-rate", "0.1", port=port) as relay:
        spend_burst(relay, key)  # the fresh profile gets 429
        up = ce_bench(home, "run", "--out", str(tmp_path / "p1.json"), "--relay", relay.url, *FAST, cwd=tmp_path)
        assert up.returncode == 1 and "(429): node_rate_limited" in said(up), up.stderr
        fresh = json.loads((tmp_path / "p1.json").read_text())
    superseded = kept.replace(".json", ".superseded")
    assert outbox(home) == sorted([superseded, other_name, f"{fresh['measured_at']}-{key.node_id[-8:]}.json"])
    assert "removed" not in said(up)


IMPLAUSIBLE = '''
# Failure injection for tests/test_promises_cli.py: a measurement bug that inflates the whole-CPU figure
# 10,000x (as a broken clock would), applied to the capsule's aggregate before `ce-bench run` imports it.
import capsule.aggregate as _aggregate

_real = _aggregate.aggregate


def _inflated(*args, **kwargs):
    figures = _real(*args, **kwargs)
    figures.gflops_fp32 = figures.gflops_fp32 * 1e4
    return figures


_aggregate.aggregate = _inflated
'''


def test_run_refuses_to_publish_a_profile_beyond_physics(tmp_path: Path) -> None:
    """Failure injection (a sitecustomize.py on PYTHONPATH, only for this command): the whole-CPU figure comes out
    10,000x too high. `ce-bench run` checks its profile against capsule/plausibility.py before it writes or
    sends it: exit 1 naming the figure and the bound; no file, nothing at the relay, nothing in the outbox."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(IMPLAUSIBLE)
    home = tmp_path / "home"
    out = tmp_path / "profile.json"
    with RelayProcess(tmp_path / "relay") as relay:
        result = ce_bench(home, "run", "--out", str(out), "--relay", relay.url, *FAST, cwd=tmp_path,
                          env={"PYTHONPATH": str(inject)})
        text = said(result)
        assert result.returncode == 1, text
        assert "refusing to publish a figure beyond physics: $.cpu.gflops_fp32 = " in text, text
        value = float(text.split("$.cpu.gflops_fp32 = ")[1].split()[0])
        bound = float(text.split(" exceeds ")[1].split(":")[0])
        assert value > bound, text  # the injection produced what it should
        assert "Traceback" not in text
        assert not out.exists()
        assert outbox(home) == []
        _, atlas, _ = relay.get("/atlas")
        assert atlas["nodes"] == [], atlas
        key = NodeKey.load(home / "node.key")
        assert relay.get(f"/v1/nodes/{key.node_id}")[0] == 404
