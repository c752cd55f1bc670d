"""The engine's job table: job id -> Job, kept in chunks so no insert rehashes more than a chunk.

A single dict of a million jobs rebuilds its whole table when it grows, or when deletions have
used up its free entries: one step of tens of milliseconds holding the event loop, which any
put can hit (issue 30). Ids are handed out in increasing order, so the table keeps the jobs
whose ids share ``id >> SHIFT`` in one dict of at most ``CHUNK`` entries; each chunk grows
and shrinks on its own, and the outer dict holds one entry per chunk.

A chunk no new id reaches any more (below the newest) only loses jobs, and a dict never gives
back its table when entries are deleted: such a chunk is copied into a fitting dict each time
its count falls to one of ``_SHRINK``, so a few jobs left in an old chunk cost what they hold,
and dropped once empty. The newest chunk is kept even empty (a queue that drains and fills
again touches no table but its dict's),
and dropped, if still empty, when a newer one is made.

Iteration is chunk by chunk in the order chunks were made, each in insertion order: id order
for jobs put in this process.

Compiled (Cython, stalkd.extensions), ``JobTable`` is an extension type (jobtable.pxd): the
engine's look-ups, inserts and deletes are C calls, not a Python frame per job. An extension
type cannot be ``Generic``, so to a type checker the table holds ``Any``, as a heap does.

>>> t = JobTable()
>>> t[5] = "a"; t[CHUNK + 1] = "b"; t[7] = "c"
>>> len(t), t.get(7), t.get(8), list(t), 5 in t
(3, 'c', None, [5, 7, 4097], True)
>>> del t[5]; del t[7]; len(t), list(t)
(1, [4097])
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the shim's signatures (Cython ships no type information)
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["CHUNK", "SHIFT", "JobTable"]

SHIFT = 12
CHUNK = 1 << SHIFT
"""Ids per chunk: a chunk's dict rehashes at most this many entries at once."""


@cython.cfunc
@cython.inline
def _chunk(jid: int) -> int:
    """The key of the chunk ``jid`` belongs to, ``jid >> SHIFT``, with the shift written out:
    compiled, a shift by a literal is C arithmetic, and by a name a generic Python operation."""
    return jid >> 12

_SHRINK = frozenset({CHUNK >> 3, CHUNK >> 6, CHUNK >> 9})
"""Counts at which a chunk below the newest is copied into a fitting dict."""


