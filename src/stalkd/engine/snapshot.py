"""Snapshot files: every live job as a ``model`` JOB record, written incrementally and atomically.

File ``snap-<start seq, 20 digits>.snap`` (written as ``.tmp``, fsynced, then renamed):
  header   8s magic ``STKSNAP\\0`` | u16 format version (1) | u64 start_seq | u64 start_offset
  blocks   u32 block length | u32 CRC32C(block) | u32 entry count | block, where the block is
           entries of u32 payload length | payload (``model.encode`` of an Op.JOB record)
           (one CRC per block of jobs: checking it is one C call, not one per job)
  trailer  u32 0xFFFFFFFF | u64 entry count | u64 next_id | u64 end_seq | u32 CRC32C(header+trailer fields)
A file without a complete, matching trailer is not a snapshot (a crash mid-write leaves only a
``.tmp`` that recovery deletes).

A snapshot is *fuzzy*: jobs are copied a chunk at a time while the engine keeps running, each
entry stamped (in its record ``seq``) with the engine's seq when that job was copied. Recovery
replays WAL records from ``start_offset`` and applies a record to a job only when its seq is
greater than the job's stamp (or than ``start_seq`` for jobs not in the snapshot). In a JOB
entry of a BURIED job, ``deadline_us`` is the seq of its bury: it orders the buried FIFO.

How to change the format (numbered, append to it):
  1. Bump ``SNAP_VERSION``, keep ``_read_v1``, add a reader for the new version beside it.
  2. Add ``tests/engine/test_snapshot_vN.py`` with a frozen file image of the new version.

Ensures: ``read_snapshot(path)`` either returns every entry written with its trailer, or raises
SnapshotError naming the file and byte offset; it never returns a partial snapshot.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from crc32c import crc32c

from stalkd.engine.job import URGENT_THRESHOLD, Job
from stalkd.engine.model import FORMAT_VERSION, HEADER_SIZE, JobState, Op, Record, decode, encode

if TYPE_CHECKING:
    from stalkd.engine.engine import Engine
    from stalkd.engine.tube import Tube

__all__ = [
    "SNAP_VERSION", "SnapshotError", "SnapshotHeader", "SnapshotWriter", "list_snapshots",
    "load_into", "read_snapshot", "snapshot_name",
]  # fmt: skip

SNAP_VERSION = 1
_MAGIC = b"STKSNAP\0"
_HEAD = struct.Struct("<8sHQQ")
_BLOCK = struct.Struct("<III")
_TRAIL = struct.Struct("<IQQQI")
_END_MARK = 0xFFFFFFFF
# Fast path over the v1 JOB layout (see model.py): header, then the JOB fixed part.
_JOB_HEAD = struct.Struct("<BBQqQBIIIqqIIIIIH")
_U32 = struct.Struct("<I")


class SnapshotError(ValueError):
    """A snapshot file that is incomplete or corrupt (the message names the file and offset)."""


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    """What a complete snapshot file says about itself."""

    path: str
    start_seq: int
    start_offset: int
    count: int
    next_id: int
    end_seq: int


def snapshot_name(start_seq: int) -> str:
    """The file name of the snapshot that starts at ``start_seq``.

    >>> snapshot_name(42)
    'snap-00000000000000000042.snap'
    """
    return f"snap-{start_seq:020d}.snap"


def list_snapshots(directory: str) -> list[str]:
    """Complete-looking snapshot paths, newest (highest start seq) first."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    snaps = sorted((n for n in names if n.startswith("snap-") and n.endswith(".snap")), reverse=True)
    return [os.path.join(directory, n) for n in snaps]


