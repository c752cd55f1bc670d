"""A set of offsets kept as sorted, disjoint, non-adjacent ranges: what a consumer group has
acked above its committed head.

The ranges live in ``array('Q')`` chunks of words ``start0, end0, start1, end1, ...`` (ends
exclusive), each chunk at most ``_MAX_WORDS`` long, with ``_heads`` the first word of each.
Since ``start0 < end0 < start1 < end1 < ...`` across all chunks, one bisect over the heads and
one over a chunk's words answer membership (an odd insertion point lies inside a range) and find
an offset's neighbours. Memory is 16 bytes per range (plus a chunk's header per 128 to 512
ranges), whatever the number of offsets in it: a head stuck on one message while a million after
it are acked is one range, not a million set entries. The words are also the cursor slot's own
layout (``cursor.encode_slot``), so a checkpoint copies them as they are.

Chunks bound the cost of an insert or removal in the middle to moving one chunk's words (8 KiB),
where a single array would move all of them (acks in a random order hold about one range per
four offsets midway).

Ensures: ``add``, ``in``, ``len``, iteration and :meth:`pairs` behave as a ``set[int]`` of the
same offsets would, with :meth:`pairs` its ranges in order (the form a checkpoint stores), and
:meth:`take_front` / :meth:`drop_below` remove exactly the offsets they report; no chunk is
under a quarter full unless it is the only one, so there are at most ``n_ranges / 128 + 1``.

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

# Words in a chunk before it is split in two (512 ranges, 8 KiB).
_MAX_WORDS = 1024


def _span(words: array[int]) -> int:
    """How many offsets the ranges ``words`` (start, end, ...) hold."""
    return sum(words[1::2]) - sum(words[0::2])


class AckedRanges:
    """Offsets as ranges (see the module docstring)."""

    __slots__ = ("_chunks", "_heads", "_count")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._chunks: list[array[int]] = []
        self._heads: list[int] = []  # the first start of each chunk
        self._count = 0  # offsets held
        for a, b in ranges:
            self.add_range(a, b)

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __contains__(self, off: int) -> bool:
        heads = self._heads
        if not heads or off < heads[0] or off >= self._chunks[-1][-1]:
            return False
        c = self._chunks[bisect_right(heads, off) - 1]
        return bisect_right(c, off) & 1 == 1

    def __iter__(self) -> Iterator[int]:
        for c in self._chunks:
            for i in range(0, len(c), 2):
                yield from range(c[i], c[i + 1])

    @property
    def n_ranges(self) -> int:
        """How many ranges are held (what memory is proportional to)."""
        return sum(len(c) for c in self._chunks) // 2

    @property
    def first(self) -> int | None:
        """The lowest offset held, or None."""
        return self._heads[0] if self._heads else None

    def add(self, off: int) -> bool:
        """Add ``off``; False if it was already held."""
        chunks = self._chunks
        if chunks:
            c = chunks[-1]
            last = c[-1]
            if off >= last:  # at or past the end: acks in order, the common case
                if off == last:
                    c[-1] = off + 1
                else:
                    c.append(off)
                    c.append(off + 1)
                    if len(c) > _MAX_WORDS:
                        self._split(len(chunks) - 1)
                self._count += 1
                return True
            heads = self._heads
            k = len(heads) - 1 if off >= heads[-1] else bisect_right(heads, off) - 1
            if k >= 0:
                c = chunks[k]
                j = bisect_right(c, off)
                if j & 1:
                    return False  # inside range (j - 1) // 2
                if j < len(c):
                    # off lies in the gap between c[j - 1] (an end, <= off) and c[j] (a start,
                    # > off), both in this chunk (j >= 1: c[0] <= off).
                    join_left = c[j - 1] == off
                    join_right = c[j] == off + 1
                    if join_left and join_right:
                        del c[j - 1 : j + 1]  # the gap was this one offset: two ranges become one
                        self._shrunk(k)
                    elif join_left:
                        c[j - 1] = off + 1
                    elif join_right:
                        c[j] = off
                    else:
                        c.insert(j, off + 1)
                        c.insert(j, off)
                        if len(c) > _MAX_WORDS:
                            self._split(k)
                    self._count += 1
                    return True
        # Before every range, or in a gap between two chunks: not held, and rare.
        self.add_range(off, off + 1)
        return True

    def add_range(self, a: int, b: int) -> None:
        """Add the offsets ``a <= off < b``, merging with the ranges they overlap or touch."""
        if a >= b:
            return
        chunks = self._chunks
        if not chunks or chunks[-1][-1] < a:  # a checkpoint's ranges come sorted and apart: the end
            self._insert(len(chunks) - 1, a, b)
            return
        # Take out every range that overlaps or touches [a, b], widening it to cover them.
        while chunks:
            k = max(bisect_right(self._heads, a) - 1, 0)
            c = chunks[k]
            i = bisect_left(c, a)  # an end equal to a (odd i) touches: its range is at i - 1
            i -= i & 1
            if i == len(c):
                if k + 1 == len(chunks):
                    break
                k, i = k + 1, 0
                c = chunks[k]
            if c[i] > b:
                break
            s, e = c[i], c[i + 1]
            a, b = min(a, s), max(b, e)
            self._count -= e - s
            self._remove(k, i)
        k = bisect_right(self._heads, a) - 1
        self._insert(k, a, b)

    def _insert(self, k: int, a: int, b: int) -> None:
        """Put the range [a, b), apart from every range held, into chunk ``k`` (-1: the first)."""
        self._count += b - a
        chunks = self._chunks
        if not chunks:
            chunks.append(array("Q", (a, b)))
            self._heads.append(a)
            return
        if k < 0:
            k = 0
        c = chunks[k]
        j = bisect_right(c, a)
        c[j:j] = array("Q", (a, b))
        if j == 0:
            self._heads[k] = a
        if len(c) > _MAX_WORDS:
            self._split(k)

    def _remove(self, k: int, i: int) -> None:
        """Remove the range at words ``i, i + 1`` of chunk ``k`` (the count is the caller's)."""
        c = self._chunks[k]
        del c[i : i + 2]
        if not c:
            del self._chunks[k], self._heads[k]
            return
        if i == 0:
            self._heads[k] = c[0]
        self._shrunk(k)

    def _shrunk(self, k: int) -> None:
        """Chunk ``k`` lost words: below a quarter full, it joins a neighbour (so no chunk but a
        lone one holds fewer than ``_MAX_WORDS // 4`` words, and chunks stay few)."""
        chunks = self._chunks
        if len(chunks[k]) >= _MAX_WORDS // 4 or len(chunks) == 1:
            return
        if k == 0:
            k = 1  # the next chunk joins the first
        into = chunks[k - 1]
        into += chunks[k]
        del chunks[k], self._heads[k]
        if len(into) > _MAX_WORDS:
            self._split(k - 1)

    def _split(self, k: int) -> None:
        c = self._chunks[k]
        half = len(c) // 4 * 2
        tail = c[half:]
        del c[half:]
        self._chunks.insert(k + 1, tail)
        self._heads.insert(k + 1, tail[0])

    def take_front(self, head: int) -> int:
        """If the lowest range starts at ``head``, remove it and return its end (the new head);
        else return ``head``."""
        if not self._heads or self._heads[0] != head:
            return head
        end = self._chunks[0][1]
        self._count -= end - head
        self._remove(0, 0)
        return end

    def drop_below(self, target: int) -> int:
        """Remove every offset below ``target``; return how many there were."""
        chunks = self._chunks
        removed = 0
        while chunks and chunks[0][-1] <= target:  # whole chunks below it
            removed += _span(chunks[0])
            del chunks[0], self._heads[0]
        if chunks and self._heads[0] < target:
            c = chunks[0]
            j = bisect_right(c, target)
            whole = j - (j & 1)  # the ranges ending at or below target
            removed += _span(c[:whole])
            del c[:whole]
            if c[0] < target:  # the range target falls in keeps its part from target on
                removed += target - c[0]
                c[0] = target
            self._heads[0] = c[0]
            self._shrunk(0)
        self._count -= removed
        return removed

    def clear(self) -> None:
        self._chunks.clear()
        self._heads.clear()
        self._count = 0

    def chunks(self) -> list[array[int]]:
        """The words of :meth:`words` as they are held, in order: not copies (a checkpoint
        reads them at once, under the group's lock)."""
        return self._chunks

    def words(self) -> array[int]:
        """The ranges as ``start, end, start, end, ...`` (a copy: the slot's ``u64`` pairs)."""
        out = array("Q")
        for c in self._chunks:
            out += c
        return out

    def pairs(self) -> tuple[tuple[int, int], ...]:
        """The ranges as ``(start, end)`` pairs, in order."""
        w = self.words()
        return tuple(zip(w[0::2], w[1::2], strict=True))

    def __repr__(self) -> str:
        return f"AckedRanges({self._count} offsets in {self.n_ranges} ranges)"
