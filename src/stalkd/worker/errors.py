"""Exceptions a task raises to steer the worker, and the worker's own errors.

>>> class PaymentDeclined(NonRetryable): ...
>>> PaymentDeclined("card expired").retryable
False
"""

from __future__ import annotations

__all__ = ["NonRetryable", "Retry", "Postpone", "ValidationError", "TimeLimitExceeded", "EnvelopeError", "UnknownTask"]


class NonRetryable(Exception):
    """Raise (or subclass) this to dead-letter the job at once, without further attempts.

    Any exception can also opt out with a class attribute ``retryable = False``.
    """

    retryable = False


class Retry(Exception):
    """Raise to ask for another attempt after ``delay`` seconds (default: the task's backoff).

    It still counts as an attempt, so ``max_attempts`` bounds it like any other failure.

    ``countdown=`` is the same, by Celery's name for it (``self.retry(countdown=30)``).

    >>> Retry(delay=30).delay, Retry(countdown=30).delay
    (30, 30)
    """

    def __init__(self, message: str = "retry requested", *, delay: int | None = None,
                 countdown: int | None = None) -> None:
        if delay is not None and countdown is not None:
            raise ValueError("give delay= or countdown= (the same thing), not both")
        super().__init__(message)
        self.delay = delay if countdown is None else countdown


class Postpone(Exception):
    """Raise to run the job again after ``delay`` seconds without using up an attempt: the
    job is put again (a copy, with a new id, carrying the attempts it used) and this one
    deleted, so no worker slot waits meanwhile. ``Limit.hold`` raises it when a rate limit's
    next token is not due yet.

    >>> Postpone(12).delay
    12
    """

    def __init__(self, delay: int, message: str = "postponed") -> None:
        super().__init__(message)
        self.delay = max(1, int(delay))


class ValidationError(ValueError):
    """A payload was rejected by the task's validator at ``put`` time; nothing was queued."""


class TimeLimitExceeded(Exception):
    """The job ran past its task's ``time_limit``; treated as a (retryable) failure."""


class EnvelopeError(ValueError):
    """A job body could not be decoded into a task call (names the job id and what was wrong)."""

    retryable = False


class UnknownTask(LookupError):
    """A job names a task this app does not define (names the job id and task)."""

    retryable = False


def is_retryable(exc: BaseException) -> bool:
    """Whether ``exc`` allows another attempt: false when it (or its class) says ``retryable = False``."""
    return bool(getattr(exc, "retryable", True))
