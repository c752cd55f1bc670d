"""A snapshot file's frame, shared by every format version: header, CRC'd blocks, trailer.

  header   8s magic ``STKSNAP\\0`` | u16 format version | u64 start_seq | u64 start_offset
           (v3: then u32 n | n x (u64 epoch | u64 first offset), the epochs the log went through
           before start_offset, so compaction never drops them with the WAL that held them)
  blocks   u32 block length | u32 CRC32C(block) | u32 entry count | block
           (what a block holds depends on the version: ``snap_v1.py``, ``snap_v2.py``)
  trailer  u32 0xFFFFFFFF | u64 entry count | u64 next_id | u64 end_seq | u32 CRC32C(header+trailer fields)

Ensures: ``read_header`` returns only for a file with a known version and a complete, matching
trailer; ``blocks`` yields only blocks whose CRC matches, and raises SnapshotError naming the file
and byte offset at the first one that does not, or if the entry counts do not add up to the
trailer's.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from typing import TYPE_CHECKING

from stalkd.engine.model import JobState
from stalkd.log.crc import crc32c
from stalkd.log.fs import REAL
from stalkd.values import Value

if TYPE_CHECKING:
    from stalkd.engine.engine import Engine
    from stalkd.engine.jobtable import JobTable
    from stalkd.engine.objects import Job, Tube

__all__ = [
    "BLOCK", "HEAD", "Buf", "JobTuple", "KNOWN_VERSIONS", "MAGIC", "SnapshotError", "SnapshotHeader", "TRAIL",
    "blocks", "head_bytes", "install", "read_header", "trailer_bytes",
]  # fmt: skip

MAGIC = b"STKSNAP\0"
HEAD = struct.Struct("<8sHQQ")
EPOCHS = struct.Struct("<I")  # v3: how many (epoch, first offset) pairs follow the header
EPOCH_PAIR = struct.Struct("<QQ")
BLOCK = struct.Struct("<III")
TRAIL = struct.Struct("<IQQQI")
_TRAIL_FIELDS = struct.Struct("<IQQQ")
END_MARK = 0xFFFFFFFF
KNOWN_VERSIONS = (1, 2, 3)  # 3: version 2's blocks behind a header with the epochs
JobTuple = tuple[int, int, str, int, int, int, int, bytes, JobState, int, int, int, int, int, int]
"""An entry of any version as a plain tuple: (seq, job_id, tube, pri, delay, ttr, deadline_us, body, state, created_us,
reserves, timeouts, releases, buries, kicks)"""
Buf = bytes | mmap.mmap  # a whole snapshot file: read, or mapped read-only


class SnapshotError(ValueError):
    """A snapshot file that is incomplete or corrupt (the message names the file and offset)."""


class SnapshotHeader(Value):
    """What a complete snapshot file says about itself."""

    __slots__ = ("path", "start_seq", "start_offset", "count", "next_id", "end_seq", "version", "epochs",
                 "blocks_at")  # fmt: skip
    path: str
    start_seq: int
    start_offset: int
    count: int
    next_id: int
    end_seq: int
    version: int
    epochs: tuple[tuple[int, int], ...]  # (epoch, first log offset), oldest first (v3)
    blocks_at: int  # where the first block starts

    def __init__(self, path: str, start_seq: int, start_offset: int, count: int, next_id: int, end_seq: int,
                 version: int = KNOWN_VERSIONS[-1], epochs: tuple[tuple[int, int], ...] = (),
                 blocks_at: int = HEAD.size) -> None:  # fmt: skip
        self.path = path
        self.start_seq = start_seq
        self.start_offset = start_offset
        self.count = count
        self.next_id = next_id
        self.end_seq = end_seq
        self.version = version
        self.epochs = epochs
        self.blocks_at = blocks_at


def head_bytes(version: int, start_seq: int, start_offset: int, epochs: tuple[tuple[int, int], ...] = ()) -> bytes:
    """A file's header (see ``read_header`` for a whole file built from these pieces);
    ``epochs`` only from version 3 on."""
    head = HEAD.pack(MAGIC, version, start_seq, start_offset)
    if version < 3:
        if epochs:
            raise ValueError(f"snapshot version {version} cannot hold epochs")
        return head
    return head + EPOCHS.pack(len(epochs)) + b"".join(EPOCH_PAIR.pack(e, o) for e, o in epochs)


def trailer_bytes(head: bytes, count: int, next_id: int, end_seq: int) -> bytes:
    """A file's trailer; its CRC covers ``head`` too, so a trailer fits one header only."""
    fields = (END_MARK, count, next_id, end_seq)
    return TRAIL.pack(*fields, crc32c(head + _TRAIL_FIELDS.pack(*fields)))


