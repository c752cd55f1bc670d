"""Uncompiled, the parser builds commands by setting slots directly (``constructors.slot_maker``
and ``put_maker``); compiled, the command classes are extension types and every path calls the
class. The values must equal what the constructors build, or the engine and server would see
different commands depending on which parser path a line took."""

from __future__ import annotations

from collections.abc import Callable

from stalkd.extensions import compiled_modules
from stalkd.protocol import NEED_DATA
from stalkd.protocol import commands as C
from stalkd.protocol.constructors import plain_fields, slot_maker
from stalkd.protocol.parser import Parser


def test_slot_maker_equals_constructor() -> None:
    cases: list[tuple[Callable[..., C.Command], tuple[int, ...]]] = [
        (C.Delete, (7,)), (C.Bury, (7, 3)), (C.Release, (7, 3, 9)), (C.Touch, (2**64 - 1,)),
        (C.ReserveWithTimeout, (0,)), (C.Kick, (4,))]  # fmt: skip
    for cls, args in cases:
        fast = slot_maker(cls)
        # compiled, the class's own constructor is one C call: nothing to make faster
        assert (fast is cls) == compiled_modules()["stalkd.protocol.commands"]
        got, want = fast(*args), cls(*args)
        assert type(got) is cls and got == want and hash(got) == hash(want)
    # a class with a default or no fields is left to its own constructor
    assert slot_maker(C.Put) is C.Put
    assert slot_maker(C.Reserve) is C.Reserve


def test_fast_and_general_paths_agree() -> None:
    # canonical lines take the fast paths; the same commands with doubled spaces take the
    # general regex path: both must give equal values
    lines = [b"delete 5", b"release 5 10 2", b"bury 5 1", b"touch 5", b"kick-job 5", b"peek 5",
             b"put 1 2 0 3\r\nabc", b"put 1 2 3 3\r\nabc", b"reserve-with-timeout 5", b"kick 3"]  # fmt: skip
    for line in lines:
        head, _, rest = line.partition(b"\r\n")
        slow_line = head.replace(b" ", b"  ")  # declined by the fast paths
        items = []
        for text in (head, slow_line):
            p = Parser()
            p.feed(text + b"\r\n" + (rest + b"\r\n" if rest else b""))
            item = p.next()
            assert p.next() is NEED_DATA
            items.append(item)
        assert items[0] == items[1], line
        assert isinstance(items[0], C.Put | C.Release | C.Bury | C.Delete | C.Touch | C.KickJob | C.Peek
                          | C.ReserveWithTimeout | C.Kick), line


def test_plain_fields_are_the_match_args() -> None:
    # uncompiled, every class's fields are its slots in __match_args__ order (what the fast
    # constructors set); compiled, none is plain (C fields)
    compiled = compiled_modules()["stalkd.protocol.commands"]
    for cls in (C.Put, C.Release, C.Reply, C.JobReply):
        assert plain_fields(cls) == (None if compiled else cls.__match_args__), cls
    assert plain_fields(C.Reserve) == () and plain_fields(len) is None
