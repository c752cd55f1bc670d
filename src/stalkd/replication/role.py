"""This server's role: primary, standby or fenced, its epoch, and what its directory remembers.

The server consults ``refuses()`` before running a command that changes state or reserves;
``stats`` shows ``role`` (``primary``, ``standby``, or ``fenced``: a former primary that learnt
of a newer epoch) and ``epoch``. The epoch and its history are the log's (``attach`` the
recovered engine: its ``epochs`` follow EPOCH records, replayed or replicated; before that,
epoch 0). A newer epoch a peer proves (``claim``, checked by ``epochs.verify_claim``) is saved
(``epochs.save_state``) before it takes effect, so a restart never forgets a fencing; so are
the first standby that streams from this directory and a promotion.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stalkd.replication import epochs
from stalkd.replication.epochs import EpochState, Saved

if TYPE_CHECKING:
    from stalkd.engine import Engine

__all__ = ["Role"]

log = logging.getLogger("stalkd.replication")


class Role:
    """``standby``: following a primary; ``directory``: where ``Saved`` is kept (None: a
    server without a data directory, which keeps it in memory).

    >>> from stalkd.engine import Engine
    >>> from stalkd.engine.handover import epoch_record
    >>> r = Role(None, standby=True); e = Engine(); r.attach(e); r.refuses(), r.name
    (True, 'standby')
    >>> _ = epoch_record(e, r.next_epoch(), 7, 0.0); r.standby = False
    >>> r.refuses(), r.name, r.state.epoch
    (False, 'primary', 1)
    >>> r.claim(4242, (), 100)
    'epoch 4242 comes with no history'
    >>> r.refuses(), r.claim(3, ((1, 7), (3, 50)), 100), r.refuses(), r.name
    (False, None, True, 'fenced')
    """

    def __init__(self, directory: str | None, *, standby: bool = False) -> None:
        self.directory = directory
        self._standby = standby
        self.saved = epochs.load_state(directory) if directory is not None else Saved()
        self._fenced = self.saved.fenced
        self.on_fenced: Callable[[int], None] | None = None  # the server lets go of what it held
        # Automatic failover's lease (``HaNode.install``), asked per command: a process that
        # wakes from a pause past its lease hands out no job before any thread has noticed.
        self._lease: Callable[[], bool] | None = None
        self._engine: Engine | None = None
        # Read per command by the server, one attribute rather than three: not a standby, not
        # fenced, no lease (``refuses`` is then False without asking). Kept by the setters below,
        # lowered before the field that may make it false, so no reader sees it true too long.
        self.quiet = self._is_quiet()
        # Objects whose ``role_quiet`` follows ``quiet`` (``mirror_quiet``): a compiled server
        # reads it as a C field per command instead of this object's attribute.
        self._mirrors: list[Any] = []

    def mirror_quiet(self, into: Any, on: bool = True) -> None:
        """From now on ``into.role_quiet`` is ``quiet`` (``on=False``: no longer; left False)."""
        if on:
            if not any(m is into for m in self._mirrors):
                self._mirrors.append(into)
            into.role_quiet = self.quiet
        else:
            self._mirrors = [m for m in self._mirrors if m is not into]
            into.role_quiet = False

    def _set_quiet(self, quiet: bool) -> None:
        self.quiet = quiet
        for m in self._mirrors:
            m.role_quiet = quiet

    def _is_quiet(self) -> bool:
        return not self._standby and not self._fenced and self._lease is None

    @property
    def standby(self) -> bool:
        return self._standby

    @standby.setter
    def standby(self, value: bool) -> None:
        self._set_quiet(False)
        self._standby = value
        self._set_quiet(self._is_quiet())

    @property
    def fenced(self) -> int:
        return self._fenced

    @fenced.setter
    def fenced(self, value: int) -> None:
        self._set_quiet(False)
        self._fenced = value
        self._set_quiet(self._is_quiet())

    @property
    def lease(self) -> Callable[[], bool] | None:
        return self._lease

    @lease.setter
    def lease(self, value: Callable[[], bool] | None) -> None:
        self._set_quiet(False)
        self._lease = value
        self._set_quiet(self._is_quiet())

    def attach(self, engine: Engine) -> None:
        """From now on the epochs are ``engine``'s (recovered from this directory's log)."""
        self._engine = engine

    @property
    def state(self) -> EpochState:
        return epochs.of_history(self._engine.epochs if self._engine is not None else (), self.fenced)

    @property
    def name(self) -> str:
        if self.standby:
            return "standby"
        return "fenced" if self.fenced and not self.state.may_lead else "primary"

    def refuses(self) -> bool:
        """Whether commands that change state or reserve get NOT_PRIMARY here (asked per
        command: the common case, never fenced, builds no state)."""
        return self.standby or (self.fenced > 0 and not self.state.may_lead) or (
            self.lease is not None and not self.lease())

    def next_epoch(self) -> int:
        """The epoch a promotion now would start."""
        return epochs.next_epoch(self.state)

    def claim(self, epoch: int, history: tuple[tuple[int, int], ...], log_end: int) -> str | None:
        """An authenticated peer says it follows ``epoch`` (``history``): fenced when the claim
        checks out against this log (which ends at ``log_end``); else why it does not."""
        why = epochs.verify_claim(self.state, log_end, epoch, history)
        if why is None:
            self.saw(epoch)
        return why

    def saw(self, epoch: int) -> None:
        """A newer epoch than ours is known to exist (verified): this server stops leading."""
        before = self.state
        s = epochs.saw_epoch(before, epoch)
        if s is before:
            return
        if not self.standby:
            log.error("fenced: a peer proved epoch %d, newer than this server's %d: refusing to act "
                      "as primary (NOT_PRIMARY); restart it with --standby-of the new primary",
                      epoch, before.epoch)  # fmt: skip
        self._save(self.saved.replace(fenced=s.fenced))
        self.fenced = s.fenced
        if not self.standby and self.on_fenced is not None:
            self.on_fenced(epoch)

    def note_standby(self) -> None:
        """A standby streams from this directory: a restart checks before acknowledging."""
        if not self.saved.had_standbys:
            self._save(self.saved.replace(had_standbys=True))

    def note_promoted(self) -> None:
        """This server was promoted to its current epoch: it stays primary across restarts."""
        self._save(self.saved.replace(promoted=self.state.epoch))

    @property
    def promoted(self) -> bool:
        """This directory was promoted to the epoch its log follows and was not fenced since."""
        st = self.state
        return self.saved.promoted > 0 and self.saved.promoted == st.epoch and st.may_lead

    def _save(self, saved: Saved) -> None:
        if self.directory is not None:
            epochs.save_state(self.directory, saved)
        self.saved = saved
