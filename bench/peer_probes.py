"""What a node-to-node probe costs (issue 18 benchmarks): bytes per probe for each node, bytes per node per
hour at the relay's default pace, and the relay's CPU per brokered probe.

    .venv/bin/python bench/peer_probes.py [--probes 30]

Method: one relay process (peer probes every 1 s, any pair again at once) and two server nodes in this
process (host_runner/live_client.py LiveSession with aiortc, host candidates on this machine). Bytes: every
UDP datagram the nodes' ICE agents send (STUN checks, DTLS handshake, SCTP data: aioice's send paths
counted), plus the signalling each node sends and receives on its live session (peer_* messages, as JSON).
Per node per hour: at the default interval a node offers once a minute and answers about once a minute, so
~120 probes an hour. Relay CPU: the relay process's CPU seconds (psutil) over a window with probes, against
the same window length with the same two sessions taking no part (the reference, measured first in this
run); the difference per probe brokered. The nodes share the 2 cores with the relay.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernels_paired import cpu_model  # noqa: E402
from common.keys import load_or_create  # noqa: E402
from host_runner.live_client import LiveSession  # noqa: E402
from tests.relay_process import RelayProcess  # noqa: E402
from tests.samples import sample_profile  # noqa: E402

PROBES_PER_HOUR = 120  # one offered and about one answered per peer_probe_interval_s (60 s)
UDP_SENT = {"bytes": 0, "datagrams": 0}


def count_udp() -> None:
    """Counts what every aioice agent in this process sends (both nodes: together, both directions)."""
    from aioice import ice

    send_data, send_stun = ice.StunProtocol.send_data, ice.StunProtocol.send_stun

    async def counted_data(self: Any, data: bytes, addr: tuple[str, int]) -> None:
        UDP_SENT["bytes"] += len(data) + 28  # + IPv4 and UDP headers
        UDP_SENT["datagrams"] += 1
        await send_data(self, data, addr)

    def counted_stun(self: Any, message: Any, addr: tuple[str, int]) -> None:
        UDP_SENT["bytes"] += len(bytes(message)) + 28
        UDP_SENT["datagrams"] += 1
        send_stun(self, message, addr)

    ice.StunProtocol.send_data = counted_data  # type: ignore[method-assign]
    ice.StunProtocol.send_stun = counted_stun  # type: ignore[method-assign]


def register(url: str, key: Any) -> None:
    import urllib.request

    beacon = json.loads(urllib.request.urlopen(url + "/beacon", timeout=10).read())
    _, profile = sample_profile(key, beacon=beacon)
    req = urllib.request.Request(url + "/v1/profiles", data=json.dumps(profile).encode(), method="POST",
                                 headers={"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--probes", type=int, default=30)
    args = parser.parse_args()
    import psutil

    count_udp()
    with tempfile.TemporaryDirectory() as tmp:
        relay = RelayProcess(Path(tmp) / "relay", "--heartbeat-interval", "1", "--peer-probe-interval-s", "1",
                             "--peer-probe-pair-repeat-s", "0", "--ip-rate", "1000").start()
        try:
            keys = [load_or_create(Path(tmp) / f"k{i}") for i in range(2)]
            for key in keys:
                register(relay.url, key)
            assert relay.proc is not None
            proc = psutil.Process(relay.proc.pid)
            idle = [LiveSession(relay.url, k).start() for k in keys]  # the reference: sessions, no probes
            time.sleep(3)
            cpu0, t0 = proc.cpu_times(), time.monotonic()
            time.sleep(20)
            idle_cpu = sum(proc.cpu_times()[:2]) - sum(cpu0[:2])
            idle_s = time.monotonic() - t0
            for s in idle:
                s.stop()
            sessions = [LiveSession(relay.url, k, peer_probes=True) for k in keys]
            signalling = [0, 0]
            for i, s in enumerate(sessions):
                send, prober = s._send, s.peers
                assert prober is not None

                def counted_send(ws: Any, message: dict[str, Any], i: int = i, send: Any = send) -> None:
                    if str(message.get("type", "")).startswith("peer"):
                        signalling[i] += len(json.dumps(message))
                    send(ws, message)

                def counted_handle(message: dict[str, Any], i: int = i, handle: Any = prober.handle) -> None:
                    signalling[i] += len(json.dumps(message))
                    handle(message)

                s._send = counted_send  # type: ignore[method-assign]
                prober.handle = counted_handle  # type: ignore[method-assign]
                s.start()
            time.sleep(3)
            done0 = len(sessions[0].peers.done) if sessions[0].peers else 0
            udp0, sig0 = dict(UDP_SENT), list(signalling)
            cpu0, t0 = proc.cpu_times(), time.monotonic()
            while (len(sessions[0].peers.done) if sessions[0].peers else 0) - done0 < args.probes:
                time.sleep(0.2)
            probe_cpu = sum(proc.cpu_times()[:2]) - sum(cpu0[:2])
            probe_s = time.monotonic() - t0
            done = sessions[0].peers.done[done0:] if sessions[0].peers else []
            udp = UDP_SENT["bytes"] - udp0["bytes"]
            sig = [signalling[i] - sig0[i] for i in range(2)]
            rtts = [float(m["rtt_ms"]) for m in done if m.get("rtt_ms") is not None]
            for s in sessions:
                s.stop()
        finally:
            relay.stop()
    n = len(done)
    measured = sum(1 for m in done if m["code"] == "measured")
    per_probe_node = udp / n + statistics.mean(sig) / n  # each node sends half the UDP and receives the other half
    reference_cpu_per_s = idle_cpu / idle_s
    extra_cpu_per_probe = max(0.0, probe_cpu - reference_cpu_per_s * probe_s) / n
    print(f"CPU: {cpu_model()}")
    print(f"probes: {n} ended ({measured} measured), RTT median {statistics.median(rtts):.3f} ms on loopback")
    print(f"bytes per probe per node: {per_probe_node / 1024:.1f} KiB (UDP both ways {udp / n / 1024:.1f} KiB, "
          f"signalling {statistics.mean(sig) / n / 1024:.2f} KiB); per node per hour at the default pace "
          f"({PROBES_PER_HOUR} probes): {per_probe_node * PROBES_PER_HOUR / 1e6:.2f} MB")
    print(f"relay CPU: {probe_cpu / probe_s * 1000:.1f} ms/s with probes vs {reference_cpu_per_s * 1000:.1f} ms/s "
          f"without (the same two sessions): {extra_cpu_per_probe * 1000:.2f} ms per brokered probe "
          f"({probe_cpu / probe_s / max(reference_cpu_per_s, 1e-9):.2f}x)")


if __name__ == "__main__":
    main()
