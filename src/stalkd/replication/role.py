"""This server's role: primary or standby, its epoch, and whether it has been fenced.

The server consults ``refuses()`` before running a command that changes state or reserves;
``stats`` shows ``role`` and ``epoch``. The epoch and its history are the log's (``attach``
the recovered engine: its ``epochs`` follow EPOCH records, replayed or replicated; before that,
epoch 0). A newer epoch seen on a peer is saved
(``epochs.save_fenced``) before it takes effect, so a restart never forgets a fencing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from stalkd.replication import epochs
from stalkd.replication.epochs import EpochState

if TYPE_CHECKING:
    from stalkd.engine import Engine

__all__ = ["Role"]

log = logging.getLogger("stalkd.replication")


class Role:
    """``standby``: following a primary; ``directory``: where ``fenced`` is kept (None: a
    server without a data directory, which keeps it in memory).

    >>> from stalkd.engine import Engine
    >>> from stalkd.engine.handover import epoch_record
    >>> r = Role(None, standby=True); e = Engine(); r.attach(e); r.refuses(), r.name
    (True, 'standby')
    >>> _ = epoch_record(e, r.next_epoch(), 7, 0.0); r.standby = False
    >>> r.refuses(), r.name, r.state.epoch
    (False, 'primary', 1)
    >>> r.saw(3); r.refuses()
    True
    """

    def __init__(self, directory: str | None, *, standby: bool = False) -> None:
        self.directory = directory
        self.standby = standby
        self.fenced = epochs.load_fenced(directory) if directory is not None else 0
        self._engine: Engine | None = None

    def attach(self, engine: Engine) -> None:
        """From now on the epochs are ``engine``'s (recovered from this directory's log)."""
        self._engine = engine

    @property
    def state(self) -> EpochState:
        return epochs.of_history(self._engine.epochs if self._engine is not None else (), self.fenced)

    @property
    def name(self) -> str:
        return "standby" if self.standby else "primary"

    def refuses(self) -> bool:
        """Whether commands that change state or reserve get NOT_PRIMARY here (asked per
        command: the common case, never fenced, builds no state)."""
        return self.standby or (self.fenced > 0 and not self.state.may_lead)

    def next_epoch(self) -> int:
        """The epoch a promotion now would start."""
        return epochs.next_epoch(self.state)

    def saw(self, epoch: int) -> None:
        """A peer follows ``epoch``: a newer one than ours fences this server."""
        before = self.state
        s = epochs.saw_epoch(before, epoch)
        if s is before:
            return
        if not self.standby:
            log.error("a peer follows epoch %d, newer than this server's %d: refusing to act as "
                      "primary (NOT_PRIMARY); restart it with --standby-of the new primary",
                      epoch, before.epoch)  # fmt: skip
        if self.directory is not None:
            epochs.save_fenced(self.directory, s.fenced)
        self.fenced = s.fenced
