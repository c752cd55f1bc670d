"""The beanstalkd command set as one table: grammar, counter, job look-up and WAL cost.

Ensures: ``COMMANDS`` lists every command in beanstalkd's matching order (``which_cmd`` in
prot.c): a line is the command of the *first* entry whose prefix it starts with. Everything
else is derived from it at import time: the parser's fast tables, the engine's dispatch (the
handler ``_<name>``, its counter, its job look-up and WAL admission), and the ``cmd-*`` keys
of ``stats``. Nothing else in stalkd spells a command name or an argument rule.

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
from typing import TYPE_CHECKING, Any, Literal, cast

from stalkd.protocol.commands import (
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
    ResultGet,
    ResultPut,
    Stats,
    StatsJob,
    StatsTube,
    Touch,
    Use,
    Watch,
)
from stalkd.values import Value

__all__ = [
    "ArgKind", "Arg", "CommandSpec", "COMMANDS", "SPECS_BY_NAME", "BODY_SPEC", "NAME_CHARS", "JobLookup",
    "WalCost", "COUNTERS", "REPORTED_COUNTERS",
    "LINE_MAX", "TUBE_NAME_MAX", "U32_MAX", "U64_MAX", "TIMEOUT_MAX", "DEFAULT_MAX_JOB_SIZE",
    "MAX_JOB_SIZE_LIMIT", "is_valid_tube", "STANDBY_COMMANDS", "NOT_PRIMARY",
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

# The kinds below are Literals for the type checker; at run time they are ``str``, as their values
# are (a Literal made at import costs about as much as a small module's import).
if TYPE_CHECKING:
    ArgKind = Literal["u32", "u64", "timeout", "count", "tube", "name"]
    JobLookup = Literal["held", "deletable", "unreserved", "kickable"]
    """How a command finds its job (NOT_FOUND otherwise): ``held`` reserved by this connection;
    ``deletable`` not reserved by another one; ``unreserved`` not reserved; ``kickable`` buried
    or delayed."""
    WalCost = Literal["put", "update", "updates", "result"]
    """The durable records a command may write, so room is promised before it runs: one put
    record, one short update record, up to ``bound`` short update records (kick), or one result
    record with its body (result-put)."""
else:
    ArgKind = JobLookup = WalCost = str


class Arg(Value):
    """One argument: the field it fills on the command value and how it is read.

    >>> SPECS_BY_NAME["pause-tube"].args
    (Arg(field='tube', kind='name'), Arg(field='delay', kind='u32'))
    """

    __slots__ = ("field", "kind")

    def __init__(self, field: str, kind: ArgKind) -> None:
        self.field = field
        self.kind = kind


class CommandSpec(Value):
    """One row of the command table.

    ``exact``: the line must equal the prefix (argument-less commands; ``reservex`` and
    ``stats `` are BAD_FORMAT). ``loose``: anything may follow the prefix (``quitx`` quits).
    ``body``: a last ``<bytes>`` argument announces a body (``put``, ``result-put``).
    ``stat``: position of the ``cmd-<name>`` counter in beanstalkd's ``stats`` output; 0 for
    a counter beanstalkd keeps but never reports, None for no counter (``quit``).
    ``job``: the look-up that answers NOT_FOUND (see ``JobLookup``); ``wal``: the durable
    records it may write (see ``WalCost``). ``own``: not beanstalkd's (stalkd's extensions).

    >>> [s.name for s in COMMANDS if s.exact][:3]
    ['peek-ready', 'peek-delayed', 'peek-buried']
    >>> SPECS_BY_NAME["bury"].job, SPECS_BY_NAME["bury"].wal
    ('held', 'update')
    """

    __slots__ = ("name", "prefix", "args", "build", "stat", "job", "wal", "body", "exact", "loose", "own")

    def __init__(self, name: str, prefix: bytes, args: tuple[Arg, ...], build: Callable[..., Command],
                 stat: int | None, job: JobLookup | None = None, wal: WalCost | None = None,
                 body: bool = False, exact: bool = False, loose: bool = False,
                 own: bool = False) -> None:  # fmt: skip
        self.name = name
        self.prefix = prefix
        self.args = args
        self.build = build
        self.stat = stat
        self.job = job
        self.wal = wal
        self.body = body
        self.exact = exact
        self.loose = loose
        self.own = own  # stalkd's own command: beanstalkd answers UNKNOWN_COMMAND

    @property
    def counter(self) -> str | None:
        """The key of this command's counter (``cmd-put``), None for none."""
        return None if self.stat is None else "cmd-" + self.name


def _spec(
    name: str, prefix: str, grammar: str, build: Callable[..., Any], stat: int | None,
    job: JobLookup | None = None, wal: WalCost | None = None, **kw: bool,
) -> CommandSpec:  # fmt: skip
    """``grammar`` is ``"field:kind field:kind"``, e.g. ``"id:u64 pri:u32"``."""
    args = tuple(Arg(f, cast("ArgKind", k)) for f, k in (a.split(":") for a in grammar.split()))
    return CommandSpec(name, prefix.encode(), args, build, stat, job, wal, **kw)


