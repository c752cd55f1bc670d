"""Epochs: who may act as primary, and since which log offset. The fencing rule lives here.

Every promotion starts a new epoch, written into the log as an EPOCH record at the offset where
it begins (``engine.handover.epoch_record``); snapshots carry the epochs before their start in
their header, so the history is the log's own: ``history`` lists ``(epoch, first offset)`` of
each epoch the log went through, oldest first (a log never promoted has epoch 0 and no
history). A standby receives the records through the ordinary stream. What the log cannot say
is that a *peer* follows a newer epoch (``fenced``): that observation is this server's alone
and is kept in ``DIR/replication.json``, replaced whole (write, fsync, rename), with two more
facts of this directory's (``Saved``): that a standby once streamed from it (``had_standbys``:
a restart then checks for a newer epoch before acknowledging) and the epoch it was promoted to
(``promoted``: it stays primary across restarts whatever its command line says).

Ensures (the rules, pure functions of the state):
- ``diverged_at``: a standby that followed ``epoch`` and holds the log up to ``offset`` shares
  this server's log up to the returned offset; past it its records were never this lineage's
  (written by a primary that was then replaced) and must be cut.
- A server that has seen a newer epoch than its log's (``fenced``) never acts as primary again
  until its log reaches that epoch (as a standby of the newer lineage); ``fenced`` survives a
  restart.
- ``verify_claim``: a peer's claim of a newer epoch fences this server only when the claimed
  history is a continuation of this server's own: the same epochs up to ours, then newer
  ones forking at or after the start of ours (a promotion of one of our standbys, which may
  hold records of ours this log lost in a power cut). A bare number proves nothing.
- ``scan`` gives the history a recovery of the directory would give, without recovering it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from stalkd.engine.model import Op, decode
from stalkd.engine.replay import ID_BAND
from stalkd.values import Value

if TYPE_CHECKING:
    from stalkd.log.fs import FileSystem

__all__ = ["EpochState", "STATE_FILE", "Saved", "load_state", "save_state", "diverged_at", "next_epoch",
           "of_history", "saw_epoch", "scan", "verify_claim", "MAX_EPOCH"]  # fmt: skip

STATE_FILE = "replication.json"
_EPOCH = int(Op.EPOCH)
MAX_EPOCH = (1 << 53) // ID_BAND - 1  # job ids stay below 2**53 (replay.ID_BAND)


class EpochState(Value):
    """``epoch``: the lineage this server's log belongs to; ``history``: ``(epoch, first
    offset)`` per promotion; ``fenced``: a newer epoch seen (0: none)."""

    __slots__ = ("epoch", "history", "fenced")
    epoch: int
    history: tuple[tuple[int, int], ...]
    fenced: int

    def __init__(self, epoch: int = 0, history: tuple[tuple[int, int], ...] = (), fenced: int = 0) -> None:
        self.epoch = epoch
        self.history = history
        self.fenced = fenced

    @property
    def may_lead(self) -> bool:
        """Whether this server may act as primary (no newer epoch seen)."""
        return self.fenced <= self.epoch


def of_history(history: tuple[tuple[int, int], ...], fenced: int = 0) -> EpochState:
    """The state of a log with ``history``.

    >>> of_history(((1, 40), (3, 90)), 2).epoch
    3
    """
    return EpochState(history[-1][0] if history else 0, history, fenced)


def diverged_at(mine: EpochState, my_next: int, their_epoch: int, their_offset: int) -> int | None:
    """Where a standby's log (``their_offset`` records, written under ``their_epoch``) must be
    cut to continue from this primary's; None when it is a prefix of this log.

    >>> s = EpochState(2, ((1, 100), (2, 250)))
    >>> diverged_at(s, 300, 2, 280), diverged_at(s, 300, 0, 120), diverged_at(s, 300, 1, 260)
    (None, 100, 250)
    >>> diverged_at(s, 300, 2, 310)
    300
    """
    end = my_next
    for epoch, start in mine.history:
        if epoch > their_epoch:
            end = start  # the first epoch they did not follow began here
            break
    return end if their_offset > end else None


def next_epoch(s: EpochState) -> int:
    """The epoch a promotion of this server starts (newer than any it has seen).

    >>> next_epoch(EpochState()), next_epoch(EpochState(1, ((1, 4),), fenced=3))
    (1, 4)
    """
    return max(s.epoch, s.fenced) + 1


def verify_claim(mine: EpochState, my_next: int, epoch: int, history: tuple[tuple[int, int], ...]) -> str | None:
    """None when a peer following ``epoch`` with ``history`` proves a lineage newer than this
    server's (which must then stop acting as primary); else why the claim does not.

    >>> s = EpochState(1, ((1, 100),))
    >>> verify_claim(s, 300, 2, ((1, 100), (2, 250))) is None
    True
    >>> verify_claim(s, 300, 4242, ())
    'epoch 4242 comes with no history'
    >>> verify_claim(s, 300, 2, ((2, 250),))
    'its history lacks our epoch 1 from offset 100'

    A fork past the end of our log proves as much: our standby held records we lost (the two
    machines lost power together, and we had streamed writes before our own fsync ended), and
    it was promoted at its longer end. Refusing that claim would leave two primaries.

    >>> verify_claim(s, 200, 2, ((1, 100), (2, 250))) is None
    True
    """
    if epoch <= max(mine.epoch, mine.fenced):
        return f"epoch {epoch} is not newer than ours"
    if not history or history[-1][0] != epoch:
        return f"epoch {epoch} comes with no history" if not history else \
            f"its history ends at epoch {history[-1][0]}, not {epoch}"
    if any(b[0] <= a[0] or b[1] < a[1] for a, b in zip(history, history[1:], strict=False)):
        return "its history is not in order"
    theirs = dict(history)
    for e, start in mine.history:
        if theirs.get(e) != start:
            return f"its history lacks our epoch {e} from offset {start}"
    fork = next(start for e, start in history if e > mine.epoch)
    if mine.history and fork < mine.history[-1][1]:
        return f"it forked at offset {fork}, before our epoch {mine.epoch} began"
    return None


def saw_epoch(s: EpochState, epoch: int) -> EpochState:
    """``epoch`` was seen somewhere (a peer's handshake): newer than ours fences us."""
    return s.replace(fenced=epoch) if epoch > max(s.epoch, s.fenced) else s


def scan(directory: str) -> tuple[tuple[int, int], ...]:
    """The history of ``directory``'s log: its newest complete snapshot's epochs, then the
    EPOCH records from that snapshot's start on (what ``Wal.recover`` would give, read before
    a standby's catch-up changes the directory; no lock taken, nothing written)."""
    # The snapshot and log readers are imported here, not at the top: ``Role`` (every server,
    # also one in memory) needs only the pure functions above at start-up.
    from stalkd.log import LogReader
    from stalkd.persist.snapshot import SnapshotError, list_snapshots, read_header

    history: dict[int, int] = {}
    start = 0
    for path in list_snapshots(os.path.join(directory, "snapshots")):
        try:
            h = read_header(path)
        except SnapshotError:
            continue  # incomplete: recovery falls back to an older one too
        history.update(h.epochs)
        start = h.start_offset
        break
    wal = os.path.join(directory, "wal")
    if os.path.isdir(wal):
        with LogReader(wal, archive=False) as r:
            for f in r.read(start):
                p = f.payload
                if len(p) > 1 and p[1] == _EPOCH:
                    rec = decode(p)
                    if rec.op is Op.EPOCH:
                        history.setdefault(rec.epoch, rec.start_offset)
    return tuple(sorted(history.items()))


class Saved(Value):
    """What ``DIR/replication.json`` keeps: a newer epoch seen (``fenced``), whether a standby
    ever streamed from this directory, and the epoch a promotion of it started (0: never)."""

    __slots__ = ("fenced", "had_standbys", "promoted")
    fenced: int
    had_standbys: bool
    promoted: int

    def __init__(self, fenced: int = 0, had_standbys: bool = False, promoted: int = 0) -> None:
        self.fenced = fenced
        self.had_standbys = had_standbys
        self.promoted = promoted


def load_state(directory: str) -> Saved:
    """The saved state (all defaults without a file). A state file of an earlier build also
    held the epoch and its history, now read from the log: they are ignored."""
    path = os.path.join(directory, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return Saved()
    except (OSError, ValueError) as e:  # ValueError: not UTF-8
        raise _unreadable(path, e) from None
    # json here and in save_state, once there is a file: a server in memory, or a new data
    # directory, never parses one (importing json takes ~1.5 ms of a start)
    import json

    try:
        doc = json.loads(text)
        return Saved(int(doc.get("fenced", 0)), bool(doc.get("had_standbys", False)), int(doc.get("promoted", 0)))
    except (ValueError, AttributeError, TypeError) as e:
        raise _unreadable(path, e) from None


def _unreadable(path: str, e: Exception) -> ValueError:
    return ValueError(f"{path}: unreadable replication state ({e}); move it away only if this "
                      "server never took part in a failover")


def save_state(directory: str, saved: Saved, fs: FileSystem | None = None) -> None:
    """Replace the state file durably (temporary file, fsync, rename, directory fsync);
    ``fs`` defaults to the real file system."""
    import json

    if fs is None:
        from stalkd.log.fs import REAL

        fs = REAL
    path = os.path.join(directory, STATE_FILE)
    tmp = path + ".tmp"
    data = json.dumps({"fenced": saved.fenced, "had_standbys": saved.had_standbys,
                       "promoted": saved.promoted}).encode() + b"\n"  # fmt: skip
    fd = fs.open(tmp, os.O_WRONLY, create=True, truncate=True)
    try:
        fs.pwrite_all(fd, data, 0)
        fs.fdatasync(fd)
    finally:
        os.close(fd)
    fs.replace(tmp, path)
    fs.fsync_dir(directory)
