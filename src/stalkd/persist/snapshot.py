"""Snapshot files: every live job, written incrementally and atomically, and loaded fast.

File ``snap-<start seq, 20 digits>.snap`` (written as ``.tmp``, fsynced, then renamed). The frame
(header with magic and format version, CRC32C'd blocks, trailer with count, next_id, end_seq) is
``snapfile.py``; what a block holds is the format version's: ``snap_v1.py`` (row entries, one
``model`` JOB record each) and ``snap_v2.py`` (columnar blocks of one tube and state; versions 2
and 3, which is written).
A file without a complete, matching trailer is not a snapshot (a crash mid-write leaves only a
``.tmp`` that recovery deletes).

A snapshot is *fuzzy*: jobs are copied a chunk at a time while the engine keeps running, each
entry stamped (its ``seq``) with the engine's seq when that job was copied. Recovery replays WAL
records from ``start_offset`` and applies a record to a job only when its seq is greater than the
job's stamp (or than ``start_seq`` for jobs not in the snapshot). In an entry of a BURIED job,
``deadline_us`` is the seq of its bury: it orders the buried FIFO.

How to change the format (numbered, append to it):
  1. Bump ``SNAP_VERSION``, keep every older reader, add a reader for the new version beside them.
  2. Add ``tests/engine/test_snapshot_vN.py`` with a frozen file image of the new version.
  3. (v2) A version's block codec and loader live in ``snap_vN.py``; ``snapfile.KNOWN_VERSIONS``
     lists the versions read, and ``load_into`` / ``read_snapshot`` / ``iter_jobs`` dispatch on
     the header's version. The writer writes ``SNAP_VERSION`` (``version=`` older ones, for tests).
  4. (v3) Version 2's blocks behind a header that also lists the log's epochs (``snapfile``):
     promotions before the snapshot's start survive the compaction of the WAL that recorded them.

Ensures: ``read_snapshot(path)`` either returns every entry written with its trailer, or raises
SnapshotError naming the file and byte offset; it never returns a partial snapshot.

Snapshots are written in version 3; ``snap_v1`` is imported only where a version 1 file is read
or written, not by every server with a data directory, and ``snap_v2`` where a later one is (a
writer, a reader): a server whose directory holds no snapshot answers without it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from stalkd.engine.model import JobState, Record, decode
from stalkd.engine.objects import Job, job_body
from stalkd.log.fs import REAL, FileSystem
from stalkd.persist.snapfile import (
    JobTuple,
    SnapshotError,
    SnapshotHeader,
    block_bytes,
    head_bytes,
    read_header,
    trailer_bytes,
)

if TYPE_CHECKING:
    from stalkd.engine.engine import Engine
    from stalkd.engine.objects import Tube

__all__ = [
    "JobTuple", "SNAP_VERSION", "SnapshotError", "SnapshotHeader", "SnapshotWriter", "capture_order",
    "iter_jobs", "list_snapshots", "load_into", "read_header", "read_snapshot", "snapshot_gap",
    "snapshot_name",
]  # fmt: skip

SNAP_VERSION = 3
_READY, _RESERVED = JobState.READY, JobState.RESERVED


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


def capture_order(e: Engine) -> list[Job]:
    """Every live job, in the order a snapshot should copy them: per tube its ready heap and its
    delay heap in heap-array order, then its buried FIFO; then each connection's reserved jobs.
    Loading a snapshot written in this order while nothing moved needs no heap reordering.
    Only list copies (C speed): it runs on the loop thread when a snapshot begins.

    >>> from stalkd.protocol.commands import Put
    >>> from stalkd.engine.engine import Engine
    >>> e = Engine(); e.connect(1, 0.0)
    >>> for pri in (5, 1, 3): _ = e.apply(1, Put(pri, 0, 60, b""), 0.0)
    >>> [j.pri for j in capture_order(e)]
    [1, 5, 3]
    """
    out: list[Job] = []
    for t in e.tube_order:
        t.ready.append_items_to(out)
        t.delayed.append_items_to(out)
        out.extend(t.buried.values())
    for c in e.holders():
        c.reserved.append_items_to(out)
    if len(out) != len(e.jobs):  # pragma: no cover - every job is in exactly one container
        return list(e.jobs.values())
    return out


def _group_jobs(jobs: list[Job]) -> dict[tuple[Tube, JobState], list[Job]]:
    """``jobs`` by (tube, state), each group in the jobs' order; a reserved job counts as ready
    (it comes back ready). Consecutive jobs mostly share a group (capture order): one lookup
    per run of them."""
    groups: dict[tuple[Tube, JobState], list[Job]] = {}
    last_t: Tube | None = None
    last_st: JobState | None = None
    cur: list[Job] = []
    for j in jobs:
        st = j.state
        if st is _RESERVED:
            st = _READY
        t = j.tube
        if t is not last_t or st is not last_st:
            cur = groups.setdefault((t, st), [])
            last_t, last_st = t, st
        cur.append(j)
    return groups


def _job_columns(jobs: list[Job], ready: bool) -> tuple[
    list[int], list[int], list[int], list[int], list[int], list[int], list[bytes], list[tuple[int, int, int, int, int, int]]
]:  # fmt: skip
    """A snapshot block's columns of ``jobs``, in one pass: ids, priorities, delays, TTRs,
    creation times, deadlines (0 when ``ready``: a ready job keeps none), bodies, and a row
    (index, reserves, timeouts, releases, buries, kicks) per job with any counter set.
    Compiled (snapshot.pxd) every field is read at its offset in the job."""
    ids: list[int] = []
    pris: list[int] = []
    delays: list[int] = []
    ttrs: list[int] = []
    created: list[int] = []
    deadlines: list[int] = []
    bodies: list[bytes] = []
    counters: list[tuple[int, int, int, int, int, int]] = []
    for i in range(len(jobs)):  # (compiled: a C loop, each job read once as a Job)
        j = jobs[i]
        ids.append(j.id)
        pris.append(j.pri)
        delays.append(j.delay)
        ttrs.append(j.ttr)
        created.append(j.created_us)
        deadlines.append(0 if ready else j.deadline_us)
        bodies.append(job_body(j))
        if j.reserves or j.timeouts or j.releases or j.buries or j.kicks:
            counters.append((i, j.reserves, j.timeouts, j.releases, j.buries, j.kicks))
    return ids, pris, delays, ttrs, created, deadlines, bodies, counters


class SnapshotWriter:
    """Write one snapshot: ``add_jobs`` (or ``add``) entries in any number of calls, then ``finish``.

    Every file call goes through ``fs`` (crash tests stop it at a chosen call with a
    :class:`~stalkd.log.fs.Faults`). ``version`` is the format written (older ones only for their tests).

    >>> import tempfile
    >>> from stalkd.engine.model import Record, Op
    >>> d = tempfile.mkdtemp()
    >>> w = SnapshotWriter(d, start_seq=5, start_offset=9)
    >>> w.add([Record(Op.JOB, 5, 0, 1, "t", body=b"x")]); p = w.finish(next_id=2, end_seq=5)
    >>> h, recs = read_snapshot(p); (h.count, h.version, [r.job_id for r in recs])
    (1, 3, [1])
    """

    def __init__(
        self,
        directory: str,
        start_seq: int,
        start_offset: int,
        version: int = SNAP_VERSION,
        reserve: str | None = None,
        fs: FileSystem = REAL,
        epochs: tuple[tuple[int, int], ...] = (),
    ) -> None:
        if version not in (1, 2, 3):
            raise ValueError(f"snapshot version {version} cannot be written (1, 2 or 3)")
        self.directory = directory
        self.fs = fs
        self.version = version
        self.final = os.path.join(directory, snapshot_name(start_seq))
        self.tmp = self.final + ".tmp"
        self._head = head_bytes(version, start_seq, start_offset, epochs)
        from stalkd.persist.snap_v2 import encode_block

        self._encode_block = encode_block
        self.count = 0
        self.bytes = 0
        fs.makedirs(directory)
        # ``reserve``: a preallocated file renamed into place, so this snapshot writes into
        # blocks it already owns (a full disk, where no other room is left); cut to size at finish.
        self._reserved = False
        if reserve is not None:
            try:
                fs.replace(reserve, self.tmp)
                self._reserved = True
            except FileNotFoundError:
                pass
        self._fd = fs.open(self.tmp, os.O_WRONLY, create=not self._reserved, truncate=not self._reserved)
        try:
            self._write(self._head)
        except BaseException:  # (a full disk): no caller holds this writer to abort it
            self.abort()
            raise

    def _write(self, data: bytes) -> None:
        self.fs.write_all(self._fd, data)
        self.bytes += len(data)

    def add(self, records: list[Record]) -> None:
        """Append JOB records (one chunk; a single write). In v2 a RESERVED record is stored as
        READY with deadline 0, and ``time_us`` reads back as ``created_us``."""
        if not records:
            return
        if self.version == 1:
            from stalkd.persist import snap_v1

            self._write(block_bytes(snap_v1.encode_records(records), len(records)))
            self.count += len(records)
            return
        groups: dict[tuple[int, str, JobState], list[Record]] = {}
        for r in records:
            st = _READY if r.state is _RESERVED else r.state
            groups.setdefault((r.seq, r.tube, st), []).append(r)
        out = []
        for (seq, tube, st), rs in groups.items():
            block = self._encode_block(
                seq, tube.encode("ascii"), st, [r.job_id for r in rs], [r.pri for r in rs],
                [r.delay for r in rs], [r.ttr for r in rs], [r.created_us for r in rs],
                [0 if st is _READY else r.deadline_us for r in rs], [r.body for r in rs],
                [(i, r.reserves, r.timeouts, r.releases, r.buries, r.kicks) for i, r in enumerate(rs)
                 if r.reserves or r.timeouts or r.releases or r.buries or r.kicks],
            )  # fmt: skip
            out.append(block_bytes(block, len(rs)))
        self.count += len(records)
        self._write(b"".join(out))

    def add_jobs(self, jobs: list[Job], seq: int) -> None:
        """Append live jobs as entries stamped ``seq`` (the loop-thread hot path: columns are
        gathered straight from the jobs, without a Record per job). Jobs keep their order
        within each (tube, state) block, so ``capture_order``'s heap order reaches the file."""
        if not jobs:
            return
        if self.version == 1:
            from stalkd.persist import snap_v1

            self._write(block_bytes(snap_v1.encode_jobs(jobs, seq), len(jobs)))
            self.count += len(jobs)
            return
        out = []
        for (t, st), js in _group_jobs(jobs).items():
            ids, pris, delays, ttrs, created, deadlines, bodies, counters = _job_columns(js, st is _READY)
            block = self._encode_block(seq, t.name.encode("ascii"), st, ids, pris, delays, ttrs, created,
                                       deadlines, bodies, counters)  # fmt: skip
            out.append(block_bytes(block, len(js)))
        self.count += len(jobs)
        self._write(b"".join(out))

    def finish(self, next_id: int, end_seq: int) -> str:
        """Trailer, fsync, atomic rename, directory fsync; returns the final path."""
        self._write(trailer_bytes(self._head, self.count, next_id, end_seq))
        if self._reserved:
            os.ftruncate(self._fd, self.bytes)
        self.fs.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self.fs.replace(self.tmp, self.final)
        self.fs.fsync_dir(self.directory)
        return self.final

    def abort(self) -> None:
        """Drop the unfinished file (an error or shutdown mid-snapshot)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        with contextlib.suppress(FileNotFoundError):
            self.fs.unlink(self.tmp)


@contextlib.contextmanager
def _mapped(path: str) -> Iterator[mmap.mmap]:
    """The whole file, read-only and mapped (no copy: bodies are sliced out of the page cache)."""
    fd = REAL.open_read(path)
    try:
        m = mmap.mmap(fd, 0, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    with m:
        yield m


def read_snapshot(path: str) -> tuple[SnapshotHeader, list[Record]]:
    """Header and all entries as Records (the general, slower reader; any known version).

    >>> import tempfile
    >>> from stalkd.engine.model import Record, Op
    >>> w = SnapshotWriter(tempfile.mkdtemp(), 1, 0); w.add([Record(Op.JOB, 1, 0, 3, "t")])
    >>> read_snapshot(w.finish(4, 1))[1][0].job_id
    3
    """
    h = read_header(path)
    with _mapped(path) as m:
        if h.version == 1:
            from stalkd.persist import snap_v1

            return h, [decode(p) for p in snap_v1.iter_payloads(m, h)]
        from stalkd.persist import snap_v2

        return h, list(snap_v2.records(m, h))


def iter_jobs(path: str, header: SnapshotHeader) -> Iterator[JobTuple]:
    """Entries as plain tuples (see ``JobTuple``), in file order."""
    with _mapped(path) as m:
        if header.version == 1:
            from stalkd.persist import snap_v1

            yield from snap_v1.iter_jobs(m, header)
            return
        from stalkd.persist import snap_v2

        for r in snap_v2.records(m, header):
            yield (r.seq, r.job_id, r.tube, r.pri, r.delay, r.ttr, r.deadline_us, r.body, r.state,
                   r.created_us, r.reserves, r.timeouts, r.releases, r.buries, r.kicks)  # fmt: skip


def load_into(e: Engine, h: SnapshotHeader) -> dict[int, int]:
    """Load a snapshot's jobs into an empty engine (recovery's hot path: ``bench/engine_bench.py``).
    Returns {job id: copy seq} for jobs copied after the snapshot began: their WAL records up to
    that seq are already in the snapshot. Call ``replay.finish`` after the WAL tail.
    """
    e.epochs = h.epochs
    with _mapped(h.path) as m:
        if h.version == 1:
            from stalkd.persist import snap_v1

            return snap_v1.load_into(e, m, h)
        from stalkd.persist import snap_v2

        return snap_v2.load_into(e, m, h)


def snapshot_gap(header: SnapshotHeader | None, oldest: int, next_offset: int, log_path: str) -> str | None:
    """Why the WAL in ``log_path`` (offsets ``oldest`` .. ``next_offset``) cannot serve the
    snapshot ``header`` (None: no snapshot), or None when it can.

    >>> snapshot_gap(None, 0, 10, "d/wal") is None
    True
    """
    need = header.start_offset if header else 0
    if oldest > need:
        return (f"{log_path}: the WAL starts at offset {oldest} but "
                + (f"snapshot {header.path} needs records from offset {need}" if header
                   else "no complete snapshot exists to cover the records before it"))  # fmt: skip
    if header is not None and next_offset < need:
        return (f"{log_path}: the WAL ends at offset {next_offset} but snapshot {header.path} was taken "
                f"when it had reached offset {need}: records the log had written are missing "
                f"(a segment file removed or cut short)")  # fmt: skip
    return None
