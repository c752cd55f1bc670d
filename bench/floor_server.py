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
``--group`` makes the durable floor commit a loop iteration's records together (one pwrite, one
fdatasync) and, with ``--standby-port``, stream each batch to a floor standby (``--standby-dir``:
it appends what it reads, fdatasyncs and acknowledges), whose acknowledgement a reply also waits
for with ``--wait-standby``: the least a Python primary does with a synchronous standby
(``standby_bench.py --floor``).

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
    group = False  # FloorGroup: replies wait for their batch (reply)
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
            if self.group:  # (an attribute, not a call: the other floors make one call per put)
                self.reply(out)
            else:
                self.transport.writelines(out)

    def reply(self, out: list[bytes]) -> None:
        """FloorGroup's: send ``out`` once what it answers is durable."""


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


class FloorGroup(Floor):
    """The durable floor with group commit, and optionally a standby (``--group``): what the
    least a Python primary does per job when its replies wait for a standby's disk too.

    A loop iteration's records are one batch: written with one pwrite, sent to the standby (when
    there is one) before the fdatasync, so the two disks sync at once, then fdatasynced on the
    loop thread (the other connections' commands wait in the kernel meanwhile and make the
    next batch). A reply waits until its batch is durable here and, with ``wait_standby``, until
    the standby's acknowledgement covers it; replies go out in the order they were made."""

    durable = True
    group = True
    fd = -1
    queued = 0  # stream offset after the last record stored (bytes, ever)
    written = 0  # stream offset written and synced here
    acked = 0  # what the standby acknowledged as durable on its disk
    wait_standby = False
    standby: asyncio.Transport | None = None
    pending: list[bytes] = []
    held: collections.deque[tuple[int, asyncio.Transport, list[bytes]]] = collections.deque()
    flush_soon = False

    def store(self, record: bytes) -> None:
        cls = FloorGroup
        cls.pending.append(record)
        cls.queued += len(record)
        if not cls.flush_soon:
            cls.flush_soon = True
            asyncio.get_running_loop().call_soon(cls.flush)

    def reply(self, out: list[bytes]) -> None:
        cls = FloorGroup
        assert self.transport is not None
        if cls.queued <= cls.durable_end() and not cls.held:
            self.transport.writelines(out)
        else:
            cls.held.append((cls.queued, self.transport, out))

    @classmethod
    def durable_end(cls) -> int:
        return min(cls.written, cls.acked) if cls.wait_standby else cls.written

    @classmethod
    def flush(cls) -> None:
        cls.flush_soon = False
        data = b"".join(cls.pending)
        cls.pending.clear()
        at = cls.written % FILE_SIZE
        if at + len(data) > FILE_SIZE:
            at = 0
        os.pwrite(cls.fd, data, at)
        if cls.standby is not None:
            cls.standby.write(len(data).to_bytes(4, "little") + data)
        os.fdatasync(cls.fd)
        cls.written += len(data)
        cls.release()

    @classmethod
    def release(cls) -> None:
        end, held = cls.durable_end(), cls.held
        while held and held[0][0] <= end:
            _, transport, out = held.popleft()
            transport.writelines(out)


class StandbyLink(asyncio.Protocol):
    """The primary's side of its link to a floor standby: reads its acknowledgements (the
    stream offset durable there, 8 bytes little-endian each; only the newest counts)."""

    def __init__(self) -> None:
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data
        whole = len(buf) - len(buf) % 8
        if whole:
            FloorGroup.acked = int.from_bytes(buf[whole - 8:whole], "little")
            FloorGroup.release()
        self.buf = buf[whole:]

    def connection_lost(self, exc: Exception | None) -> None:
        FloorGroup.standby = None  # (stopping: a reply waiting for it now waits for good)


