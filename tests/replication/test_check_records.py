"""What a standby accepts from one message of its primary's stream (``frames.check_records``):
every record decodes, none is of an operation this build does not know, and each EPOCH record
starts a newer epoch at its own offset. A bad record anywhere in the message refuses the whole
message and names its offset."""

from __future__ import annotations

import pytest

from stalkd.engine.model import Op, Record, decode, encode
from stalkd.replication.frames import check_records
from stalkd.replication.wire import WireError


def put(jid: int) -> bytes:
    return encode(Record(Op.PUT, jid, 5_000_000, jid, "t", 0, 0, 60, 0, b"job %d" % jid))


def epoch(n: int, at: int) -> bytes:
    return encode(Record(Op.EPOCH, 1, 5_000_000, epoch=n, start_offset=at))


def test_a_good_message_gives_its_records_in_order() -> None:
    payloads = [put(1), epoch(2, 11), put(2), epoch(3, 13)]
    records = check_records(10, payloads, 10, 1)
    assert records == [decode(p) for p in payloads]


@pytest.mark.parametrize("where", [0, 2, 4])
def test_a_damaged_record_refuses_the_message_and_names_its_offset(where: int) -> None:
    payloads = [put(j) for j in range(1, 6)]
    payloads[where] = payloads[where][:5]  # cut short
    with pytest.raises(WireError, match=f"record at offset {20 + where}: "):
        check_records(20, payloads, 20, 0)


def test_an_unknown_operation_in_the_middle_is_named() -> None:
    unknown = bytearray(put(2))
    unknown[1] = 103
    with pytest.raises(WireError, match=r"record at offset 31: an operation this stalkd does not know \(code 103\)"):
        check_records(30, [put(1), bytes(unknown), put(3)], 30, 0)


def test_epochs_in_one_message_must_each_be_newer_than_the_last() -> None:
    assert [r.epoch for r in check_records(5, [epoch(2, 5), epoch(3, 6)], 5, 1)] == [2, 3]
    with pytest.raises(WireError, match="an EPOCH record at offset 6 starts epoch 2, not newer than 2"):
        check_records(5, [epoch(2, 5), epoch(2, 6)], 5, 1)
    with pytest.raises(WireError, match="an EPOCH record at offset 6 says it starts at 9"):
        check_records(5, [put(1), epoch(2, 9)], 5, 1)


def test_a_message_that_does_not_start_at_the_log_end_is_refused() -> None:
    with pytest.raises(WireError, match="the primary sent offset 8, the local log ends at 7"):
        check_records(8, [put(1)], 7, 0)