class JobTable:
    """A mapping of job ids (ints >= 0) to jobs, in chunks of ``CHUNK`` consecutive ids."""

    __slots__ = ("_chunks", "_n", "_top")

    def __init__(self) -> None:
        self._chunks: dict[int, dict[int, Any]] = {}
        self._n = 0  # jobs in all chunks
        self._top = -1  # the newest chunk's key: chunks below it only shrink

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    @cython.locals(chunk=dict)
    def get(self, jid: int, default: Any = None) -> Any:
        chunk = self._chunks.get(_chunk(jid))
        return default if chunk is None else chunk.get(jid, default)

    def __getitem__(self, jid: int) -> Any:
        return self._chunks[_chunk(jid)][jid]

    def __contains__(self, jid: object) -> bool:
        if not isinstance(jid, int):
            return False
        chunk = self._chunks.get(_chunk(jid))
        return chunk is not None and jid in chunk

    def _new_chunk(self, key: int) -> dict[int, Any]:
        chunk: dict[int, Any] = {}
        self._chunks[key] = chunk
        if key > self._top:
            if not self._chunks.get(self._top, True):
                del self._chunks[self._top]  # the newest until now, left empty
            self._top = key
        return chunk

    @cython.locals(chunk=dict, n=cython.Py_ssize_t)
    def __setitem__(self, jid: int, job: Any) -> None:
        key = _chunk(jid)
        chunk = self._chunks.get(key)
        if chunk is None:
            chunk = self._new_chunk(key)
        n = len(chunk)
        chunk[jid] = job
        self._n += len(chunk) - n

    @cython.locals(chunk=dict, n=cython.Py_ssize_t)
    def add(self, jid: int, job: Any) -> bool:
        """``self[jid] = job`` unless ``jid`` is in the table (then nothing): whether it was
        added. One chunk look-up for both (compiled, a C call): a standby adds every job so.

        >>> t = JobTable(); t.add(5, "a"), t.add(5, "b"), t[5], len(t)
        (True, False, 'a', 1)
        """
        key = _chunk(jid)
        chunk = self._chunks.get(key)
        if chunk is None:
            chunk = self._new_chunk(key)
        n = len(chunk)
        chunk.setdefault(jid, job)
        if len(chunk) == n:
            return False
        self._n += 1
        return True

    @cython.locals(chunk=dict, n=cython.Py_ssize_t)
    def __delitem__(self, jid: int) -> None:
        key = _chunk(jid)
        chunk = self._chunks[key]
        del chunk[jid]
        self._n -= 1
        n = len(chunk)
        if key < self._top:
            if not n:
                del self._chunks[key]
            elif n in _SHRINK:
                self._chunks[key] = dict(chunk)

    @cython.locals(i=cython.Py_ssize_t, n=cython.Py_ssize_t, end=cython.Py_ssize_t, had=cython.Py_ssize_t,
                   chunk=dict)  # fmt: skip
    def update(self, ids: Sequence[int], jobs: Sequence[Any]) -> None:
        """Add ``jobs[i]`` under ``ids[i]`` for each i, as one at a time would: a run of ids in
        one chunk (as a snapshot block holds them, or the tail's new jobs) goes into it in one
        go (compiled, a C loop of dict stores; uncompiled, one dict update of the run, ascending).

        >>> t = JobTable(); t.update([1, 2, CHUNK, 3], "abcd"); list(t.items())
        [(1, 'a'), (2, 'b'), (3, 'd'), (4096, 'c')]
        """
        if len(ids) != len(jobs):
            raise ValueError(f"{len(ids)} ids for {len(jobs)} jobs")
        i, n = 0, len(ids)
        if cython.compiled:
            while i < n:
                key = _chunk(ids[i])
                lo, hi = key << SHIFT, (key + 1) << SHIFT
                end = i + 1
                while end < n and lo <= ids[end] < hi:
                    end += 1
                chunk = self._chunks.get(key)
                if chunk is None:
                    chunk = self._new_chunk(key)
                had = len(chunk)
                while i < end:
                    chunk[ids[i]] = jobs[i]
                    i += 1
                self._n += len(chunk) - had
        else:  # uncompiled: the run in one dict update, ascending; else one at a time
            while i < n:
                key = _chunk(ids[i])
                end = bisect_left(ids, (key + 1) << SHIFT, i, n)  # where the run ends, if ascending
                run = ids[i:end]
                if run and _chunk(min(run)) == key and _chunk(max(run)) == key:
                    chunk = self._chunks.get(key)
                    if chunk is None:
                        chunk = self._new_chunk(key)
                    had = len(chunk)
                    chunk.update(zip(run, jobs[i:end], strict=True))
                    self._n += len(chunk) - had
                else:  # not ascending here: one at a time
                    end = i + 1
                    self[ids[i]] = jobs[i]
                i = end

    def __iter__(self) -> Iterator[int]:
        return chain.from_iterable(self._chunks.values())

    def keys(self) -> Iterator[int]:
        return iter(self)

    def values(self) -> Iterator[Any]:
        return chain.from_iterable(map(dict.values, self._chunks.values()))

    def items(self) -> Iterator[tuple[int, Any]]:
        return chain.from_iterable(map(dict.items, self._chunks.values()))

    def clear(self) -> None:
        self._chunks.clear()
        self._n = 0

    def chunks(self) -> list[tuple[int, int]]:
        """(key, jobs in it) per chunk, in iteration order, and the newest key (for tests)."""
        return [(k, len(c)) for k, c in self._chunks.items()] + [(self._top, -1)]

    def __repr__(self) -> str:
        return f"JobTable({self._n} jobs in {len(self._chunks)} chunks)"

