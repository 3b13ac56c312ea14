"""A delaying TCP forwarder for the network-namespace harness (the kernel's netem qdisc is missing on these
machines): `python netns_forwarder.py SPEC_JSON`, SPEC = [[listen_port, target_host, target_port, one_way_ms]].
Every chunk is delivered one_way_ms after it was read, in order, in both directions."""

from __future__ import annotations

import asyncio
import json
import sys
import time


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                writer.close()
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()

    task = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(65536)
            queue.put_nowait((time.monotonic() + delay_s, data))
            if not data:
                break
        await task
    except (ConnectionError, OSError):
        task.cancel()


async def serve(port: int, host: str, target_port: int, one_way_ms: float) -> asyncio.Server:
    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(host, target_port)
        except OSError:
            client_w.close()
            return
        await asyncio.gather(pump(client_r, up_w, one_way_ms / 1000), pump(up_r, client_w, one_way_ms / 1000),
                             return_exceptions=True)

    return await asyncio.start_server(handle, "127.0.0.1", port)


async def main() -> None:
    spec = json.loads(sys.argv[1])
    servers = [await serve(int(p), str(h), int(tp), float(d)) for p, h, tp, d in spec]
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main())
