"""A set of offsets kept as sorted, disjoint, non-adjacent ranges: what a consumer group has
acked above its committed head.

The ranges live in one ``array('Q')`` of words ``start0, end0, start1, end1, ...`` (ends
exclusive). Since ``start0 < end0 < start1 < end1 < ...``, one bisect over the words answers
membership (an odd insertion point lies inside a range) and finds an offset's neighbours. Memory
is 16 bytes per range, whatever the number of offsets in it: a head stuck on one message while a
million after it are acked is one range, not a million set entries. The words are also the
cursor slot's own layout (``cursor.encode_slot``), so a checkpoint copies them as they are.

Ranges taken off the front (the committed head advancing over them) are skipped by an index and
compacted away only once they are half the array, so advancing the head over ``n`` ranges costs
``O(n)`` in all, not a move of the whole array per range.

Ensures: ``add``, ``in``, ``len``, iteration and :meth:`pairs` behave as a ``set[int]`` of the
same offsets would, with :meth:`pairs` its ranges in order (the form a checkpoint stores), and
:meth:`take_front` / :meth:`drop_below` remove exactly the offsets they report.

>>> r = AckedRanges()
>>> for off in (5, 7, 6, 9, 3):
...     _ = r.add(off)
>>> r.pairs(), len(r), 6 in r, 8 in r
(((3, 4), (5, 8), (9, 10)), 5, True, False)
>>> r.take_front(3), r.pairs()
(4, ((5, 8), (9, 10)))
>>> r.drop_below(6), r.pairs()
(1, ((6, 8), (9, 10)))
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator

__all__ = ["AckedRanges"]

# Below this many dead words at the front, compacting is not worth a call.
_COMPACT_MIN = 1024


class AckedRanges:
    """Offsets as ranges (see the module docstring)."""

    __slots__ = ("_words", "_lo", "_count")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._words = array("Q")
        self._lo = 0  # words before it are dead (taken off the front)
        self._count = 0  # offsets held
        for a, b in ranges:
            self.add_range(a, b)

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __contains__(self, off: int) -> bool:
        w = self._words
        if len(w) == self._lo or off >= w[-1] or off < w[self._lo]:
            return False
        return bisect_right(w, off, self._lo) & 1 == 1

    def __iter__(self) -> Iterator[int]:
        w = self._words
        for i in range(self._lo, len(w), 2):
            yield from range(w[i], w[i + 1])

    @property
    def n_ranges(self) -> int:
        """How many ranges are held (what memory is proportional to)."""
        return (len(self._words) - self._lo) // 2

    @property
    def first(self) -> int | None:
        """The lowest offset held, or None."""
        return self._words[self._lo] if len(self._words) > self._lo else None

    def add(self, off: int) -> bool:
        """Add ``off``; False if it was already held."""
        w = self._words
        n = len(w)
        lo = self._lo
        if n == lo:
            w.append(off)
            w.append(off + 1)
            self._count += 1
            return True
        last = w[-1]
        if off >= last:  # at or past the end: acks in order, the common case
            if off == last:
                w[-1] = off + 1
            else:
                w.append(off)
                w.append(off + 1)
            self._count += 1
            return True
        j = bisect_right(w, off, lo)
        if j & 1:
            return False  # inside range (j - 1) // 2
        # off lies in the gap between w[j - 1] (an end, <= off) and w[j] (a start, > off).
        join_left = j > lo and w[j - 1] == off
        join_right = w[j] == off + 1
        if join_left and join_right:
            del w[j - 1 : j + 1]  # the gap was this one offset: the two ranges become one
        elif join_left:
            w[j - 1] = off + 1
        elif join_right:
            w[j] = off
        else:
            w[j:j] = array("Q", (off, off + 1))
        self._count += 1
        return True

    def add_range(self, a: int, b: int) -> None:
        """Add the offsets ``a <= off < b``, merging with the ranges they overlap or touch."""
        if a >= b:
            return
        w = self._words
        lo = self._lo
        if len(w) == lo or w[-1] < a:  # a checkpoint's ranges come sorted and apart: the end
            w.append(a)
            w.append(b)
            self._count += b - a
            return
        i = bisect_left(w, a, lo)  # an end equal to a (odd i) touches: merge with its range
        if i & 1:
            i -= 1
            a = w[i]
        j = bisect_right(w, b, lo)  # a start equal to b touches: it is before j
        if j & 1:
            b = w[j]
            j += 1
        self._count += (b - a) - sum(w[k + 1] - w[k] for k in range(i, j, 2))
        w[i:j] = array("Q", (a, b))

    def take_front(self, head: int) -> int:
        """If the lowest range starts at ``head``, remove it and return its end (the new head);
        else return ``head``."""
        w = self._words
        lo = self._lo
        if len(w) == lo or w[lo] != head:
            return head
        end = w[lo + 1]
        self._count -= end - head
        self._drop_words(lo + 2)
        return end

    def drop_below(self, target: int) -> int:
        """Remove every offset below ``target``; return how many there were."""
        w = self._words
        lo = self._lo
        removed = 0
        i = lo
        n = len(w)
        while i < n and w[i + 1] <= target:
            removed += w[i + 1] - w[i]
            i += 2
        if i < n and w[i] < target:
            removed += target - w[i]
            w[i] = target
        self._count -= removed
        self._drop_words(i)
        return removed

    def _drop_words(self, lo: int) -> None:
        w = self._words
        if lo == len(w):
            del w[:]
            self._lo = 0
        elif lo >= _COMPACT_MIN and 2 * lo >= len(w):
            del w[:lo]
            self._lo = 0
        else:
            self._lo = lo

    def clear(self) -> None:
        del self._words[:]
        self._lo = 0
        self._count = 0

    def words(self) -> array[int]:
        """The ranges as ``start, end, start, end, ...`` (a copy: the slot's ``u64`` pairs)."""
        return self._words[self._lo :]

    def pairs(self) -> tuple[tuple[int, int], ...]:
        """The ranges as ``(start, end)`` pairs, in order."""
        w = self._words[self._lo :]
        return tuple(zip(w[0::2], w[1::2], strict=True))

    def __repr__(self) -> str:
        return f"AckedRanges({self._count} offsets in {self.n_ranges} ranges)"
