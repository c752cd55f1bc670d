"""The "floor" server of bench/floor_bench.py and server_bench.py: the least a Python server on uvloop does per put.

It parses only what a put needs and answers ``INSERTED n``: no engine, no records, no stats
(``use``/``watch`` and any other line get a fixed short reply). With ``--sync-dir`` it is the
durable floor: each put's bytes go into a preallocated file (pwrite), then fdatasync before its
INSERTED, what beanstalkd ``-f 0`` does; ``--no-fsync`` leaves out the fdatasync (beanstalkd
``-F``) and ``--sleep-ms`` blocks that long instead of it (a control that blocks without I/O).

Run: ``.venv/bin/python bench/floor_server.py [--port 0] [--sync-dir DIR ...]``; it listens on
127.0.0.1 (port 0 by default: the kernel picks, and the benches read the port from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time


class Floor(asyncio.Protocol):
    """put -> INSERTED n; use/watch/other lines get a fixed short reply."""

    durable = False  # the durable floor stores each put before replying (one loop for both)

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.n = 0

    def store(self, record: bytes) -> None:
        pass

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        out = []
        pos = 0
        while True:
            i = buf.find(b"\r\n", pos)
            if i < 0:
                break
            line = buf[pos:i]
            if line.startswith(b"put "):
                end = i + 2 + int(line.rsplit(b" ", 1)[1]) + 2
                if len(buf) < end:
                    break
                if self.durable:
                    self.store(buf[pos:end])
                pos = end
                self.n += 1
                out.append(b"INSERTED %d\r\n" % self.n)
            else:
                pos = i + 2
                out.append(b"USING x\r\n" if line.startswith(b"use ") else b"WATCHING 2\r\n")
        self.buf = buf[pos:]
        if out and self.transport is not None:
            self.transport.writelines(out)


class FloorSync(Floor):
    """The floor, durable: each put's bytes go into a preallocated file (pwrite), then
    fdatasync (or, as a control, a sleep; or nothing, as -F) before its INSERTED."""

    durable = True
    fd = -1
    pos = 0
    sleep = 0.0
    fsync = True

    def store(self, record: bytes) -> None:
        cls = FloorSync
        if cls.pos + len(record) > FILE_SIZE:
            cls.pos = 0
        cls.pos += os.pwrite(cls.fd, record, cls.pos)
        if cls.sleep:
            time.sleep(cls.sleep)
        elif cls.fsync:
            os.fdatasync(cls.fd)


FILE_SIZE = 64 << 20


async def _serve(port: int, proto: type[Floor]) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_server(proto, "127.0.0.1", port)
    await asyncio.Event().wait()


def options(ap: argparse.ArgumentParser) -> None:
    """The durable floor's options (floor_bench.py --serve takes them too)."""
    ap.add_argument("--sync-dir", metavar="DIR", help="durable floor writing into DIR/log")
    ap.add_argument("--sleep-ms", type=float, default=0.0,
                    help="with --sync-dir: block this long instead of fdatasync (a control)")
    ap.add_argument("--no-fsync", action="store_true", help="with --sync-dir: write, never fdatasync (as -F)")
    ap.add_argument("--unwritten", action="store_true",
                    help="with --sync-dir: only posix_fallocate the file (no zeros written over it)")


def serve(port: int, args: argparse.Namespace) -> None:
    import uvloop

    proto: type[Floor] = Floor
    if args.sync_dir:
        proto = FloorSync
        FloorSync.fd = os.open(os.path.join(args.sync_dir, "log"), os.O_RDWR | os.O_CREAT, 0o600)
        os.posix_fallocate(FloorSync.fd, 0, FILE_SIZE)
        if not args.unwritten:  # zeros over the whole file, as beanstalkd writes its binlog
            for at in range(0, FILE_SIZE, 1 << 20):
                os.pwrite(FloorSync.fd, bytes(1 << 20), at)
            os.fsync(FloorSync.fd)
        FloorSync.sleep = args.sleep_ms / 1000
        FloorSync.fsync = not args.no_fsync
    uvloop.run(_serve(port, proto))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (default 0: the kernel picks)")
    options(ap)
    args = ap.parse_args()
    serve(args.port, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
