#!/usr/bin/env python3
"""A TCP proxy that adds latency (the kernel here has no netem): asyncio, stdlib only.

    python bench/latency_proxy.py --delay-ms 25 LISTEN_PORT:TARGET_PORT [...]

Listens on 127.0.0.1:LISTEN_PORT and forwards to 127.0.0.1:TARGET_PORT, holding every
chunk for --delay-ms in each direction (25 ms each way = a 50 ms round trip). Latency, not
a bandwidth cap: each direction is a queue of (deliver_at, bytes), so chunks in flight
overlap and keep their order. Prints "ready" on stdout once every port listens; stops on
SIGTERM / SIGINT. A listen port 0 picks a free one; the chosen pairs are printed as
"LISTEN:TARGET" on the ready line.

With --turns-file FILE it also counts, per connection, the **turns**: how often the
direction of the traffic changed, each client->server chunk read after a server->client one
(or first) starting a new turn. A side that waits for the other's answer before it speaks
costs one turn, so the turns of a connection are the round trips it paid (a TCP connect
excluded); bytes sent back to back, pipelined, stay in one turn. When a connection closes,
one line `LISTEN_PORT TURNS BYTES_UP BYTES_DOWN` is appended to FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import time

CHUNK = 64 * 1024


class Turns:
    """Direction changes of one connection: a new turn when the client speaks after the server."""

    def __init__(self) -> None:
        self.turns = 0
        self.last = ""  # "up" (client -> server) or "down"
        self.bytes = {"up": 0, "down": 0}

    def saw(self, direction: str, size: int) -> None:
        if size:
            if direction == "up" and self.last != "up":
                self.turns += 1
            self.last = direction
            self.bytes[direction] += size


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float,
                turns: Turns | None = None, direction: str = "") -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
    loop = asyncio.get_running_loop()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                try:
                    if writer.can_write_eof():
                        writer.write_eof()
                except OSError:
                    pass
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(CHUNK)
            if turns is not None:
                turns.saw(direction, len(data))
            queue.put_nowait((loop.time() + delay, data))
            if not data:
                break
        await sender
    except (ConnectionError, OSError):
        pass
    finally:
        if not sender.done():
            sender.cancel()


async def _serve_one(target_port: int, delay: float, c_reader: asyncio.StreamReader,
                     c_writer: asyncio.StreamWriter, turns_file: str | None = None) -> None:
    try:
        s_reader, s_writer = await asyncio.open_connection("127.0.0.1", target_port)
    except OSError:
        c_writer.close()
        return
    for w in (c_writer, s_writer):
        sock = w.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # The TCP connect itself is one round trip in the real world: pay it before the first byte.
    await asyncio.sleep(2 * delay)
    turns = Turns()
    try:
        await asyncio.gather(_pipe(c_reader, s_writer, delay, turns, "up"),
                             _pipe(s_reader, c_writer, delay, turns, "down"), return_exceptions=True)
    except asyncio.CancelledError:
        pass  # shutting down
    finally:
        if turns_file:
            listen = c_writer.get_extra_info("sockname")[1]
            with open(turns_file, "a") as f:
                f.write(f"{listen} {turns.turns} {turns.bytes['up']} {turns.bytes['down']}\n")
        for w in (c_writer, s_writer):
            try:
                w.close()
            except OSError:
                pass


async def main_async(pairs: list[tuple[int, int]], delay: float, turns_file: str | None = None) -> None:
    servers, chosen = [], []
    for listen, target in pairs:
        server = await asyncio.start_server(
            lambda r, w, t=target: _serve_one(t, delay, r, w, turns_file), "127.0.0.1", listen, backlog=512)
        servers.append(server)
        chosen.append(f"{server.sockets[0].getsockname()[1]}:{target}")
    print("ready", " ".join(chosen), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        server.close()
    for task in asyncio.all_tasks() - {asyncio.current_task()}:
        task.cancel()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--delay-ms", type=float, default=25.0, help="one-way delay (default 25 = 50 ms round trip)")
    p.add_argument("--turns-file", help="append each connection's turns (round trips) here when it closes")
    p.add_argument("pairs", nargs="+", metavar="LISTEN:TARGET")
    args = p.parse_args()
    pairs = [tuple(int(x) for x in pair.split(":")) for pair in args.pairs]
    asyncio.run(main_async(pairs, args.delay_ms / 1000.0, args.turns_file))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
