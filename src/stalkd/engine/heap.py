"""An indexed binary min-heap keyed by integers, with O(log n) removal of any item.

beanstalkd keeps each job's position in its heap (``heap_index``) so that ``delete`` of a job in
the middle of a ready queue is cheap; this is the same idea. Keys are single Python ints (callers
pack a tuple such as ``(priority, id)`` into ``priority << 64 | id``) because comparing two ints is
much cheaper than comparing two tuples, and one int per entry is the smallest key we can store.

Ensures: ``keys[i] <= keys[2i+1]`` and ``keys[i] <= keys[2i+2]`` for every i, and
``items[i].hpos == i`` for every item in the heap; an item outside any heap has ``hpos == -1``.
An item is in at most one heap at a time (jobs move between ready, delay and reserved heaps).

The two lists hold the heap in their first ``len(heap)`` entries and are not shrunk by every
pop: a heap that goes from empty to one item and back (a tube's ready jobs at depth 1, a
connection's reservations) would otherwise free and allocate its arrays on every command. They
are cut back when the heap falls below a quarter of them, and before anything reads them whole.

Compiled (Cython, stalkd.extensions), ``HeapItem`` and ``IndexedHeap`` are extension types
(heap.pxd): ``hpos`` is a C field, the engine calls a heap's methods as C functions and the
sifts index the two lists with C integers; the same code, run in C. An extension type cannot
be ``Generic``, so to a type checker a heap holds ``Any`` (its users know what they put in).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the shim's signatures (Cython ships no type information)
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["HeapItem", "IndexedHeap", "pack"]

_SHIFT = 64


class HeapItem:
    """What a heap holds: an object that remembers its slot in ``hpos`` (-1 outside any heap).
    Job, Tube and ConnState are HeapItems (their constructors set ``hpos = -1``).

    >>> HeapItem().hpos
    -1
    """

    __slots__ = ("hpos",)

    def __init__(self) -> None:
        self.hpos = -1



def pack(major: int, minor: int) -> int:
    """Pack an ordering pair into one int key.

    >>> pack(1, 7) < pack(1, 8) < pack(2, 0)
    True
    """
    return (major << _SHIFT) | minor


class IndexedHeap:
    """Min-heap of items with int keys; items remember their slot in ``hpos``.

    >>> h: IndexedHeap = IndexedHeap()
    >>> a, b = HeapItem(), HeapItem()
    >>> h.push(5, a); h.push(3, b); h.peek() is b
    True
    >>> h.remove(b); h.pop() is a
    True
    """

    __slots__ = ("_keys", "_items", "_n")

    def __init__(self) -> None:
        self._keys: list[int] = []
        self._items: list[Any] = []
        self._n = 0  # items in the heap: the lists' first _n entries

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def _fit(self) -> None:
        """Cut the lists to the heap, for the readers of whole lists below."""
        del self._keys[self._n :]
        del self._items[self._n :]

    def __iter__(self) -> Iterator[Any]:
        """Items in heap (not sorted) order."""
        self._fit()
        return iter(self._items)

    def append_items_to(self, out: list[Any]) -> None:
        """Append every item to ``out`` in heap-array order (a list-to-list copy in C, twice as
        fast as extending from an iterator; a snapshot starts with this over every job).

        >>> h: IndexedHeap = IndexedHeap(); a = HeapItem(); h.push(1, a)
        >>> out: list[HeapItem] = []
        >>> h.append_items_to(out); out == [a]
        True
        """
        self._fit()
        out += self._items

    def key_list(self) -> list[int]:
        """The keys in heap-array order (a copy; for tests and the differential check)."""
        self._fit()
        return list(self._keys)

    def item_list(self) -> list[Any]:
        """The items in heap-array order (a copy; ``item_list()[i].hpos == i``)."""
        self._fit()
        return list(self._items)

    @cython.boundscheck(False)  # (compiled: _n > 0, so the list holds an item 0)
    @cython.wraparound(False)
    def peek(self) -> Any:
        return self._items[0] if self._n else None

    def peek_key(self) -> int | None:
        return self._keys[0] if self._n else None

    @cython.locals(keys=list, items=list, it=HeapItem, n=cython.Py_ssize_t)
    def push(self, key: int, item: Any) -> None:
        keys, items = self._keys, self._items
        it = item
        n = self._n
        if n < len(keys):  # (and of items: the two lists have one length)
            _put(keys, n, key)
            _put(items, n, it)
        else:
            keys.append(key)
            items.append(it)
        self._n = n + 1
        _up(keys, items, n)

    @cython.boundscheck(False)  # every index below is in range (compiled: unchecked)
    @cython.wraparound(False)
    @cython.locals(keys=list, items=list, top=HeapItem, last=HeapItem,
                   n=cython.Py_ssize_t, i=cython.Py_ssize_t, c=cython.Py_ssize_t,
                   r=cython.Py_ssize_t)  # fmt: skip
    def pop(self) -> Any:
        """Remove and return the item with the smallest key (IndexError when empty).

        Floyd's variant (as heapq): the hole left at the root walks down to a leaf along the
        smaller children, one comparison per level instead of two, then the last item is put
        there and sifted up. A reserve pops a ready heap that is usually sorted by arrival, so
        the sift-up stops at once; ~10% less time than a plain sift-down at 40k jobs.
        """
        keys, items = self._keys, self._items
        n = self._n - 1
        if n < 0:
            raise IndexError("pop from an empty heap")
        top = items[0]
        top.hpos = -1
        self._n = n
        last_key = keys[n]
        last = items[n]
        _vacate(keys, items, n)
        if not n:
            return top
        i = 0
        c = 1
        while c < n:
            ck = keys[c]
            r = c + 1
            if r < n:
                rk = keys[r]
                if _lt(rk, ck):
                    c = r
                    ck = rk
            _seat(keys, items, i, ck, items[c])
            i = c
            c = 2 * i + 1
        _put(keys, i, last_key)
        _put(items, i, last)
        _up(keys, items, i)
        return top

    @cython.locals(it=HeapItem, i=cython.Py_ssize_t)
    def remove(self, item: Any) -> None:
        """Remove ``item``, wherever it is (ValueError if it is not in this heap)."""
        it = item
        i = it.hpos
        if i < 0 or i >= self._n or self._items[i] is not it:
            raise ValueError("item is not in this heap")
        self._n -= 1
        _take(self._keys, self._items, self._n, i)

    @cython.locals(it=HeapItem, i=cython.Py_ssize_t, keys=list)
    def update(self, item: Any, key: int) -> None:
        """Change the key of an item already in the heap."""
        it = item
        i = it.hpos
        keys = self._keys
        old = keys[i]
        keys[i] = key
        if _lt(key, old):
            _up(keys, self._items, i)
        else:
            _down(keys, self._items, self._n, i)

    def load(self, keys: list[int], items: list[Any]) -> None:
        """Fill an empty heap at once (recovery): ``keys[i]`` belongs to ``items[i]``; keys must be
        unique (they are: every key packs an id). Takes ownership of both lists.

        Lists already in heap order (a snapshot written from heap arrays; any sorted list) are
        kept as they are: heapify of a copy, then one list comparison, both in C. Otherwise
        heapq.heapify orders the int keys and a key -> item map lines the items up, which is
        several times faster than sorting (key, item) pairs.

        >>> h: IndexedHeap = IndexedHeap(); a, b = HeapItem(), HeapItem()
        >>> h.load([9, 4], [a, b]); (h.pop() is b, a.hpos)
        (True, 0)
        """
        if self._n:
            raise ValueError("load() needs an empty heap")
        if len(keys) != len(items):
            raise ValueError(f"load() got {len(keys)} keys for {len(items)} items")
        # Compiled, one comparison per key tells; uncompiled, heapify of a copy and a list
        # comparison (both in C) beat that loop in Python.
        if len(keys) > 1 and not (cython.compiled and _keeps_order([], keys)):
            ordered = keys[:]
            heapq.heapify(ordered)
            if ordered != keys:
                by_key = dict(zip(keys, items, strict=True))
                if len(by_key) != len(keys):
                    raise ValueError("load() needs unique keys")
                items = list(map(by_key.__getitem__, ordered))
                keys = ordered
        _number(items)
        self._keys = keys
        self._items = items
        self._n = len(keys)

    def add_many(self, keys: list[int], items: list[Any]) -> None:
        """Push many items (``keys[i]`` for ``items[i]``): appended as they are when that keeps
        the heap order (each key at least its would-be parent's, as ascending ids at one priority
        after a snapshot's keys: recovery's tail), one by one when they are few next to the heap,
        else the heap rebuilt with them in one ``load`` (O(n), in C mostly).

        >>> h: IndexedHeap = IndexedHeap(); a, b, c = HeapItem(), HeapItem(), HeapItem()
        >>> h.push(5, a); h.add_many([9, 1], [b, c]); [h.pop() is x for x in (c, a, b)]
        [True, True, True]
        >>> h.push(5, a); h.add_many([6, 7], [b, c]); (h.key_list(), c.hpos)
        ([5, 6, 7], 2)
        """
        if not keys:
            return
        if len(keys) != len(items):
            raise ValueError(f"add_many() got {len(keys)} keys for {len(items)} items")
        self._fit()
        if _keeps_order(self._keys, keys):
            n = self._n
            self._keys += keys
            self._items += items
            self._n = len(self._keys)
            _number(self._items, n)
            return
        if len(keys) * 8 < self._n:
            for k, it in zip(keys, items, strict=True):
                self.push(k, it)
            return
        all_keys, all_items = self._keys + keys, self._items + items
        self._keys, self._items, self._n = [], [], 0
        self.load(all_keys, all_items)

    def sorted_items(self) -> list[Any]:
        """All items in key order (O(n log n); for snapshots and tests, not hot paths)."""
        order = sorted(range(self._n), key=self._keys.__getitem__)
        return [self._items[i] for i in order]


# The sifts, functions of the two lists (compiled: C functions, no Python call). Every item
# in a heap is a HeapItem (push and load check it), so the sifts read them unchecked.


@cython.cfunc
@cython.locals(items=list, start=cython.Py_ssize_t, i=cython.Py_ssize_t, it=HeapItem)
def _number(items: list[Any], start: int = 0) -> None:
    """Each item's ``hpos`` to its index, from ``start`` on (a HeapItem each: TypeError otherwise)."""
    for i in range(start, len(items)):
        it = items[i]
        it.hpos = i


