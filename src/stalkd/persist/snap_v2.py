"""Snapshot format version 2: a block holds jobs of one tube, one state and one copy seq, columnar.

  block    u64 seq | u8 state | u16 tube_len | tube (ascii), then, for the block's n entries:
           n x u64 id | n x u32 pri | n x u32 delay | n x u32 ttr | n x u32 body length |
           n x i64 created_us | n x i64 deadline_us |
           u32 k | k x (u32 index, u32 reserves, u32 timeouts, u32 releases, u32 buries, u32 kicks) |
           the n bodies, concatenated
  (little-endian; ``state`` is READY 1, BURIED 3 or DELAYED 4: a reserved job is stored READY
  with deadline 0; only jobs with a non-zero counter get a counter row)

Why columnar: with v1's row entries, recovery spent most of its time in one ``struct`` call,
one tuple and a dozen Python steps per job (``bench/engine_bench.py --only recovery`` measures
it). Here each column is one C call per
block, jobs are built by ``map(Job, ...)`` over the columns, and the writer puts each tube's
ready and delay heaps in heap-array order (``snapshot.capture_order``), so a snapshot taken
while nothing moves loads into valid heaps with no reordering (``IndexedHeap.load``'s check).
A JOB entry's record ``time_us`` is its ``created_us`` (as ``replay.durable_record`` makes it).

Ensures: ``parse_block`` returns only columns whose lengths add up to the block exactly, with a
known state and counter rows inside the block; anything else raises SnapshotError naming the
file and offset.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator
from itertools import accumulate, pairwise
from typing import TYPE_CHECKING, NamedTuple

from stalkd.engine.heap import pack
from stalkd.engine.model import JobState, Op, Record
from stalkd.engine.objects import Job
from stalkd.persist.snapfile import BLOCK, Buf, SnapshotError, SnapshotHeader, blocks, install
from stalkd.persist.snapjobs import block_jobs

if TYPE_CHECKING:
    from stalkd.engine.engine import Engine
    from stalkd.engine.objects import Tube

__all__ = ["Columns", "encode_block", "iter_columns", "load_into", "records"]

_BHEAD = struct.Struct("<QBH")
_U32 = struct.Struct("<I")
_ROW = struct.Struct("<IIIIII")
_PER_JOB = 8 + 4 * 4 + 8 + 8  # fixed column bytes per job
_STATES = {1: JobState.READY, 3: JobState.BURIED, 4: JobState.DELAYED}


class Columns(NamedTuple):
    """One decoded block: per-job columns (tuples), counter rows, and where the bodies start."""

    seq: int
    state: JobState
    tube: bytes
    ids: tuple[int, ...]
    pris: tuple[int, ...]
    delays: tuple[int, ...]
    ttrs: tuple[int, ...]
    lens: tuple[int, ...]
    created: tuple[int, ...]
    deadlines: tuple[int, ...]
    counters: list[tuple[int, int, int, int, int, int]]
    body_start: int


@functools.lru_cache(maxsize=64)
def _cols(n: int) -> tuple[struct.Struct, struct.Struct, struct.Struct]:
    return struct.Struct(f"<{n}Q"), struct.Struct(f"<{n}I"), struct.Struct(f"<{n}q")


def encode_block(
    seq: int, tube: bytes, state: int, ids: list[int], pris: list[int], delays: list[int],
    ttrs: list[int], created: list[int], deadlines: list[int], bodies: list[bytes],
    counters: list[tuple[int, int, int, int, int, int]],
) -> bytes:  # fmt: skip
    """One block's bytes (without the length/CRC/count frame ``snapfile.block_bytes`` adds).

    >>> b = encode_block(5, b"t", 1, [7], [0], [0], [60], [10], [0], [b"hi"], [])
    >>> c = parse_block(b, 0, len(b), 1, "x"); (c.ids, c.tube, b[c.body_start:])
    ((7,), b't', b'hi')
    """
    q, u, s = _cols(len(ids))
    parts = [_BHEAD.pack(seq, state, len(tube)), tube, q.pack(*ids), u.pack(*pris), u.pack(*delays),
             u.pack(*ttrs), u.pack(*map(len, bodies)), s.pack(*created), s.pack(*deadlines),
             _U32.pack(len(counters))]  # fmt: skip
    parts.extend(_ROW.pack(*row) for row in counters)
    parts.extend(bodies)
    return b"".join(parts)


def parse_block(buf: Buf, start: int, end: int, n: int, path: str) -> Columns:
    """Decode the block ``buf[start:end]`` of ``n`` jobs (its CRC already checked). Errors name
    the offset of the block's frame, as CRC errors do."""
    at = start - BLOCK.size
    if start + _BHEAD.size > end:
        raise SnapshotError(f"{path}: offset {at}: block too short for its header")
    seq, state, tlen = _BHEAD.unpack_from(buf, start)
    st = _STATES.get(state)
    if st is None:
        raise SnapshotError(f"{path}: offset {at}: block of {n} jobs has unknown state {state}")
    p = start + _BHEAD.size
    tube = buf[p : p + tlen]
    p += tlen
    if p + n * _PER_JOB + 4 > end:
        raise SnapshotError(f"{path}: offset {at}: block too short for {n} jobs")
    q, u, s = _cols(n)
    ids = q.unpack_from(buf, p)
    p += q.size
    pris = u.unpack_from(buf, p)
    delays = u.unpack_from(buf, p + u.size)
    ttrs = u.unpack_from(buf, p + 2 * u.size)
    lens = u.unpack_from(buf, p + 3 * u.size)
    p += 4 * u.size
    created = s.unpack_from(buf, p)
    deadlines = s.unpack_from(buf, p + s.size)
    p += 2 * s.size
    (k,) = _U32.unpack_from(buf, p)
    p += 4
    if p + k * _ROW.size > end:
        raise SnapshotError(f"{path}: offset {at}: block too short for its {k} counter rows")
    counters = list(_ROW.iter_unpack(buf[p : p + k * _ROW.size])) if k else []
    p += k * _ROW.size
    if p + sum(lens) != end:
        raise SnapshotError(f"{path}: offset {at}: body lengths of {n} jobs do not match the block")
    if counters and max(row[0] for row in counters) >= n:
        raise SnapshotError(f"{path}: offset {at}: a counter row names a job outside the block")
    return Columns(seq, st, bytes(tube), ids, pris, delays, ttrs, lens, created, deadlines, counters, p)


