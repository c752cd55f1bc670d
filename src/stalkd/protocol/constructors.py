"""Fast constructors for command values: set a frozen slots dataclass's slots directly.

A frozen dataclass's ``__init__`` stores each field through ``object.__setattr__``, the
parser's largest per-command cost (bench/protocol_bench.py). These build the same values
(tests/protocol/test_fast_constructors.py compares them) and fall back to the class itself for
any class that is not the plain shape they were written for. The C parser
(``_speedups.c``) does the same from the same slot descriptors.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from stalkd.protocol.commands import Command, Put

__all__ = ["put_maker", "slot_maker", "plain_fields"]


def plain_fields(kind: object) -> tuple[str, ...] | None:
    """The field names of a frozen slots dataclass without ``__post_init__`` (whose values
    may be stored slot by slot), None for any other class.

    >>> from stalkd.protocol.commands import Release, Reserve
    >>> plain_fields(Release), plain_fields(Reserve), plain_fields(len)
    (('id', 'pri', 'delay'), (), None)
    """
    if not isinstance(kind, type) or not dataclasses.is_dataclass(kind):
        return None
    if not hasattr(kind, "__slots__") or hasattr(kind, "__post_init__"):
        return None
    return tuple(f.name for f in dataclasses.fields(kind))


def put_maker() -> Callable[[int, int, int, bytes], Put]:
    """A constructor for ``Put`` values that skips the frozen dataclass ``__init__`` (the
    parser's largest per-put cost, see bench/protocol_bench.py) by setting the slots directly. Used only while
    ``Put`` is exactly the plain five-slot dataclass this was written for."""
    names = tuple(f.name for f in dataclasses.fields(Put))
    plain = (names == ("pri", "delay", "ttr", "body", "error") and hasattr(Put, "__slots__")
             and not hasattr(Put, "__post_init__"))  # fmt: skip
    if not plain:
        return Put
    new = object.__new__
    set_pri, set_delay, set_ttr, set_body, set_error = (
        getattr(Put, n).__set__ for n in names
    )

    def make(pri: int, delay: int, ttr: int, body: bytes) -> Put:
        put = new(Put)
        set_pri(put, pri)
        set_delay(put, delay)
        set_ttr(put, ttr)
        set_body(put, body)
        set_error(put, None)
        return put

    return make



def slot_maker(build: Callable[..., Command]) -> Callable[..., Command]:
    """A constructor for a 1..3-field command with the same trick as ``put_maker``; ``build``
    itself for any class that is not such a plain frozen slots dataclass. The fast path is for
    the id commands a pipelined worker sends (delete, release, bury, touch, ...)."""
    kind: Any = build  # typed loosely: object.__new__(kind) below is a Command
    if not isinstance(kind, type) or not dataclasses.is_dataclass(kind):
        return build
    kind = build
    names = tuple(f.name for f in dataclasses.fields(kind))
    plain = (hasattr(kind, "__slots__") and not hasattr(kind, "__post_init__") and 1 <= len(names) <= 3
             and all(f.default is dataclasses.MISSING for f in dataclasses.fields(kind)))  # fmt: skip
    if not plain:
        return build
    new = object.__new__
    setters = [getattr(kind, n).__set__ for n in names]
    if len(names) == 1:
        (s0,) = setters

        def make1(a: object) -> Command:
            o: Command = new(kind)
            s0(o, a)
            return o

        return make1
    if len(names) == 2:
        s0, s1 = setters

        def make2(a: object, b: object) -> Command:
            o: Command = new(kind)
            s0(o, a)
            s1(o, b)
            return o

        return make2
    s0, s1, s2 = setters

    def make3(a: object, b: object, c: object) -> Command:
        o: Command = new(kind)
        s0(o, a)
        s1(o, b)
        s2(o, c)
        return o

    return make3
