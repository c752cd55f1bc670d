"""Before a standby serves: bring its data directory onto the primary's lineage and up to date.

Run once at start-up, blocking, before the WAL is recovered (so recovery sees a consistent
directory): ask the primary to stream from the local log's last record (which its copy must
match: ``overlap``), then

- ``STREAMING``: copy every record up to the primary's end into the local log and fsync it;
- ``SNAPSHOT_NEEDED``: the primary no longer keeps what follows the local log (it compacted
  past it), or the local log is of another lineage: the local ``wal/`` and ``snapshots/`` are
  moved to ``quarantine/`` (never deleted), the primary's newest snapshot is copied, and the
  log starts again at the snapshot's start offset;
- ``DIVERGED <offset>``: the local log holds records past ``<offset>`` that the new primary
  never had (this server was the primary before a failover and wrote them after the standby's
  last acknowledgement), or the primary's record at our last offset is not ours (it lost
  records we hold): the directory is quarantined the same way, with a note naming the jobs of
  those records, and the server starts again from the primary's copy.

Every records message is checked (``wire``: length, CRC; ``frames``: offsets, record format,
epochs) before it is written: a bad stream is a ``CatchUpError`` and the local log keeps only
what came before it (the server then serves that copy and retries in the background).

Ensures: afterwards the directory holds a prefix of the primary's log (and a snapshot it
needs), durable, its epochs the primary's (EPOCH records, or the copied snapshot's header); or ``CatchUpError`` says why not
(the primary unreachable, not a primary, or refusing this identity), having changed nothing
beyond a completed quarantine.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
from collections.abc import Callable

from stalkd.client._address import Address
from stalkd.client._tls import wrap_socket
from stalkd.engine.model import Op
from stalkd.log import Log, LogReader
from stalkd.log.active import create_segment
from stalkd.log.errors import LogError
from stalkd.log.fs import REAL, FileSystem
from stalkd.log.repairs import free_name
from stalkd.persist.datadir import job_id_ranges
from stalkd.persist.snapshot import list_snapshots, read_header, snapshot_name
from stalkd.replication import overlap, wire
from stalkd.replication.epochs import of_history, scan
from stalkd.replication.frames import check_records

__all__ = ["CatchUpError", "catch_up", "connect", "quarantine", "read_line", "ask", "QUARANTINE_DIR"]

log = logging.getLogger("stalkd.replication")

QUARANTINE_DIR = "quarantine"
_MAX_ROUNDS = 4  # stream, or quarantine + snapshot + stream: two rounds suffice; margin for races


class CatchUpError(RuntimeError):
    """The standby could not be brought up to date (the message says what to do)."""


def connect(address: Address, timeout: float) -> socket.socket:
    """A connected (TLS when the address says so) blocking socket to the primary."""
    if address.path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(address.path)
        except BaseException:
            sock.close()
            raise
        return sock
    sock = socket.create_connection((address.host, address.port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return wrap_socket(sock, address)


def read_line(sock: socket.socket, buf: bytearray) -> bytes:
    """One ``\\r\\n``-terminated line from ``sock``; what follows it stays in ``buf``."""
    while True:
        end = buf.find(b"\r\n")
        if end >= 0:
            line = bytes(buf[:end + 2])
            del buf[:end + 2]
            return line
        if len(buf) > wire.MAX_LINE:
            raise CatchUpError("the primary's reply line is too long: is it a stalkd server?")
        chunk = sock.recv(65536)
        if not chunk:
            raise CatchUpError("the primary closed the connection before replying")
        buf += chunk


def ask(sock: socket.socket, buf: bytearray, request: bytes, secret: str | None) -> wire.Reply:
    """Send ``request`` and read the primary's answer, proving ``secret`` when challenged."""
    sock.sendall(request)
    r = wire.parse_reply(read_line(sock, buf))
    if r.word == "CHALLENGE":
        if secret is None:
            raise CatchUpError("the primary asks for the replication secret: give --replication-secret FILE")
        sock.sendall(wire.encode_auth(secret, r.args[0].encode(), request))
        r = wire.parse_reply(read_line(sock, buf))
    return r


