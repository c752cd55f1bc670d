"""A snapshot block's jobs, built in bulk from its columns: recovery's inner loop.

``snap_v2.load_into`` hands each decoded block here. Compiled (stalkd.extensions), one C loop per
block builds every job and makes its ready-heap key and urgent count in the same pass.
Uncompiled, ``map`` over the columns is the interpreter's fastest form of the same work, so the
pure build keeps it.

A job's body is not copied out here: the job holds the block's ``bodies`` and where its body lies
in them (``objects.new_lazy_job``), and the body becomes a ``bytes`` of its own when first read
(reserve, peek, a snapshot copying it). A body was one of the objects every recovered job
allocated, and most wait untouched long after the restart's first reply. ``bodies`` lives while
any of its jobs still holds it so: at most one block's bodies (``compaction.CHUNK_BYTES``, or
one bigger job) per such job, and none once the next snapshot has copied them all.

Ensures: ``block_jobs`` returns ``new_lazy_job(ids[i], tube, pris[i], delays[i], ttrs[i], bodies,
a_i, lens[i], state, created[i])`` for each i, ``a_i`` being the sum of ``lens`` before ``i``
(``lens`` must add up to ``len(bodies)``: ValueError otherwise), so job i's body is
``bodies[a_i : a_i + lens[i]]``; with ``keys``, it appends ``pack(pris[i], ids[i])`` for each i
and adds the jobs with pri < 1024 to ``tube.urgent``.
"""

from __future__ import annotations

from itertools import accumulate, repeat
from typing import TYPE_CHECKING

from stalkd.engine.heap import pack
from stalkd.engine.model import JobState
from stalkd.engine.objects import URGENT_THRESHOLD, Job, Tube, new_lazy_job

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["block_jobs"]

Ints = tuple[int, ...]  # a column as struct unpacks it (compiled: a tuple, nothing else)


@cython.boundscheck(False)  # the indices below are in range (compiled: unchecked)
@cython.wraparound(False)
def block_jobs(
    tube: Tube, state: JobState, ids: Ints, pris: Ints, delays: Ints, ttrs: Ints, lens: Ints, created: Ints,
    bodies: bytes, keys: list[int] | None,
) -> list[Job]:  # fmt: skip
    """The jobs of one block's columns (see the module's Ensures).

    >>> from stalkd.engine.objects import Tube  # (compiled, the module's own names are C types)
    >>> t = Tube("t", 1); keys: list[int] = []
    >>> js = block_jobs(t, JobState.READY, (4, 5), (0, 2000), (0, 0), (60, 60), (2, 1), (7, 8), b"abc", keys)
    >>> [(j.id, j.body) for j in js], keys == [pack(0, 4), pack(2000, 5)], t.urgent
    ([(4, b'ab'), (5, b'c')], True, 1)
    >>> block_jobs(t, JobState.READY, (4,), (0,), (0,), (60,), (2,), (7,), b"abc", None)
    Traceback (most recent call last):
    ValueError: body lengths add up to 2, not the 3 bytes given
    """
    n = len(ids)
    if not (len(pris) == len(delays) == len(ttrs) == len(lens) == len(created) == n):
        raise ValueError(f"columns of unequal length for {n} jobs")
    if not cython.compiled:
        ends = list(accumulate(lens, initial=0))
        if ends[-1] != len(bodies):
            raise ValueError(f"body lengths add up to {ends[-1]}, not the {len(bodies)} bytes given")
        js = list(map(new_lazy_job, ids, repeat(tube, n), pris, delays, ttrs, repeat(bodies, n), ends, lens,
                      repeat(state, n), created))  # fmt: skip
        if keys is not None:
            keys.extend(map(pack, pris, ids))
            tube.urgent += sum(map(URGENT_THRESHOLD.__gt__, pris))
        return js
    total = 0
    for i in range(n):
        total += lens[i]
    if total != len(bodies):
        raise ValueError(f"body lengths add up to {total}, not the {len(bodies)} bytes given")
    out: list[Job] = [None] * n  # type: ignore[list-item]
    a = 0
    urgent = 0
    for i in range(n):
        ln = lens[i]
        jid = ids[i]
        pri = pris[i]
        out[i] = new_lazy_job(jid, tube, pri, delays[i], ttrs[i], bodies, a, ln, state, created[i])
        a += ln
        if keys is not None:
            keys.append(pack(pri, jid))
            if pri < URGENT_THRESHOLD:
                urgent += 1
    tube.urgent += urgent
    return out
