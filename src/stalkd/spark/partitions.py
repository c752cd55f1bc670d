"""Planning a read of a log into Spark partitions: slices of segments, grouped to fit the cores.

A *slice* is a range of offsets within one segment. Sealed segments larger than
``slice_records`` are split into several slices (a slice that starts mid-segment scans the
frames before it, so splitting is only worth it for segments much larger than that). Then
consecutive slices are grouped into about ``target`` partitions of near-equal record counts:
every Spark task pays a fixed cost (~70-100 ms on a 2-core machine: task launch, shipping the
read function to a Python worker), so one partition per 16 MiB segment left a 1M-record read
~20% slower than the same slices read as one partition per core. That is the rule Spark's own
file sources follow (about one split per core, ``spark.sql.files.maxPartitionBytes`` at most),
with ``slice_records`` as the cap.

Ensures: the groups hold every slice exactly once, in offset order (concatenated, they are the
slices); a group is never empty; there are never more groups than slices.

Example::

    >>> segs = [Segment("a", 0, 10), Segment("b", 10, 20), Segment("c", 20, None)]
    >>> [[s.path for s in p.slices] for p in group(plan(segs, 0, None, 100), target=2, cap=100)]
    [['a', 'b'], ['c']]
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from pyspark.sql.datasource import InputPartition

__all__ = ["LogSlice", "Segment", "SliceGroup", "available_cores", "group", "plan"]


@dataclass(frozen=True)
class LogSlice(InputPartition):
    """Frames ``[start, end)`` of one segment (``end`` None: to the segment's end)."""

    path: str
    base: int
    start: int
    end: int | None
    # An archived object's (archive URL, segment end, size, CRC) from the manifest, checked when read.
    obj: tuple[str, int, int, int] | None = field(default=None, repr=False)


@dataclass(frozen=True)
class SliceGroup(InputPartition):
    """One Spark partition: consecutive slices, read one after the other."""

    slices: tuple[LogSlice, ...]


@dataclass(frozen=True)
class Segment:
    """A segment as planning sees it: ``end`` is its end offset, None for the active one."""

    path: str
    base: int
    end: int | None
    obj: tuple[str, int, int, int] | None = field(default=None, repr=False)  # see LogSlice.obj


def plan(segments: Sequence[Segment], start: int, end: int | None, slice_records: int) -> list[LogSlice]:
    """Slices covering ``[start, end)``: one per segment, sealed segments split by record count.

    >>> plan([Segment("a", 0, 10), Segment("b", 10, None)], 3, None, 4)
    ... # doctest: +NORMALIZE_WHITESPACE
    [LogSlice(path='a', base=0, start=3, end=7), LogSlice(path='a', base=0, start=7, end=10),
     LogSlice(path='b', base=10, start=10, end=None)]
    """
    out: list[LogSlice] = []
    for i, seg in enumerate(segments):
        # A segment without a known end runs to the next segment's base (or is the active tail).
        seg_end = seg.end if seg.end is not None else (segments[i + 1].base if i + 1 < len(segments) else None)
        lo = max(start, seg.base)
        hi = seg_end if end is None else (end if seg_end is None else min(end, seg_end))
        if hi is not None and lo >= hi:
            continue
        if hi is None:
            out.append(LogSlice(seg.path, seg.base, lo, None, seg.obj))
            continue
        s = lo
        while s < hi:
            e = min(hi, s + slice_records)
            out.append(LogSlice(seg.path, seg.base, s, e, seg.obj))
            s = e
    return out


def _sizes(slices: Sequence[LogSlice]) -> list[float]:
    """Record counts; an open-ended slice (the active segment) is guessed as an average one.

    Only balance depends on the guess: a wrong one costs at most one segment of imbalance.
    """
    known = [s.end - s.start for s in slices if s.end is not None]
    guess = sum(known) / len(known) if known else 1.0
    return [float(s.end - s.start) if s.end is not None else guess for s in slices]


def group(slices: Sequence[LogSlice], target: int, cap: int) -> list[SliceGroup]:
    """Consecutive slices grouped into about ``max(target, records / cap)`` balanced partitions.

    A slice joins the next group when its middle lies past the ideal cut, so each group's
    record count is within half a slice of ``records / groups``.

    >>> s = [LogSlice("x", 0, i * 10, i * 10 + 10) for i in range(6)]
    >>> [len(g.slices) for g in group(s, target=2, cap=1000)]
    [3, 3]
    >>> [len(g.slices) for g in group(s, target=2, cap=20)]
    [2, 2, 2]
    >>> [len(g.slices) for g in group(s, target=8, cap=1000)]
    [1, 1, 1, 1, 1, 1]
    """
    sizes = _sizes(slices)
    total = sum(sizes)
    count = min(len(slices), max(1, target, math.ceil(total / cap)))
    if count >= len(slices):
        return [SliceGroup((s,)) for s in slices]
    out: list[SliceGroup] = []
    current: list[LogSlice] = []
    done = 0.0
    for s, size in zip(slices, sizes, strict=True):
        cut = total * (len(out) + 1) / count
        if current and done + size / 2 > cut and len(out) < count - 1:
            out.append(SliceGroup(tuple(current)))
            current = []
        current.append(s)
        done += size
    out.append(SliceGroup(tuple(current)))
    return out


def available_cores() -> int:
    """CPUs this process may run on: the default partition target.

    Planning runs in a Python worker on the driver, which cannot see Spark's default
    parallelism; on ``local[*]`` the two agree. Elsewhere pass ``.option("partitions", N)``.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)