def quarantine(directory: str, why: str, since: int | None, fs: FileSystem = REAL) -> str:
    """Move ``wal/`` and ``snapshots/`` aside into ``quarantine/<time>/`` with a note."""
    # free: a second one within the second (a swap finished at start) gets a name of its own
    dest = free_name(os.path.join(directory, QUARANTINE_DIR), time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}")
    fs.makedirs(dest)
    dropped = ""
    wal_dir = os.path.join(directory, "wal")
    if since is not None and os.path.isdir(wal_dir):
        with LogReader(wal_dir, archive=False) as r:
            dropped = job_id_ranges((f.offset, f.bytes()) for f in r.read(since))
    for sub in ("wal", "snapshots"):
        src = os.path.join(directory, sub)
        if os.path.exists(src):
            fs.replace(src, os.path.join(dest, sub))
    note = f"{why}\n" + (f"jobs named by the records from offset {since} on: {dropped or 'none'}\n"
                         if since is not None else "")  # fmt: skip
    fd = fs.open(os.path.join(dest, "NOTE"), os.O_WRONLY, create=True, truncate=True)
    try:
        fs.write_all(fd, note.encode())
        fs.fsync(fd)
    finally:
        os.close(fd)
    fs.fsync_dir(dest)  # what moved in: without it a power cut could keep it in neither place
    fs.fsync_dir(os.path.dirname(dest))
    fs.fsync_dir(directory)
    log.warning("%s; the local WAL and snapshots were moved to %s (inspect them with "
                "`stalkd log inspect %s`)%s", why, dest, os.path.join(dest, "wal"),
                f"; jobs named by the records cut: {dropped}" if dropped else "")  # fmt: skip
    return dest


def _fetch_snapshot(address: Address, directory: str, segment_size: int, timeout: float, secret: str | None,
                    on_end: Callable[[int], None]) -> int:  # fmt: skip
    """Copy the primary's newest snapshot; start an empty log at its start offset. Returns it
    (0 when the primary has none: its log still starts at 0)."""
    snap_dir = os.path.join(directory, "snapshots")
    REAL.makedirs(snap_dir)
    with connect(address, timeout) as sock:
        buf = bytearray()
        r = ask(sock, buf, wire.REPLICATE_SNAPSHOT, secret)
        if r.word == "SNAPSHOT_NEEDED":
            return 0
        if r.word != "SNAPSHOT":
            raise CatchUpError(f"the primary refused a snapshot copy: {r.word}")
        start, size = int(r.args[0]), int(r.args[1])  # its header carries the epochs before start
        on_end(start)  # the primary's log goes at least that far: a lag while the copy runs
        tmp = os.path.join(snap_dir, "copy.snap.tmp")  # recovery deletes a .tmp left behind
        fd = REAL.open(tmp, os.O_WRONLY, create=True, truncate=True)
        try:
            got = 0
            if buf:
                REAL.write_all(fd, bytes(buf[:size]))
                got = min(len(buf), size)
            while got < size:
                chunk = sock.recv(min(1 << 20, size - got))
                if not chunk:
                    raise CatchUpError(f"the snapshot copy ended after {got} of {size} bytes")
                REAL.write_all(fd, chunk)
                got += len(chunk)
            REAL.fsync(fd)
        finally:
            os.close(fd)
    header = read_header(tmp)
    if header.start_offset != start:
        raise CatchUpError(f"the primary's snapshot says offset {header.start_offset}, its reply {start}")
    REAL.replace(tmp, os.path.join(snap_dir, snapshot_name(header.start_seq)))
    REAL.fsync_dir(snap_dir)
    wal_dir = os.path.join(directory, "wal")
    REAL.makedirs(wal_dir)
    if start:  # fsync=True: the segment's header and the directory's new name
        create_segment(wal_dir, start, segment_size, 1, "pwrite", True, REAL).close()
    log.info("copied the primary's snapshot (%d bytes, %d jobs, log from offset %d)", size, header.count, start)
    return start


def _stream_to(sock: socket.socket, buf: bytearray, lg: Log, target: int, epoch: int, last: bytes | None) -> int:
    """Append the streamed records to ``lg`` until it reaches ``target``, each message checked
    before it is written (the first against ``last``, our last record: ``overlap``); fsync.
    Returns count."""
    overlap.check_end(lg.next_offset, target)
    dec = wire.RecordDecoder()
    n = 0
    data = bytes(buf)
    # Our last record is compared even when the primary's log ends where ours does: the primary
    # (after a power cut of both) may have written another record at that very offset.
    while lg.next_offset < target or last is not None:
        for first, payloads in dec.feed(data):
            if last is not None:
                first, payloads = overlap.trim(first, payloads, lg.next_offset, last)
                last = None
                if not payloads:
                    continue
            for r in check_records(first, payloads, lg.next_offset, epoch):
                if r.op is Op.EPOCH:
                    epoch = r.epoch
            lg.write_many(payloads)
            n += len(payloads)
        if lg.next_offset >= target and last is None:
            break
        data = sock.recv(1 << 20)
        if not data:
            raise CatchUpError("the primary closed the stream during catch-up")
    lg.sync()
    return n


