"""``overlap.last_record`` on a real log: what a standby compares its stream's first record with."""

from __future__ import annotations

from pathlib import Path

from stalkd.log import Log
from stalkd.replication import overlap


def test_the_last_record_of_a_log_and_where_a_stream_starts(tmp_path: Path) -> None:
    lg = Log.open(str(tmp_path / "wal"), segment_size=65536, durability="always")
    try:
        assert overlap.last_record(lg) is None
        assert overlap.request_offset(lg.next_offset, None) == 0
        lg.write_many([b"one", b"two", b"three"])
        last = overlap.last_record(lg)
        assert last == b"three"
        assert overlap.request_offset(lg.next_offset, last) == 2
        assert overlap.trim(2, [b"three", b"four"], lg.next_offset, b"three") == (3, [b"four"])
    finally:
        lg.close()
