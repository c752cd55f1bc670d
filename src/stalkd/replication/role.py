"""This server's role: primary or standby, its epoch, and whether it has been fenced.

The server consults ``refuses()`` before running a command that changes state or reserves;
``stats`` shows ``role`` and ``epoch``. Every change of the epoch state is saved before it
takes effect (``epochs.save``), so a restart never forgets a promotion or a fencing.
"""

from __future__ import annotations

import logging

from stalkd.replication import epochs
from stalkd.replication.epochs import EpochState

__all__ = ["Role"]

log = logging.getLogger("stalkd.replication")


class Role:
    """``standby``: following a primary; ``state``: the epoch state (saved in ``directory``;
    None: a server without a data directory, which keeps it in memory).

    >>> r = Role(None, standby=True); r.refuses(), r.name
    (True, 'standby')
    >>> r.promote(7); r.refuses(), r.name, r.state.epoch
    (False, 'primary', 1)
    >>> r.saw(3); r.refuses()
    True
    """

    def __init__(self, directory: str | None, *, standby: bool = False) -> None:
        self.directory = directory
        self._standby = standby
        self.state = epochs.load(directory) if directory is not None else EpochState()
        # refuses(), kept as a plain attribute by every change: the server reads it per command.
        self.refusing = standby or not self.state.may_lead

    @property
    def standby(self) -> bool:
        return self._standby

    @standby.setter
    def standby(self, on: bool) -> None:
        self._standby = on
        self.refusing = on or not self.state.may_lead

    @property
    def name(self) -> str:
        return "standby" if self.standby else "primary"

    def refuses(self) -> bool:
        """Whether commands that change state or reserve get NOT_PRIMARY here."""
        return self.refusing

    def _set(self, s: EpochState) -> None:
        if s != self.state:
            if self.directory is not None:
                epochs.save(self.directory, s)
            self.state = s
            self.refusing = self._standby or not s.may_lead

    def saw(self, epoch: int) -> None:
        """A peer follows ``epoch``: a newer one than ours fences this server."""
        s = epochs.saw_epoch(self.state, epoch)
        if s is not self.state and not self.standby:
            log.error("a peer follows epoch %d, newer than this server's %d: refusing to act as "
                      "primary (NOT_PRIMARY); restart it with --standby-of the new primary",
                      epoch, self.state.epoch)  # fmt: skip
        self._set(s)

    def follow(self, epoch: int, history: tuple[tuple[int, int], ...]) -> None:
        """Now streaming from a primary of ``epoch`` with ``history``."""
        self._set(epochs.following(self.state, epoch, history))

    def promote(self, at_offset: int) -> None:
        """Become primary of a new epoch that starts at log offset ``at_offset``."""
        self._set(epochs.promoted(self.state, at_offset))
        self.standby = False
