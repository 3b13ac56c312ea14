"""The `ce-bench relay` command, beside the relay it runs. Every option's default is RelayConfig's (the one
place that documents each default with its unit), so help texts cannot drift from what the relay does."""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import ipaddress
import os
import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from common.errors import UserError
from common.keys import KeyFileError
from web.config import RelayConfig
from web.jobs.config import JobsConfig

DEFAULTS = RelayConfig()

# option -> (RelayConfig field, click type, help); defaults come from DEFAULTS
_TUNABLES: dict[str, tuple[str, Any, str]] = {
    "--ip-rate": ("ip_rate_per_s", click.FloatRange(0.1), "requests per second per client IP"),
    "--nats-connect-wait-s": ("nats_connect_wait_s", click.FloatRange(0), "seconds a starting relay waits for an "
                              "unreachable --nats server before it exits"),
    "--node-rate": ("node_rate_per_min", click.FloatRange(0.1), "profiles per minute per node"),
    "--heartbeat-interval": ("heartbeat_interval_s", click.FloatRange(0.1), "seconds between heartbeats"),
    "--beacon-interval": ("beacon_interval_s", click.FloatRange(0.1), "seconds between beacon rounds"),
    "--bw-probe-interval": ("bw_probe_interval_s", click.FloatRange(1), "mean seconds between bandwidth probes "
                            "of one live session"),
    "--challenge-first-after": ("challenge_first_after_s", click.FloatRange(0.1), "seconds from a node's hello "
                                "to its first challenge"),
    "--challenge-interval-unverified": ("challenge_interval_unverified_s", click.FloatRange(0.1),
                                        "mean seconds between challenges of a node not yet verified"),
    "--gpu-floor-tflops": ("gpu_floor_tflops", click.FloatRange(min=1e-9), "fp32 TFLOP/s a GPU must show at a "
                           "roll call to count as one (a CPU or software rasterizer shows far less)"),
    "--roll-call-interval-s": ("roll_call_interval_s", click.FloatRange(0.1), "mean seconds between roll calls "
                               "(every live session challenged at one moment; the verified scoreboard is the "
                               "latest)"),
    "--roll-call-min-gap-s": ("roll_call_min_gap_s", click.FloatRange(0.1), "seconds at least between roll "
                              "calls (one at a time)"),
    "--roll-call-llm-offset-s": ("roll_call_llm_offset_s", click.FloatRange(0.1), "seconds from a roll call's "
                                 "SGEMM challenges to its reference-model challenges"),
    "--roll-call-send-priority": ("roll_call_send_priority", click.IntRange(0, 99), "SCHED_FIFO priority of a "
                                  "roll call's send loop where the OS allows it (root or CAP_SYS_NICE); 0: off"),
    "--roll-call-target-s": ("roll_call_target_s", click.FloatRange(0.05), "seconds of work a roll-call "
                             "challenge asks at the claimed speed"),
    "--link-refit-interval-s": ("link_refit_interval_s", click.FloatRange(0.1), "seconds between refits of "
                                "the network coordinates from every link sample held (when samples changed)"),
    "--link-refit-max-duty": ("link_refit_max_duty", click.FloatRange(0.001, 1.0), "share of the time link "
                              "refits may take (each waits for the previous one's time x (1 / duty - 1))"),
    "--peer-probe-interval-s": ("peer_probe_interval_s", click.FloatRange(0.1), "seconds at least between the "
                                "node-to-node probes a node offers (it also answers others')"),
    "--peer-probe-timeout-s": ("peer_probe_timeout_s", click.FloatRange(1), "seconds a node-to-node probe may "
                               "take from pairing to its co-signed sample"),
    "--peer-probe-pair-repeat-s": ("peer_probe_pair_repeat_s", click.FloatRange(0), "seconds at least before "
                                   "the same two nodes are probed again"),
    "--link-gossip-min-interval-s": ("link_gossip_min_interval_s", click.FloatRange(0), "seconds at least "
                                     "between two samples of one edge this relay sends to its cluster (when the "
                                     "RTT moved)"),
    "--landmark-mesh-interval-s": ("landmark_mesh_interval_s", click.FloatRange(1), "seconds between this "
                                   "relay's probes of its peer relays (the landmarks' mesh)"),
    "--transcript-audit-fraction": ("transcript_audit_fraction", click.FloatRange(0, 1), "share of peer relays' "
                                    "passed work transcripts this relay re-checks (the rest are believed on the "
                                    "peer's signature until one check fails)"),
    "--transcript-llm-audit-fraction": ("transcript_llm_audit_fraction", click.FloatRange(0, 1), "share of peer "
                                        "relays' passed reference-model transcripts whose checked token this "
                                        "relay checks again (~10% of the node's decode each)"),
    "--digest-full-every": ("digest_full_every", click.IntRange(1, 10_000), "heartbeat intervals between "
                            "the full live digests this relay publishes to its cluster (changes go every interval)"),
    "--stats-history-interval": ("stats_history_interval_s", click.FloatRange(0.1), "seconds between samples "
                                 "of the scoreboard kept for /stats/history"),
    "--verify-workers": ("verify_workers", click.IntRange(0, 64), "processes verifying posted profiles beside "
                         "the event loop (0: in-process)"),
    "--live-sessions-per-address": ("live_sessions_per_address", click.IntRange(1), "live sessions (WS /v1/live) "
                                    "one source address may hold at once (an IPv6 /64 is one address)"),
    "--live-bytes-per-s-per-address": ("live_bytes_per_s_per_address", click.FloatRange(1), "bytes per second "
                                       "one source address may send over its live sessions"),
    "--live-bytes-burst-per-address": ("live_bytes_burst_per_address", click.IntRange(1), "bytes one source "
                                       "address may send at once over its live sessions (the byte budget's burst)"),
}


