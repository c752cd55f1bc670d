"""Fast constructors for command values in the uncompiled build: set the slots directly.

Uncompiled, a command's ``__init__`` stores each field through ``_Value.__setattr__`` (which
lets a field be set once), the pure-Python parser's largest per-command cost
(bench/protocol_bench.py). These build the same values (tests/protocol/test_fast_constructors.py
compares them) through the slots' descriptors. Compiled, the command classes are extension types
whose own constructor is one C call: there every maker here is the class itself, as it is for
any class that is not the plain shape they were written for.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MemberDescriptorType
from typing import Any

from stalkd.protocol.commands import Command, Put

__all__ = ["put_maker", "slot_maker", "plain_fields"]


def plain_fields(kind: object) -> tuple[str, ...] | None:
    """The field names of a command class whose fields are plain ``__slots__`` (so its values
    may be stored slot by slot), None for any other class (a compiled one included).

    >>> from stalkd.extensions import compiled_modules
    >>> from stalkd.protocol.commands import Release, Reserve
    >>> compiled = compiled_modules()["stalkd.protocol.commands"]
    >>> plain_fields(Release) == (None if compiled else ("id", "pri", "delay")), plain_fields(len)
    (True, None)
    """
    if not isinstance(kind, type):
        return None
    names: tuple[str, ...] = getattr(kind, "__match_args__", None) or ()
    if not all(type(kind.__dict__.get(n)) is MemberDescriptorType for n in names):
        return None
    return names if isinstance(getattr(kind, "__slots__", None), tuple) else None


def put_maker() -> Callable[[int, int, int, bytes], Put]:
    """A constructor for ``Put`` values that sets the slots directly. Used only while ``Put`` is
    exactly the plain five-slot class this was written for."""
    names = plain_fields(Put)
    if names != ("pri", "delay", "ttr", "body", "error"):
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
    itself for any class that is not such a plain slots class without defaults. The fast path is
    for the id commands a pipelined worker sends (delete, release, bury, touch, ...)."""
    kind: Any = build  # typed loosely: object.__new__(kind) below is a Command
    names = plain_fields(kind)
    if names is None or not 1 <= len(names) <= 3 or kind.__init__.__defaults__:
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
