"""A stand-in standby for ``standby_bench.py --stand-in``: it streams from a primary as a
standby does (the same request, the secret's challenge, every message checked by
``wire.RecordDecoder``: lengths, CRCs, the frames' own CRCs) and acknowledges what each read
brought, but keeps no log and applies nothing. With ``--fsync FILE`` it first writes the read
into FILE and fdatasyncs it, as a standby's group commit does before its acknowledgement. FILE
is zero-filled to ``FILE_SIZE`` and synced before the stream starts, and the reads go round it,
as the floor standby's file (floor_server.py): each fdatasync then carries the read's bytes and
no change of the file's size or extents, the least a standby's disk does per read.

Against it, the primary does all of its replication work (reading its log back, sending
frames, reading acknowledgements, and with ``--sync-standbys 1`` holding replies for them)
while the second process costs the shared cores almost nothing. So the bench separates the
primary's own cost and the round trip (and, with ``--fsync``, the standby's disk) from the
real standby's CPU per record.

Run: ``python bench/standby_standin.py PORT SECRET_FILE [--fsync FILE [--file-size BYTES]]`` (the
bench starts it).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from floor_server import FILE_SIZE, preallocated  # (bench/floor_server.py: its standby's file)

from stalkd.replication import wire
from stalkd.replication.receiver import ask
from stalkd.secretfile import read_secret


async def follow(port: int, secret: str, sync_path: str | None, size: int = FILE_SIZE) -> None:
    fd = preallocated(sync_path, size=size) if sync_path else -1
    at = 0
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    reply = await ask(reader, writer, wire.encode_request(0, 0), secret)
    if reply.word != "STREAMING":
        raise SystemExit(f"the primary answered {reply.word}")
    dec = wire.RecordDecoder()
    beats = end = 0
    try:
        while data := await reader.read(1 << 20):
            msgs = dec.feed(data)
            if msgs and fd >= 0:
                if at + len(data) > size:
                    at = 0
                os.pwrite(fd, data, at)
                os.fdatasync(fd)
                at += len(data)
            for first, payloads in msgs:
                end = first + len(payloads)
            if msgs or dec.heartbeats != beats:
                beats = dec.heartbeats
                writer.write(wire.encode_ack(end))
    finally:
        if fd >= 0:
            os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("port", type=int, help="the primary's port on 127.0.0.1")
    ap.add_argument("secret_file", help="the primary's --replication-secret file")
    ap.add_argument("--fsync", metavar="FILE", help="write each read into FILE (zero-filled first) and fdatasync it before acknowledging")
    ap.add_argument("--file-size", type=int, default=FILE_SIZE, metavar="BYTES",
                    help=f"the size of --fsync's file (default {FILE_SIZE}); a read larger than it is written whole")
    opts = ap.parse_args()
    if opts.file_size <= 0:
        ap.error(f"--file-size must be a positive number of bytes, not {opts.file_size}")
    secret = read_secret(opts.secret_file, "replication secret")
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a default dependency on POSIX
        asyncio.run(follow(opts.port, secret, opts.fsync, opts.file_size))
    else:
        uvloop.run(follow(opts.port, secret, opts.fsync, opts.file_size))


if __name__ == "__main__":
    main()
