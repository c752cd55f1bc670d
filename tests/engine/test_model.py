"""WAL record format, version 1: round trips, frozen bytes, and corrupt input."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalkd.engine.model import (
    DURABLE_OPS,
    LAYOUTS,
    JobState,
    Op,
    Record,
    RecordFormatError,
    decode,
    encode,
)

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
i64 = st.integers(0, 2**63 - 1)
tubes = st.text(alphabet="abcXYZ019-+/;.$_()", min_size=1, max_size=200)


@st.composite
def records(draw: st.DrawFn) -> Record:
    op = draw(st.sampled_from([o for o in Op if o is not Op.UNKNOWN]))
    base = {"op": op, "seq": draw(u64), "time_us": draw(i64), "job_id": draw(u64)}
    if op is Op.PUT:
        t = draw(i64)
        base["time_us"] = t
        base.update(tube=draw(tubes), pri=draw(u32), delay=draw(u32), ttr=draw(u32),
                    deadline_us=draw(i64), body=draw(st.binary(max_size=300)), created_us=t)
    elif op is Op.RELEASE:
        base.update(pri=draw(u32), delay=draw(u32), deadline_us=draw(i64))
    elif op is Op.BURY:
        base.update(pri=draw(u32))
    elif op is Op.RESULT:
        base.update(deadline_us=draw(i64), body=draw(st.binary(max_size=300)))
    elif op is Op.EPOCH:
        base.update(epoch=draw(u64), start_offset=draw(u64))
    elif op is Op.PAUSE:
        base.update(tube=draw(tubes), delay=draw(u32), deadline_us=draw(i64))
    elif op is Op.JOB:
        base.update(tube=draw(tubes), pri=draw(u32), delay=draw(u32), ttr=draw(u32),
                    deadline_us=draw(i64), body=draw(st.binary(max_size=300)),
                    state=draw(st.sampled_from(list(JobState))), created_us=draw(i64),
                    reserves=draw(u32), timeouts=draw(u32), releases=draw(u32),
                    buries=draw(u32), kicks=draw(u32))
    return Record(**base)


@given(records())
def test_round_trip(r: Record) -> None:
    assert decode(encode(r)) == r
    assert decode(memoryview(encode(r))) == r


def test_version_1_put_bytes_are_frozen() -> None:
    # A v1 PUT written by this build; if this literal changes, the format changed: see model.py.
    r = Record(Op.PUT, seq=7, time_us=1_000_000, job_id=3, tube="default", pri=1024, delay=0,
               ttr=60, body=b"hi", created_us=1_000_000)
    frozen = bytes.fromhex(
        "0101" "0700000000000000" "40420f0000000000" "0300000000000000"
        "00040000" "00000000" "3c000000" "0000000000000000" "0700" "64656661756c74"
        "02000000" "6869"
    )
    assert encode(r) == frozen
    assert decode(frozen) == r


def test_version_1_result_bytes_are_frozen() -> None:
    # A v1 RESULT (op 11): a job's stored result and when it expires. Frozen like PUT above.
    r = Record(Op.RESULT, seq=9, time_us=2_000_000, job_id=3, deadline_us=62_000_000, body=b"ok")
    frozen = bytes.fromhex(
        "010b" "0900000000000000" "80841e0000000000" "0300000000000000"
        "800bb20300000000" "02000000" "6f6b"
    )
    assert encode(r) == frozen
    assert decode(frozen) == r


def test_version_1_epoch_bytes_are_frozen() -> None:
    # A v1 EPOCH (op 12): a promotion started epoch 2 at log offset 300. Frozen like PUT above.
    r = Record(Op.EPOCH, seq=5, time_us=3_000_000, epoch=2, start_offset=300)
    frozen = bytes.fromhex(
        "010c" "0500000000000000" "c0c62d0000000000" "0000000000000000"
        "0200000000000000" "2c01000000000000"
    )
    assert encode(r) == frozen
    assert decode(frozen) == r


def test_unknown_op_is_skippable() -> None:
    payload = bytes([1, 200]) + bytes(24)
    assert decode(payload).op is Op.UNKNOWN


@pytest.mark.parametrize("cut", [0, 1, 10, 25, 30, 40])
def test_truncated_put_is_a_format_error(cut: int) -> None:
    payload = encode(Record(Op.PUT, 1, 1, 1, tube="t", ttr=1, body=b"abcdef", created_us=1))
    with pytest.raises(RecordFormatError):
        decode(payload[:cut])


def test_unknown_version_is_a_format_error() -> None:
    with pytest.raises(RecordFormatError, match="version 9"):
        decode(bytes([9, 1]) + bytes(24))


def test_every_op_has_its_row_in_the_registry() -> None:
    # what encode and decode derive from: an op added to Op without a row would be refused
    assert set(LAYOUTS) == set(Op) - {Op.UNKNOWN}


def test_an_op_without_a_layout_is_refused_not_written_as_a_bare_header() -> None:
    with pytest.raises(ValueError, match="decoding result"):
        encode(Record(Op.UNKNOWN, 1, 2, 3))
    with pytest.raises(ValueError, match="no layout"):
        encode(Record(99, 1, 2, 3))  # type: ignore[arg-type]


def test_every_row_has_a_replay_rule_and_its_size() -> None:
    # adding a record type is a row in model.LAYOUTS and its rule in replay.RULES
    from stalkd.engine.replay import RULES

    assert set(LAYOUTS) <= set(RULES)
    r = Record(Op.JOB, 1, 2, 3, "tube", 4, 5, 6, 7, b"body" * 9, JobState.BURIED, 8, kicks=2)
    for op, row in LAYOUTS.items():
        rec = dataclasses.replace(r, op=op)
        assert row.size(rec) == len(encode(rec)), op


def test_the_wal_room_of_each_op_follows_its_row() -> None:
    # the cost the space budget promises, derived from the registry, is the rule the WAL's room
    # was written with: a put its frame and its delete's, a result its frame, a delete nothing
    # (its put paid), other durable records one short frame, analytics records nothing
    from stalkd.engine.space import COSTLESS_OPS, SHORT_FRAME, put_frame, record_cost
    from stalkd.log.frame import frame_size

    put = Record(Op.PUT, 1, 2, 3, "tube", body=b"x" * 100)
    assert record_cost(put) == put_frame(100, 4) + SHORT_FRAME
    result = Record(Op.RESULT, 1, 2, 3, body=b"y" * 10)
    assert record_cost(result) == frame_size(len(encode(result)))
    for op in (Op.RELEASE, Op.BURY, Op.KICK, Op.EPOCH):
        assert record_cost(Record(op, 1, 2, 3)) == SHORT_FRAME >= frame_size(len(encode(Record(op, 1, 2, 3))))
    for op in (Op.DELETE, Op.TOUCH, Op.RESERVE, Op.TIMEOUT, Op.PAUSE):
        assert record_cost(Record(op, 1, 2, 3)) == 0 and op in COSTLESS_OPS
    assert {Op.PUT, Op.DELETE, Op.RELEASE, Op.BURY, Op.KICK, Op.JOB, Op.RESULT, Op.EPOCH} == DURABLE_OPS


# What ``@dataclass(frozen=True)`` made of Record before it wrote its own methods: its fields in
# order, their annotations and defaults.
_DATACLASS_FIELDS = [
    ("op", "Op", dataclasses.MISSING), ("seq", "int", dataclasses.MISSING), ("time_us", "int", dataclasses.MISSING),
    ("job_id", "int", 0), ("tube", "str", ""), ("pri", "int", 0), ("delay", "int", 0), ("ttr", "int", 0),
    ("deadline_us", "int", 0), ("body", "bytes", b""), ("state", "JobState", JobState.READY),
    *((name, "int", 0) for name in ("created_us", "reserves", "timeouts", "releases", "buries", "kicks", "epoch",
                                    "start_offset")),
]  # fmt: skip


def test_record_keeps_the_frozen_dataclass_contract_it_no_longer_defines_at_import() -> None:
    assert [(f.name, f.type, f.default) for f in dataclasses.fields(Record)] == _DATACLASS_FIELDS
    assert dataclasses.is_dataclass(Record) and Record.__match_args__ == tuple(n for n, _, _ in _DATACLASS_FIELDS)
    r = Record(Op.JOB, 1, 2, 3, "tube", 4, 5, 6, 7, b"body", JobState.BURIED, 8, kicks=2)
    assert dataclasses.replace(r, kicks=3) == Record(Op.JOB, 1, 2, 3, "tube", 4, 5, 6, 7, b"body", JobState.BURIED, 8,
                                                     kicks=3)  # fmt: skip
    assert dataclasses.astuple(r) == tuple(getattr(r, n) for n, _, _ in _DATACLASS_FIELDS)
    assert r != dataclasses.replace(r, kicks=3) and r != (1, 2) and hash(r) == hash(dataclasses.astuple(r))
    assert copy.copy(r) == r and copy.deepcopy(r) == r and pickle.loads(pickle.dumps(r)) == r
    assert repr(r) == ("Record(op=<Op.JOB: 10>, seq=1, time_us=2, job_id=3, tube='tube', pri=4, delay=5, ttr=6, "
                       "deadline_us=7, body=b'body', state=<JobState.BURIED: 3>, created_us=8, reserves=0, timeouts=0, "
                       "releases=0, buries=0, kicks=2, epoch=0, start_offset=0)")  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.kicks = 4  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del r.kicks  # type: ignore[misc]
    assert r.kicks == 2
