"""Which implementation of the hot path runs: the C accelerator or the pure-Python reference.

``stalkd.protocol._speedups`` (built from ``_speedups.c`` by ``pip install``/``make`` when a
compiler is there) is a compiled twin of ``parser.Parser``, ``replies.encode_line`` and
``replies.encode_reply_parts`` (plain lines and job replies; YAML replies go to the
reference). It is given the command table here, so the grammar stays written once
(``grammar.COMMANDS``).
The Python parser (``parser``, with ``lines``' tables) is imported only where it runs, or when
``PyParser`` is first asked for: a server whose C parser runs never builds it.
``STALKD_NO_EXTENSIONS=1`` in the environment forces the pure-Python modules; so does a
missing or unloadable extension, and one built from an older ``_speedups.c`` that does
not take this table (with a warning saying how to rebuild it). ``IMPLEMENTATION`` says which one is active ("c" or
"python"); ``stalkd serve --version`` prints it.

Example:
    >>> IMPLEMENTATION in ("c", "python")
    True
    >>> p = Parser()
    >>> p.feed(b"delete 5\\r\\n")
    >>> p.next()
    Delete(id=5)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from stalkd.extensions import compiled_module, extensions_disabled
from stalkd.protocol import commands, replies
from stalkd.protocol.grammar import BODY_SPEC, COMMANDS, MAX_JOB_SIZE_LIMIT, NAME_CHARS, CommandSpec
from stalkd.protocol.markers import BAD_FORMAT, NEED_DATA, UNKNOWN_COMMAND

if TYPE_CHECKING:
    from stalkd.protocol import parser
    from stalkd.protocol.parser import Parser as PyParser

__all__ = ["IMPLEMENTATION", "Parser", "PyParser", "CParser", "encode_line", "encode_reply_parts",
           "extensions_disabled", "speedups"]

_KIND_CODES = {"u32": b"u", "u64": b"U", "timeout": b"t", "count": b"c", "tube": b"T", "name": b"n"}
_EXACT, _LOOSE, _BODY, _PUT = 1, 2, 4, 8


def _keywords(build: Callable[..., Any], fields: tuple[str, ...]) -> Callable[..., Any]:
    """``build`` called with keywords, for a class that does not take the arguments in order."""
    return lambda *values: build(**dict(zip(fields, values, strict=True)))


def _row(spec: CommandSpec) -> tuple[bytes, bytes, int, object, object]:
    """One table row as the C parser takes it: (prefix, argument kinds, flags, the value of
    an argument-less command, what to call with the values in argument order)."""
    kinds = b"".join(_KIND_CODES[a.kind] for a in spec.args)
    flags = (_EXACT if spec.exact else 0) | (_LOOSE if spec.loose else 0) | (_BODY if spec.body else 0)
    if spec.exact or spec.loose:
        return spec.prefix, kinds, flags, spec.build(), spec.build
    if spec.body:
        if spec is BODY_SPEC:
            flags |= _PUT
        # built as parser.py builds it: the class called with (*head, body, error)
        return spec.prefix, kinds, flags, None, spec.build
    names = tuple(a.field for a in spec.args)
    in_order = getattr(spec.build, "__match_args__", None) == names
    return spec.prefix, kinds, flags, None, spec.build if in_order else _keywords(spec.build, names)


def _load() -> ModuleType | None:
    _speedups = compiled_module("stalkd.protocol._speedups")
    if _speedups is None:
        return None
    try:
        _configure(_speedups)
    except (TypeError, ValueError) as e:
        # A module built from an older _speedups.c (sources updated, not rebuilt): run the
        # reference rather than fail to start, and say how to get the fast path back.
        warnings.warn(f"stalkd.protocol._speedups does not match this source ({e}); using the "
                      "pure-Python parser: rebuild it with `make ext` (or pip install -e .)",
                      RuntimeWarning, stacklevel=2)
        return None
    return _speedups


def _configure(_speedups: ModuleType) -> None:
    _speedups.configure(
        table=tuple(_row(s) for s in COMMANDS),
        put=commands.Put,
        need_data=NEED_DATA,
        bad_format=BAD_FORMAT,
        unknown_command=UNKNOWN_COMMAND,
        name_chars=NAME_CHARS,
        max_job_limit=MAX_JOB_SIZE_LIMIT,
        reply=commands.Reply,
        words=replies.WORD_LINES,
        job_reply=commands.JobReply,
        parts_fallback=replies.encode_reply_parts,
    )


speedups: ModuleType | None = _load()
"""The configured extension module, None when the pure-Python modules run."""

IMPLEMENTATION: Literal["c", "python"] = "python" if speedups is None else "c"


def _py_parser() -> type[parser.Parser]:
    from stalkd.protocol.parser import Parser

    return Parser


def __getattr__(name: str) -> object:
    if name == "PyParser":  # the Python parser, imported when first asked for
        return _py_parser()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


CParser: type[parser.Parser] | None = None if speedups is None else speedups.Parser
Parser: type[parser.Parser] = _py_parser() if CParser is None else CParser
encode_line: Callable[[commands.Reply], bytes] = (
    replies.encode_line if speedups is None else speedups.encode_line
)
encode_reply_parts: Callable[[commands.AnyReply], tuple[bytes, ...]] = (
    replies.encode_reply_parts if speedups is None else speedups.encode_reply_parts
)