# Order matters: beanstalkd tests prefixes in exactly this order.
# name, prefix, arguments, value, stats position, job look-up, WAL cost, flags
COMMANDS: tuple[CommandSpec, ...] = (
    _spec("put", "put ", "pri:u32 delay:u32 ttr:u32 bytes:u32", Put, 1, None, "put", body=True),
    _spec("peek", "peek ", "id:u64", Peek, 2),
    _spec("peek-ready", "peek-ready", "", PeekReady, 3, exact=True),
    _spec("peek-delayed", "peek-delayed", "", PeekDelayed, 4, exact=True),
    _spec("peek-buried", "peek-buried", "", PeekBuried, 5, exact=True),
    _spec("reserve-with-timeout", "reserve-with-timeout ", "timeout:timeout", ReserveWithTimeout, 7),
    _spec("reserve-job", "reserve-job ", "id:u64", ReserveJob, 0, "unreserved"),
    _spec("reserve", "reserve", "", Reserve, 6, exact=True),
    _spec("delete", "delete ", "id:u64", Delete, 8, "deletable"),
    _spec("release", "release ", "id:u64 pri:u32 delay:u32", Release, 9, "held", "update"),
    _spec("bury", "bury ", "id:u64 pri:u32", Bury, 13, "held", "update"),
    _spec("kick", "kick ", "bound:count", Kick, 14, None, "updates"),
    _spec("kick-job", "kick-job ", "id:u64", KickJob, 0, "kickable", "update"),
    _spec("touch", "touch ", "id:u64", Touch, 15, "held"),
    _spec("stats-job", "stats-job ", "id:u64", StatsJob, 17),
    _spec("stats-tube", "stats-tube ", "tube:tube", StatsTube, 18),
    _spec("stats", "stats", "", Stats, 16, exact=True),
    _spec("use", "use ", "tube:tube", Use, 10),
    _spec("watch", "watch ", "tube:tube", Watch, 11),
    _spec("ignore", "ignore ", "tube:tube", Ignore, 12),
    _spec("list-tubes-watched", "list-tubes-watched", "", ListTubesWatched, 21, exact=True),
    _spec("list-tube-used", "list-tube-used", "", ListTubeUsed, 20, exact=True),
    _spec("list-tubes", "list-tubes", "", ListTubes, 19, exact=True),
    _spec("quit", "quit", "", Quit, None, loose=True),
    _spec("pause-tube", "pause-tube", "tube:name delay:u32", PauseTube, 22),
    # stalkd's own commands (beanstalkd answers UNKNOWN_COMMAND): job results, kept for a TTL.
    # Counted (stat 0) but not in ``stats``, whose keys stay beanstalkd's.
    _spec("result-put", "result-put ", "id:u64 ttl:u32 bytes:u32", ResultPut, 0, None, "result", body=True,
          own=True),
    _spec("result-get", "result-get ", "id:u64", ResultGet, 0, own=True),
)

SPECS_BY_NAME: dict[str, CommandSpec] = {s.name: s for s in COMMANDS}
BODY_SPEC: CommandSpec = next(s for s in COMMANDS if s.body)
"""The first row with a body (put): both parsers read its line as put's (parser.py and the C
parser, which accel tells)."""

COUNTERS: tuple[str, ...] = tuple(s.counter for s in COMMANDS if s.counter is not None)
"""Every per-command counter the engine keeps (beanstalkd's ``op_ct``)."""
REPORTED_COUNTERS: tuple[str, ...] = tuple(
    s.counter for s in sorted(COMMANDS, key=lambda s: s.stat or 0) if s.stat and s.counter
)
"""The counters ``stats`` reports, in beanstalkd's order.

>>> REPORTED_COUNTERS[:3], len(REPORTED_COUNTERS)
(('cmd-put', 'cmd-peek', 'cmd-peek-ready'), 22)
"""

NOT_PRIMARY = "NOT_PRIMARY"
"""The reply of a standby (or of a primary fenced by a newer epoch) to a command it may not
run. Not a beanstalkd word on purpose: existing clients raise a clean "unexpected reply"
error on it (they do on any unknown reply) and can retry on another server."""
STANDBY_COMMANDS: frozenset[str] = frozenset({
    "peek", "peek-ready", "peek-delayed", "peek-buried", "stats-job", "stats-tube", "stats",
    "use", "watch", "ignore", "list-tubes-watched", "list-tube-used", "list-tubes", "quit",
})  # fmt: skip
"""What a standby runs: reads, and the per-connection tube choices (which change no job).
Every other command (puts, reserves, deletes, releases, buries, touches, kicks, pauses) gets
``NOT_PRIMARY``."""

_NAME_SET = frozenset(NAME_CHARS)


def is_valid_tube(name: bytes) -> bool:
    """beanstalkd's ``is_valid_tube``: 1..200 name characters, not starting with ``-``.

    >>> is_valid_tube(b"x_y"), is_valid_tube(b"-x"), is_valid_tube(b"a*b")
    (True, False, False)
    """
    return 0 < len(name) <= TUBE_NAME_MAX and name[0] != 0x2D and _NAME_SET.issuperset(name)
