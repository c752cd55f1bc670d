"""Shutdown: SIGTERM (or SIGINT) asks the worker to drain; a second one stops it now.

First signal: stop reserving, let in-flight jobs finish within the grace period, then release
the rest and exit 0. Second signal: release everything at once. Releasing is done by closing
the jobs' connections, which beanstalkd treats as a release that leaves the ``releases`` counter
(our attempt count) untouched, so a drain never uses up a job's attempts.

Two signals sent at the same instant can arrive as one (POSIX does not queue them): send the
second after the worker logged ``draining``. (Process mode's parent uses SIGUSR1 for its
children's "now" for that reason.)

Signal handlers can only be installed from the main thread; elsewhere this middleware does
nothing and the embedding program calls ``worker.stop()`` itself.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING

from stalkd.worker.middleware.base import Middleware

if TYPE_CHECKING:
    from stalkd.worker.middleware.base import RunningWorker

__all__ = ["Shutdown"]


class Shutdown(Middleware):
    """Installs SIGTERM/SIGINT handlers for the worker's lifetime."""

    def __init__(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> None:
        self.signals = signals
        self.received = 0
        self._previous: dict[int, object] = {}

    def on_worker_start(self, worker: RunningWorker) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            self.received += 1
            worker.stop(now=self.received > 1)

        for s in self.signals:
            self._previous[s] = signal.signal(s, handler)

    def on_worker_stop(self, worker: RunningWorker) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)  # type: ignore[arg-type]
        self._previous.clear()
