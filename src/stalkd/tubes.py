"""The tubes stalkd keeps for itself, defined once: every tube whose name starts ``stalkd.``.

The worker writes dead-letter records to ``stalkd.failed`` and holds unique keys with marker jobs
in ``stalkd.key.<sha1>`` tubes; the admin dashboard, ``stalkd tubes`` and ``stalkd top`` hide
them unless asked. This module imports nothing of stalkd's, so the worker, the admin endpoint
and the command-line tools can all use it without an import cycle.

>>> is_internal(FAILED_TUBE), is_internal(KEY_TUBE_PREFIX + "ab12"), is_internal("emails")
(True, True, False)
"""

from __future__ import annotations

__all__ = ["INTERNAL_PREFIX", "FAILED_TUBE", "KEY_TUBE_PREFIX", "WAIT_TUBE_PREFIX", "CANCEL_TUBE_PREFIX",
           "WAKE_TUBE_PREFIX", "CANCEL_IDLE_TUBE", "LIMIT_TUBE_PREFIX", "WORKERS_TUBE_PREFIX",
           "is_internal"]

INTERNAL_PREFIX = "stalkd."
FAILED_TUBE = INTERNAL_PREFIX + "failed"  # dead-letter records (stalkd failed / stalkd retry)
KEY_TUBE_PREFIX = INTERNAL_PREFIX + "key."  # one tube per unique key, holding its marker job
WAIT_TUBE_PREFIX = INTERNAL_PREFIX + "wait."  # per key: the jobs to wake when it is freed
CANCEL_TUBE_PREFIX = INTERNAL_PREFIX + "cancel."  # + a job id: requests to stop that job
WAKE_TUBE_PREFIX = CANCEL_TUBE_PREFIX + "wake."  # + a worker process's token: its wake-ups
CANCEL_IDLE_TUBE = CANCEL_TUBE_PREFIX + "idle"  # always watched by a worker's cancel thread
LIMIT_TUBE_PREFIX = INTERNAL_PREFIX + "limit."  # + a limit's name: its token jobs
WORKERS_TUBE_PREFIX = INTERNAL_PREFIX + "workers."  # + host.pid.token: a worker's presence


def is_internal(tube: str) -> bool:
    """True for a tube stalkd keeps for itself (hidden from listings by default)."""
    return tube.startswith(INTERNAL_PREFIX)
