"""The tube names a decoded record carries (``model._text``): each the str its bytes spell, the
same object for the same name while the name cache keeps it (what the engine's tube lookup then
hashes once), and the cache bounded however many names go by."""

from __future__ import annotations

import pytest

from stalkd.engine import model
from stalkd.engine.model import Op, Record, RecordFormatError, decode, encode


def put(name: str, jid: int = 1) -> bytes:
    return encode(Record(Op.PUT, jid, 5, jid, name, body=b"x"))


def test_names_decode_to_their_own_str_in_any_order() -> None:
    names = [f"tube-{i}" for i in range(200)]  # more names than the compiled slots (64): they collide
    payloads = [put(n, i + 1) for i, n in enumerate(names)]
    for _ in range(3):
        for n, p in zip(names, payloads, strict=True):
            assert decode(p).tube == n
    for n, p in zip(reversed(names), reversed(payloads), strict=True):  # (each after another name)
        assert decode(p).tube == n


def test_a_name_decoded_again_is_the_same_object() -> None:
    a, b = put("shared-a"), put("shared-b")
    first = decode(a).tube
    decode(b)
    assert decode(a).tube is first  # (after another name: not the last one's check)
    assert decode(put("shared-a", 9)).tube is first


def test_the_cache_stays_bounded_and_names_past_it_still_decode() -> None:
    for i in range(4096 + 500):  # (past the dict's 4,096 names)
        assert decode(put(f"many-{i}")).tube == f"many-{i}"
    kept = getattr(model, "_TUBE_NAMES", None)  # (compiled, a C global: not to be read from here)
    assert kept is None or len(kept) <= model._TUBE_NAMES_KEPT
    assert decode(put("many-0")).tube == "many-0" and decode(put("late-name")).tube == "late-name"


def test_a_name_that_is_no_ascii_is_refused_every_time() -> None:
    good = put("abcd")
    bad = good.replace(b"abcd", b"ab\xffd")
    for _ in range(2):  # (nothing of it kept: refused again)
        with pytest.raises(RecordFormatError):
            decode(bad)
    assert decode(good).tube == "abcd"
