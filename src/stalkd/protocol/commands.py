"""Commands and replies as values: what the protocol parser produces and the engine consumes.

These types are the contract between ``stalkd.protocol`` (bytes <-> values) and
``stalkd.engine`` (values -> state changes). Nothing here knows about sockets or wire bytes;
``stalkd.protocol.replies`` turns a reply value into bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import FrozenInstanceError, dataclass
from typing import Any, Literal

__all__ = [
    "Command", "Put", "Use", "Reserve", "ReserveWithTimeout", "ReserveJob", "Delete", "Release",
    "Bury", "Touch", "Watch", "Ignore", "Peek", "PeekReady", "PeekDelayed", "PeekBuried", "Kick",
    "KickJob", "StatsJob", "StatsTube", "Stats", "ListTubes", "ListTubeUsed", "ListTubesWatched",
    "Quit", "PauseTube", "ResultPut", "ResultGet",
    "Reply", "JobReply", "YamlDict", "YamlList", "Close", "AnyReply",
]  # fmt: skip


_set = object.__setattr__


class _Value:
    """What every command and reply shares: immutable once built, equal to a value of the same
    class with equal fields, hashed by its fields, shown as ``Name(field=value, ...)``.

    Each class is a dataclass (``dataclasses.fields`` and its slots are what the fast
    constructors and the C parser read), but with these methods written once here and its
    ``__init__`` written out: ``@dataclass(frozen=True)`` generates six methods per class with
    ``exec``, which made this module the largest part of the server's own start-up imports.

    >>> Delete(3) == Delete(3), Delete(3) == Touch(3), Delete(3), hash(Delete(3)) == hash((3,))
    (True, False, Delete(id=3), True)
    >>> Delete(3).id = 4
    Traceback (most recent call last):
    dataclasses.FrozenInstanceError: cannot assign to field 'id'
    """

    __slots__ = ()
    __match_args__: tuple[str, ...] = ()

    def _fields(self) -> tuple[Any, ...]:
        return tuple([getattr(self, name) for name in self.__match_args__])

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._fields() == other._fields()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__match_args__)
        return f"{self.__class__.__qualname__}({shown})"

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __getstate__(self) -> tuple[Any, ...]:  # copy and pickle, past the frozen __setattr__
        return self._fields()

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__match_args__, state, strict=True):
            _set(self, name, value)


# --- commands -------------------------------------------------------------------------------


@dataclass(init=False, repr=False, eq=False, slots=True)
class Put(_Value):
    """``put <pri> <delay> <ttr> <bytes>``. ``error`` is set by the parser when the put cannot
    be accepted but still counts as beanstalkd counts it (cmd-put; for EXPECTED_CRLF an id):
    a too-big or badly terminated body, or text after the size (BAD_FORMAT, body not read)."""

    pri: int
    delay: int
    ttr: int
    body: bytes
    error: Literal["JOB_TOO_BIG", "EXPECTED_CRLF", "BAD_FORMAT"] | None = None

    def __init__(self, pri: int, delay: int, ttr: int, body: bytes,
                 error: Literal["JOB_TOO_BIG", "EXPECTED_CRLF", "BAD_FORMAT"] | None = None) -> None:
        _set(self, "pri", pri)
        _set(self, "delay", delay)
        _set(self, "ttr", ttr)
        _set(self, "body", body)
        _set(self, "error", error)


@dataclass(init=False, repr=False, eq=False, slots=True)
class Use(_Value):
    tube: str

    def __init__(self, tube: str) -> None:
        _set(self, "tube", tube)


@dataclass(init=False, repr=False, eq=False, slots=True)
class Reserve(_Value):
    pass


@dataclass(init=False, repr=False, eq=False, slots=True)
class ReserveWithTimeout(_Value):
    timeout: int  # seconds

    def __init__(self, timeout: int) -> None:
        _set(self, "timeout", timeout)


@dataclass(init=False, repr=False, eq=False, slots=True)
class ReserveJob(_Value):
    id: int

    def __init__(self, id: int) -> None:
        _set(self, "id", id)


@dataclass(init=False, repr=False, eq=False, slots=True)
class Delete(_Value):
    id: int

    def __init__(self, id: int) -> None:
        _set(self, "id", id)


@dataclass(init=False, repr=False, eq=False, slots=True)
class Release(_Value):
    id: int
    pri: int
    delay: int

    def __init__(self, id: int, pri: int, delay: int) -> None:
        _set(self, "id", id)
        _set(self, "pri", pri)
        _set(self, "delay", delay)


@dataclass(init=False, repr=False, eq=False, slots=True)
class Bury(_Value):
    id: int
    pri: int

    def __init__(self, id: int, pri: int) -> None:
        _set(self, "id", id)
        _set(self, "pri", pri)


@dataclass(init=False, repr=False, eq=False, slots=True)
class Touch(_Value):
    id: int

    def __init__(self, id: int) -> None:
        _set(self, "id", id)


@dataclass(init=False, repr=False, eq=False, slots=True)
class Watch(_Value):
    tube: str

    def __init__(self, tube: str) -> None:
        _set(self, "tube", tube)


@dataclass(init=False, repr=False, eq=False, slots=True)
class Ignore(_Value):
    tube: str

    def __init__(self, tube: str) -> None:
        _set(self, "tube", tube)


@dataclass(init=False, repr=False, eq=False, slots=True)
class Peek(_Value):
    id: int

    def __init__(self, id: int) -> None:
        _set(self, "id", id)


@dataclass(init=False, repr=False, eq=False, slots=True)
class PeekReady(_Value):
    pass


@dataclass(init=False, repr=False, eq=False, slots=True)
class PeekDelayed(_Value):
    pass


@dataclass(init=False, repr=False, eq=False, slots=True)
class PeekBuried(_Value):
    pass


@dataclass(init=False, repr=False, eq=False, slots=True)
class Kick(_Value):
    bound: int

    def __init__(self, bound: int) -> None:
        _set(self, "bound", bound)


@dataclass(init=False, repr=False, eq=False, slots=True)
class KickJob(_Value):
    id: int

    def __init__(self, id: int) -> None:
        _set(self, "id", id)


@dataclass(init=False, repr=False, eq=False, slots=True)
class StatsJob(_Value):
    id: int

    def __init__(self, id: int) -> None:
        _set(self, "id", id)


@dataclass(init=False, repr=False, eq=False, slots=True)
class StatsTube(_Value):
    tube: str

    def __init__(self, tube: str) -> None:
        _set(self, "tube", tube)


@dataclass(init=False, repr=False, eq=False, slots=True)
class Stats(_Value):
    pass


@dataclass(init=False, repr=False, eq=False, slots=True)
class ListTubes(_Value):
    pass


@dataclass(init=False, repr=False, eq=False, slots=True)
class ListTubeUsed(_Value):
    pass


@dataclass(init=False, repr=False, eq=False, slots=True)
class ListTubesWatched(_Value):
    pass


@dataclass(init=False, repr=False, eq=False, slots=True)
class Quit(_Value):
    pass


@dataclass(init=False, repr=False, eq=False, slots=True)
class PauseTube(_Value):
    tube: str
    delay: int  # seconds; 0 un-pauses

    def __init__(self, tube: str, delay: int) -> None:
        _set(self, "tube", tube)
        _set(self, "delay", delay)


@dataclass(init=False, repr=False, eq=False, slots=True)
class ResultPut(_Value):
    """``result-put <id> <ttl> <bytes>`` (stalkd only): keep ``body`` as job ``id``'s result for
    ``ttl`` seconds, replacing an earlier one (``ttl`` 0 forgets it). ``error`` as for ``Put``:
    a too-big or badly terminated body (the body is read and dropped)."""

    id: int
    ttl: int
    body: bytes
    error: Literal["JOB_TOO_BIG", "EXPECTED_CRLF"] | None = None

    def __init__(self, id: int, ttl: int, body: bytes,
                 error: Literal["JOB_TOO_BIG", "EXPECTED_CRLF"] | None = None) -> None:
        _set(self, "id", id)
        _set(self, "ttl", ttl)
        _set(self, "body", body)
        _set(self, "error", error)


@dataclass(init=False, repr=False, eq=False, slots=True)
class ResultGet(_Value):
    """``result-get <id>`` (stalkd only): ``FOUND <id> <bytes>`` with the stored result, or
    NOT_FOUND (none stored, or expired)."""

    id: int

    def __init__(self, id: int) -> None:
        _set(self, "id", id)


Command = (
    Put | Use | Reserve | ReserveWithTimeout | ReserveJob | Delete | Release | Bury | Touch
    | Watch | Ignore | Peek | PeekReady | PeekDelayed | PeekBuried | Kick | KickJob | StatsJob
    | StatsTube | Stats | ListTubes | ListTubeUsed | ListTubesWatched | Quit | PauseTube
    | ResultPut | ResultGet
)  # fmt: skip


# --- replies --------------------------------------------------------------------------------


@dataclass(init=False, repr=False, eq=False, slots=True)
class Reply(_Value):
    """A one-line reply: ``word`` then its arguments, e.g. ``Reply("INSERTED", (5,))``."""

    word: str
    args: tuple[int | str, ...] = ()

    def __init__(self, word: str, args: tuple[int | str, ...] = ()) -> None:
        _set(self, "word", word)
        _set(self, "args", args)


@dataclass(init=False, repr=False, eq=False, slots=True)
class JobReply(_Value):
    """``RESERVED <id> <bytes>`` or ``FOUND <id> <bytes>`` followed by the body."""

    word: Literal["RESERVED", "FOUND"]
    id: int
    body: bytes

    def __init__(self, word: Literal["RESERVED", "FOUND"], id: int, body: bytes) -> None:
        _set(self, "word", word)
        _set(self, "id", id)
        _set(self, "body", body)


@dataclass(init=False, repr=False, eq=False, slots=True)
class YamlDict(_Value):
    """``OK <bytes>`` with a YAML mapping. ``kind`` selects key order and quoting in
    ``stalkd.protocol.stats``. For ``kind="stats"`` the engine fills the keys it owns and the
    server adds the process, binlog and host keys before encoding."""

    kind: Literal["stats", "stats-job", "stats-tube"]
    values: Mapping[str, int | float | bool | str]

    def __init__(self, kind: Literal["stats", "stats-job", "stats-tube"],
                 values: Mapping[str, int | float | bool | str]) -> None:
        _set(self, "kind", kind)
        _set(self, "values", values)


@dataclass(init=False, repr=False, eq=False, slots=True)
class YamlList(_Value):
    """``OK <bytes>`` with a YAML list of tube names (list-tubes, list-tubes-watched)."""

    items: tuple[str, ...]

    def __init__(self, items: tuple[str, ...]) -> None:
        _set(self, "items", items)


@dataclass(init=False, repr=False, eq=False, slots=True)
class Close(_Value):
    """No reply: the server closes the connection (``quit``)."""


AnyReply = Reply | JobReply | YamlDict | YamlList | Close
