"""A stand-in standby for ``standby_bench.py --stand-in``: it streams from a primary as a
standby does (the same request, the secret's challenge, every message checked by
``wire.RecordDecoder``: lengths, CRCs, the frames' own CRCs) and acknowledges what each read
brought, but keeps no log and applies nothing. With ``--fsync FILE`` it first appends the read
to FILE and fdatasyncs it, as a standby's group commit does before its acknowledgement.

Against it, the primary does all of its replication work (reading its log back, sending
frames, reading acknowledgements, and with ``--sync-standbys 1`` holding replies for them)
while the second process costs the shared cores almost nothing. So the bench separates the
primary's own cost and the round trip (and, with ``--fsync``, the standby's disk) from the
real standby's CPU per record.

Run: ``python bench/standby_standin.py PORT SECRET_FILE [--fsync FILE]`` (the bench starts it).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from stalkd.replication import wire
from stalkd.replication.receiver import ask
from stalkd.secretfile import read_secret


async def follow(port: int, secret: str, sync_path: str | None) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    reply = await ask(reader, writer, wire.encode_request(0, 0), secret)
    if reply.word != "STREAMING":
        raise SystemExit(f"the primary answered {reply.word}")
    fd = os.open(sync_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600) if sync_path else -1
    dec = wire.RecordDecoder()
    beats = end = 0
    try:
        while data := await reader.read(1 << 20):
            msgs = dec.feed(data)
            if msgs and fd >= 0:
                os.write(fd, data)
                os.fdatasync(fd)
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
    ap.add_argument("--fsync", metavar="FILE", help="append each read to FILE and fdatasync it before acknowledging")
    opts = ap.parse_args()
    secret = read_secret(opts.secret_file, "replication secret")
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a default dependency on POSIX
        asyncio.run(follow(opts.port, secret, opts.fsync))
    else:
        uvloop.run(follow(opts.port, secret, opts.fsync))


if __name__ == "__main__":
    main()
