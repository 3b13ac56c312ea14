"""NATS with authorization (web/cluster/nats_auth.py, web/cluster/nats_local.py): real nats-servers and real relays.

A client without credentials, or with wrong ones, cannot connect to the cluster's server, so it cannot publish
the forged record a relay user can (the control: the same record, sent by the same code with a relay's
credentials, reaches the other relay on its subject and is counted there); a relay user cannot delete the
bucket; relays with their credentials still form one cluster (profiles, beacon rounds, digests and link
samples cross, with no permission violation logged). Refused or unreadable credentials end `ce-bench relay`
with one line; `--processes 2` runs its own nats-server that refuses anonymous clients."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import subprocess
import time
from pathlib import Path

import nats
import psutil
import pytest
from nats.errors import Error as NatsError

from common.keys import load_or_create
from tests.nats_process import NatsProcess
from tests.relay_process import CLI, RelayProcess, eventually, free_port, metric
from tests.samples import sample_profile
from tests.threaded import in_thread
from web.cluster import nats_cluster as cluster
from web.cluster.nats_auth import RELAY_SUBJECTS, relay_permissions
from web.config import RelayConfig

# timed (tests/scheduling.py): beacon rounds and digests cross the cluster within set times
pytestmark = pytest.mark.timed

INVALID = 'ce_relay_cluster_received_total{result="invalid"}'
DIGESTS = tuple(f'ce_relay_cluster_received_total{{result="digest_{outcome}"}}'
                for outcome in ("applied", "gap", "old"))
LINKS_SENT = ('ce_relay_cluster_sent_total{kind="links"}',)
FORGED = json.dumps({"origin": "12D3KooWforger", "body": "{}"}).encode()  # a record no relay can verify


async def forge(url: str, **credentials: str) -> str | None:
    """Publishes FORGED on the relays' profile subject as a client of `url` would; None once the server took
    it, else what refused it."""
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    try:
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=1,
                                reconnect_time_wait=0.1, error_cb=on_error, **credentials)
    except (NatsError, OSError) as exc:
        return str(exc)
    try:
        await nc.publish(cluster.SUBJECT_PROFILES, FORGED)
        await nc.flush(timeout=5)
        await asyncio.sleep(0.3)  # a permissions violation arrives asynchronously
    finally:
        await nc.close()
    return errors[0] if errors else None


async def delete_bucket(url: str, user: str, password: str) -> str | None:
    """Deletes the profiles' bucket with a relay's credentials; None if it went, else what refused it."""
    async def quiet(exc: Exception) -> None:
        return None

    nc = await nats.connect(url, user=user, password=password, error_cb=quiet)
    try:
        await nc.jetstream(timeout=3).delete_stream("KV_ce-atlas")
    except (NatsError, TimeoutError) as exc:
        return repr(exc)  # the server drops a forbidden request: the API call times out
    finally:
        await nc.close()
    return None


def serves(relay: RelayProcess, node_id: str) -> bool:
    return relay.get(f"/v1/nodes/{node_id}")[0] == 200


def heard(relay: RelayProcess, peer: str) -> bool:
    """Whether the relay has a beacon round of the peer (they crossed the nats-server)."""
    return any(r["relay"] == peer and r["last_seen"] for r in relay.get("/v1/relays")[1]["relays"])


def counted(relay: RelayProcess, metrics: tuple[str, ...]) -> bool:
    return any(metric(relay, name) > 0 for name in metrics)


def test_only_relay_credentials_reach_the_relays_subjects_and_the_relays_form_a_cluster(tmp_path: Path) -> None:
    assert RELAY_SUBJECTS == (cluster.SUBJECT_PROFILES, cluster.SUBJECT_DIGESTS, cluster.SUBJECT_BEACONS,
                              cluster.SUBJECT_TRANSCRIPTS, cluster.SUBJECT_LINKS)  # the permissions' subjects
    keys = {n: load_or_create(tmp_path / n / "relay.key") for n in ("a", "b")}
    ports = {n: free_port() for n in keys}
    with NatsProcess(tmp_path / "nats", users=["relay-a", "relay-b"]) as server:
        conf = server.conf.read_text()
        assert "no_auth_user" not in conf and oct(server.conf.stat().st_mode & 0o777) == "0o600"
        relays = {n: RelayProcess(tmp_path / n, *server.relay_args(f"relay-{n}"),
                                  "--cluster-peer", keys["b" if n == "a" else "a"].node_id,
                                  "--public-url", f"http://127.0.0.1:{ports[n]}", "--ip-rate", "1000",
                                  "--beacon-interval", "1", "--heartbeat-interval", "1", "--digest-full-every", "1",
                                  "--landmark-mesh-interval-s", "1", port=ports[n]) for n in keys}
        try:
            a, b = relays["a"].start(), relays["b"].start()
            _, beacon, _ = a.get("/beacon")
            key, profile = sample_profile(beacon=beacon)
            assert a.post("/v1/profiles", profile)[0] == 201
            eventually(lambda: serves(b, key.node_id), 15, "the profile posted to a served by b")
            for relay, peer in ((a, keys["b"].node_id), (b, keys["a"].node_id)):
                eventually(functools.partial(heard, relay, peer), 15, "the peer's beacon rounds")
                eventually(functools.partial(counted, relay, DIGESTS), 15, "the peer's live digests")
                eventually(functools.partial(counted, relay, LINKS_SENT), 20,
                           "a landmark link sample put in the bucket and sent on the subject")

            # no credentials, wrong ones: refused at connect; nothing reaches b
            assert "Authorization Violation" in str(in_thread(asyncio.run, forge(server.url)))
            wrong = in_thread(asyncio.run, forge(server.url, user="relay-a", password="not-the-password"))
            assert "Authorization Violation" in str(wrong)
            unknown = in_thread(asyncio.run, forge(server.url, user="listener",
                                                   password=server.passwords["relay-a"]))
            assert "Authorization Violation" in str(unknown)
            assert metric(b, INVALID) == 0
            # the control: the same code with a relay's credentials publishes on the subject b listens to
            assert in_thread(asyncio.run, forge(server.url, user="relay-a",
                                                password=server.passwords["relay-a"])) is None
            eventually(lambda: metric(b, INVALID) >= 1, 10, "the forged record reaching b (control)")
            time.sleep(1.0)
            assert metric(b, INVALID) == 1  # only the control's record arrived
            # a relay user may not delete what the cluster keeps
            refused = in_thread(asyncio.run, delete_bucket(server.url, "relay-a", server.passwords["relay-a"]))
            assert refused is not None, "a relay user deleted the bucket"
        finally:
            for relay in relays.values():
                relay.stop()
    for relay in relays.values():
        assert "permissions violation" not in relay.log.read_text().lower(), relay.log.read_text()[-3000:]


def run_relay(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, "relay", "--port", str(free_port()), *args], capture_output=True, text=True,
                          timeout=60, env=env or dict(os.environ))


def test_refused_or_unreadable_credentials_end_the_relay_with_one_line(tmp_path: Path) -> None:
    with NatsProcess(tmp_path / "nats", users=["relay-a"]) as server:
        wrong = tmp_path / "wrong.password"
        wrong.write_text("not-the-password\n")
        wrong.chmod(0o600)
        readable = tmp_path / "readable.password"
        readable.write_text(server.passwords["relay-a"] + "\n")
        readable.chmod(0o644)
        env_wrong = {**os.environ, "CE_NATS_PASSWORD": "not-the-password"}
        cases: list[tuple[list[str], dict[str, str] | None, list[str]]] = [
            (["--nats-user", "relay-a", "--nats-password-file", str(wrong)], None,
             ["refused user 'relay-a'", "Authorization Violation", f"--nats-password-file {wrong}"]),
            (["--nats-user", "relay-a"], env_wrong, ["refused user 'relay-a'", "$CE_NATS_PASSWORD"]),
            ([], None, ["refused a connection without credentials", "--nats-user NAME", "--nats-password-file"]),
            (["--nats-user", "relay-a", "--nats-password-file", str(tmp_path / "missing")], None,
             ["No such file", "expected a file holding the password of NATS user 'relay-a' on one line"]),
            (["--nats-user", "relay-a", "--nats-password-file", str(readable)], None,
             ["readable by others", f"chmod 600 {readable}"]),
            (["--nats-user", "relay-a"], {k: v for k, v in os.environ.items() if k != "CE_NATS_PASSWORD"},
             ["--nats-user relay-a needs its password", "--nats-password-file FILE"]),
        ]
        for i, (args, env, expected) in enumerate(cases):
            data = tmp_path / f"relay{i}"
            done = run_relay("--data-dir", str(data), "--nats", server.url, *args, env=env)
            assert done.returncode == 1, (args, done)
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("ce-bench: error: "), (args, done.stderr)
            for text in expected:
                assert text in lines[0], (text, lines[0])
            assert server.passwords["relay-a"] not in done.stderr
            assert not data.exists()  # refused before anything was written
        # the right password, the same way: the relay starts (the refusals above were about the credentials)
        good = RelayProcess(tmp_path / "good", *server.relay_args("relay-a")).start()
        good.stop()


def test_a_server_that_admits_anonymous_clients_ends_the_relay_unless_told_insecure(tmp_path: Path) -> None:
    """Before: a relay on an open nats-server started without a word about the missing authorization."""
    with NatsProcess(tmp_path / "nats") as server:  # no authorization block: anyone may connect
        assert in_thread(asyncio.run, forge(server.url)) is None  # the precondition: an anonymous client publishes
        done = run_relay("--data-dir", str(tmp_path / "refused"), "--nats", server.url)
        assert done.returncode == 1, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ce-bench: error: "), done.stderr
        assert "admits clients without credentials" in lines[0] and "--nats-insecure" in lines[0], lines[0]
        assert not (tmp_path / "refused").exists()  # refused before anything was written
        accepted = RelayProcess(tmp_path / "accepted", "--nats", server.url, "--nats-insecure").start()
        accepted.stop()


def test_processes_run_their_own_nats_server_that_refuses_anonymous_clients(tmp_path: Path) -> None:
    relay = RelayProcess(tmp_path / "relay", "--processes", "2", "--ip-rate", "1000", "--beacon-interval", "1")
    server: list[psutil.Process] = []
    try:
        relay.start(timeout=60)
        conf_path = tmp_path / "relay" / "nats" / "nats.conf"
        conf = conf_path.read_text()
        assert oct(conf_path.stat().st_mode & 0o777) == "0o600" and "no_auth_user" not in conf
        listen = next(line for line in conf.splitlines() if line.startswith("listen:"))
        url = "nats://" + json.loads(listen.split(":", 1)[1].strip())
        assert url.startswith("nats://127.0.0.1:"), url  # loopback only
        passwords = {}
        for i in range(2):
            path = tmp_path / "relay" / f"process-{i}" / "nats-password"
            assert oct(path.stat().st_mode & 0o777) == "0o600"
            passwords[f"relay-{i}"] = path.read_text().strip()
            assert f'user: "relay-{i}"' in conf
        assert "Authorization Violation" in str(in_thread(asyncio.run, forge(url)))
        # the control: process 0's credentials publish on the relays' subject (and the processes count it)
        assert in_thread(asyncio.run, forge(url, user="relay-0", password=passwords["relay-0"])) is None

        eventually(lambda: len({r["relay"] for r in relay.get("/v1/relays")[1]["relays"]}) == 2, 30,
                   "both processes in /v1/relays")
        eventually(lambda: all(all(r["last_seen"] for r in relay.get("/v1/relays")[1]["relays"]) for _ in range(6)),
                   30, "each process has heard the other's beacon rounds over the nats-server")
        time.sleep(1.5)  # a round both processes know
        _, beacon, _ = relay.get("/beacon")
        key, profile = sample_profile(beacon=beacon)
        assert relay.post("/v1/profiles", profile)[0] == 201
        eventually(lambda: all(serves(relay, key.node_id) for _ in range(12)), 15, "the profile on every process")
        server = [p for p in psutil.Process(relay.proc.pid if relay.proc else 0).children()
                  if p.name() == "nats-server"]
        assert len(server) == 1, server
    finally:
        relay.stop()
    assert relay.proc is not None and relay.proc.returncode == 0, relay.log.read_text()[-2000:]
    assert not server[0].is_running() or server[0].status() == psutil.STATUS_ZOMBIE, "nats-server outlived it"
    assert "permissions violation" not in relay.log.read_text().lower(), relay.log.read_text()[-3000:]


def test_the_manual_shows_the_permissions_relays_get() -> None:
    """docs/manual.md's nats.conf grants each relay user exactly what web/cluster/nats_auth.py grants it (a copied
    config works), writes into the profiles' and link samples' buckets under its own keys only, and has no
    no_auth_user."""
    manual = (Path(__file__).resolve().parents[1] / "docs" / "manual.md").read_text()
    start = manual.index("# nats.conf (mode 0600)")
    conf = manual[start:manual.index("```", start)]
    users = re.findall(r'\{ user: "([^"]+)", password: "[^"]+", permissions: \{(.*?)\} \}', conf, re.DOTALL)
    assert [u for u, _ in users] == ["relay-a", "relay-b"], users
    for user, block in users:
        permissions = relay_permissions(RelayConfig().nats_bucket, user=user)
        for verb in ("publish", "subscribe"):
            listed = block.split(f"{verb}: {{ allow: [", 1)[1].split("]", 1)[0]
            assert sorted(re.findall(r'"([^"]+)"', listed)) == sorted(permissions[verb]["allow"]), (user, verb)
        assert f'"$KV.ce-atlas.{user}.>"' in block and '"$KV.ce-atlas.>"' not in block
    assert not re.search(r"^\s*no_auth_user", conf, re.MULTILINE)


def test_nats_configs_writes_servers_for_regions_that_nats_server_accepts(tmp_path: Path) -> None:
    """`ce-bench nats-configs`: the hub's and each region's config (what tests/nats_regions.py runs, from the same
    web/cluster/region_servers.py), accepted by `nats-server -t`, readable by their owner only; a bad region
    spec is one line."""
    from tests.nats_process import NATS_SERVER

    out = tmp_path / "conf"
    done = subprocess.run([CLI, "nats-configs", str(out), "--region", "eu:relay-e1,relay-e2", "--region", "us:relay-u1",
                           "--hub-host", "hub.example"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["eu.conf", "hub.conf", "relay-e1.password", "relay-e2.password", "relay-u1.password",
                     "us.conf"], names
    for path in out.iterdir():
        assert oct(path.stat().st_mode & 0o777) == "0o600", path
    for conf in ("hub", "eu", "us"):
        tested = subprocess.run([NATS_SERVER, "-t", "-c", str(out / f"{conf}.conf")], capture_output=True, text=True,
                                timeout=30)
        assert tested.returncode == 0, (conf, tested.stderr)
    eu = (out / "eu.conf").read_text()
    assert '"relay-e1"' in eu and '"relay-u1"' not in eu and "no_auth_user" not in eu
    assert "nats-leaf://leaf-eu:" in eu and "@hub.example:7422" in eu
    assert '"ce.trust.handoff.*"' in eu and '"$JS.hub.API.$KV.ce-atlas.relay-e1.>"' in eu
    assert '"$JS.hub.API.$KV.ce-atlas.>"' not in eu  # each relay user writes its own keys only
    bad = subprocess.run([CLI, "nats-configs", str(tmp_path / "bad"), "--region", "EU"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "REGION:USER" in bad.stderr or "a region is" in bad.stderr, bad.stderr
    # a relay user named as a server's own user would get that user's password (the hub's admin, a leaf)
    clash = subprocess.run([CLI, "nats-configs", str(tmp_path / "clash"), "--region", "eu:admin,leaf-eu"],
                           capture_output=True, text=True, timeout=60)
    assert clash.returncode == 1 and "may not be named admin, leaf-eu" in clash.stderr, clash.stderr
