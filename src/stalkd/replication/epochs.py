"""Epochs: who may act as primary, and since which log offset. The fencing rule lives here.

Every promotion starts a new epoch: ``history`` lists ``(epoch, first offset)`` of each epoch
this server's log went through, oldest first (a server never promoted has epoch 0 and no
history). The state is kept in ``DIR/replication.json``, replaced whole (write, fsync, rename),
so a crash leaves the old state or the new one.

Ensures (the rules, pure functions of the state):
- ``diverged_at``: a standby that followed ``epoch`` and holds the log up to ``offset`` shares
  this server's log up to the returned offset; past it its records were never this lineage's
  (written by a primary that was then replaced) and must be cut.
- A server that has seen a newer epoch than its own (``fenced``) never acts as primary again
  until it becomes a standby of the newer lineage; ``fenced`` survives a restart.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace

from stalkd.log.fs import REAL, FileSystem

__all__ = ["EpochState", "STATE_FILE", "load", "save", "diverged_at", "promoted", "saw_epoch", "following"]

STATE_FILE = "replication.json"


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


def promoted(s: EpochState, at_offset: int) -> EpochState:
    """The state after promoting this server with its log ending at ``at_offset``.

    >>> promoted(EpochState(), 40)
    EpochState(epoch=1, history=((1, 40),), fenced=0)
    """
    epoch = max(s.epoch, s.fenced) + 1
    return EpochState(epoch, (*s.history, (epoch, at_offset)), 0)


def saw_epoch(s: EpochState, epoch: int) -> EpochState:
    """``epoch`` was seen somewhere (a peer's handshake): newer than ours fences us."""
    return replace(s, fenced=epoch) if epoch > max(s.epoch, s.fenced) else s


def following(s: EpochState, epoch: int, history: tuple[tuple[int, int], ...]) -> EpochState:
    """The state of a standby now streaming from a primary of ``epoch`` with ``history``."""
    return EpochState(epoch, history, 0 if s.fenced <= epoch else s.fenced)


def load(directory: str) -> EpochState:
    path = os.path.join(directory, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return EpochState()
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: unreadable replication state ({e}); move it away only if this "
                         "server never took part in a failover") from None
    return EpochState(int(doc["epoch"]), tuple((int(e), int(o)) for e, o in doc["history"]),
                      int(doc.get("fenced", 0)))


def save(directory: str, s: EpochState, fs: FileSystem = REAL) -> None:
    """Replace the state file durably (temporary file, fsync, rename, directory fsync)."""
    path = os.path.join(directory, STATE_FILE)
    tmp = path + ".tmp"
    data = json.dumps({"epoch": s.epoch, "history": [list(p) for p in s.history],
                       "fenced": s.fenced}).encode() + b"\n"  # fmt: skip
    fd = fs.open(tmp, os.O_WRONLY, create=True, truncate=True)
    try:
        fs.pwrite_all(fd, data, 0)
        fs.fdatasync(fd)
    finally:
        os.close(fd)
    fs.replace(tmp, path)
    fs.fsync_dir(directory)