class FloorStandby(asyncio.Protocol):
    """A floor standby: appends what the primary streams (4-byte length, then the batch) to its
    preallocated file, fdatasyncs, and acknowledges the stream offset now durable here, once per
    read, as a standby's group commit does."""

    fd = -1

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.durable = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        pos = 0
        got = []
        while len(buf) - pos >= 4:
            n = int.from_bytes(buf[pos:pos + 4], "little")
            if len(buf) - pos - 4 < n:
                break
            got.append(buf[pos + 4:pos + 4 + n])
            pos += 4 + n
        self.buf = buf[pos:]
        if got and self.transport is not None:
            data = b"".join(got)
            at = self.durable % FILE_SIZE
            if at + len(data) > FILE_SIZE:
                at = 0
            os.pwrite(self.fd, data, at)
            os.fdatasync(self.fd)
            self.durable += len(data)
            self.transport.write(self.durable.to_bytes(8, "little"))


async def _serve(port: int, proto: type[asyncio.Protocol], standby_port: int = 0) -> None:
    loop = asyncio.get_running_loop()
    if standby_port:  # stream to the standby from the first put on
        try:
            transport, _ = await loop.create_connection(StandbyLink, "127.0.0.1", standby_port)
        except OSError as e:
            raise SystemExit(f"floor_server.py: no floor standby at 127.0.0.1:{standby_port}: {e.strerror}") from None
        FloorGroup.standby = transport  # type: ignore[assignment]
    await loop.create_server(proto, "127.0.0.1", port)
    await asyncio.Event().wait()


def preallocated(path: str, zeros: bool = True, size: int = FILE_SIZE) -> int:
    """``path`` created with ``size`` bytes reserved and, unless ``zeros`` is false, written
    with zeros and synced: a durable floor's file (and ``standby_standin.py --fsync``'s), into
    which each write then changes no size and converts no extent, so an fdatasync carries the
    data alone. Writes go round it (``at`` back to 0 at the end)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.posix_fallocate(fd, 0, size)
    if zeros:  # zeros over the whole file, as beanstalkd writes its binlog
        stretch = bytes(1 << 20)
        for at in range(0, size, len(stretch)):
            os.pwrite(fd, stretch[: size - at], at)
        os.fsync(fd)
    return fd


def _file(directory: str, zeros: bool) -> int:
    """The preallocated file the durable floor writes into (``preallocated``)."""
    return preallocated(os.path.join(directory, "log"), zeros)


def options(ap: argparse.ArgumentParser) -> None:
    """The durable floor's options (floor_bench.py --serve takes them too)."""
    ap.add_argument("--sync-dir", metavar="DIR", help="durable floor writing into DIR/log")
    ap.add_argument("--sleep-ms", type=float, default=0.0,
                    help="with --sync-dir: block this long instead of fdatasync (a control)")
    ap.add_argument("--no-fsync", action="store_true", help="with --sync-dir: write, never fdatasync (as -F)")
    ap.add_argument("--unwritten", action="store_true",
                    help="with --sync-dir: only posix_fallocate the file (no zeros written over it)")
    ap.add_argument("--group", action="store_true",
                    help="with --sync-dir: group commit (a loop iteration's records, one pwrite and one fdatasync)")
    ap.add_argument("--standby-port", type=int, default=0, metavar="PORT",
                    help="with --group: stream each batch to the floor standby on this port of 127.0.0.1")
    ap.add_argument("--wait-standby", action="store_true",
                    help="with --standby-port: a reply also waits for the standby's disk (a sync standby)")
    ap.add_argument("--standby-dir", metavar="DIR",
                    help="be a floor standby instead: append what a primary streams into DIR/log, "
                    "fdatasync, acknowledge")


def serve(port: int, args: argparse.Namespace) -> None:
    import uvloop

    proto: type[asyncio.Protocol] = Floor
    if args.standby_dir:
        proto = FloorStandby
        FloorStandby.fd = _file(args.standby_dir, not args.unwritten)
    elif args.sync_dir and args.group:
        proto = FloorGroup
        FloorGroup.fd = _file(args.sync_dir, not args.unwritten)
        FloorGroup.wait_standby = args.wait_standby
    elif args.sync_dir:
        proto = FloorSync
        FloorSync.fd = _file(args.sync_dir, not args.unwritten)
        FloorSync.sleep = args.sleep_ms / 1000
        FloorSync.fsync = not args.no_fsync
    uvloop.run(_serve(port, proto, args.standby_port if args.group else 0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (default 0: the kernel picks)")
    options(ap)
    args = ap.parse_args()
    serve(args.port, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
