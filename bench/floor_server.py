"""The "floor" server of bench/floor_bench.py and server_bench.py: the least a Python server on uvloop does per job.

It parses only what a put, a reserve and a delete need: no engine, no priorities, no stats. A
put appends its body to its tube's queue (the tube of the connection's last ``use``) and answers
``INSERTED id``; ``reserve`` (or ``reserve-with-timeout``) takes the oldest body of the tube the
connection last watched into a table of reserved jobs and answers ``RESERVED id n`` with it, or
``TIMED_OUT`` at once when that queue is empty (it never blocks); ``delete id`` drops a reserved
job (``DELETED``, else ``NOT_FOUND``). Any other line gets a fixed short reply. With ``--sync-dir`` it is the
durable floor: each put's bytes and each delete's line go into a preallocated file (pwrite),
then fdatasync before the reply, what beanstalkd ``-f 0`` does (its binlog gets a record per put
and per delete, none per reserve); ``--no-fsync`` leaves out the fdatasync (beanstalkd ``-F``)
and ``--sleep-ms`` blocks that long instead of it (a control that blocks without I/O).

Run: ``.venv/bin/python bench/floor_server.py [--port 0] [--sync-dir DIR ...]``; it listens on
127.0.0.1 (port 0 by default: the kernel picks, and the benches read the port from /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import sys
import time


class Floor(asyncio.Protocol):
    """put -> INSERTED id, reserve -> RESERVED id n, delete id -> DELETED; use/watch/other lines
    get a fixed short reply."""

    durable = False  # the durable floor stores each put and delete before replying (one loop for both)
    # The server's jobs, shared by its connections as beanstalkd's are: ids count puts.
    last_id = 0
    tubes: collections.defaultdict[bytes, collections.deque[tuple[int, bytes]]] = (
        collections.defaultdict(collections.deque))
    reserved: dict[int, bytes] = {}

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.using = self.watching = Floor.tubes[b"default"]

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
                Floor.last_id += 1
                self.using.append((Floor.last_id, buf[i + 2:end - 2]))
                pos = end
                out.append(b"INSERTED %d\r\n" % Floor.last_id)
            elif line.startswith(b"reserve"):
                pos = i + 2
                if self.watching:
                    jid, body = self.watching.popleft()
                    Floor.reserved[jid] = body
                    out += (b"RESERVED %d %d\r\n" % (jid, len(body)), body, b"\r\n")
                else:
                    out.append(b"TIMED_OUT\r\n")
            elif line.startswith(b"delete "):
                pos = i + 2
                if Floor.reserved.pop(int(line[7:]), None) is None:
                    out.append(b"NOT_FOUND\r\n")
                else:
                    if self.durable:  # beanstalkd's binlog records a delete (a reserve: nothing)
                        self.store(buf[i - len(line):pos])
                    out.append(b"DELETED\r\n")
            elif line.startswith(b"use "):
                pos = i + 2
                self.using = Floor.tubes[line[4:]]
                out.append(b"USING %s\r\n" % line[4:])
            else:
                pos = i + 2
                if line.startswith(b"watch "):
                    self.watching = Floor.tubes[line[6:]]
                out.append(b"WATCHING 2\r\n")
        self.buf = buf[pos:]
        if out and self.transport is not None:
            self.transport.writelines(out)


class FloorSync(Floor):
    """The floor, durable: each put's bytes and each delete's line go into a preallocated file
    (pwrite), then fdatasync (or, as a control, a sleep; or nothing, as -F) before the reply."""

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
