"""Recovery: what a writer finds in a log directory when it opens it, and what ``check`` reports.

Sealed segments are trusted through their footers (only the footer is read), so opening costs
one scan of the active segment whatever the log's size. That scan tells a torn tail from damage:

* torn tail: nothing valid follows the first bad frame (a write a crash interrupted). It is cut
  (the bytes zeroed) with one WARNING line naming the bytes dropped;
* damage: valid frames follow the bad one, the file is shorter than its data (segments are
  preallocated, so a crash never shortens one), the log ends with a sealed segment (the
  active one that must follow it is gone), or the log ends below its high-water mark
  (``mark.py``: records known to have been durable are missing, whatever the bytes look like),
  or it has no segment at all although the directory says a log existed (its mark, spare
  segments). Opening refuses, naming the file, byte, log offset, how many valid frames follow,
  and the command that cuts the log there.

``mode="repair"`` (``stalkd log repair``, ``stalkd serve --repair``) also verifies every frame of
the sealed segments and cuts the log at the first damage: the bytes beyond the cut are copied to a
quarantine file in ``dropped/`` (mode 0600) and later segments are moved there, never deleted;
the report lists the records still readable in what was dropped. ``mode="check"`` (``stalkd log
inspect --verify``) runs the same decisions read-only and returns the damage found.

What a cut changes on disk (zeroing, footers, ``dropped/``) is in ``repairs``.

Before a writer continues (``open``, ``repair``), the last sealed segment is fdatasynced. Its
footer was read from the page cache, which a kill -9 between the writer's store of the footer and
its fdatasync leaves there, footer and frames not durable (under ``never`` and ``every``, a
segment's frames reach the disk with its seal); nothing syncs that segment again, so a power cut
later would lose it while the segments written after it survive, and the log would refuse to open
with every later record beyond a repair's cut (the power-loss campaign, campaign/logcut.py, found
it: about one run in twenty under ``never``). Only that one can be unsynced: a writer seals each
segment, durably, before the next receives a frame, and every open syncs the last one.

Ensures: the result describes a prefix of the directory's frames that is dense in offsets and
CRC-valid; ``open`` changes nothing but a torn tail's bytes, empty segments and a missing footer
left by a crash during a roll-over; a log that lost acknowledged records is never opened silently.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Literal

from stalkd.values import Value

from .active import SPARES_DIR
from .errors import LogCorruptError
from .frame import scan_positions
from .fs import REAL, FileSystem
from .mark import MARK_NAME, MarkError, read_mark
from .reader import list_segments
from .repairs import DROPPED_DIR, ZEROS, RepairReport, cut, quarantine, write_footer, zero
from .segment import (
    FOOTER_SIZE,
    HEADER_SIZE,
    ScanState,
    SegmentView,
    segment_name,
)

__all__ = ["DROPPED_DIR", "Damage", "Recovered", "RepairReport", "recover", "refusal"]

_log = logging.getLogger("stalkd.log.recovery")


class Damage(Value):
    """Where a log is damaged: ``path``/``position`` (file and byte), ``offset`` (the log offset
    expected there), ``following`` (valid frames found beyond it) and what is wrong.

    >>> Damage("wal/seg-00000000000000000000.log", 20000, 312, 4, "bad frame").describe()
    'wal/seg-00000000000000000000.log, byte 20000 (log offset 312): bad frame; 4 valid frames follow it'
    """

    __slots__ = ("path", "position", "offset", "following", "reason")
    path: str
    position: int
    offset: int
    following: int
    reason: str

    def __init__(self, path: str, position: int, offset: int, following: int, reason: str) -> None:
        self.path = path
        self.position = position
        self.offset = offset
        self.following = following
        self.reason = reason

    def describe(self) -> str:
        verb = "follows" if self.following == 1 else "follow"
        noun = "frame" if self.following == 1 else "frames"
        return (f"{self.path}, byte {self.position} (log offset {self.offset}): {self.reason}; "
                f"{self.following} valid {noun} {verb} it")  # fmt: skip


def refusal(d: Damage, root: str) -> LogCorruptError:
    """The error that refuses to open a damaged log, naming the command that repairs it."""
    return LogCorruptError(
        f"{d.describe()}. The log is damaged, not torn by a crash, so it is not opened. To cut it "
        f"there and continue (bytes cut off are kept in {os.path.join(root, DROPPED_DIR)}/), run: "
        f"stalkd log repair {root}   (or start the server with --repair)",
        path=d.path, position=d.position, offset=d.offset,
    )  # fmt: skip


class Recovered(Value):
    """The state to continue from: sealed (base, end, path) segments, the next offset, and the
    active segment as (path, base, data end position, epoch), or None to start a new segment.
    ``damage`` (check mode) lists what an open would refuse; ``torn`` the bytes of a torn tail;
    ``mark`` the high-water mark found (None: no mark file, or an unreadable one a repair replaces)."""

    __slots__ = ("sealed", "next_offset", "active", "repair", "damage", "torn", "mark")
    sealed: tuple[tuple[int, int, str], ...]
    next_offset: int
    active: tuple[str, int, int, int] | None
    repair: RepairReport | None
    damage: tuple[Damage, ...]
    torn: int
    mark: int | None

    def __init__(self, sealed: tuple[tuple[int, int, str], ...], next_offset: int,
                 active: tuple[str, int, int, int] | None, repair: RepairReport | None,
                 damage: tuple[Damage, ...] = (), torn: int = 0, mark: int | None = None) -> None:  # fmt: skip
        self.sealed = sealed
        self.next_offset = next_offset
        self.active = active
        self.repair = repair
        self.damage = damage
        self.torn = torn
        self.mark = mark


class _Tail(Value):
    """The scan of the last (unsealed) segment: data ends at ``data_end`` (offset ``next_offset``);
    non-zero bytes run on to ``extent``; ``found`` are valid frames beyond the data end."""

    __slots__ = ("data_end", "next_offset", "extent", "damage", "found")
    data_end: int
    next_offset: int
    extent: int
    damage: Damage | None
    found: list[tuple[int, int, bytes]]

    def __init__(self, data_end: int, next_offset: int, extent: int, damage: Damage | None,
                 found: list[tuple[int, int, bytes]] | None = None) -> None:  # fmt: skip
        self.data_end = data_end
        self.next_offset = next_offset
        self.extent = extent
        self.damage = damage
        self.found = [] if found is None else found


# Offsets past a segment's base that no scan reaches: the column scan below lists no frame
# (every one checked) and never stops for a row limit.
_NONE_LISTED = 1 << 62


def _scan_all(view: SegmentView) -> ScanState:
    """Where the frames of ``view`` stop being valid, every one checked: the column scan
    (compiled, a C loop over the mapping), listing nothing; ``scan`` would build a Frame and a
    payload view per record, for nothing (opening a log after a crash walks its active segment)."""
    st = ScanState(HEADER_SIZE, view.base)
    b = view.base
    scan_positions(view.mv, b, view.epoch, st, view.size, None, b + _NONE_LISTED, _NONE_LISTED)
    return st


def _last_nonzero(view: SegmentView, start: int, stop: int) -> int:
    """End of the non-zero bytes in ``[start, stop)`` (``start`` if all are zero)."""
    end = stop
    while end > start:
        lo = max(start, end - len(ZEROS))
        chunk = bytes(view.mv[lo:end])
        # Compared whole first (a memcmp): rstrip tests each byte against its argument, far
        # slower, and opening a torn active segment scans all of its empty preallocated rest
        if chunk != ZEROS[: end - lo]:
            return lo + len(chunk.rstrip(b"\0"))
        end = lo
    return start


def _check_tail(view: SegmentView) -> _Tail:
    size = view.size
    for _ in range(8):
        st = _scan_all(view)
        found = view.find_frames(st.pos, size, st.offset)
        if not found or found[0][1] != st.pos:
            break
        # The frame the scan stopped at is valid now: a live writer (``stalkd log inspect``
        # beside a server) finished it meanwhile. Scan again.
    footer_room_dirty = _last_nonzero(view, max(st.pos, size - FOOTER_SIZE), size) > max(st.pos, size - FOOTER_SIZE)
    if st.status == "end" and not found and not footer_room_dirty and st.pos + FOOTER_SIZE <= size:
        return _Tail(st.pos, st.offset, st.pos, None)
    extent = _last_nonzero(view, st.pos, size)
    dmg = None
    if found:
        dmg = Damage(view.path, st.pos, st.offset, len(found), "bad frame in the active segment")
    elif footer_room_dirty or st.pos + FOOTER_SIZE > size:
        dmg = Damage(view.path, st.pos, st.offset, 0,
                     f"the file was cut short: it is {size} bytes and its data runs into its end (a segment "
                     "is preallocated and a crash never shortens one), so the records past its end are lost")  # fmt: skip
    return _Tail(st.pos, st.offset, extent, dmg, found)


def _verify(view: SegmentView) -> tuple[int, int] | None:
    """(position, offset) of the first bad frame of a sealed segment, or None."""
    try:
        for _ in view.frames(view.base):
            pass
    except LogCorruptError as e:
        return e.position, e.offset if e.offset is not None else view.base
    return None


def _following(views: list[SegmentView], i: int, pos: int, offset: int) -> int:
    """Valid frames beyond byte ``pos`` of views[i], counting every later segment's too."""
    n = len(views[i].find_frames(pos, views[i].size, offset))
    for v in views[i + 1 :]:
        n += v.footer[0] - v.base if v.footer is not None else len(v.find_frames(HEADER_SIZE, v.size, v.base))
    return n


