"""Snapshot format version 1: a block is a run of row entries, each a ``model`` JOB record.

  block    entries of u32 payload length | payload (``model.encode`` of an Op.JOB record)

Version 2 (``snap_v2.py``) replaced it as the written format; this module keeps reading it
(``tests/engine/test_snapshot_v1.py`` holds a frozen image) and can still write it, for that test.

Ensures: every entry read is a JOB record; a non-JOB entry, a body length that disagrees with its
entry, or an unknown state raises SnapshotError naming the file and offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from stalkd.engine.heap import pack
from stalkd.engine.model import FORMAT_VERSION, HEAD_JOB, U32, JobState, Op, Record, decode, encode
from stalkd.engine.objects import URGENT_THRESHOLD, Job, job_body
from stalkd.persist.snapfile import Buf, JobTuple, SnapshotError, SnapshotHeader, blocks, install

if TYPE_CHECKING:
    from stalkd.engine.engine import Engine
    from stalkd.engine.objects import Tube

__all__ = ["JobTuple", "encode_jobs", "encode_records", "iter_jobs", "iter_payloads", "load_into"]



def encode_records(records: list[Record]) -> bytes:
    """One v1 block of JOB records."""
    pack = U32.pack
    parts = []
    for r in records:
        p = encode(r)
        parts.append(pack(len(p)))
        parts.append(p)
    return b"".join(parts)


def encode_jobs(jobs: list[Job], seq: int) -> bytes:
    """One v1 block of live jobs stamped ``seq``: byte for byte what ``encode_records`` gives
    for their ``durable_record``, without building a Record per job."""
    parts: list[bytes] = []
    add = parts.append
    head = HEAD_JOB.pack
    u32 = U32.pack
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
        body = job_body(j)
        fixed = head(version, op, seq, j.created_us, j.id, st, j.pri, j.delay, j.ttr, j.created_us,
                     deadline, j.reserves, j.timeouts, j.releases, j.buries, j.kicks, len(tb))  # fmt: skip
        add(u32(len(fixed) + len(tb) + 4 + len(body)))
        add(fixed)
        add(tb)
        add(u32(len(body)))
        add(body)
    return b"".join(parts)


def iter_payloads(buf: Buf, header: SnapshotHeader) -> Iterator[bytes]:
    """Each entry's payload, CRC-checked a block at a time; SnapshotError at the first bad block."""
    for pos, end, _ in blocks(buf, header):
        while pos < end:
            (n,) = U32.unpack_from(buf, pos)
            yield buf[pos + 4 : pos + 4 + n]
            pos += 4 + n


def iter_jobs(buf: Buf, header: SnapshotHeader) -> Iterator[JobTuple]:
    """Entries as plain tuples, parsing the v1 JOB layout directly."""
    unpack = HEAD_JOB.unpack_from
    u32 = U32.unpack_from
    tubes: dict[bytes, str] = {}
    states = {s.value: s for s in JobState}
    fixed = HEAD_JOB.size
    path = header.path
    for pos, end, _ in blocks(buf, header):
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


def load_into(e: Engine, buf: Buf, h: SnapshotHeader) -> dict[int, int]:
    """Load a v1 snapshot's jobs into an empty engine (see ``snapshot.load_into``)."""
    unpack = HEAD_JOB.unpack_from
    u32 = U32.unpack_from
    fixed = HEAD_JOB.size
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
    for pos, end, _ in blocks(buf, h):
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
                t = tubes[tb] = e.tube_named(tb.decode("ascii"))
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
                rkeys.append(pack(pri, jid))
                rjobs.append(j)
                if pri < URGENT_THRESHOLD:
                    t.urgent += 1
            elif st == 4:
                j.state = DELAYED
                j.deadline_us = deadline
                dkeys.append(pack(deadline, jid))
                djobs.append(j)
            elif st == 3:
                j.state = BURIED
                j.deadline_us = deadline
                t.buried[jid] = j
            else:
                raise SnapshotError(f"{h.path}: offset {p0}: job {jid} has unknown state {st}")
    install(e, h, jobs, lists, body_bytes)
    return fresh

