"""Exceptions raised by :mod:`stalkd.log`; every one names the directory, file or offset concerned."""

from __future__ import annotations

__all__ = ["LogError", "LogCorruptError", "LogLockedError", "LogFullError", "LogLagError", "NotALogError"]


class LogError(Exception):
    """Base class of every log error (also raised when a log failed after an fsync error)."""


class LogCorruptError(LogError):
    """A frame that fails its checks where the log must be intact (e.g. inside a sealed segment).

    Carries ``path`` (segment file), ``position`` (byte offset in it) and ``offset`` (the logical
    record number expected there, or None).
    """

    def __init__(self, message: str, *, path: str, position: int, offset: int | None) -> None:
        super().__init__(message)
        self.path = path
        self.position = position
        self.offset = offset


class LogLockedError(LogError):
    """Another process (or another Log object) holds the directory's writer lock."""


class LogFullError(LogError):
    """No room on the file system for a new segment; nothing of the refused append was written."""


class LogLagError(LogError):
    """An append was refused: a consumer group with ``overflow="refuse"`` is over its lag limit."""


class NotALogError(LogError):
    """A path given as a log holds none: neither segment files nor a server data directory's
    ``wal/`` (the message says what was expected there)."""
