"""The `ce-bench` command: measure this server, sign and report its NodeProfile, verify profiles,
manage the node key, run CE jobs."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import click

from capsule.signing import SignatureError, verify_record
from capsule.typed import ValidationError
from common import keys as keys_mod
from common.errors import UserError
from common.files import write_atomic
from common.multiaddrs import NODE_LIBP2P_LISTEN
from host_runner.relay_client import (
    RelayError,
    fetch_beacon,
    forget_superseded,
    local_beacon,
    post_profile_told,
    resend_outbox,
    save_to_outbox,
)
from host_runner.ui import PhaseProgress, console, results_table
from host_runner.wasm import CapsuleError

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CAPSULE = REPO / "build" / "capsule.wasm"


def checked_capsule(path: Path) -> Path:
    """The capsule, refused when unreadable or when it differs from the sha256 the build recorded."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read the capsule {path}: {exc.strerror}; build it with `python build.py`") from None
    expected_file = path.with_name("capsule.sha256")
    if expected_file.exists():
        expected = expected_file.read_text().strip()
        actual = hashlib.sha256(data).hexdigest()
        if actual != expected:
            raise UserError(f"{path} has sha256 {actual[:16]}..., but the build recorded {expected[:16]}... in "
                            f"{expected_file.name}: tampered or stale; rebuild with `python build.py --force`")
    return path


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    try:
        write_atomic(path, (json.dumps(data, indent=1) + "\n").encode())
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror}") from None


def load_key() -> keys_mod.NodeKey:
    try:
        return keys_mod.load_or_create()
    except keys_mod.KeyFileError as exc:
        hint = "" if "chmod" in str(exc) else (
            "; move it away and run `ce-bench keys rotate` to make a new one (the node gets a new NodeId)")
        raise UserError(f"{exc}{hint}") from None


def package_version() -> str:
    """The installed ce-bench's version, and the capsule's (its figures' method version)."""
    import importlib.metadata

    from capsule import CAPSULE_VERSION

    try:
        version = importlib.metadata.version("ce-bench")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout without `pip install -e .`
        version = "unknown (not installed)"
    return f"{version} (capsule {CAPSULE_VERSION})"


def _node_name(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    import re

    from capsule.model import NODE_NAME

    if value is None or re.fullmatch(NODE_NAME, value):
        return value
    raise click.BadParameter(f"expected 1-64 characters, no control characters, no invisible or bidirectional "
                             f"format characters, no space at either end, not beginning like a NodeId (12D3KooW); "
                             f"got {value[:80]!r}")


def name_option(f: Any) -> Any:
    """--name / CE_NODE_NAME: the operator's name for this node, signed in its profile and shown on the relay's
    pages and listings beside the NodeId (a label, not an identity)."""
    return click.option("--name", metavar="TEXT", envvar="CE_NODE_NAME", show_envvar=True, callback=_node_name,
                        help="a name for this node on the relay's pages and listings (1-64 characters, signed in "
                             "the profile; a label: the NodeId stays the identity)")(f)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_version(), "--version", "-V", prog_name="ce-bench", message="%(prog)s %(version)s")
def main() -> None:
    """ce-bench: measure this machine and publish it as a signed NodeProfile.

    Commands that take --relay URL read it from the CE_RELAY environment variable when it is not given."""


@main.command()
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("profile.json"),
              show_default=True, help="where the signed NodeProfile is written")
@click.option("--relay", metavar="URL", envvar="CE_RELAY", show_envvar=True,
              help="relay to take the beacon from and report the profile to")
@click.option("--budget-ms", type=click.IntRange(500, 600_000), default=3000, show_default=True,
              help="capsule budget per phase (whole-CPU phase, then one core alone)")
@click.option("--instances", type=click.IntRange(1, 4096), help="capsule instances for the whole-CPU figure "
              "[default: one per physical core]")
@click.option("--no-gpu", is_flag=True, help="skip the GPU probes")
@click.option("--no-jitter", is_flag=True, help="start at once instead of after the beacon's start jitter")
@click.option("--scratch", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="directory the disk probe writes in [default: the current directory]")
@click.option("--capsule", "capsule_path", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_CAPSULE,
              show_default=True)