Mode = Literal["open", "repair", "check"]


def _sync_sealed(fs: FileSystem, path: str) -> None:
    """Make a sealed segment's footer and frames durable (see the module docstring); a no-op for
    the disk when its seal's own fdatasync ran."""
    fd = fs.open_read(path)
    try:
        fs.fdatasync(fd)
    finally:
        os.close(fd)


def _existed(root: str) -> str | None:
    """What in a directory without segments says a log was there (its mark, spare segments), or
    None. (``LOCK`` alone does not: a first open killed before its first segment leaves only it.)"""
    if os.path.exists(os.path.join(root, MARK_NAME)):
        return f"its high-water mark {MARK_NAME}"
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        if os.listdir(os.path.join(root, SPARES_DIR)):
            return f"its spare segments in {SPARES_DIR}/"
    return None


def _below_mark(path: str, position: int, end: int, mark: int) -> Damage:
    lost = mark - end
    return Damage(path, position, end, 0,
                  f"the log ends at offset {end}, but its high-water mark ({MARK_NAME}) says records up to "
                  f"offset {mark} were durable: {lost} acknowledged record{'s' if lost != 1 else ''} "
                  "missing or damaged after they were written, not torn by a crash")  # fmt: skip


def recover(root: str, repair: bool = False, *, mode: Mode | None = None, verify: bool = False,
            fs: FileSystem = REAL) -> Recovered:
    """Inspect ``root`` and decide where the writer continues (``open``, the caller holding the
    lock), cut the log at its first damage (``repair``), or only report (``check``, read-only;
    ``verify`` also checks every frame of the sealed segments, as a repair does). Every change
    it makes to the directory goes through ``fs``.

    Raises LogCorruptError (see ``refusal``) when ``open`` finds damage.
    """
    mode = mode or ("repair" if repair else "open")
    act = mode != "check"
    verify = verify or mode == "repair"
    if act:
        for name in os.listdir(root):
            if name.startswith("seg-") and name.endswith(".log.tmp"):
                fs.unlink(os.path.join(root, name))  # a segment whose creation a crash interrupted
    segs = list_segments(root, archive=False)
    files = [p for _, p, _ in segs]
    views: list[SegmentView] = []
    report: RepairReport | None = None
    found: list[Damage] = []

    def damaged(d: Damage) -> bool:
        """Refuse (open), note (check); True to cut here (repair)."""
        if mode == "open":
            raise refusal(d, root)
        if mode == "check":
            found.append(d)
        return mode == "repair"

    mark: int | None = None
    try:
        mark = read_mark(root, fs)
    except MarkError as e:  # a repair writes a new mark at the end it finds
        if mode == "open":
            raise
        if mode == "check":
            found.append(Damage(os.path.join(root, MARK_NAME), 0, 0, 0, str(e)))
    if not segs:
        why = _existed(root)
        if why is not None:
            d = Damage(os.path.join(root, segment_name(0)), 0, 0, 0,
                       f"no segment file, yet {why} says a log existed here: its records are lost"
                       + (f" (up to offset {mark} acknowledged)" if mark else ""))  # fmt: skip
            if damaged(d):
                report = RepairReport(d.path, 0, 0, d.reason, ())

    try:
        for i, (base, p, _) in enumerate(segs):
            try:
                views.append(SegmentView(p))
            except LogCorruptError as e:
                prev_end = views[-1].footer[0] if views and views[-1].footer else base
                if damaged(Damage(p, e.position, prev_end, 0, f"unreadable segment ({e})")):
                    report = cut(fs, root, files, views, i, None, 0, prev_end, f"unreadable segment: {e}")
                break
        n = len(views)
        i = 0
        while i < n - 1:
            view, nxt = views[i], views[i + 1].base
            if view.footer is not None:
                if view.footer[0] != nxt:
                    d = Damage(view.path, view.size - FOOTER_SIZE, view.footer[0], _following(views, i + 1, HEADER_SIZE, 0),
                               f"gap in offsets: the footer ends at offset {view.footer[0]} but the next "
                               f"segment starts at {nxt}")  # fmt: skip
                    if damaged(d):
                        report = cut(fs, root, files, views, i + 1, None, 0, view.footer[0], "gap in offsets")
                    n = i + 1
                    break
                bad = _verify(view) if verify else None
                if bad is not None:
                    d = Damage(view.path, bad[0], bad[1], _following(views, i, bad[0], bad[1]),
                               "bad frame in a sealed segment")  # fmt: skip
                    if damaged(d):
                        report = cut(fs, root, files, views, i + 1, view, bad[0], bad[1], "bad frame in sealed segment")
                    n = i + 1
                    break
                i += 1
                continue
            # No valid footer on a segment that is not the last: a crash while rolling over (the
            # next segment is created before this footer is written), or damage.
            st = _scan_all(view)
            later = views[i + 1 : n]
            if all(v.footer is None and _scan_all(v).offset == v.base for v in later):
                if act:
                    for v in later:
                        v.close()
                        fs.unlink(v.path)
                    # the footer write the crash interrupted may have left bytes in its room
                    zero(fs, view.path, view.size - FOOTER_SIZE, view.size)
                    with contextlib.suppress(OSError):
                        fs.fsync_dir(root)
                    n = i + 1
                    break
                n = i + 1
                break
            if st.offset == nxt and st.status == "end":
                if act:
                    write_footer(fs, view.path, view.base, st.offset, st.pos, view.epoch)
                    view.footer = (st.offset, st.pos)
                i += 1
                continue
            d = Damage(view.path, st.pos, st.offset, _following(views, i, st.pos, st.offset),
                       "bad frame in a sealed segment without a valid footer")  # fmt: skip
            if damaged(d):
                report = cut(fs, root, files, views, i + 1, view, st.pos, st.offset, "bad frame in sealed segment")
            n = i + 1
            break
        views = views[:n]
        if not views:
            return Recovered((), report.offset if report else 0, None, report, tuple(found), mark=mark)
        sealed = [(v.base, v.footer[0], v.path) for v in views[:-1] if v.footer is not None]
        last = views[-1]
        if last.footer is not None and (mode != "check" or not found):
            end = last.footer[0]
            d = Damage(last.path, last.size - FOOTER_SIZE, end, 0,
                       f"the log ends with a sealed segment: the active segment that must follow it "
                       f"({segment_name(end)}, from offset {end}) is missing, so its records are lost")  # fmt: skip
            if damaged(d):
                report = report or RepairReport(os.path.join(root, segment_name(end)), 0, end,
                                                "active segment missing", ())  # fmt: skip
            sealed.append((last.base, end, last.path))
            if act:
                _sync_sealed(fs, last.path)
            return Recovered(tuple(sealed), end, None, report, tuple(found), mark=mark)
        tail = _check_tail(last)
        if tail.damage is None and mark is not None and tail.next_offset < mark:
            tail.damage = _below_mark(last.path, tail.data_end, tail.next_offset, mark)
        torn = tail.extent - tail.data_end
        if tail.damage is not None and damaged(tail.damage):
            q = quarantine(fs, root, last, tail.data_end, tail.extent) if torn else None
            zero(fs, last.path, tail.data_end, tail.extent)
            salvaged = tuple((o, p) for o, _, p in tail.found)
            if report is None:
                report = RepairReport(last.path, tail.data_end, tail.next_offset, tail.damage.reason,
                                      (q,) if q else (), salvaged)  # fmt: skip
            else:
                report = RepairReport(report.path, report.position, report.offset, report.reason,
                                      report.dropped_files + ((q,) if q else ()), report.salvaged + salvaged)  # fmt: skip
            torn = 0
        elif tail.damage is None and torn and act:
            zero(fs, last.path, tail.data_end, tail.extent)
            _log.warning("%s: torn tail cut: %d bytes dropped at byte %d (log offset %d), nothing valid "
                         "after them (a write a crash interrupted)", last.path, torn, tail.data_end, tail.next_offset)
        if tail.damage is not None:  # (check mode: damage, not a torn tail to report as well)
            torn = 0
        if act and sealed:
            _sync_sealed(fs, sealed[-1][2])
        return Recovered(tuple(sealed), tail.next_offset, (last.path, last.base, tail.data_end, last.epoch),
                         report, tuple(found), torn, mark)  # fmt: skip
    finally:
        for v in views:
            v.close()
