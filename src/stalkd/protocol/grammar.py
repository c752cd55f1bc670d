"""The beanstalkd command grammar as one table: prefix, argument grammar, body flag, builder.

Ensures: ``COMMANDS`` lists every command in beanstalkd's matching order (``which_cmd`` in
prot.c): a line is the command of the *first* entry whose prefix it starts with. The parser
compiles this table once; nothing else in stalkd spells a command name or an argument rule.

Argument kinds (what beanstalkd 1.13 does in ``read_u32``/``read_u64``/``strtoul``, kept
exactly, quirks included, because clients and their test suites depend on them):

``u32`` / ``u64``
    spaces skipped, then ASCII digits (no sign), at most 2**32-1 / 2**64-1. The next argument
    starts right after the digits; the last one must end the line.
``timeout``
    a ``u32`` at most 2147483647 (1.13; 1.12 accepted more and blocked); text after the digits
    is ignored, so ``reserve-with-timeout 5abc`` waits 5 s.
``count``
    C ``strtoul``: any C whitespace, an optional sign, digits; a minus wraps modulo 2**64 and
    the result is truncated to 32 bits; text after the digits is ignored (``kick -1`` kicks
    everything, ``kick 1abc`` kicks one).
``tube``
    the whole rest of the line is the name: 1 to 200 of ``NAME_CHARS``, not starting with ``-``.
``name``
    ``pause-tube``'s name token: spaces skipped, then a run of ``NAME_CHARS``; checked as a
    ``tube`` once the following argument parsed.

Example:
    >>> spec = SPECS_BY_NAME["release"]
    >>> spec.prefix, [a.kind for a in spec.args]
    (b'release ', ['u64', 'u32', 'u32'])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, cast

from stalkd.engine.commands import (
    Bury,
    Command,
    Delete,
    Ignore,
    Kick,
    KickJob,
    ListTubes,
    ListTubesWatched,
    ListTubeUsed,
    PauseTube,
    Peek,
    PeekBuried,
    PeekDelayed,
    PeekReady,
    Put,
    Quit,
    Release,
    Reserve,
    ReserveJob,
    ReserveWithTimeout,
    Stats,
    StatsJob,
    StatsTube,
    Touch,
    Use,
    Watch,
)

__all__ = [
    "ArgKind", "Arg", "CommandSpec", "COMMANDS", "SPECS_BY_NAME", "NAME_CHARS",
    "LINE_MAX", "TUBE_NAME_MAX", "U32_MAX", "U64_MAX", "TIMEOUT_MAX", "DEFAULT_MAX_JOB_SIZE",
    "MAX_JOB_SIZE_LIMIT", "is_valid_tube",
]  # fmt: skip

LINE_MAX = 224
"""Longest command line including ``\\r\\n`` (beanstalkd ``LINE_BUF_SIZE = 11 + 201 + 12``)."""
TUBE_NAME_MAX = 200
NAME_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()"
U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1
TIMEOUT_MAX = 2**31 - 1
DEFAULT_MAX_JOB_SIZE = 65535
MAX_JOB_SIZE_LIMIT = 2**30
"""beanstalkd clamps ``-z`` to 1 GiB; so does stalkd."""

ArgKind = Literal["u32", "u64", "timeout", "count", "tube", "name"]


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument: the field it fills on the command value and how it is read.

    >>> SPECS_BY_NAME["pause-tube"].args
    (Arg(field='tube', kind='name'), Arg(field='delay', kind='u32'))
    """

    field: str
    kind: ArgKind


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One row of the command table.

    ``exact``: the line must equal the prefix (argument-less commands; ``reservex`` and
    ``stats `` are BAD_FORMAT). ``loose``: anything may follow the prefix (``quitx`` quits).
    ``body``: a ``<bytes>`` argument announces a body (``put``).

    >>> [s.name for s in COMMANDS if s.exact][:3]
    ['peek-ready', 'peek-delayed', 'peek-buried']
    """

    name: str
    prefix: bytes
    args: tuple[Arg, ...]
    build: Callable[..., Command]
    body: bool = False
    exact: bool = False
    loose: bool = False


def _spec(name: str, prefix: str, grammar: str, build: Callable[..., Any], **kw: bool) -> CommandSpec:
    """``grammar`` is ``"field:kind field:kind"``, e.g. ``"id:u64 pri:u32"``."""
    args = tuple(Arg(f, cast(ArgKind, k)) for f, k in (a.split(":") for a in grammar.split()))
    return CommandSpec(name, prefix.encode(), args, build, **kw)


# Order matters: beanstalkd tests prefixes in exactly this order.
COMMANDS: tuple[CommandSpec, ...] = (
    _spec("put", "put ", "pri:u32 delay:u32 ttr:u32 bytes:u32", Put, body=True),
    _spec("peek", "peek ", "id:u64", Peek),
    _spec("peek-ready", "peek-ready", "", PeekReady, exact=True),
    _spec("peek-delayed", "peek-delayed", "", PeekDelayed, exact=True),
    _spec("peek-buried", "peek-buried", "", PeekBuried, exact=True),
    _spec("reserve-with-timeout", "reserve-with-timeout ", "timeout:timeout", ReserveWithTimeout),
    _spec("reserve-job", "reserve-job ", "id:u64", ReserveJob),
    _spec("reserve", "reserve", "", Reserve, exact=True),
    _spec("delete", "delete ", "id:u64", Delete),
    _spec("release", "release ", "id:u64 pri:u32 delay:u32", Release),
    _spec("bury", "bury ", "id:u64 pri:u32", Bury),
    _spec("kick", "kick ", "bound:count", Kick),
    _spec("kick-job", "kick-job ", "id:u64", KickJob),
    _spec("touch", "touch ", "id:u64", Touch),
    _spec("stats-job", "stats-job ", "id:u64", StatsJob),
    _spec("stats-tube", "stats-tube ", "tube:tube", StatsTube),
    _spec("stats", "stats", "", Stats, exact=True),
    _spec("use", "use ", "tube:tube", Use),
    _spec("watch", "watch ", "tube:tube", Watch),
    _spec("ignore", "ignore ", "tube:tube", Ignore),
    _spec("list-tubes-watched", "list-tubes-watched", "", ListTubesWatched, exact=True),
    _spec("list-tube-used", "list-tube-used", "", ListTubeUsed, exact=True),
    _spec("list-tubes", "list-tubes", "", ListTubes, exact=True),
    _spec("quit", "quit", "", Quit, loose=True),
    _spec("pause-tube", "pause-tube", "tube:name delay:u32", PauseTube),
)

SPECS_BY_NAME: dict[str, CommandSpec] = {s.name: s for s in COMMANDS}

_NAME_SET = frozenset(NAME_CHARS)


def is_valid_tube(name: bytes) -> bool:
    """beanstalkd's ``is_valid_tube``: 1..200 name characters, not starting with ``-``.

    >>> is_valid_tube(b"x_y"), is_valid_tube(b"-x"), is_valid_tube(b"a*b")
    (True, False, False)
    """
    return 0 < len(name) <= TUBE_NAME_MAX and name[0] != 0x2D and _NAME_SET.issuperset(name)