class SnapshotWriter:
    """Write one snapshot: ``add`` entries in any number of calls, then ``finish``.

    ``fault`` is called with a step name before each step (crash-injection tests raise there).

    >>> import tempfile
    >>> from stalkd.engine.model import Record, Op
    >>> d = tempfile.mkdtemp()
    >>> w = SnapshotWriter(d, start_seq=5, start_offset=9)
    >>> w.add([Record(Op.JOB, 5, 0, 1, "t", body=b"x")]); p = w.finish(next_id=2, end_seq=5)
    >>> h, recs = read_snapshot(p); (h.count, [r.job_id for r in recs])
    (1, [1])
    """

    def __init__(
        self,
        directory: str,
        start_seq: int,
        start_offset: int,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        self.directory = directory
        self.final = os.path.join(directory, snapshot_name(start_seq))
        self.tmp = self.final + ".tmp"
        self._fault = fault or (lambda step: None)
        self._head = _HEAD.pack(_MAGIC, SNAP_VERSION, start_seq, start_offset)
        self.count = 0
        self.bytes = 0
        self._fault("snapshot-open")
        os.makedirs(directory, exist_ok=True)
        self._fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._write(self._head)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self.bytes += len(data)

    def add(self, records: list[Record]) -> None:
        """Append JOB records (one chunk; a single write)."""
        self._fault("snapshot-chunk")
        if not records:
            return
        parts = []
        pack = _U32.pack
        for r in records:
            p = encode(r)
            parts.append(pack(len(p)))
            parts.append(p)
        block = b"".join(parts)
        self.count += len(records)
        self._write(_BLOCK.pack(len(block), crc32c(block), len(records)) + block)

    def add_jobs(self, jobs: list[Job], seq: int) -> None:
        """Append live jobs as JOB entries stamped ``seq`` (the loop-thread hot path: packs the
        v1 layout straight from the jobs, byte for byte what ``encode(durable_record(j, seq))``
        gives, without building a Record per job)."""
        self._fault("snapshot-chunk")
        if not jobs:
            return
        parts: list[bytes] = []
        add = parts.append
        head = _JOB_HEAD.pack
        u32 = _U32.pack
        version, op = FORMAT_VERSION, int(Op.JOB)
        reserved = JobState.RESERVED
        names: dict[str, bytes] = {}
        for j in jobs:
            name = j.tube.name
            tb = names.get(name)
            if tb is None:
                tb = names[name] = name.encode("ascii")
            st, deadline = j.state, j.deadline_us
            if st is reserved:  # a reserved job comes back ready
                st, deadline = JobState.READY, 0
            body = j.body
            fixed = head(version, op, seq, j.created_us, j.id, st, j.pri, j.delay, j.ttr, j.created_us,
                         deadline, j.reserves, j.timeouts, j.releases, j.buries, j.kicks, len(tb))  # fmt: skip
            add(u32(len(fixed) + len(tb) + 4 + len(body)))
            add(fixed)
            add(tb)
            add(u32(len(body)))
            add(body)
        block = b"".join(parts)
        self.count += len(jobs)
        self._write(_BLOCK.pack(len(block), crc32c(block), len(jobs)) + block)

    def finish(self, next_id: int, end_seq: int) -> str:
        """Trailer, fsync, atomic rename, directory fsync; returns the final path."""
        self._fault("snapshot-trailer")
        fields = (_END_MARK, self.count, next_id, end_seq)
        crc = crc32c(self._head + struct.pack("<IQQQ", *fields))
        self._write(_TRAIL.pack(*fields, crc))
        self._fault("snapshot-fsync")
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self._fault("snapshot-rename")
        os.replace(self.tmp, self.final)
        self._fault("snapshot-dirsync")
        fsync_dir(self.directory)
        return self.final

    def abort(self) -> None:
        """Drop the unfinished file (an error or shutdown mid-snapshot)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_header(path: str) -> SnapshotHeader:
    """Check the header and trailer (not the entries); SnapshotError if incomplete."""
    with open(path, "rb") as f:
        head = f.read(_HEAD.size)
        if len(head) < _HEAD.size:
            raise SnapshotError(f"{path}: {len(head)}-byte file is shorter than the snapshot header")
        magic, version, start_seq, start_offset = _HEAD.unpack(head)
        if magic != _MAGIC:
            raise SnapshotError(f"{path}: offset 0: not a stalkd snapshot (magic {magic!r})")
        if version != SNAP_VERSION:
            raise SnapshotError(f"{path}: offset 8: snapshot version {version} is unknown (this build reads 1)")
        size = f.seek(0, os.SEEK_END)
        if size < _HEAD.size + _TRAIL.size:
            raise SnapshotError(f"{path}: {size} bytes: no trailer (incomplete snapshot)")
        f.seek(size - _TRAIL.size)
        mark, count, next_id, end_seq, crc = _TRAIL.unpack(f.read(_TRAIL.size))
    if mark != _END_MARK or crc != crc32c(head + struct.pack("<IQQQ", mark, count, next_id, end_seq)):
        raise SnapshotError(f"{path}: offset {size - _TRAIL.size}: bad trailer (incomplete or corrupt snapshot)")
    return SnapshotHeader(path, start_seq, start_offset, count, next_id, end_seq)


def iter_payloads(path: str, header: SnapshotHeader) -> Iterator[memoryview]:
    """Each entry's payload, CRC-checked a block at a time; SnapshotError at the first bad block."""
    for buf, pos, end in _blocks(path, header):
        while pos < end:
            (n,) = _U32.unpack_from(buf, pos)
            yield memoryview(buf)[pos + 4 : pos + 4 + n]
            pos += 4 + n


def _blocks(path: str, header: SnapshotHeader) -> Iterator[tuple[bytes, int, int]]:
    """(file bytes, block start, block end) per CRC-checked block. Entries are sliced from the
    ``bytes`` object (one allocation per slice) rather than from a memoryview (two)."""
    with open(path, "rb") as f:
        data = f.read()
    buf = memoryview(data)
    pos = _HEAD.size
    end = len(data) - _TRAIL.size
    n = 0
    while pos < end:
        if pos + _BLOCK.size > end:
            raise SnapshotError(f"{path}: offset {pos}: truncated block header")
        length, crc, count = _BLOCK.unpack_from(buf, pos)
        start = pos + _BLOCK.size
        if start + length > end or crc32c(buf[start : start + length]) != crc:
            raise SnapshotError(f"{path}: offset {pos}: block of {count} jobs fails its CRC")
        yield data, start, start + length
        pos = start + length
        n += count
    if n != header.count:
        raise SnapshotError(f"{path}: {n} entries but the trailer says {header.count}")


def read_snapshot(path: str) -> tuple[SnapshotHeader, list[Record]]:
    """Header and all entries as Records (the general, slower reader; see ``iter_jobs`` for speed)."""
    h = read_header(path)
    return h, [decode(p) for p in iter_payloads(path, h)]


JobTuple = tuple[int, int, str, int, int, int, int, bytes, JobState, int, int, int, int, int, int]
"""(seq, job_id, tube, pri, delay, ttr, deadline_us, body, state, created_us,
reserves, timeouts, releases, buries, kicks)"""


def iter_jobs(path: str, header: SnapshotHeader) -> Iterator[JobTuple]:
    """Entries as plain tuples, parsing the v1 JOB layout directly (recovery's hot path)."""
    unpack = _JOB_HEAD.unpack_from
    u32 = _U32.unpack_from
    tubes: dict[bytes, str] = {}
    states = {s.value: s for s in JobState}
    fixed = _JOB_HEAD.size
    for buf, pos, end in _blocks(path, header):
        while pos < end:
            (n,) = u32(buf, pos)
            p0 = pos + 4
            pos = p0 + n
            if buf[p0] != FORMAT_VERSION or buf[p0 + 1] != Op.JOB or n < fixed:
                r = decode(buf[p0:pos])
                if r.op is not Op.JOB:
                    raise SnapshotError(f"{path}: entry for job {r.job_id} is a {r.op.name} record, not JOB")
                yield (r.seq, r.job_id, r.tube, r.pri, r.delay, r.ttr, r.deadline_us, r.body, r.state,
                       r.created_us, r.reserves, r.timeouts, r.releases, r.buries, r.kicks)  # fmt: skip
                continue
            (_, _, seq, _, jid, state, pri, delay, ttr, created, deadline,
             res, tos, rel, bur, kic, tlen) = unpack(buf, p0)  # fmt: skip
            t0 = p0 + fixed
            tb = buf[t0 : t0 + tlen]
            tube = tubes.get(tb)
            if tube is None:
                tube = tubes[tb] = tb.decode("ascii")
            b0 = t0 + tlen
            (blen,) = u32(buf, b0)
            if b0 + 4 + blen != pos:
                raise SnapshotError(f"{path}: job {jid}: body length {blen} does not match its entry")
            yield (seq, jid, tube, pri, delay, ttr, deadline, buf[b0 + 4 : pos], states[state],
                   created, res, tos, rel, bur, kic)  # fmt: skip


def load_into(e: Engine, h: SnapshotHeader) -> dict[int, int]:
    """Load a snapshot's jobs into an empty engine (recovery's hot path: the v1 JOB layout is
    parsed inline, ~2 us a job). Returns {job id: copy seq} for jobs copied after the snapshot
    began: their WAL records up to that seq are already in the snapshot.
    """
    unpack = _JOB_HEAD.unpack_from
    u32 = _U32.unpack_from
    fixed = _JOB_HEAD.size
    job_op = int(Op.JOB)
    READY, DELAYED, BURIED = JobState.READY, JobState.DELAYED, JobState.BURIED
    tubes: dict[bytes, Tube] = {}
    # per tube: [ready keys, ready jobs, delay keys, delayed jobs]
    lists: dict[Tube, tuple[list[int], list[Job], list[int], list[Job]]] = {}
    fresh: dict[int, int] = {}
    jobs = e.jobs
    start = h.start_seq
    body_bytes = 0
    last_tube = b""
    rkeys: list[int] = []
    rjobs: list[Job] = []
    dkeys: list[int] = []
    djobs: list[Job] = []
    for buf, pos, end in _blocks(h.path, h):
        while pos < end:
            (n,) = u32(buf, pos)
            p0 = pos + 4
            pos = p0 + n
            if buf[p0] != FORMAT_VERSION or buf[p0 + 1] != job_op or n < fixed:
                r = decode(buf[p0:pos])  # another version or op: the general reader decides
                if r.op is not Op.JOB:
                    raise SnapshotError(f"{h.path}: offset {p0}: a {r.op.name} record, not JOB")
                seq, jid, tb, pri, delay, ttr, deadline, body = (
                    r.seq, r.job_id, r.tube.encode(), r.pri, r.delay, r.ttr, r.deadline_us, r.body)
                st, created = int(r.state), r.created_us
                res, tos, rel, bur, kic = r.reserves, r.timeouts, r.releases, r.buries, r.kicks
            else:
                (_, _, seq, _, jid, st, pri, delay, ttr, created, deadline,
                 res, tos, rel, bur, kic, tlen) = unpack(buf, p0)  # fmt: skip
                t0 = p0 + fixed
                tb = buf[t0 : t0 + tlen]
                b0 = t0 + tlen
                if u32(buf, b0)[0] != pos - b0 - 4:
                    raise SnapshotError(f"{h.path}: offset {p0}: job {jid}'s body length does not match its entry")
                body = buf[b0 + 4 : pos]
            t = tubes.get(tb)
            if t is None:
                t = tubes[tb] = e._tube(tb.decode("ascii"))
                lists[t] = ([], [], [], [])
                rkeys, rjobs, dkeys, djobs = lists[t]
                last_tube = tb
            elif tb != last_tube:
                rkeys, rjobs, dkeys, djobs = lists[t]
                last_tube = tb
            j = Job(jid, t, pri, delay, ttr, body, READY, created)
            if res or tos or rel or bur or kic:
                j.reserves, j.timeouts, j.releases, j.buries, j.kicks = res, tos, rel, bur, kic
            jobs[jid] = j
            body_bytes += len(body)
            if seq > start:
                fresh[jid] = seq
            if st == 1 or st == 2:  # READY, or RESERVED (comes back ready)
                rkeys.append((pri << 64) | jid)  # heap.pack, inlined
                rjobs.append(j)
                if pri < URGENT_THRESHOLD:
                    t.urgent += 1
            elif st == 4:
                j.state = DELAYED
                j.deadline_us = deadline
                dkeys.append((deadline << 64) | jid)
                djobs.append(j)
            elif st == 3:
                j.state = BURIED
                j.deadline_us = deadline
                t.buried[jid] = j
            else:
                raise SnapshotError(f"{h.path}: offset {p0}: job {jid} has unknown state {st}")
    if len(jobs) != h.count:
        raise SnapshotError(f"{h.path}: {h.count} entries but {len(jobs)} distinct job ids")
    for t, (rk, rj, dk, dj) in lists.items():
        t.ready.load(rk, rj)
        t.delayed.load(dk, dj)
        e._retime_tube(t)
    e.body_bytes += body_bytes
    e.next_id = max(e.next_id, max(jobs, default=0) + 1)
    return fresh


assert _JOB_HEAD.size == HEADER_SIZE + 51  # the v1 JOB fixed part (model.py)
