"""The `ce-bench` command, assembled: the node's commands (host_runner.cli), the relay's (web.cli), and
`up`, which needs both. The only module that imports both sides; tests/test_static_checks.py holds the
import directions (capsule imports nothing of ours, fabric only capsule, web and host_runner never each
other)."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
import urllib.request

import click

from common.errors import UserError
from host_runner.agent import llm_streams
from host_runner.cli import DEFAULT_CAPSULE, checked_capsule, load_key, main, name_option
from host_runner.listings import nodes as listing_nodes
from host_runner.listings import roll_calls as listing_roll_calls
from host_runner.live_client import LiveSession
from host_runner.node import RunOptions, measure
from host_runner.relay_client import RelayError, fetch_beacon, post_profile, trust_certificate
from host_runner.ui import PhaseProgress, console, results_table
from web.api.tls import lan_address
from web.cli import listen, relay_cmd, relay_options, serve, tls_files
from web.cli_nats import nats_configs
from web.cluster.nats_auth import check as check_nats
from web.config import RelayConfig

main.add_command(relay_cmd)
main.add_command(listing_nodes)
main.add_command(listing_roll_calls)
main.add_command(nats_configs)


@main.command("up")
@relay_options
@click.option("--budget-ms", type=click.IntRange(500, 600_000), default=3000, show_default=True)
@click.option("--no-gpu", is_flag=True)
@name_option
def up(config: RelayConfig, log_level: str, tls: bool, budget_ms: int, no_gpu: bool, name: str | None) -> None:
    """Start a relay, measure and register this machine through it, keep it live, print the join URL."""
    # the port first: one another process holds is a one-line error before anything is measured or posted
    sock = listen(config.host, config.port)
    config = dataclasses.replace(config, port=sock.getsockname()[1])
    check_nats(config)  # NATS credentials: read and tried before the relay starts (a one-line error)
    capsule = checked_capsule(DEFAULT_CAPSULE)
    key = load_key()
    # the machine's own key may submit jobs to its relay (docs/jobs.md)
    config = dataclasses.replace(config, jobs=dataclasses.replace(
        config.jobs, submitters=tuple(dict.fromkeys([*config.jobs.submitters, key.node_id]))))
    files = tls_files(config, tls)
    context = trust_certificate(files[0]) if files else None
    failed: list[BaseException] = []

    def run_server() -> None:
        try:
            serve(config, log_level, files, sock)
        except BaseException as exc:  # said below, with the exit status it calls for
            failed.append(exc)

    server = threading.Thread(target=run_server, daemon=True)
    server.start()
    scheme = "https" if files else "http"
    host, port = config.host, config.port
    local = f"{scheme}://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(local + "/beacon", timeout=2, context=context).read()
            break
        except OSError:
            if not server.is_alive() or time.monotonic() > deadline:
                why = f": {failed[0]}" if failed else ""
                raise UserError(f"the relay did not start on {host}:{port}{why}") from None
            time.sleep(0.2)
    beacon = fetch_beacon(local)
    with PhaseProgress() as progress:
        result = measure(key, beacon, RunOptions(capsule=capsule, phase_budget_ms=budget_ms, gpu=not no_gpu,
                                                 beacon_source=f"relay {local}", name=name), progress.phase)
    console.print(results_table(result.profile))
    try:
        post_profile(local, result.profile)
    except RelayError as exc:
        raise UserError(str(exc)) from None
    reactor = capsule.with_name("capsule-reactor.wasm")  # answers the relay's challenges (web/proof/challenges.py)
    gpu = None
    if not no_gpu:  # the GPU's pipelines compiled once, outside every challenge's time
        from host_runner.gpu_answer import context_for

        gpu, line = context_for(result.profile)
        click.echo(line)
    # takes tasks of the jobs it submits to its own relay, one at a time, as `ce-bench node` does (docs/jobs.md)
    session = LiveSession(local, key, context, reactor_wasm=reactor if reactor.exists() else None, gpu=gpu,
                          job_slots=1, warm_llm=llm_streams(result.profile),
                          say=lambda line: click.echo(f"ce-bench up: {line}", err=True)).start()
    click.echo(f"this machine is node {key.node_id}")
    click.echo(f"join: {local}/   (atlas: {local}/atlas, scoreboard: {local}/stats)", err=False)
    lan = lan_address()
    if host in ("0.0.0.0", "::") and lan:
        click.echo(f"other devices: {scheme}://{lan}:{port}/" + (
            "  (self-signed certificate: accept it once)" if files else
            "  (plain http: browsers there refuse WebCrypto/WebGPU; add --tls)"))
    sys.stdout.flush()
    try:
        while server.is_alive():
            server.join(timeout=1)
    except KeyboardInterrupt:
        pass
    finally:
        session.stop()
    if failed and not isinstance(failed[0], KeyboardInterrupt | SystemExit):
        raise UserError(f"the relay stopped: {failed[0]}")


if __name__ == "__main__":
    sys.exit(main())
