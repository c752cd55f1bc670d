"""One command line (without its ``\\r\\n``) to a command value or an error reply.

The readers of each argument kind (``grammar``'s ``u32``, ``u64``, ``timeout``, ``count``,
``tube``, ``name``) are regex fragments compiled per table row, the first time a line of that
row comes (``_lazy``): a server whose C parser reads its lines compiles none, and the Python
parser's canonical lines go by the fast lookups below, which need none. Those are equivalent to
the ordered prefix scan (tests/protocol/test_properties.py checks the equivalence). ``put``'s
line is read by the parser, which owns its body (``PUT_RX``, compiled when first asked for,
``PUT_HEAD``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from stalkd.protocol.commands import Command, Reply
from stalkd.protocol.constructors import slot_maker
from stalkd.protocol.grammar import (
    BODY_SPEC,
    COMMANDS,
    TIMEOUT_MAX,
    U32_MAX,
    U64_MAX,
    CommandSpec,
    is_valid_tube,
)
from stalkd.protocol.markers import BAD_FORMAT, UNKNOWN_COMMAND

__all__ = [
    "BAD_FORMAT", "UNKNOWN_COMMAND", "DIGITS", "BODY_SPEC", "PUT_PREFIX", "PUT_HEAD", "PUT_PARTS", "PUT_RX",
    "FAST1", "FAST_DIGITS", "EXACT", "SPACED", "parse_line", "fast_digits", "match_command",
]  # fmt: skip

if TYPE_CHECKING:  # (at run time no alias is made: see grammar.ArgKind)
    _Parse = Callable[[bytes], Command | Reply]

# Argument kinds -> (regex fragment, converter of its groups). The fragments use possessive
# quantifiers so digits are never split between two arguments (C's strtoumax is greedy).
_DIGITS = DIGITS = rb" *+([0-9]++)"  # DIGITS: also parser.py's other body commands
_NAME = rb" *+([A-Za-z0-9\-+/;.$_()]++)"
_CSPACE = rb"[ \t\n\x0b\x0c\r]*+([+-]?)([0-9]++)"  # strtoul: C isspace, optional sign

def _u32(g: bytes) -> int | None:
    v = int(g)
    return v if v <= U32_MAX else None


def _u64(g: bytes) -> int | None:
    v = int(g)
    return v if v <= U64_MAX else None


def _timeout(g: bytes) -> int | None:
    v = int(g)
    return v if v <= TIMEOUT_MAX else None


def _count(sign: bytes, g: bytes) -> int | None:
    v = int(g)
    if v > U64_MAX:  # strtoul's ERANGE
        return None
    if sign == b"-":
        v = -v % 2**64
    return v & U32_MAX  # beanstalkd stores strtoul's unsigned long in a 32-bit uint


def _tube(g: bytes) -> str | None:
    return g.decode("ascii") if is_valid_tube(g) else None


def _compile(spec: CommandSpec) -> _Parse:
    """Turn one table row into a function from the text after the prefix to a value."""
    if spec.exact:
        only = spec.build()
        return lambda rest: BAD_FORMAT if rest else only
    if spec.loose:
        only = spec.build()
        return lambda rest: only
    parts: list[bytes] = []
    convs: list[tuple[int, Callable[..., int | str | None]]] = []
    for arg in spec.args:
        if arg.kind == "tube":
            parts.append(rb"(.*)")
            convs.append((1, _tube))
        elif arg.kind == "name":
            parts.append(_NAME)
            convs.append((1, _tube))
        elif arg.kind == "count":
            parts.append(_CSPACE)
            convs.append((2, _count))
        else:
            parts.append(_DIGITS)
            convs.append((1, {"u32": _u32, "u64": _u64, "timeout": _timeout}[arg.kind]))
    rx = re.compile(b"".join(parts), re.DOTALL)
    # timeout and count read with an end pointer nobody checks: trailing text is ignored.
    loose_tail = spec.args[-1].kind in ("timeout", "count")
    match = rx.match if loose_tail else rx.fullmatch
    build = spec.build
    fields = [a.field for a in spec.args]

    if len(convs) == 1 and convs[0][0] == 1:
        conv1 = convs[0][1]

        def parse1(rest: bytes) -> Command | Reply:
            m = match(rest)
            if m is None:
                return BAD_FORMAT
            v = conv1(m.group(1))
            return BAD_FORMAT if v is None else build(v)

        return parse1

    def parse(rest: bytes) -> Command | Reply:
        m = match(rest)
        if m is None:
            return BAD_FORMAT
        groups = m.groups()
        values: dict[str, int | str] = {}
        i = 0
        for field, (n, conv) in zip(fields, convs, strict=True):
            v = conv(*groups[i : i + n])
            if v is None:
                return BAD_FORMAT
            values[field] = v
            i += n
        return build(**values)

    return parse


# The body command (put) from the table (grammar.BODY_SPEC): its line is "<head> <u32> <u32> <u32> <bytes>".
assert len(BODY_SPEC.args) == 4 and all(a.kind == "u32" for a in BODY_SPEC.args)
PUT_PREFIX = BODY_SPEC.prefix
PUT_HEAD = PUT_PREFIX[:-1]
PUT_PARTS = len(BODY_SPEC.args) + 1
_PUT_PATTERN = _DIGITS * len(BODY_SPEC.args)
PUT_RX: re.Pattern[bytes]  # (made by __getattr__ below)


def __getattr__(name: str) -> object:
    # PUT_RX, compiled when first asked for (the parser's non-canonical put lines), then a
    # global like any other
    if name == "PUT_RX":
        global PUT_RX
        PUT_RX = re.compile(_PUT_PATTERN)
        return PUT_RX
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _lazy(spec: CommandSpec, at: int) -> _Parse:
    """The parser of a row with arguments until its first line: it makes ``_compile(spec)``
    (the regex compiled then, not at import), puts it in its own places in ``_PARSERS`` and
    ``SPACED`` and parses the line with it. Later lines call that parser directly."""

    def first(rest: bytes) -> Command | Reply:
        parse = _compile(spec)
        _PARSERS[at] = (spec.prefix, parse)
        if spec.prefix.endswith(b" "):
            SPACED[spec.prefix[:-1]] = parse
        return parse(rest)

    return first


# Fast lookups equivalent to the ordered prefix scan (tests/protocol checks the equivalence):
# a line "<head> <rest>" whose "<head> " is a table prefix, or a line equal to an exact prefix,
# cannot be claimed by an earlier row. A row without arguments has no regex: made at once.
_PARSERS: list[tuple[bytes, _Parse]] = [
    (s.prefix, _compile(s) if s.exact or s.loose else _lazy(s, at))
    for at, s in enumerate(s for s in COMMANDS if not s.body)
]
SPACED: dict[bytes, _Parse] = {p[:-1]: f for p, f in _PARSERS if p.endswith(b" ")}
EXACT: dict[bytes, Command] = {s.prefix: s.build() for s in COMMANDS if s.exact}


def _fast_id(build: Callable[[int], Command]) -> Callable[[bytes], Command | None]:
    def fast(arg: bytes) -> Command | None:
        # at most 19 digits always fits in a u64; longer goes to the checked path
        return build(int(arg)) if arg.isdigit() and len(arg) < 20 else None

    return fast


def _fast_tube(build: Callable[[str], Command]) -> Callable[[bytes], Command | None]:
    # Tube names repeat: keep the (immutable) command per name, bounded.
    cache: dict[bytes, Command] = {}

    def fast(arg: bytes) -> Command | None:
        cmd = cache.get(arg)
        if cmd is None:
            name = _tube(arg)
            if name is None:
                return None
            if len(cache) >= 1024:
                cache.clear()
            cmd = cache[arg] = build(name)
        return cmd

    return fast


def _fast_bounded(build: Callable[[int], Command], conv: Callable[[bytes], int | None]) -> Callable[[bytes], Command | None]:
    def fast(arg: bytes) -> Command | None:
        if not arg.isdigit():
            return None
        v = conv(arg)
        return None if v is None else build(v)

    return fast


def _fast1_for(spec: CommandSpec) -> Callable[[bytes], Command | None]:
    kind = spec.args[0].kind
    if kind == "tube":
        return _fast_tube(spec.build)
    if kind == "u64":
        return _fast_id(slot_maker(spec.build))
    if kind == "timeout":
        return _fast_bounded(slot_maker(spec.build), _timeout)
    return _fast_bounded(slot_maker(spec.build), lambda g: _count(b"", g))  # count, plain digits


FAST1: dict[bytes, Callable[[bytes], Command | None]] = {
    s.prefix[:-1]: _fast1_for(s)
    for s in COMMANDS
    if s.prefix.endswith(b" ") and len(s.args) == 1
}
# "<head> <digits> <digits>..." commands: (builder, maximum of each argument)
FAST_DIGITS: dict[tuple[bytes, int], tuple[Callable[..., Command], tuple[int, ...]]] = {
    (s.prefix[:-1], len(s.args) + 1): (slot_maker(s.build), tuple(U64_MAX if a.kind == "u64" else U32_MAX for a in s.args))
    for s in COMMANDS
    if not s.body and len(s.args) > 1 and s.prefix.endswith(b" ") and all(a.kind in ("u32", "u64") for a in s.args)
}


def fast_digits(spec: tuple[Callable[..., Command], tuple[int, ...]], parts: list[bytes]) -> Command | None:
    build, maxima = spec
    values = []
    for part, top in zip(parts[1:], maxima, strict=True):
        if not part.isdigit():
            return None
        v = int(part)
        if v > top:
            return None
        values.append(v)
    return build(*values)


def match_command(line: bytes) -> str | None:
    """Name of the table row a command line (without CRLF) matches, by the ordered scan.

    >>> match_command(b"reserve-with-timeout"), match_command(b"quitx"), match_command(b"use")
    ('reserve', 'quit', None)
    """
    for spec in COMMANDS:
        if line.startswith(spec.prefix):
            return spec.name
    return None


def parse_line(line: bytes) -> Command | Reply:
    """A command line other than a body command's, by beanstalkd's ordered prefix scan.

    >>> parse_line(b"delete 5"), parse_line(b"delete 5x"), parse_line(b"PEEK 1")
    (Delete(id=5), Reply(word='BAD_FORMAT', args=()), Reply(word='UNKNOWN_COMMAND', args=()))
    """
    if b"\0" in line:
        return BAD_FORMAT
    sp = line.find(b" ")
    if sp > 0:
        parse = SPACED.get(line[:sp])
        if parse is not None:
            return parse(line[sp + 1 :])
    for prefix, parse in _PARSERS:
        if line.startswith(prefix):
            return parse(line[len(prefix) :])
    return UNKNOWN_COMMAND
