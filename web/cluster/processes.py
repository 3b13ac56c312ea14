"""Several relay processes on one machine and one port: `ce-bench relay --processes N`.

Why: one relay process's event loop saturates one core near 10,000 live sessions (BENCHMARKS.md, "Relay -
live sessions"). Each process binds the port with SO_REUSEPORT, so the kernel spreads new connections over
them, and each is a full member of the NATS cluster with its own key and store (DATA_DIR/process-I) that
names the others as cluster peers: the cluster's rules (one trust, roll calls led by the lowest id, signed
live digests, shared link samples) hold between the processes as between machines. Without --nats they
share a nats-server started here, on loopback, with one user per process and no anonymous access
(web/cluster/nats_local.py). A process that dies is started again, and so is that nats-server; sessions reconnect
to the port (another process takes them meanwhile)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import signal
import socket
import time
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType

from common.errors import UserError
from common.keys import load_or_create
from web.cluster.nats_local import LocalNats
from web.config import RelayConfig

log = logging.getLogger("ce_bench.relay")

RESTART_DELAY_S = 1.0  # before a process that died is started again
QUICK_DEATH_S = 10.0   # a process that exits this soon after its start did not start (a bad key, a busy port)
QUICK_DEATHS_MAX = 3   # such exits in a row before the whole relay stops with an error instead of looping


def process_dir(config: RelayConfig, index: int) -> Path:
    return config.data_dir / f"process-{index}"


def process_configs(config: RelayConfig, processes: int) -> list[RelayConfig]:
    """One RelayConfig per process: its own data directory (key, store) and every other process, beside the
    operator's --cluster-peer relays, as a cluster peer. Keys are made here, before any process starts, so
    each knows the others' ids from its first moment."""
    if processes == 1:
        return [config]
    ids = [load_or_create(process_dir(config, i) / "relay.key").node_id for i in range(processes)]
    return [dataclasses.replace(config, data_dir=process_dir(config, i),
                                cluster_peers=tuple(dict.fromkeys([*config.cluster_peers,
                                                                   *(x for x in ids if x != ids[i])])))
            for i in range(processes)]


def shared_socket(host: str, port: int) -> socket.socket:
    """A listening socket that other processes of this user may bind too (the kernel balances accepts)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot serve on {host}:{port}: {exc.strerror}") from None
    return sock  # not listening yet: uvicorn listens once the relay has started (no connection waits on a start)


def _child(config: RelayConfig, log_level: str, tls: tuple[Path, Path] | None) -> None:
    from web.cli import serve

    try:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C reaches the whole group: the supervisor stops all
            serve(config, log_level, tls, sock=shared_socket(config.host, config.port))
    except UserError as exc:
        logging.getLogger("ce_bench.relay").error("relay process stopped: %s", exc)
        raise SystemExit(2) from None


def local_nats(config: RelayConfig, configs: list[RelayConfig]) -> tuple[list[RelayConfig], LocalNats | None]:
    """Without --nats, the nats-server of these processes (not started yet) and their configs pointed at it."""
    if len(configs) == 1 or config.nats_url:
        return configs, None
    nats = LocalNats(config.data_dir, config.nats_bucket)
    return nats.prepare(configs), nats


def run_processes(configs: list[RelayConfig], log_level: str, tls: tuple[Path, Path] | None,
                  nats: LocalNats | None = None) -> None:
    """Runs one relay per config until SIGTERM or SIGINT, restarting a process that dies (and the processes'
    own nats-server, when given: started first, stopped last)."""
    context = multiprocessing.get_context("spawn")
    stopping = False

    def start(i: int) -> BaseProcess:
        proc = context.Process(target=_child, args=(configs[i], log_level, tls), name=f"relay-{i}")
        proc.start()
        return proc

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    if nats is not None:
        nats.start()
    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    procs = [start(i) for i in range(len(configs))]
    started = [time.monotonic()] * len(procs)
    quick_deaths = [0] * len(procs)
    try:
        while not stopping:
            time.sleep(0.2)
            if nats is not None and nats.died() and not stopping:  # the relays serve from their stores meanwhile
                log.error("the processes' nats-server exited; starting it again (log: %s)", nats.log)
                nats.start()
            for i, proc in enumerate(procs):
                if proc.is_alive() or stopping:
                    continue
                quick_deaths[i] = quick_deaths[i] + 1 if time.monotonic() - started[i] < QUICK_DEATH_S else 0
                if quick_deaths[i] >= QUICK_DEATHS_MAX:
                    raise UserError(f"relay process {i} ({configs[i].data_dir}) exited {QUICK_DEATHS_MAX} times "
                                    f"within {QUICK_DEATH_S:g} s of its start (last exit code {proc.exitcode}); "
                                    "see the messages above")
                log.error("relay process %d (%s) exited with %s; starting it again in %g s", i,
                          configs[i].data_dir, proc.exitcode, RESTART_DELAY_S)
                time.sleep(RESTART_DELAY_S)
                if not stopping:
                    procs[i], started[i] = start(i), time.monotonic()
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()  # uvicorn shuts down gracefully on SIGTERM
        for proc in procs:
            proc.join(timeout=10)  # within what a service manager waits before SIGKILL
            if proc.is_alive():
                proc.kill()
        if nats is not None:
            nats.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
