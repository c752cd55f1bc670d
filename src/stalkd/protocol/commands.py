"""Commands and replies as values: what the protocol parser produces and the engine consumes.

These types are the contract between ``stalkd.protocol`` (bytes <-> values) and
``stalkd.engine`` (values -> state changes). Nothing here knows about sockets or wire bytes;
``stalkd.protocol.replies`` turns a reply value into bytes.

Compiled (``stalkd.extensions.CYTHON_MODULES``), every class is an extension type whose fields
``commands.pxd`` declares: building one is one C call (the type's vectorcall), and a compiled
module that cimports the class (the engine's ``jobcommands``) reads its fields as C struct
members. Uncompiled, the same classes are plain ``__slots__`` classes with the same behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = [
    "Command", "Put", "Use", "Reserve", "ReserveWithTimeout", "ReserveJob", "Delete", "Release",
    "Bury", "Touch", "Watch", "Ignore", "Peek", "PeekReady", "PeekDelayed", "PeekBuried", "Kick",
    "KickJob", "StatsJob", "StatsTube", "Stats", "ListTubes", "ListTubeUsed", "ListTubesWatched",
    "Quit", "PauseTube", "ResultPut", "ResultGet",
    "Reply", "JobReply", "YamlDict", "YamlList", "Close", "AnyReply", "new_reply",
]  # fmt: skip


_set = object.__setattr__


def _frozen(message: str) -> AttributeError:
    """The error of a frozen dataclass's fields, which ours are (``dataclasses`` imported only
    here: the module is no part of a server's start)."""
    from dataclasses import FrozenInstanceError

    return FrozenInstanceError(message)