def _multiaddr_option(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A TCP multiaddr the libp2p host can listen on or announce, checked before anything starts."""
    from common.multiaddrs import multiaddr_problem

    for text in (value if isinstance(value, tuple) else (value,)):
        problem = None if text is None else multiaddr_problem(text, need_peer_id=False)
        if problem:
            raise click.BadParameter(problem)
    return value


def _region_option(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from web.cluster.regions import check_region

    try:
        return None if value is None else check_region(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def default_libp2p_listen(host: str) -> str:
    """The libp2p host listens where the HTTP server does (a port of its own the OS picks)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "/ip4/0.0.0.0/tcp/0"  # a host name: every interface, as uvicorn resolves it to
    return f"/ip{address.version}/{address}/tcp/0"


def relay_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options of every command that starts a relay (`relay`, `up`); the command receives `config`
    (a RelayConfig), `log_level` and `tls`."""
    options = [
        click.option("--host", default=DEFAULTS.host, show_default=True, help="address to listen on"),
        click.option("--port", type=click.IntRange(1, 65535), default=DEFAULTS.port, show_default=True),
        click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=DEFAULTS.data_dir,
                     show_default=True, help="SQLite store and the relay key"),
        click.option("--nats", metavar="URL", help="NATS JetStream server shared by a relay cluster"),
        click.option("--nats-user", metavar="NAME", envvar="CE_NATS_USER",
                     help="the NATS user this relay connects as (a user of the nats-server's authorization "
                          "block; env CE_NATS_USER)"),
        click.option("--nats-password-file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
                     envvar="CE_NATS_PASSWORD_FILE",
                     help="file holding the --nats-user's password on one line, mode 0600 (or the password in "
                          "env CE_NATS_PASSWORD; never on the command line)"),
        click.option("--nats-insecure", is_flag=True,
                     help="run on a nats-server that admits clients without credentials (anyone who reaches it "
                          "can publish on the relays' subjects and write their buckets); without this flag such a "
                          "relay refuses to start"),
        *[click.option(name, field, type=kind, default=getattr(DEFAULTS, field), show_default=True, help=text)
          for name, (field, kind, text) in _TUNABLES.items()],
        click.option("--trusted-proxy", "trusted_proxies", multiple=True, metavar="ADDRESS",
                     help="a reverse proxy whose X-Forwarded-For / X-Forwarded-Proto headers are believed "
                          "(repeatable); without it, proxy headers are ignored and the peer address counts"),
        click.option("--region", metavar="NAME", callback=_region_option,
                     help="this relay's region (a-z, 0-9, '-'): digests, link samples and transcripts stay on the "
                          "region's NATS subjects; the regions' signed totals make the network's scoreboard "
                          "(docs/manual.md, \"Sizing a cluster\")"),
        click.option("--nats-domain", metavar="NAME", help="the JetStream domain of the cluster's buckets (the "
                     "hub's), when --nats is a leaf node of that hub"),
        click.option("--cluster-peer", "cluster_peers", multiple=True, metavar="RELAY_ID",
                     help="another relay of this NATS cluster (its relay id, 12D3KooW...; repeatable): its roll "
                          "calls, beacon and challenge transcripts are believed once re-checked"),
        click.option("--job-submitter", "job_submitters", multiple=True, metavar="PEER_ID",
                     help="a key allowed to submit jobs to this relay (its NodeId, 12D3KooW...; repeatable). "
                          "Without one the relay takes no jobs (docs/jobs.md)"),
        click.option("--public-url", metavar="URL", help="the address nodes reach this relay at (http[s]://HOST:PORT), "
                     "announced to the cluster: nodes of the other relays probe it as a landmark"),
        click.option("--libp2p-listen", metavar="MULTIADDR", callback=_multiaddr_option,
                     help="where the relay's libp2p host listens (TCP; port 0: one the OS picks, shown at GET "
                          "/v1/libp2p): the CE mesh reads profiles, edges and scoreboards there (docs/mesh.md) "
                          "[default: /ip4/--host/tcp/0]"),
        click.option("--libp2p-announce", multiple=True, metavar="MULTIADDR", callback=_multiaddr_option,
                     help="a multiaddr announced instead of the listening ones (a public address in front of NAT; "
                          "repeatable)"),
        click.option("--no-libp2p", is_flag=True, help="run no libp2p host: the relay is not on the CE mesh"),
        click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
                     show_default=True),
        click.option("--log-json", is_flag=True, help="JSON log lines on a terminal too (they are JSON whenever "
                     "stderr is not a terminal)"),
        click.option("--tls", is_flag=True, help="serve https with a self-signed certificate kept in --data-dir "
                     "(browsers on other devices need https for WebCrypto and WebGPU)"),
    ]

    @functools.wraps(fn)  # keeps the options declared under this decorator (__click_params__)
    def wrapper(host: str, port: int, data_dir: Path, nats: str | None, nats_user: str | None,
                nats_password_file: Path | None, log_level: str, tls: bool, trusted_proxies: tuple[str, ...],
                cluster_peers: tuple[str, ...], region: str | None, nats_domain: str | None,
                public_url: str | None, libp2p_listen: str | None, job_submitters: tuple[str, ...],
                libp2p_announce: tuple[str, ...], no_libp2p: bool, log_json: bool, nats_insecure: bool,
                **kwargs: Any) -> Any:
        if log_json:
            os.environ["CE_LOG_JSON"] = "1"  # the relay processes it starts read it too (web/api/logs.py)
        tunables = {field: kwargs.pop(field) for field, _, _ in _TUNABLES.values()}
        config = RelayConfig(host=host, port=port, data_dir=data_dir, nats_url=nats, nats_user=nats_user,
                             nats_password_file=nats_password_file, nats_insecure=nats_insecure,
                             public_url=public_url,
                             libp2p_listen=None if no_libp2p else libp2p_listen or default_libp2p_listen(host),
                             libp2p_announce=libp2p_announce,
                             trusted_proxies=tuple(trusted_proxies), cluster_peers=tuple(cluster_peers),
                             region=region, nats_domain=nats_domain,
                             jobs=JobsConfig(submitters=tuple(job_submitters)), **tunables)
        return fn(config=config, log_level=log_level, tls=tls, **kwargs)

    command: Callable[..., Any] = wrapper
    for option in reversed(options):
        command = option(command)
    return command


def tls_files(config: RelayConfig, tls: bool) -> tuple[Path, Path] | None:
    if not tls:
        return None
    from web.api.tls import TlsError, self_signed

    try:
        return self_signed(config.data_dir, config.host)
    except TlsError as exc:
        raise UserError(str(exc)) from None


def listen(host: str, port: int) -> socket.socket:
    """The relay's listening socket, bound before anything else happens: a port another process holds is a
    one-line error before a key is written or a machine measured (`ce-bench up` once measured anyway and posted
    this machine's profile to the other relay on that port, then exited 0)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a relay restarted at once reuses its port
        if family == socket.AF_INET6 and host == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # "::" serves IPv4 too, as uvicorn does
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        why = ("another process listens there (a relay already running? pick another --port)"
               if exc.errno == errno.EADDRINUSE else exc.strerror or str(exc))
        raise UserError(f"cannot listen on {host}:{port}: {why}") from None
    sock.set_inheritable(True)
    return sock


_HELD: list[int] = []  # lock files held for the life of this process


def port_lock_path(host: str, port: int) -> Path:
    import tempfile

    return Path(tempfile.gettempdir()) / f"ce-bench-relay-{host.replace(':', '_').replace('/', '_')}-{port}.lock"


def hold_port(host: str, port: int) -> None:
    """`--processes N`: the processes bind with SO_REUSEPORT before they listen, and a bind check sees only a
    listening socket, so a second `--processes` relay started while a first one starts (loads its store, starts
    its nats-server) would share the port. The supervisor holds an flock for (host, port) for its whole life."""
    import fcntl

    path = port_lock_path(host, port)
    try:
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    except OSError as exc:
        raise UserError(f"cannot listen on {host}:{port}: cannot open the port's lock {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UserError(f"cannot listen on {host}:{port}: another ce-bench relay --processes is starting or running "
                        f"there (it holds {path})") from None
    _HELD.append(fd)


def port_free(host: str, port: int) -> None:
    """`--processes N`: each process binds the port itself with SO_REUSEPORT, which another SO_REUSEPORT socket
    of this user (a second `--processes` relay) would share without a word, splitting the connections between
    two relays. One bind without SO_REUSEPORT first fails while any socket holds the port, then is let go."""
    listen(host, port).close()


def key_hint(exc: KeyFileError) -> str:
    return "" if "chmod" in str(exc) else "; move it away and restart to make a new one (a new relay id)"


def relay_id(config: RelayConfig) -> str:
    """The relay's id (its key's NodeId; the key is made here on a first start)."""
    from common.keys import load_or_create

    try:
        return load_or_create(config.data_dir / "relay.key").node_id
    except KeyFileError as exc:
        raise UserError(f"relay key: {exc}{key_hint(exc)}") from None
    except OSError as exc:
        raise UserError(f"cannot write the relay key in {config.data_dir}: {exc.strerror}") from None


def serve(config: RelayConfig, log_level: str, tls: tuple[Path, Path] | None = None,
          sock: socket.socket | None = None) -> None:
    """Runs one relay until SIGTERM/SIGINT; on `sock` (bound already: web/cluster/processes.py) when given."""
    import uvicorn

    from web.api import logs
    from web.api.app import create_app
    from web.sessions.live_guard import max_frame_bytes

    logs.configure(log_level)
    try:
        app = create_app(config)
    except KeyFileError as exc:
        raise UserError(f"relay key: {exc}{key_hint(exc)}") from None
    except (OSError, sqlite3.Error) as exc:
        raise UserError(f"cannot open the relay's data directory {config.data_dir}: {exc}") from None
    try:
        # uvicorn believes X-Forwarded-For from 127.0.0.1 by default: three identities behind one local
        # "proxy" header once became three hosts. Only the operator's named proxies are believed.
        server = uvicorn.Server(uvicorn.Config(
            app, host=config.host, port=config.port, log_level="warning", proxy_headers=bool(config.trusted_proxies),
            forwarded_allow_ips=list(config.trusted_proxies) if config.trusted_proxies else "",
            access_log=False, ssl_certfile=str(tls[0]) if tls else None, ssl_keyfile=str(tls[1]) if tls else None,
            # no permessage-deflate: compressing every frame was a third of the relay's CPU at 10,000 sessions
            # (py-spy, BENCHMARKS.md), most of it the 256 KiB bandwidth probe, random and so incompressible (and
            # a compressed probe would not time the link); the JSON frames are a few hundred bytes
            ws_per_message_deflate=False,
            # frames beyond the largest legitimate one (a 64-instance opening) are refused by the protocol
            # layer (close 1009) before their payload is read (web/sessions/live_guard.py)
            ws_max_size=max_frame_bytes(config)))
        logs.quiet_client_junk()  # after uvicorn.Config, which configures its loggers
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the SIGINT it shut down gracefully for
            server.run(sockets=[sock] if sock is not None else None)
    except OSError as exc:
        raise UserError(f"cannot serve on {config.host}:{config.port}: {exc.strerror}") from None


@click.command("relay")
@relay_options
@click.option("--processes", type=click.IntRange(1, 64), default=1, show_default=True,
              help="relay processes sharing the port (SO_REUSEPORT), each a member of the --nats cluster with its "
                   "own key and store in DATA_DIR/process-I (without --nats: of a nats-server started for them, "
                   "loopback only, one user each): one process holds ~1,000-5,000 live sessions per core")
def relay_cmd(config: RelayConfig, log_level: str, tls: bool, processes: int) -> None:
    """Run a relay: verify and store profiles, serve the atlas, the scoreboard and the beacon."""
    from web.cluster.nats_auth import check
    from web.cluster.processes import local_nats, process_configs, run_processes

    if processes > 1 and config.port == 0:
        raise UserError("--processes needs a fixed --port: with port 0 each process would take another port")
    # the port, then the NATS credentials, before anything is written (a key, a store, a nats-server)
    sock = listen(config.host, config.port) if processes == 1 else None
    if sock is None:
        hold_port(config.host, config.port)
        port_free(config.host, config.port)
    if sock is not None:
        config = dataclasses.replace(config, port=sock.getsockname()[1])
    check(config)
    configs, nats = local_nats(config, process_configs(config, processes))
    files = tls_files(config, tls)
    scheme = "https" if files else "http"
    where = f"{config.data_dir}" if processes == 1 else f"{config.data_dir}/process-0..{processes - 1}"
    click.echo(f"ce-bench relay on {scheme}://{config.host}:{config.port} (data in {where})", err=True)
    if nats is not None:
        click.echo(f"nats-server for the processes on {nats.url} (config {nats.conf}: one user per process, "
                   "no anonymous access)", err=True)
    if sock is not None:
        click.echo(f"relay id {relay_id(config)} (other relays name it with --cluster-peer)", err=True)
        serve(config, log_level, files, sock)
    else:
        ids = ", ".join(relay_id(c) for c in configs)
        click.echo(f"relay ids {ids} (other relays name each with --cluster-peer)", err=True)
        run_processes(configs, log_level, files, nats)