def catch_up(address: Address, directory: str, *, segment_size: int, timeout: float = 5.0,
             secret: str | None = None, on_end: Callable[[int], None] | None = None) -> str:
    """Bring ``directory`` up to the primary at ``address`` (see the module doc); a summary.
    ``on_end(offset)``: what this learns of the primary's log end as it goes (a snapshot's start
    offset, then the end its stream reaches for), called on this thread."""
    try:
        return _catch_up(address, directory, segment_size, timeout, secret, on_end or _ignore)
    except (wire.WireError, ValueError) as e:  # nothing of the bad message was written
        raise CatchUpError(f"{address} sent a bad stream: {e}") from None
    except (OSError, LogError) as e:  # the network, or this disk (full, failing)
        raise CatchUpError(f"catching up with {address}: {type(e).__name__}: {e}") from None


def _ignore(offset: int) -> None:
    pass


def _open(wal_dir: str, segment_size: int) -> Log:
    return Log.open(wal_dir, segment_size=segment_size, durability="always")


def _catch_up(address: Address, directory: str, segment_size: int, timeout: float, secret: str | None,
              on_end: Callable[[int], None]) -> str:  # fmt: skip
    wal_dir = os.path.join(directory, "wal")
    compare = True  # from our last record (overlap); not when the primary keeps none that old
    for _ in range(_MAX_ROUNDS):
        # No log yet (a new standby, a resync's staging copy): nothing is created before the
        # primary has said how far its log goes, which a full disk would otherwise keep this
        # from learning (``on_end``: the lag the standby reports through the copy).
        lg = _open(wal_dir, segment_size) if os.path.isdir(wal_dir) else None
        cut: int | None = None  # found by comparing our last record (overlap), and why
        why = ""
        try:
            nxt = lg.next_offset if lg is not None else 0
            last = overlap.last_record(lg) if compare and lg is not None else None
            try:
                sock = connect(address, timeout)
            except (OSError, ValueError) as e:
                raise CatchUpError(f"cannot reach the primary {address}: {e}") from None
            with sock:
                # the epochs of the local log as it is now (a quarantine changed them)
                mine = of_history(scan(directory))
                buf = bytearray()
                at = overlap.request_offset(nxt, last)
                r = ask(sock, buf, wire.encode_request(at, mine.epoch, mine.history), secret)
                if r.word == "STREAMING":
                    epoch, target = int(r.args[0]), int(r.args[1])
                    on_end(target)
                    if lg is None:
                        lg = _open(wal_dir, segment_size)
                    sock.settimeout(max(timeout, 60.0))
                    try:
                        n = _stream_to(sock, buf, lg, target, mine.epoch, last)
                        return (f"caught up with {address} (epoch {epoch}): {n} records copied, log ends "
                                f"at {lg.next_offset}")  # fmt: skip
                    except overlap.Diverged as e:
                        why, cut = f"{address}: {e}", e.since
                elif r.word == "SNAPSHOT_NEEDED" and last is not None:
                    compare = False  # it keeps nothing before our end: ask from the end
                    continue
                if r.word in ("NOT_PRIMARY", "PERMISSION_DENIED"):
                    raise CatchUpError(f"{address} answered {r.word}: "
                                       + ("it is not a primary" if r.word == "NOT_PRIMARY"
                                          else "it refuses this standby: the same --replication-secret on "
                                          "both, or an ACL identity with `replicate = true`"))
        finally:
            if lg is not None:
                lg.close()
        if cut is not None:
            quarantine(directory, why, cut)
        elif r.word == "DIVERGED":
            cut = int(r.args[0])
            quarantine(directory, f"this server's log holds records past offset {cut} that the primary "
                        f"{address} never had (written before a failover)", cut)  # fmt: skip
        elif nxt or list_snapshots(os.path.join(directory, "snapshots")):
            quarantine(directory, f"the primary {address} no longer keeps the records after this "
                        f"server's log (offset {nxt})", None)  # fmt: skip
        elif lg is not None:
            shutil.rmtree(wal_dir)  # an empty log (no record, no snapshot): nothing to keep
        _fetch_snapshot(address, directory, segment_size, timeout, secret, on_end)
    raise CatchUpError(f"{address}: could not catch up after {_MAX_ROUNDS} attempts (is it compacting very fast?)")
