"""Commands and replies as values: what the protocol parser produces and the engine consumes.

These types are the contract between ``stalkd.protocol`` (bytes <-> values) and
``stalkd.engine`` (values -> state changes). Nothing here knows about sockets or wire bytes;
``stalkd.protocol.replies`` turns a reply value into bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Command", "Put", "Use", "Reserve", "ReserveWithTimeout", "ReserveJob", "Delete", "Release",
    "Bury", "Touch", "Watch", "Ignore", "Peek", "PeekReady", "PeekDelayed", "PeekBuried", "Kick",
    "KickJob", "StatsJob", "StatsTube", "Stats", "ListTubes", "ListTubeUsed", "ListTubesWatched",
    "Quit", "PauseTube", "ResultPut", "ResultGet",
    "Reply", "JobReply", "YamlDict", "YamlList", "Close", "AnyReply",
]  # fmt: skip


# --- commands -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Put:
    """``put <pri> <delay> <ttr> <bytes>``. ``error`` is set by the parser when the put cannot
    be accepted but still counts as beanstalkd counts it (cmd-put; for EXPECTED_CRLF an id):
    a too-big or badly terminated body, or text after the size (BAD_FORMAT, body not read)."""

    pri: int
    delay: int
    ttr: int
    body: bytes
    error: Literal["JOB_TOO_BIG", "EXPECTED_CRLF", "BAD_FORMAT"] | None = None


@dataclass(frozen=True, slots=True)
class Use:
    tube: str


@dataclass(frozen=True, slots=True)
class Reserve:
    pass


@dataclass(frozen=True, slots=True)
class ReserveWithTimeout:
    timeout: int  # seconds


@dataclass(frozen=True, slots=True)
class ReserveJob:
    id: int


@dataclass(frozen=True, slots=True)
class Delete:
    id: int


@dataclass(frozen=True, slots=True)
class Release:
    id: int
    pri: int
    delay: int


@dataclass(frozen=True, slots=True)
class Bury:
    id: int
    pri: int


@dataclass(frozen=True, slots=True)
class Touch:
    id: int


@dataclass(frozen=True, slots=True)
class Watch:
    tube: str


@dataclass(frozen=True, slots=True)
class Ignore:
    tube: str


@dataclass(frozen=True, slots=True)
class Peek:
    id: int


@dataclass(frozen=True, slots=True)
class PeekReady:
    pass


@dataclass(frozen=True, slots=True)
class PeekDelayed:
    pass


@dataclass(frozen=True, slots=True)
class PeekBuried:
    pass


@dataclass(frozen=True, slots=True)
class Kick:
    bound: int


@dataclass(frozen=True, slots=True)
class KickJob:
    id: int


@dataclass(frozen=True, slots=True)
class StatsJob:
    id: int


@dataclass(frozen=True, slots=True)
class StatsTube:
    tube: str


@dataclass(frozen=True, slots=True)
class Stats:
    pass


@dataclass(frozen=True, slots=True)
class ListTubes:
    pass


@dataclass(frozen=True, slots=True)
class ListTubeUsed:
    pass


@dataclass(frozen=True, slots=True)
class ListTubesWatched:
    pass


@dataclass(frozen=True, slots=True)
class Quit:
    pass


@dataclass(frozen=True, slots=True)
class PauseTube:
    tube: str
    delay: int  # seconds; 0 un-pauses


@dataclass(frozen=True, slots=True)
class ResultPut:
    """``result-put <id> <ttl> <bytes>`` (stalkd only): keep ``body`` as job ``id``'s result for
    ``ttl`` seconds, replacing an earlier one (``ttl`` 0 forgets it). ``error`` as for ``Put``:
    a too-big or badly terminated body (the body is read and dropped)."""

    id: int
    ttl: int
    body: bytes
    error: Literal["JOB_TOO_BIG", "EXPECTED_CRLF"] | None = None


@dataclass(frozen=True, slots=True)
class ResultGet:
    """``result-get <id>`` (stalkd only): ``FOUND <id> <bytes>`` with the stored result, or
    NOT_FOUND (none stored, or expired)."""

    id: int


Command = (
    Put | Use | Reserve | ReserveWithTimeout | ReserveJob | Delete | Release | Bury | Touch
    | Watch | Ignore | Peek | PeekReady | PeekDelayed | PeekBuried | Kick | KickJob | StatsJob
    | StatsTube | Stats | ListTubes | ListTubeUsed | ListTubesWatched | Quit | PauseTube
    | ResultPut | ResultGet
)  # fmt: skip


# --- replies --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reply:
    """A one-line reply: ``word`` then its arguments, e.g. ``Reply("INSERTED", (5,))``."""

    word: str
    args: tuple[int | str, ...] = ()


@dataclass(frozen=True, slots=True)
class JobReply:
    """``RESERVED <id> <bytes>`` or ``FOUND <id> <bytes>`` followed by the body."""

    word: Literal["RESERVED", "FOUND"]
    id: int
    body: bytes


@dataclass(frozen=True, slots=True)
class YamlDict:
    """``OK <bytes>`` with a YAML mapping. ``kind`` selects key order and quoting in
    ``stalkd.protocol.stats``. For ``kind="stats"`` the engine fills the keys it owns and the
    server adds the process, binlog and host keys before encoding."""

    kind: Literal["stats", "stats-job", "stats-tube"]
    values: Mapping[str, int | float | bool | str]


@dataclass(frozen=True, slots=True)
class YamlList:
    """``OK <bytes>`` with a YAML list of tube names (list-tubes, list-tubes-watched)."""

    items: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Close:
    """No reply: the server closes the connection (``quit``)."""


AnyReply = Reply | JobReply | YamlDict | YamlList | Close