def iter_columns(buf: Buf, header: SnapshotHeader) -> Iterator[Columns]:
    """Each block of the file ``buf``, CRC-checked and decoded."""
    for start, end, n in blocks(buf, header):
        yield parse_block(buf, start, end, n, header.path)


def _bodies(buf: Buf, c: Columns) -> list[bytes]:
    ends = list(accumulate(c.lens, initial=c.body_start))
    return [buf[a:b] for a, b in pairwise(ends)]


def records(buf: Buf, header: SnapshotHeader) -> Iterator[Record]:
    """Every entry as a JOB Record, in file order (the general, slower reader)."""
    for c in iter_columns(buf, header):
        tube = c.tube.decode("ascii")
        rows = {row[0]: row[1:] for row in c.counters}
        for i, body in enumerate(_bodies(buf, c)):
            res, tos, rel, bur, kic = rows.get(i, (0, 0, 0, 0, 0))
            yield Record(Op.JOB, c.seq, c.created[i], c.ids[i], tube, c.pris[i], c.delays[i], c.ttrs[i],
                         c.deadlines[i], body, c.state, c.created[i], res, tos, rel, bur, kic)  # fmt: skip


def load_into(e: Engine, buf: Buf, h: SnapshotHeader) -> dict[int, int]:
    """Load a v2 snapshot's jobs into an empty engine (see ``snapshot.load_into``)."""
    READY, DELAYED = JobState.READY, JobState.DELAYED
    jobs = e.jobs
    fresh: dict[int, int] = {}
    start_seq = h.start_seq
    tubes: dict[bytes, Tube] = {}
    # per tube: ready keys, ready jobs, delay keys, delayed jobs
    lists: dict[Tube, tuple[list[int], list[Job], list[int], list[Job]]] = {}
    body_bytes = 0
    for c in iter_columns(buf, h):
        t = tubes.get(c.tube)
        if t is None:
            t = tubes[c.tube] = e.tube_named(c.tube.decode("ascii"))
            lists[t] = ([], [], [], [])
        rk, rj, dk, dj = lists[t]
        ids, st = c.ids, c.state
        size = sum(c.lens)
        js = block_jobs(t, st, ids, c.pris, c.delays, c.ttrs, c.lens, c.created,
                        buf[c.body_start : c.body_start + size], rk if st is READY else None)  # fmt: skip
        jobs.update(ids, js)
        body_bytes += size
        for i, res, tos, rel, bur, kic in c.counters:
            j = js[i]
            j.reserves, j.timeouts, j.releases, j.buries, j.kicks = res, tos, rel, bur, kic
        if c.seq > start_seq:
            fresh.update(dict.fromkeys(ids, c.seq))
        if st is READY:  # block_jobs added their keys and urgent count
            rj.extend(js)
            continue
        for j, d in zip(js, c.deadlines, strict=True):
            j.deadline_us = d
        if st is DELAYED:
            dk.extend(map(pack, c.deadlines, ids))
            dj.extend(js)
        else:  # BURIED: replay.finish orders the FIFO by bury seq (deadline_us)
            t.buried.update(zip(ids, js, strict=True))
    install(e, h, jobs, lists, body_bytes)
    return fresh