@name_option
def run(out: Path, relay: str | None, budget_ms: int, instances: int | None, no_gpu: bool, no_jitter: bool,
        scratch: Path | None, capsule_path: Path, name: str | None) -> None:
    """Measure this machine, sign the NodeProfile, write it to --out and report it to --relay."""
    from host_runner.node import RunOptions, measure

    capsule = checked_capsule(capsule_path)
    key = load_key()
    beacon_source = "local"
    if relay:
        sent, problems = resend_outbox(relay)
        if sent:
            console.print(f"resent {sent} waiting profile(s) to {relay}")
        for p in problems:
            console.print(f"[yellow]outbox: {p}[/yellow]")
        try:
            beacon = fetch_beacon(relay)
            beacon_source = f"relay {relay}"
        except RelayError as exc:
            console.print(f"[yellow]{exc}; measuring with a local beacon[/yellow]")
            beacon = local_beacon(key)
    else:
        beacon = local_beacon(key)
    opts = RunOptions(capsule=capsule, phase_budget_ms=budget_ms, instances=instances, scratch=scratch,
                      gpu=not no_gpu, jitter=not no_jitter, beacon_source=beacon_source, name=name)
    try:
        with PhaseProgress() as progress:
            result = measure(key, beacon, opts, progress.phase)
    except CapsuleError as exc:
        raise UserError(str(exc)) from None
    write_json_atomic(out, result.profile)
    console.print(results_table(result.profile))
    console.print(f"signed NodeProfile written to {out}")
    if relay:
        try:
            status, warnings = post_profile_told(relay, result.profile)
            console.print(f"reported to {relay} ({status})")
            for warning in warnings:
                console.print(f"[yellow]the relay says: {warning}[/yellow]")
            for line in forget_superseded(result.profile):
                console.print(f"outbox: {line}")
        except RelayError as exc:
            waiting = save_to_outbox(result.profile)
            raise UserError(f"{exc}\nthe profile is kept in {waiting}; `ce-bench run --relay URL` resends it") from None


@main.command("node")
@click.option("--relay", metavar="URL", envvar="CE_RELAY", show_envvar=True,
              required=True, help="the relay this node registers with and stays live on")
@click.option("--budget-ms", type=click.IntRange(500, 600_000), default=3000, show_default=True,
              help="capsule budget per phase of each measurement")
@click.option("--no-gpu", is_flag=True, help="skip the GPU probes")
@click.option("--scratch", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="directory the disk probe writes in [default: the current directory]")
@click.option("--remeasure-h", type=click.FloatRange(0.001), default=6.0, show_default=True,
              help="mean hours between measurements (drawn from the beacon, +-25%)")
@click.option("--no-jitter", is_flag=True, help="start each measurement at once, not after the beacon's jitter")
@click.option("--landmark-interval-s", type=click.FloatRange(0), default=600.0, show_default=True,
              help="seconds between RTT probes by the other relays of the cluster (landmarks); 0: none")
@click.option("--peer-probes/--no-peer-probes", default=True, show_default=True,
              help="measure RTTs to other nodes when the relay pairs this node with one (WebRTC, a few KB each)")
@click.option("--libp2p-listen", metavar="MULTIADDR", default=NODE_LIBP2P_LISTEN, show_default=True,
              help="where the node's libp2p host listens (ping and identify for any peer; PeerId = NodeId); "
                   "loopback: peers on this machine only (others probe it over WebRTC), /ip4/0.0.0.0/tcp/PORT: "
                   "every interface")
@click.option("--libp2p-announce", multiple=True, metavar="MULTIADDR",
              help="a multiaddr announced instead of the listening ones (a public address in front of NAT)")
@click.option("--no-libp2p", is_flag=True, help="run no libp2p host")
@click.option("--accept-jobs/--no-jobs", default=True, show_default=True,
              help="run tasks of CE jobs the relay places on this node (WASI modules under their manifest's limits, "
                   "docs/jobs.md)")
@click.option("--job-slots", type=click.IntRange(1, 256), default=1, show_default=True,
              help="tasks run at once (each takes at most one core)")
@click.option("--source-address", metavar="IP", help="the local address the live session connects from (a host with "
              "several addresses)")
@name_option
def node_cmd(relay: str, budget_ms: int, no_gpu: bool, scratch: Path | None, remeasure_h: float,
             no_jitter: bool, landmark_interval_s: float, peer_probes: bool, libp2p_listen: str,
             libp2p_announce: tuple[str, ...], no_libp2p: bool, accept_jobs: bool, job_slots: int,
             source_address: str | None, name: str | None) -> None:
    """Stay a node: measure, register, keep the live session, re-measure on schedule; SIGTERM stops it."""
    import signal

    from host_runner.agent import Agent, AgentConfig
    from host_runner.node import RunOptions

    capsule = checked_capsule(DEFAULT_CAPSULE)
    key = load_key()
    opts = RunOptions(capsule=capsule, phase_budget_ms=budget_ms, scratch=scratch, gpu=not no_gpu,
                      jitter=not no_jitter, beacon_source=f"relay {relay}", name=name)
    from common.multiaddrs import multiaddr_problem

    for text in (libp2p_listen, *libp2p_announce):
        if problem := multiaddr_problem(text, need_peer_id=False):
            raise click.BadParameter(problem, param_hint="--libp2p-listen / --libp2p-announce")
    config = AgentConfig(remeasure_s=remeasure_h * 3600, landmark_interval_s=landmark_interval_s,
                         peer_probes=peer_probes, libp2p_listen=None if no_libp2p else libp2p_listen,
                         libp2p_announce=libp2p_announce, job_slots=job_slots if accept_jobs else 0,
                         source_address=source_address)
    agent = Agent(relay, key, opts, config,
                  say=lambda line: click.echo(f"ce-bench node: {line}", err=True))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: agent.stop.set())
    click.echo(f"ce-bench node: {key.node_id} -> {relay}", err=True)
    agent.run()
    if agent.superseded is not None:  # another process runs this key: exit non-zero, not "stopped" as asked
        raise UserError(f"another process uses this node's key: {agent.superseded}")


