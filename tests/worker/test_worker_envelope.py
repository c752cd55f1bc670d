"""The job envelope and dead-letter records round-trip, and bad bodies fail with the job id."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stalkd.worker.actions import DeadLetter
from stalkd.worker.errors import EnvelopeError
from stalkd.worker.serializer import PREFIX, Header, decode_envelope, encode_envelope

headers = st.builds(
    Header, task=st.text(min_size=1, max_size=50),
    key=st.none() | st.text(max_size=50), marker=st.none() | st.integers(1, 2**63),
    deps=st.lists(st.text(max_size=20), max_size=3).map(tuple),
    ttr=st.none() | st.integers(1, 2**32 - 1),
    inputs=st.lists(st.integers(1, 2**63), max_size=4).map(tuple), gather=st.booleans(),
    result_ttl=st.none() | st.floats(0, 1e9), origin=st.none() | st.integers(1, 2**63))


@given(header=headers, payload=st.binary(max_size=300))
def test_envelope_round_trips(header: Header, payload: bytes) -> None:
    assert decode_envelope(encode_envelope(header, payload), job_id=1) == (header, payload)


@given(body=st.binary(max_size=200).filter(lambda b: not b.startswith(PREFIX)))
def test_foreign_bodies_pass_through_as_bare_payloads(body: bytes) -> None:
    assert decode_envelope(body, job_id=1) == (None, body)


@pytest.mark.parametrize("body", [PREFIX + b'{"t":"x"}', PREFIX + b"not json\n{}",
                                  PREFIX + b'{"task":"x"}\n1', PREFIX + b'{"t":5}\n1'])
def test_broken_envelopes_name_the_job(body: bytes) -> None:
    with pytest.raises(EnvelopeError, match="^job 42: "):
        decode_envelope(body, job_id=42)


@given(st.builds(DeadLetter, job_id=st.integers(1, 2**63), tube=st.text(max_size=20),
                 task=st.text(max_size=20), attempts=st.integers(1, 100), error=st.text(),
                 traceback=st.text(), failed_at=st.floats(0, 2e9), body=st.binary(max_size=200)))
def test_dead_letter_records_round_trip(record: DeadLetter) -> None:
    assert DeadLetter.from_json(record.to_json()) == record


def test_a_foreign_job_is_not_mistaken_for_a_dead_letter() -> None:
    with pytest.raises(ValueError, match="not a stalkd dead-letter record"):
        DeadLetter.from_json(b'{"job_id": 1}')
