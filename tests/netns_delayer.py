"""A user-space router for the network-namespace world (tests/test_world.py): the router namespace sends every
IPv4 packet it forwards into the TUN device this process opens; each waits its one-way delay (by source and
destination host: the third octet of 10.78.H.2) and goes back to the kernel, which delivers it. TCP and UDP
alike, so WebRTC's data channels see the same delays as the relays' WebSockets (these machines have no netem).

    python netns_delayer.py TUN_NAME DELAYS_JSON      DELAYS = {"H": {"H2": one_way_ms}}; prints "ready"
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import struct
import sys

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


async def main() -> None:
    name, spec = sys.argv[1], json.loads(sys.argv[2])
    delays = {(int(a), int(b)): float(ms) / 1000 for a, row in spec.items() for b, ms in row.items()}
    fd = open_tun(name)
    with contextlib.suppress(PermissionError):  # on time while the hosts fill both cores (root may)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    loop = asyncio.get_running_loop()

    def deliver(packet: bytes) -> None:
        with contextlib.suppress(OSError):  # a full queue drops the packet, as a router would
            os.write(fd, packet)

    def on_readable() -> None:
        while True:
            try:
                packet = os.read(fd, 65535)
            except BlockingIOError:
                return
            if len(packet) < 20 or packet[0] >> 4 != 4:
                continue  # IPv4 only (the world has no IPv6 addresses)
            delay = delays.get((packet[14], packet[18]), 0.0)
            if delay <= 0:
                deliver(packet)
            else:
                loop.call_later(delay, deliver, packet)

    loop.add_reader(fd, on_readable)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