@main.command("status")
@click.argument("node_id", required=False)
@click.option("--relay", metavar="URL", envvar="CE_RELAY", show_envvar=True,
              required=True, help="the relay whose view to show")
@click.option("--json", "as_json", is_flag=True, help="print the view as one JSON object")
def status_cmd(node_id: str | None, relay: str, as_json: bool) -> None:
    """The relay's view of a node (default: this machine's key): trust status and reason, proven vs claimed
    figures, the last roll calls, measured links."""
    from host_runner.status import fetch_status, render

    try:
        view = fetch_status(relay, node_id or load_key().node_id)
    except RelayError as exc:
        raise UserError(str(exc)) from None
    click.echo(json.dumps(view, indent=1) if as_json else render(view))


@main.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--recompute", is_flag=True, help="also re-run the capsule on the seeds the profile names and "
              "compare the SGEMM checksums and the decoded-token hash")
@click.option("--capsule", "capsule_path", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_CAPSULE,
              show_default=True, help="the capsule used by --recompute")
def verify(file: Path, recompute: bool, capsule_path: Path) -> None:
    """Check a signed NodeProfile (or JobReceipt): schema, and the signature by its node_id."""
    try:
        data = json.loads(file.read_text())
    except OSError as exc:
        raise UserError(f"cannot read {file}: {exc.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{file} is not JSON: {exc}") from None
    except RecursionError:  # thousands of nested arrays: a bad file, not a traceback
        raise UserError(f"{file} is nested too deeply to be a record") from None
    kind = "JobReceipt" if isinstance(data, dict) and "job_id" in data else "NodeProfile"
    try:
        verify_record(kind, data)
    except (ValidationError, SignatureError) as exc:
        raise UserError(f"{file}: invalid {kind}: {exc}") from None
    click.echo(f"{file}: valid {kind} signed by {data['node_id']}")
    if recompute:
        recompute_profile(file, data, capsule_path)


def recompute_profile(file: Path, profile: dict[str, Any], capsule_path: Path) -> None:
    from host_runner.recompute import claims_of
    from host_runner.recompute import recompute as run_recompute

    claims = claims_of(profile)
    if not claims:
        raise UserError(f"{file}: the evidence names no seed and checksum to recompute")
    outcomes = run_recompute(claims, checked_capsule(capsule_path))
    for o in outcomes:
        c = o.claim
        where = f"--seed {c.seed[:16]}..." + (f" --sgemm-n {c.sgemm_n}" if c.sgemm_n else "")
        if o.reproduced:
            click.echo(f"  reproduced  {c.what}: {c.key} {c.expected[:16]}... ({where})")
        else:
            got = o.error or (f"got {o.actual[:16]}..." if o.actual else "no value")
            click.echo(f"  MISMATCH    {c.what}: {c.key} claimed {c.expected[:16]}..., {got} ({where})")
    bad = [o for o in outcomes if not o.reproduced]
    if bad:
        raise UserError(f"{file}: {len(bad)} of {len(outcomes)} recomputed value(s) differ from the profile's claims")
    click.echo(f"{file}: all {len(outcomes)} recomputed value(s) match")


@main.group()
def keys() -> None:
    """Show or rotate this node's Ed25519 key (its NodeId)."""


@keys.command("show")
@click.option("--file", "path", type=click.Path(dir_okay=False, path_type=Path),
              help="another key file, made if missing (a relay's: DATA_DIR/relay.key, whose id other relays name "
                   "with --cluster-peer)")
def keys_show(path: Path | None) -> None:
    """Print the NodeId of this node's key (or of --file's), making the key if there is none yet."""
    if path is None:
        key = load_key()
    else:
        try:
            key = keys_mod.load_or_create(path)
        except keys_mod.KeyFileError as exc:
            raise UserError(str(exc)) from None
        except OSError as exc:
            raise UserError(f"cannot write {path}: {exc.strerror}") from None
    click.echo(f"node_id {key.node_id}\nkey file {path or keys_mod.key_path()}")


