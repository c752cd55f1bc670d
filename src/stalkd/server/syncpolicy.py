"""Where an ``always`` group commit's fsync runs while several connections write: on the sync
thread, or inline on the loop thread. A pure core: durations are measured by the caller.

The sync thread lets the loop keep reading and answering during the fsync, but every batch
then pays a hand-off: waking the thread (it must also find a free CPU and the GIL) and waking
the loop again with the result. On a busy machine with few cores that hand-off can cost as much
as the fsync itself, and inline then serves more jobs at less server CPU per job
(``bench/server_bench.py --class always --conns 16 --depth 1`` shows both placements'
figures); on an idle many-core machine, or with a slow disk, the thread wins instead.

So the policy measures both and picks the cheaper: inline while the fsync (moving average)
is no longer than the hand-off and at most ``max_inline`` (a bound on how long one fsync may
hold every other connection), on the thread otherwise. The hand-off can only be measured on
the thread, so it starts there, and every ``probe_every`` inline syncs one runs on the thread
to refresh it (load changes).

Ensures: no inline choice before a hand-off was measured; never inline while the fsync
average exceeds ``max_inline``; at least one thread sync in every ``probe_every + 1``.

Example::

    p = SyncPolicy()
    p.inline()                        # False: nothing measured yet
    p.thread_done(handoff=0.0003, fsync=0.0002)
    p.inline()                        # True: the fsync is cheaper than the hand-off
"""

from __future__ import annotations

__all__ = ["SyncPolicy"]


class SyncPolicy:
    """Moving averages of fsync and hand-off time, and the choice they imply."""

    def __init__(self, *, max_inline: float = 0.001, probe_every: int = 64, alpha: float = 0.25) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.max_inline = max_inline
        self.probe_every = probe_every
        self.alpha = alpha
        self.fsync: float | None = None  # seconds, moving average over both placements
        self.handoff: float | None = None  # seconds, thread placement only
        self._inline_run = 0  # inline syncs since the last thread sync

    def _avg(self, old: float | None, new: float) -> float:
        return new if old is None else old + self.alpha * (new - old)

    def inline(self) -> bool:
        """Run the next fsync inline on the loop thread?"""
        fsync, handoff = self.fsync, self.handoff
        if fsync is None or handoff is None or fsync > self.max_inline:
            return False
        if self._inline_run >= self.probe_every:
            return False  # time to measure the hand-off again
        return fsync <= handoff

    def inline_done(self, fsync: float) -> None:
        """An inline fsync took ``fsync`` seconds."""
        self.fsync = self._avg(self.fsync, fsync)
        self._inline_run += 1

    def thread_done(self, handoff: float, fsync: float) -> None:
        """A thread sync: ``handoff`` seconds of waking (request to fsync start, plus fsync end
        to the loop running the result), ``fsync`` seconds of fsync."""
        self.fsync = self._avg(self.fsync, fsync)
        self.handoff = self._avg(self.handoff, handoff)
        self._inline_run = 0
