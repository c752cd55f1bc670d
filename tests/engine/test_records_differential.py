"""The compiled record encoder (stalkd.engine._records) against the reference (model.encode):
every record, valid or not, gives the same bytes or the same error. Skipped when the extension
is not active (``STALKD_NO_EXTENSIONS=1`` or no compiler); test_heap_build.py checks that the
accelerators build.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stalkd.engine import fastrecords, model
from stalkd.engine.model import JobState, Op, Record

pytestmark = pytest.mark.skipif(fastrecords.IMPLEMENTATION != "c", reason="the compiled encoder is not active")

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Mostly in range, with the edges of every field width and some values past them.
ints = st.one_of(
    st.integers(0, 2**32 - 1),
    st.sampled_from([0, 1, 255, 256, 2**16 - 1, 2**16, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -1,
                     -(2**63), -(2**63) - 1]),
    st.integers(-(2**70), 2**70),
)
tubes = st.one_of(st.text(alphabet="abcXYZ019-+/;.$_()", max_size=200), st.text(max_size=5),
                  st.just("t" * 65536))
bodies = st.one_of(st.binary(max_size=300), st.binary(max_size=8).map(bytearray))


WIDTHS = {"seq": (0, 2**64 - 1), "time_us": (-(2**63), 2**63 - 1), "job_id": (0, 2**64 - 1), "pri": (0, 2**32 - 1),
          "delay": (0, 2**32 - 1), "ttr": (0, 2**32 - 1), "deadline_us": (-(2**63), 2**63 - 1),
          "created_us": (-(2**63), 2**63 - 1), "reserves": (0, 2**32 - 1), "timeouts": (0, 2**32 - 1),
          "releases": (0, 2**32 - 1), "buries": (0, 2**32 - 1), "kicks": (0, 2**32 - 1), "epoch": (0, 2**64 - 1),
          "start_offset": (0, 2**64 - 1)}  # fmt: skip


@st.composite
def valid_records(draw: st.DrawFn) -> Record:
    """Every field within its width, as the engine makes them."""
    fields: dict[str, Any] = {name: draw(st.integers(lo, hi)) for name, (lo, hi) in WIDTHS.items()}
    return Record(op=draw(st.sampled_from([o for o in Op if o is not Op.UNKNOWN])),
                  tube=draw(st.text(alphabet="abcXYZ019-+/;.$_()", max_size=200)), body=draw(st.binary(max_size=300)),
                  state=draw(st.sampled_from(list(JobState))), **fields)  # fmt: skip


@SETTINGS
@given(valid_records())
def test_same_bytes(r: Record) -> None:
    assert fastrecords.encode(r) == model.encode(r)


@st.composite
def records(draw: st.DrawFn) -> Record:
    """Anything a Record can hold, mostly out of range somewhere."""
    fields: dict[str, Any] = {name: draw(ints) for name in (
        "seq", "time_us", "job_id", "pri", "delay", "ttr", "deadline_us", "created_us", "reserves",
        "timeouts", "releases", "buries", "kicks", "epoch", "start_offset")}  # fmt: skip
    return Record(op=draw(st.sampled_from(list(Op))), tube=draw(tubes), body=draw(bodies),
                  state=draw(st.one_of(st.sampled_from(list(JobState)), ints)), **fields)  # fmt: skip


def outcome(encode: Any, r: Record) -> tuple[str, object]:
    try:
        return "bytes", encode(r)
    except Exception as e:  # the same error, type and message, is the requirement
        return type(e).__name__, str(e)


@SETTINGS
@given(records())
def test_same_bytes_or_same_error(r: Record) -> None:
    assert outcome(fastrecords.encode, r) == outcome(model.encode, r)


def test_every_op_in_range_gives_the_references_bytes() -> None:
    for op in Op:
        if op is Op.UNKNOWN:
            continue
        r = Record(op, 2**64 - 1, -5, 7, "tube-a", 2**32 - 1, 3, 4, -(2**63), b"body\x00", JobState.BURIED, 9, 1, 2,
                   3, 4, 5, 2**64 - 1, 12)  # fmt: skip
        assert fastrecords.encode(r) == model.encode(r), op


def test_a_plain_int_op_is_the_references_to_decide() -> None:
    r = Record(1, 1, 2, 3, "t", body=b"x")  # type: ignore[arg-type]
    assert fastrecords.encode(r) == model.encode(r)