# Compiled, the commands and replies below are extension types the cycle collector does not track
# (``@cython.no_gc``, which Cython takes only after ``@cython.cclass`` and in this file, not in
# commands.pxd): their fields are numbers, strings, bytes and tuples of those, which close no
# reference cycle. YamlDict's mapping is left to the collector.
class _Value:
    """What every command and reply shares: immutable once built, equal to a value of the same
    class with equal fields, hashed by its fields, shown as ``Name(field=value, ...)``, matched
    by position in ``case`` patterns. A class's fields are its ``__match_args__``, in the order
    its ``__init__`` takes them.

    These methods are written once here rather than generated per class: ``@dataclass`` makes
    them with ``exec`` at import (the server's largest start-up import when it was used), and a
    compiled extension type takes no ``@dataclass(slots=True)``.

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
        # Uncompiled, ``__init__``'s ``self.field = value`` comes here once per field, which
        # is let through while the slot is empty. Compiled, ``__init__`` stores to the C fields
        # directly (every field already holds None here), so this only refuses.
        if name in self.__match_args__ and not hasattr(self, name):
            _set(self, name, value)
        else:
            raise _frozen(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise _frozen(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle: the class called with the fields
        return (self.__class__, self._fields())


# --- commands -------------------------------------------------------------------------------


@cython.no_gc
@cython.cclass
class Put(_Value):
    """``put <pri> <delay> <ttr> <bytes>``. ``error`` is set by the parser when the put cannot
    be accepted but still counts as beanstalkd counts it (cmd-put; for EXPECTED_CRLF an id):
    a too-big or badly terminated body, or text after the size (BAD_FORMAT, body not read)."""

    __slots__ = __match_args__ = ("pri", "delay", "ttr", "body", "error")
    pri: int
    delay: int
    ttr: int
    body: bytes
    error: Literal["JOB_TOO_BIG", "EXPECTED_CRLF", "BAD_FORMAT"] | None

    def __init__(self, pri: int, delay: int, ttr: int, body: bytes,
                 error: Literal["JOB_TOO_BIG", "EXPECTED_CRLF", "BAD_FORMAT"] | None = None) -> None:
        self.pri = pri
        self.delay = delay
        self.ttr = ttr
        self.body = body
        self.error = error


@cython.no_gc
@cython.cclass
class Use(_Value):
    __slots__ = __match_args__ = ("tube",)
    tube: str

    def __init__(self, tube: str) -> None:
        self.tube = tube


@cython.no_gc
@cython.cclass
class Reserve(_Value):
    __slots__ = ()


@cython.no_gc
@cython.cclass
class ReserveWithTimeout(_Value):
    __slots__ = __match_args__ = ("timeout",)
    timeout: int  # seconds

    def __init__(self, timeout: int) -> None:
        self.timeout = timeout


@cython.no_gc
@cython.cclass
class ReserveJob(_Value):
    __slots__ = __match_args__ = ("id",)
    id: int

    def __init__(self, id: int) -> None:
        self.id = id


@cython.no_gc
@cython.cclass
class Delete(_Value):
    __slots__ = __match_args__ = ("id",)
    id: int

    def __init__(self, id: int) -> None:
        self.id = id


@cython.no_gc
@cython.cclass
class Release(_Value):
    __slots__ = __match_args__ = ("id", "pri", "delay")
    id: int
    pri: int
    delay: int

    def __init__(self, id: int, pri: int, delay: int) -> None:
        self.id = id
        self.pri = pri
        self.delay = delay


@cython.no_gc
@cython.cclass
class Bury(_Value):
    __slots__ = __match_args__ = ("id", "pri")
    id: int
    pri: int

    def __init__(self, id: int, pri: int) -> None:
        self.id = id
        self.pri = pri


@cython.no_gc
@cython.cclass
class Touch(_Value):
    __slots__ = __match_args__ = ("id",)
    id: int

    def __init__(self, id: int) -> None:
        self.id = id


@cython.no_gc
@cython.cclass
class Watch(_Value):
    __slots__ = __match_args__ = ("tube",)
    tube: str

    def __init__(self, tube: str) -> None:
        self.tube = tube


@cython.no_gc
@cython.cclass
class Ignore(_Value):
    __slots__ = __match_args__ = ("tube",)
    tube: str

    def __init__(self, tube: str) -> None:
        self.tube = tube


@cython.no_gc
@cython.cclass
class Peek(_Value):
    __slots__ = __match_args__ = ("id",)
    id: int

    def __init__(self, id: int) -> None:
        self.id = id


@cython.no_gc
@cython.cclass
class PeekReady(_Value):
    __slots__ = ()


@cython.no_gc
@cython.cclass
class PeekDelayed(_Value):
    __slots__ = ()


@cython.no_gc
@cython.cclass
class PeekBuried(_Value):
    __slots__ = ()


@cython.no_gc
@cython.cclass
class Kick(_Value):
    __slots__ = __match_args__ = ("bound",)
    bound: int

    def __init__(self, bound: int) -> None:
        self.bound = bound


@cython.no_gc
@cython.cclass
class KickJob(_Value):
    __slots__ = __match_args__ = ("id",)
    id: int

    def __init__(self, id: int) -> None:
        self.id = id


@cython.no_gc
@cython.cclass
class StatsJob(_Value):
    __slots__ = __match_args__ = ("id",)
    id: int

    def __init__(self, id: int) -> None:
        self.id = id


@cython.no_gc
@cython.cclass
class StatsTube(_Value):
    __slots__ = __match_args__ = ("tube",)
    tube: str

    def __init__(self, tube: str) -> None:
        self.tube = tube


@cython.no_gc
@cython.cclass
class Stats(_Value):
    __slots__ = ()


@cython.no_gc
@cython.cclass
class ListTubes(_Value):
    __slots__ = ()


@cython.no_gc
@cython.cclass
class ListTubeUsed(_Value):
    __slots__ = ()


@cython.no_gc
@cython.cclass
class ListTubesWatched(_Value):
    __slots__ = ()


@cython.no_gc
@cython.cclass
class Quit(_Value):
    __slots__ = ()


@cython.no_gc
@cython.cclass
class PauseTube(_Value):
    __slots__ = __match_args__ = ("tube", "delay")
    tube: str
    delay: int  # seconds; 0 un-pauses

    def __init__(self, tube: str, delay: int) -> None:
        self.tube = tube
        self.delay = delay


@cython.no_gc
@cython.cclass
class ResultPut(_Value):
    """``result-put <id> <ttl> <bytes>`` (stalkd only): keep ``body`` as job ``id``'s result for
    ``ttl`` seconds, replacing an earlier one (``ttl`` 0 forgets it). ``error`` as for ``Put``:
    a too-big or badly terminated body (the body is read and dropped)."""

    __slots__ = __match_args__ = ("id", "ttl", "body", "error")
    id: int
    ttl: int
    body: bytes
    error: Literal["JOB_TOO_BIG", "EXPECTED_CRLF"] | None

    def __init__(self, id: int, ttl: int, body: bytes,
                 error: Literal["JOB_TOO_BIG", "EXPECTED_CRLF"] | None = None) -> None:
        self.id = id
        self.ttl = ttl
        self.body = body
        self.error = error


@cython.no_gc
@cython.cclass
class ResultGet(_Value):
    """``result-get <id>`` (stalkd only): ``FOUND <id> <bytes>`` with the stored result, or
    NOT_FOUND (none stored, or expired)."""

    __slots__ = __match_args__ = ("id",)
    id: int

    def __init__(self, id: int) -> None:
        self.id = id


Command = (
    Put | Use | Reserve | ReserveWithTimeout | ReserveJob | Delete | Release | Bury | Touch
    | Watch | Ignore | Peek | PeekReady | PeekDelayed | PeekBuried | Kick | KickJob | StatsJob
    | StatsTube | Stats | ListTubes | ListTubeUsed | ListTubesWatched | Quit | PauseTube
    | ResultPut | ResultGet
)  # fmt: skip


# --- replies --------------------------------------------------------------------------------


@cython.no_gc
@cython.cclass
class Reply(_Value):
    """A one-line reply: ``word`` then its arguments, e.g. ``Reply("INSERTED", (5,))``."""

    __slots__ = __match_args__ = ("word", "args")
    word: str
    args: tuple[int | str, ...]

    def __init__(self, word: str, args: tuple[int | str, ...] = ()) -> None:
        self.word = word
        self.args = args


def new_reply(word: str, args: tuple[int | str, ...] = ()) -> Reply:
    """``Reply(word, args)``. Compiled, a C function (commands.pxd) that fills the new value's
    C fields itself rather than a call of the type through its ``__init__`` (~65 instructions
    less; most of a Reply's ~900 is its allocation), for the engine's one per put
    (``INSERTED <id>``).

    >>> new_reply("INSERTED", (7,)) == Reply("INSERTED", (7,))
    True
    """
    if not cython.compiled:
        return Reply(word, args)
    r: Reply = cython.declare(Reply, Reply.__new__(Reply))
    r.word = word
    r.args = args
    return r


@cython.no_gc
@cython.cclass
class JobReply(_Value):
    """``RESERVED <id> <bytes>`` or ``FOUND <id> <bytes>`` followed by the body."""

    __slots__ = __match_args__ = ("word", "id", "body")
    word: Literal["RESERVED", "FOUND"]
    id: int
    body: bytes

    def __init__(self, word: Literal["RESERVED", "FOUND"], id: int, body: bytes) -> None:
        self.word = word
        self.id = id
        self.body = body


class YamlDict(_Value):
    """``OK <bytes>`` with a YAML mapping. ``kind`` selects key order and quoting in
    ``stalkd.protocol.stats``. For ``kind="stats"`` the engine fills the keys it owns and the
    server adds the process, binlog and host keys before encoding."""

    __slots__ = __match_args__ = ("kind", "values")
    kind: Literal["stats", "stats-job", "stats-tube"]
    values: Mapping[str, int | float | bool | str]

    def __init__(self, kind: Literal["stats", "stats-job", "stats-tube"],
                 values: Mapping[str, int | float | bool | str]) -> None:
        self.kind = kind
        self.values = values


@cython.no_gc
@cython.cclass
class YamlList(_Value):
    """``OK <bytes>`` with a YAML list of tube names (list-tubes, list-tubes-watched)."""

    __slots__ = __match_args__ = ("items",)
    items: tuple[str, ...]

    def __init__(self, items: tuple[str, ...]) -> None:
        self.items = items


@cython.no_gc
@cython.cclass
class Close(_Value):
    """No reply: the server closes the connection (``quit``)."""

    __slots__ = ()


AnyReply = Reply | JobReply | YamlDict | YamlList | Close
