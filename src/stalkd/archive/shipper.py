"""Shipping sealed WAL segments and snapshots to an archive, on a thread of its own.

The shipper polls the server's data directory (``wal/``, ``wal/archive/``, ``snapshots/``):
it never touches the event loop or the writer's state, so a put is never blocked by it; it
competes only for the GIL while it checks a segment's frames. For each sealed segment past
what the manifest covers, in offset order, it

1. builds the segment's compact image: header, frames up to the footer's ``data_end``, and the
   footer (the preallocated zeros between are dropped; the image is itself a valid segment),
   checking every frame's CRC on the way and noting the first and last timestamps;
2. writes it with ``Store.put_atomic`` under ``segments/``;
3. writes the manifest's last part with the segment's entry, then publishes the index counting
   it (written last, so a crash at any step leaves nothing a reader takes for a segment; the
   next start ships the segment again under the same name). Each publish rewrites one part of
   at most ``part_size`` entries and the small index, whatever the archive's size.

Snapshots are shipped too, with the WAL offset each needs records from. A snapshot no reader
needs is pruned: rebuilding the queue from the archive starts at the newest shipped snapshot
whose records are all shipped (its ``start`` at or below the archive's end), so every older one
is dropped from the index and then deleted (a reader holding the previous index may find it
gone, and reads the new index again).

A failed step is retried after a jittered exponential delay (``retry_delay``), forever: the
server's retention holds every segment not yet shipped (``shipped_end``), so a store that is
down costs disk space, never history.

Ensures: the manifest's segments are exactly the shipped ones, in offset order; every object a
manifest names was complete before the manifest was written; a segment below ``shipped_end()``
is in the archive; a pruned snapshot is out of the index before its object is deleted.
"""

from __future__ import annotations

import logging
import mmap
import os
import random
import threading
import time
from collections.abc import Callable

import numpy as np

from stalkd.archive.manifest import (
    MANIFEST_NAME,
    PART_SIZE,
    Index,
    Part,
    SegmentEntry,
    SnapshotEntry,
)
from stalkd.archive.remote import load_index, load_part
from stalkd.archive.store import Store, StoreError
from stalkd.log.columns import segment_columns
from stalkd.log.crc import crc32c
from stalkd.log.errors import LogCorruptError, NotALogError
from stalkd.log.reader import list_segments
from stalkd.log.segment import FOOTER_SIZE, SegmentView, segment_name
from stalkd.persist.snapfile import SnapshotError, read_header

__all__ = ["Shipper", "retry_delay", "segment_image"]

log = logging.getLogger("stalkd.archive")

SNAP_DIR = "snapshots"  # persist.wal.SNAP_DIR (not imported: the WAL is not needed here)
WAL_DIR = "wal"


def retry_delay(attempt: int, *, base: float = 0.2, cap: float = 30.0, rand: float) -> float:
    """Seconds before retry number ``attempt`` (1-based): full jitter under a doubling cap.

    >>> retry_delay(1, rand=0.5), retry_delay(3, rand=0.5), retry_delay(40, rand=0.999) <= 30
    (0.1, 0.4, True)
    """
    return min(cap, base * 2.0 ** min(attempt - 1, 60)) * rand


