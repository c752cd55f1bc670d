"""Epochs: who may act as primary, and since which log offset. The fencing rule lives here.

Every promotion starts a new epoch, written into the log as an EPOCH record at the offset where
it begins (``engine.handover.epoch_record``); snapshots carry the epochs before their start in
their header, so the history is the log's own: ``history`` lists ``(epoch, first offset)`` of
each epoch the log went through, oldest first (a log never promoted has epoch 0 and no
history). A standby receives the records through the ordinary stream. What the log cannot say
is that a *peer* follows a newer epoch (``fenced``): that observation is this server's alone
and is kept in ``DIR/replication.json``, replaced whole (write, fsync, rename).

Ensures (the rules, pure functions of the state):
- ``diverged_at``: a standby that followed ``epoch`` and holds the log up to ``offset`` shares
  this server's log up to the returned offset; past it its records were never this lineage's
  (written by a primary that was then replaced) and must be cut.
- A server that has seen a newer epoch than its log's (``fenced``) never acts as primary again
  until its log reaches that epoch (as a standby of the newer lineage); ``fenced`` survives a
  restart.
- ``scan`` gives the history a recovery of the directory would give, without recovering it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from stalkd.engine.model import Op, decode

if TYPE_CHECKING:
    from stalkd.log.fs import FileSystem

__all__ = ["EpochState", "STATE_FILE", "load_fenced", "save_fenced", "diverged_at", "next_epoch", "of_history",
           "saw_epoch", "scan"]  # fmt: skip

STATE_FILE = "replication.json"
_EPOCH = int(Op.EPOCH)


@dataclass(frozen=True, slots=True)
class EpochState:
    """``epoch``: the lineage this server's log belongs to; ``history``: ``(epoch, first
    offset)`` per promotion; ``fenced``: a newer epoch seen (0: none)."""

    epoch: int = 0
    history: tuple[tuple[int, int], ...] = field(default_factory=tuple)
    fenced: int = 0

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


def saw_epoch(s: EpochState, epoch: int) -> EpochState:
    """``epoch`` was seen somewhere (a peer's handshake): newer than ours fences us."""
    return replace(s, fenced=epoch) if epoch > max(s.epoch, s.fenced) else s


def scan(directory: str) -> tuple[tuple[int, int], ...]:
    """The history of ``directory``'s log: its newest complete snapshot's epochs, then the
    EPOCH records from that snapshot's start on (what ``Wal.recover`` would give, read before
    a standby's catch-up changes the directory; no lock taken, nothing written)."""
    # The snapshot and log readers are imported here, not at the top: ``Role`` (every server,
    # also one in memory) needs only the pure functions above at start-up.
    from stalkd.engine.snapshot import SnapshotError, list_snapshots, read_header
    from stalkd.log import LogReader

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


def load_fenced(directory: str) -> int:
    """The newer epoch this server was told of (0: none). A state file of an earlier build also
    held the epoch and its history, now read from the log: only ``fenced`` is taken from it."""
    import json  # here and in save_fenced: a server in memory never reads the file

    path = os.path.join(directory, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return int(doc.get("fenced", 0))
    except FileNotFoundError:
        return 0
    except (OSError, ValueError, AttributeError, TypeError) as e:
        raise ValueError(f"{path}: unreadable replication state ({e}); move it away only if this "
                         "server never took part in a failover") from None


def save_fenced(directory: str, fenced: int, fs: FileSystem | None = None) -> None:
    """Replace the state file durably (temporary file, fsync, rename, directory fsync);
    ``fs`` defaults to the real file system."""
    if fs is None:
        from stalkd.log.fs import REAL

        fs = REAL
    import json

    path = os.path.join(directory, STATE_FILE)
    tmp = path + ".tmp"
    data = json.dumps({"fenced": fenced}).encode() + b"\n"
    fd = fs.open(tmp, os.O_WRONLY, create=True, truncate=True)
    try:
        fs.pwrite_all(fd, data, 0)
        fs.fdatasync(fd)
    finally:
        os.close(fd)
    fs.replace(tmp, path)
    fs.fsync_dir(directory)