def block_bytes(block: bytes, count: int) -> bytes:
    """One block with its length, CRC and entry count in front."""
    return BLOCK.pack(len(block), crc32c(block), count) + block


def read_header(path: str) -> SnapshotHeader:
    """Check the header and trailer (not the entries); SnapshotError if incomplete.

    >>> import os, tempfile
    >>> head = head_bytes(2, 7, 3)
    >>> path = os.path.join(tempfile.mkdtemp(), "snap-x.snap")
    >>> with open(path, "wb") as f:
    ...     _ = f.write(head + block_bytes(b"", 0) + trailer_bytes(head, 0, 1, 7))
    >>> h = read_header(path); (h.version, h.start_seq, h.count, h.end_seq)
    (2, 7, 0, 7)
    >>> from pathlib import Path
    >>> list(blocks(Path(path).read_bytes(), h))
    [(38, 38, 0)]
    """
    with os.fdopen(REAL.open_read(path), "rb") as f:
        head = f.read(HEAD.size)
        if len(head) < HEAD.size:
            raise SnapshotError(f"{path}: {len(head)}-byte file is shorter than the snapshot header")
        magic, version, start_seq, start_offset = HEAD.unpack(head)
        if magic != MAGIC:
            raise SnapshotError(f"{path}: offset 0: not a stalkd snapshot (magic {magic!r})")
        if version not in KNOWN_VERSIONS:
            known = ", ".join(map(str, KNOWN_VERSIONS))
            raise SnapshotError(f"{path}: offset 8: snapshot version {version} is unknown (this build reads {known})")
        epochs: tuple[tuple[int, int], ...] = ()
        if version >= 3:
            more = f.read(EPOCHS.size)
            n = EPOCHS.unpack(more)[0] if len(more) == EPOCHS.size else -1
            pairs = f.read(n * EPOCH_PAIR.size) if n >= 0 else b""
            if n < 0 or len(pairs) != n * EPOCH_PAIR.size:
                raise SnapshotError(f"{path}: offset {HEAD.size}: truncated epoch list in the header")
            head += more + pairs
            epochs = tuple((int(e), int(o)) for e, o in EPOCH_PAIR.iter_unpack(pairs))
        size = f.seek(0, os.SEEK_END)
        if size < len(head) + TRAIL.size:
            raise SnapshotError(f"{path}: {size} bytes: no trailer (incomplete snapshot)")
        f.seek(size - TRAIL.size)
        mark, count, next_id, end_seq, crc = TRAIL.unpack(f.read(TRAIL.size))
    if mark != END_MARK or crc != crc32c(head + _TRAIL_FIELDS.pack(mark, count, next_id, end_seq)):
        raise SnapshotError(f"{path}: offset {size - TRAIL.size}: bad trailer (incomplete or corrupt snapshot)")
    return SnapshotHeader(path, start_seq, start_offset, count, next_id, end_seq, version, epochs, len(head))


def _crc(buf: Buf, start: int, end: int) -> int:
    # A view only for the call: a view alive across a ``yield`` would keep the caller's mmap
    # from closing (BufferError) if the caller stops early.
    with memoryview(buf) as view:
        return crc32c(view[start:end])


def blocks(buf: Buf, header: SnapshotHeader) -> Iterator[tuple[int, int, int]]:
    """(block start, block end, entry count) of each CRC-checked block of the whole file ``buf``
    (bytes or a read-only mmap)."""
    path = header.path
    pos = header.blocks_at
    end = len(buf) - TRAIL.size
    n = 0
    while pos < end:
        if pos + BLOCK.size > end:
            raise SnapshotError(f"{path}: offset {pos}: truncated block header")
        length, crc, count = BLOCK.unpack_from(buf, pos)
        start = pos + BLOCK.size
        if start + length > end or _crc(buf, start, start + length) != crc:
            raise SnapshotError(f"{path}: offset {pos}: block of {count} jobs fails its CRC")
        yield start, start + length, count
        pos = start + length
        n += count
    if n != header.count:
        raise SnapshotError(f"{path}: {n} entries but the trailer says {header.count}")


def install(e: Engine, h: SnapshotHeader, jobs: JobTable,
            lists: dict[Tube, tuple[list[int], list[Job], list[int], list[Job]]],
            body_bytes: int) -> None:
    """The end of every version's load: check the count, build each tube's ready and delay
    heaps from (key, job) lists, and account the loaded jobs in the engine."""
    if len(jobs) != h.count:
        raise SnapshotError(f"{h.path}: {h.count} entries but {len(jobs)} distinct job ids")
    for t, (rk, rj, dk, dj) in lists.items():
        t.ready.load(rk, rj)
        t.delayed.load(dk, dj)
        e.retime_tube(t)
    e.body_bytes += body_bytes
    e.next_id = max(e.next_id, max(jobs, default=0) + 1)
