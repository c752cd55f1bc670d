"""Records that are a header alone (delete, kick, reserve, touch, timeout) encode to the bytes
the header's struct gives, compiled (stored by C) or not, and refuse the same fields."""

from __future__ import annotations

import struct

import pytest

from stalkd.engine.model import (
    FORMAT_VERSION,
    HEAD,
    HEADER_SIZE,
    LAYOUTS,
    Op,
    Record,
    decode,
    encode,
)

HEAD_ONLY = [op for op, row in LAYOUTS.items() if not row.fields and not row.body]


def test_the_header_only_ops_are_the_ones_without_fields() -> None:
    assert set(HEAD_ONLY) == {Op.DELETE, Op.KICK, Op.TOUCH, Op.RESERVE, Op.TIMEOUT}


@pytest.mark.parametrize("op", HEAD_ONLY)
@pytest.mark.parametrize(("seq", "time_us", "job_id"), [
    (1, 2, 3), (0, 0, 0), (2**64 - 1, -(2**63), 2**64 - 1), (2**40 + 5, 2**63 - 1, 77),
])  # fmt: skip
def test_a_header_alone_encodes_as_the_struct_does(op: Op, seq: int, time_us: int, job_id: int) -> None:
    r = Record(op, seq, time_us, job_id)
    out = encode(r)
    assert out == HEAD.pack(FORMAT_VERSION, op, seq, time_us, job_id) and len(out) == HEADER_SIZE
    assert decode(out) == r


@pytest.mark.parametrize(("seq", "time_us", "job_id"), [(-1, 0, 1), (2**64, 0, 1), (1, 2**63, 1), (1, 0, -5)])
def test_a_field_the_format_cannot_hold_is_refused(seq: int, time_us: int, job_id: int) -> None:
    with pytest.raises(struct.error):
        encode(Record(Op.DELETE, seq, time_us, job_id))