@cython.cfunc
@cython.boundscheck(False)  # every index below is in range (compiled: unchecked)
@cython.wraparound(False)
@cython.locals(keys=list, more=list, n=cython.Py_ssize_t, i=cython.Py_ssize_t, p=cython.Py_ssize_t)
def _keeps_order(keys: list[int], more: list[int]) -> bool:
    """Whether the heap array ``keys`` with ``more`` appended is still in heap order: each key
    of ``more`` at least its parent's (one comparison per key; the first out of order stops it).

    >>> _keeps_order([1, 5], [2, 6, 9]), _keeps_order([1, 5], [2, 4])
    (True, False)
    """
    n = len(keys)
    for i in range(n, n + len(more)):
        if i == 0:
            continue
        p = (i - 1) >> 1
        if (keys[p] if p < n else more[p - n]) > more[i - n]:
            return False
    return True


@cython.cfunc
@cython.locals(keys=list, items=list, n=cython.Py_ssize_t)
def _vacate(keys: list[int], items: list[Any], n: int) -> None:
    """The heap now ends at ``n``: the item that was there is let go, and the lists are cut
    back when they are over four times the heap (a heap that shrank from a flood)."""
    _put(items, n, None)  # (n is the old heap's last slot: in range)
    if n < len(keys) >> 2:
        del keys[n:]
        del items[n:]