@keys.command("rotate")
def keys_rotate() -> None:
    key, backup = keys_mod.rotate()
    click.echo(f"new node_id {key.node_id}\nkey file {keys_mod.key_path()}")
    if backup:
        click.echo(f"previous key kept at {backup}")


@main.group()
def job() -> None:
    """CE jobs: run the capsule as a job here, or submit work to a relay that places it on proven nodes."""


@job.command("submit")
@click.argument("manifest", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--relay", metavar="URL", envvar="CE_RELAY", show_envvar=True,
              required=True, help="the relay that takes the job")
@click.option("--wait", is_flag=True, help="follow the job until it ends; exit 0 only if every task was accepted")
@click.option("--json", "json_out", is_flag=True, help="print JSON (the job's id; with --wait, its final state)")
def job_submit(manifest: Path, relay: str, wait: bool, json_out: bool) -> None:
    """Submit a job MANIFEST (v2, docs/jobs.md) signed with this machine's key; prints the job id."""
    from host_runner.job_client import JobClient, follow, read_manifest

    body, blobs = read_manifest(manifest)
    client = JobClient(relay)
    answer = client.submit(body, blobs, load_key())
    if not wait:
        click.echo(json.dumps(answer) if json_out else answer["id"])
        return
    if not json_out:
        click.echo(f"job {answer['id']}: {answer['tasks']} task(s)", err=True)
    _job_end(follow(client, answer["id"], json_out), json_out)


def _job_end(state: dict[str, Any], json_out: bool) -> None:
    if json_out:
        click.echo(json.dumps(state, indent=2))
    else:
        counts = state.get("counts") or {}
        click.echo(f"job {state['id']} {state['state']}: {counts.get('done', 0)} accepted, "
                   f"{counts.get('failed', 0)} failed, {counts.get('cancelled', 0)} cancelled")
        for task in state.get("tasks") or []:
            if task["state"] == "failed":
                click.echo(f"  task {task['task']} failed: {task['error']}")
    if state["state"] != "done":
        raise SystemExit(1)


@job.command("status")
@click.argument("job_id")
@click.option("--relay", metavar="URL", envvar="CE_RELAY", show_envvar=True,
              required=True)
@click.option("--follow", "follow_", is_flag=True, help="follow the job until it ends")
@click.option("--json", "json_out", is_flag=True)
def job_status(job_id: str, relay: str, follow_: bool, json_out: bool) -> None:
    """The job's state and, per task, its node, attempts, exit code and output."""
    from host_runner.job_client import JobClient, follow

    client = JobClient(relay)
    state = follow(client, job_id, json_out) if follow_ else client.status(job_id)
    if json_out or follow_:
        _job_end(state, json_out)
        return
    counts = state.get("counts") or {}
    click.echo(f"job {state['id']} {state['state']}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for task in state.get("tasks") or []:
        where = task.get("node_id") or "-"
        click.echo(f"  task {task['task']:>5} {task['state']:<9} node {where[:20]} attempts {len(task['attempts'])}"
                   + (f" exit {task['exit_code']}" if task.get("exit_code") is not None else "")
                   + (f" error: {task['error']}" if task.get("error") else ""))


@job.command("cancel")
@click.argument("job_id")
@click.option("--relay", metavar="URL", envvar="CE_RELAY", show_envvar=True,
              required=True)
def job_cancel(job_id: str, relay: str) -> None:
    """Cancel a job you submitted: tasks not finished stop."""
    from host_runner.job_client import JobClient

    state = JobClient(relay).cancel(job_id, load_key())
    click.echo(f"job {state['id']} {state['state']}")


@job.command("run")
@click.argument("manifest", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("."), show_default=True,
              help="directory for profile.json and receipt.json")
@click.option("--capsule", "capsule_path", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_CAPSULE,
              show_default=True)
def job_run(manifest: Path, out: Path, capsule_path: Path) -> None:
    """Execute a job MANIFEST: capsule named by sha256, probes and limits; write a signed result + receipt."""
    from host_runner.jobs import JobError, run_job

    try:
        result = run_job(manifest, capsule_path, load_key())
    except JobError as exc:
        raise UserError(str(exc)) from None
    out.mkdir(parents=True, exist_ok=True)
    if result.profile is not None:
        write_json_atomic(out / "profile.json", result.profile)
    write_json_atomic(out / "receipt.json", result.receipt)
    click.echo(f"job {result.receipt['job_id'][:16]}... {result.receipt['status']}; receipt in {out / 'receipt.json'}")
    if result.receipt["status"] != "ok":
        raise UserError(f"job failed: {result.receipt['error']}")


if __name__ == "__main__":
    sys.exit(main())
