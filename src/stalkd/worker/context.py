"""The per-delivery context that middleware read and write while a job runs.

``JobContext`` is runtime bookkeeping for one delivery and is mutable on purpose (middleware
fill in ``attempt``, ``action``, ``time_limit``); the decisions it ends in are the frozen
values of ``actions``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stalkd.worker.actions import WorkerAction
from stalkd.worker.serializer import Header
from stalkd.worker.task import Task

__all__ = ["JobContext"]


def _nothing() -> None:
    return None


@dataclass(eq=False)
class JobContext:
    """One delivery of one job, as middleware see it."""

    job_id: int
    body: bytes
    task: Task[Any]
    header: Header
    payload: Any
    started: float                      # time.monotonic() when processing began
    touch: Callable[[], None] = _nothing    # thread-safe touch of this job on its connection
    interrupt: Callable[[], None] = _nothing  # thread-safe: stop the running handler (time limit)
    interrupted: bool = False           # set by whoever called ``interrupt``
    cancel_requested: bool = False      # asked to stop (``stalkd.worker.cancel``)
    on_cancel: Callable[[], None] = _nothing  # thread-safe: cancel an async handler's task
    attempt: int | None = None          # 1-based; filled from stats-job on failure (or always, on request)
    exception: BaseException | None = None
    traceback: str | None = None
    result: Any = None
    action: WorkerAction | None = None
    time_limit: float | None = None     # seconds; set by the time-limit middleware
    duration: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def tube(self) -> str:
        return self.task.options.tube

    @property
    def ttr(self) -> int:
        """The TTR this job was put with (the envelope says when it is not the task's)."""
        return self.header.ttr if self.header.ttr is not None else self.task.options.ttr