@cython.cfunc
@cython.boundscheck(False)  # the sifts' indices are in range (compiled: unchecked)
@cython.wraparound(False)
@cython.locals(keys=list, items=list, n=cython.Py_ssize_t, i=cython.Py_ssize_t, gone=HeapItem,
               last=HeapItem)  # fmt: skip
def _take(keys: list[int], items: list[Any], n: int, i: int) -> None:
    """Take the item at ``i`` out of a heap now of ``n`` items (its last one was at ``n``)."""
    gone = items[i]
    gone.hpos = -1
    last_key = keys[n]
    last = items[n]
    _vacate(keys, items, n)
    if i == n:
        return
    _seat(keys, items, i, last_key, last)
    if i > 0 and _lt(last_key, keys[(i - 1) >> 1]):
        _up(keys, items, i)
    else:
        _down(keys, items, n, i)


if not cython.compiled:  # compiled, heap.pxd takes these from C

    def _put(a: list[Any], i: int, v: object) -> None:
        a[i] = v

    def _lt(a: int, b: int) -> bool:
        return a < b


@cython.cfunc
@cython.inline
@cython.locals(keys=list, items=list, i=cython.Py_ssize_t, item=HeapItem)
def _seat(keys: list[int], items: list[Any], i: int, key: int, item: Any) -> None:
    """Put ``item`` with its ``key`` at position ``i``, and tell the item where it is. Compiled,
    the two stores are ``_put`` (heap.pxd), C inlined into the sifts, where Cython's unchecked
    list store is a call of its generic helper, a few dozen a reserve from a large ready heap."""
    _put(keys, i, key)
    _put(items, i, item)
    item.hpos = i


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(keys=list, items=list, i=cython.Py_ssize_t, p=cython.Py_ssize_t, item=HeapItem)
def _up(keys: list[int], items: list[Any], i: int) -> None:
    key, item = keys[i], items[i]
    while i > 0:
        p = (i - 1) >> 1
        pk = keys[p]
        if not _lt(key, pk):  # pk <= key
            break
        _seat(keys, items, i, pk, items[p])
        i = p
    _seat(keys, items, i, key, item)


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(keys=list, items=list, i=cython.Py_ssize_t, n=cython.Py_ssize_t, c=cython.Py_ssize_t,
               r=cython.Py_ssize_t, item=HeapItem)  # fmt: skip
def _down(keys: list[int], items: list[Any], n: int, i: int) -> None:
    key, item = keys[i], items[i]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        ck = keys[c]
        r = c + 1
        if r < n and _lt(keys[r], ck):
            c = r
            ck = keys[r]
        if not _lt(ck, key):  # key <= ck
            break
        _seat(keys, items, i, ck, items[c])
        i = c
    _seat(keys, items, i, key, item)