def segment_image(path: str) -> tuple[mmap.mmap, SegmentEntry] | None:
    """The compact image of the sealed segment at ``path`` and its manifest entry (None if not sealed).

    Raises LogCorruptError if a frame inside the sealed range fails its checks.
    """
    view = SegmentView(path)
    try:
        if view.footer is None:
            return None
        end, data_end = view.footer
        lo: int | None = None
        hi = 0
        for cols in segment_columns(view, view.base, end, 65536):
            src = np.frombuffer(cols.buf, np.uint8)
            stamps = src[: len(src) // 8 * 8].view("<i8")[(np.array(cols.positions, np.int64) >> 3) + 2]
            lo = int(stamps.min()) if lo is None else min(lo, int(stamps.min()))
            hi = max(hi, int(stamps.max()))
            del src, stamps, cols
        image = _read_image(path, data_end, view.size)
        name = f"segments/{segment_name(view.base)}"
        return image, SegmentEntry(name, view.base, end, lo or 0, hi, len(image), crc32c(image))
    finally:
        view.close()


def _read_image(path: str, data_end: int, size: int) -> mmap.mmap:
    """Bytes ``[0, data_end)`` and the footer of the segment file at ``path``, in one buffer.

    Read with ``preadv`` into anonymous memory rather than copied out of the file's mapping: a
    copy (or a zero-filled ``bytearray``) is one C call holding the GIL for as long as it takes,
    page faults included, which the event loop would wait out (tens of ms for a large segment);
    a read releases the GIL, and the anonymous pages are faulted in inside it. ``crc32c``
    releases the GIL too, above 32 KiB.
    """
    image = mmap.mmap(-1, data_end + FOOTER_SIZE)
    mv = memoryview(image)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for dst, at in ((mv[:data_end], 0), (mv[data_end:], size - FOOTER_SIZE)):
            while len(dst):
                n = os.preadv(fd, [dst], at)
                if n <= 0:
                    raise LogCorruptError(f"{path}: ends at {at}, before its footer", path=path,
                                          position=at, offset=None)
                dst, at = dst[n:], at + n
    finally:
        os.close(fd)
    return image


class Shipper:
    """Ships ``data_dir``'s sealed segments and snapshots to ``store``; see the module docstring.

    >>> # s = Shipper("/data", Store.open("s3://bucket/q")); s.start(); ...; s.stop()
    """

    def __init__(self, data_dir: str, store: Store, *, poll: float = 0.5, part_size: int = PART_SIZE,
                 rand: Callable[[], float] = random.random) -> None:  # fmt: skip
        self.data_dir = data_dir
        self.wal_dir = os.path.join(data_dir, WAL_DIR)
        self.store = store
        self.poll = poll
        self.part_size = part_size  # for a new archive; an existing one keeps its own
        self._rand = rand
        self._index: Index | None = None
        self._last = Part()  # the index's last part (the one that grows)
        self._shipped_end = 0  # read by the retention hold from other threads: an int is atomic
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.failures = 0

    # -------------------------------------------------------------- the server's side

    def shipped_end(self) -> int:
        """Every segment wholly below this offset is in the archive: retention may drop it."""
        return self._shipped_end

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="stalkd-archive", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Look for new segments now (e.g. after a roll) rather than at the next poll."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -------------------------------------------------------------- one pass

    def load(self) -> Index:
        """The published index (empty if the archive is new), and its last part in ``_last``.
        A format-1 manifest is converted: its parts are written, then a format-2 index."""
        if self._index is None:
            try:
                index = load_index(self.store)
            except NotALogError:
                index = Index(part_size=self.part_size)
            if index.inline is not None:
                index, parts = Index.from_v1(index.inline.segments, index.snapshots, self.part_size)
                for name, part in parts:
                    self.store.put_atomic(name, part.encode())
                self.store.put_atomic(MANIFEST_NAME, index.encode())
            self._last = Part(load_part(self.store, index.parts[-1])) if index.parts else Part()
            self._index = index
            self._shipped_end = index.end
        return self._index

    def ship_once(self) -> int:
        """Ship every sealed segment and snapshot not yet in the archive, then prune snapshots
        no reader needs; returns segments shipped."""
        index = self.load()
        shipped = 0
        for base, path, _archived in list_segments(self.wal_dir, archive=True):
            if base < index.end:
                continue
            try:
                got = segment_image(path)
            except FileNotFoundError:  # moved to wal/archive/ meanwhile: the next pass finds it
                break
            if got is None:
                break  # the active segment: everything after it is newer still
            image, entry = got
            if index.parts and entry.base != index.end:
                log.warning("archive %s: offsets %d..%d are missing (deleted before they were "
                            "shipped); shipping from %d", self.store.url, index.end, entry.base - 1, entry.base)
            self.store.put_atomic(entry.name, image)
            index, part = index.with_segment(self._last, entry)
            self.store.put_atomic(index.parts[-1].name, part.encode())
            self._publish(index)
            self._last = part
            shipped += 1
            log.info("archived %s (offsets %d..%d, %d bytes)", entry.name, entry.base, entry.end - 1, entry.size)
        self._ship_snapshots()
        self._prune_snapshots()
        return shipped

    def _ship_snapshots(self) -> None:
        index = self.load()
        have = {s.name for s in index.snapshots}
        snap_dir = os.path.join(self.data_dir, SNAP_DIR)
        try:
            names = sorted(n for n in os.listdir(snap_dir) if n.endswith(".snap"))
        except FileNotFoundError:
            return
        for n in names:
            name = f"{SNAP_DIR}/{n}"
            if name in have:
                continue
            path = os.path.join(snap_dir, n)
            try:
                start = read_header(path).start_offset
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:  # replaced by a newer one meanwhile
                continue
            except SnapshotError:  # not complete (being written): the next pass takes it
                continue
            index = index.with_snapshot(SnapshotEntry(name, len(data), crc32c(data), start))
            self.store.put_atomic(name, data)
            self._publish(index)

    def _prune_snapshots(self) -> None:
        """Drop every snapshot older than the newest one whose records are all shipped."""
        index = self.load()
        covered = [s for s in index.snapshots if s.start is not None and s.start <= index.end]
        if not covered:
            return
        keep = max(covered, key=lambda s: (s.start or 0, s.name))
        start = keep.start or 0
        old = {s.name for s in index.snapshots
               if s.name < keep.name and (s.start is None or s.start <= start)}  # fmt: skip
        if not old:
            return
        self._publish(index.without_snapshots(old))
        for name in sorted(old):
            try:
                self.store.delete(name)
            except StoreError as exc:  # out of the index: an orphan, harmless; say so
                log.warning("archive %s: could not delete pruned %s: %s", self.store.url, name, exc)

    def _publish(self, index: Index) -> None:
        self.store.put_atomic(MANIFEST_NAME, index.encode())
        self._index = index
        self._shipped_end = index.end

    def _run(self) -> None:
        attempt = 0
        while not self._stop.is_set():
            try:
                self.ship_once()
                attempt = 0
                wait = self.poll
            except (OSError, StoreError, ValueError) as exc:
                attempt += 1
                self.failures += 1
                self._index = None  # re-read: a failed publish may or may not have landed
                wait = retry_delay(attempt, rand=self._rand())
                log.warning("archive %s: shipping failed (attempt %d, retry in %.1f s): %s",
                            self.store.url, attempt, wait, exc)
            except Exception:  # a bug or corruption: say so loudly, keep the server up, retry slowly
                attempt += 1
                self.failures += 1
                self._index = None
                wait = retry_delay(attempt, cap=300.0, rand=self._rand())
                log.exception("archive %s: shipping failed (attempt %d, retry in %.1f s)",
                              self.store.url, attempt, wait)
            self._wake.wait(wait)
            self._wake.clear()
        # A last pass on a clean stop ships the segment sealed by the shutdown, if any.
        t0 = time.monotonic()
        try:
            self.ship_once()
        except Exception as exc:
            log.warning("archive %s: final pass failed after %.1f s: %s", self.store.url, time.monotonic() - t0, exc)
