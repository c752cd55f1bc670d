"""Consumer groups: delivery order, ack/nack/seek/lag, crash-safe cursors, TTL, lag limits, waiting."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from stalkd.log import Log, LogError, LogLagError
from stalkd.log.cursor import (
    SLOT_SIZE,
    CursorFile,
    CursorState,
    decode_slot,
    encode_slot,
    read_cursor,
)


def fill(log: Log, n: int, start: int = 0) -> None:
    log.append_many([b"m%d" % i for i in range(start, start + n)])


def test_poll_ack_lag_and_resume_after_reopen(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never") as log:
        fill(log, 10)
        g = log.group("g", durability="always")
        assert g.lag == 10
        msgs = g.poll(4)
        assert [m.offset for m in msgs] == [0, 1, 2, 3]
        assert msgs[0].bytes() == b"m0" and msgs[0].attempts == 1
        assert g.poll(0) == []
        g.ack(*msgs[:3])
        assert g.committed == 3 and g.lag == 7
        # offset 3 is in flight: the next poll hands out 4.. only
        assert [m.offset for m in g.poll(2)] == [4, 5]
        g.ack(5)  # out of order: committed stays, 5 is remembered
        assert g.committed == 3 and g.lag == 6
    with Log.open(tmp_path, durability="never") as log:
        g = log.group("g")
        # Then only unacked records come back: 3, 4, (5 acked), 6..9
        assert [m.offset for m in g.poll(100)] == [3, 4, 6, 7, 8, 9]
        with pytest.raises(LogError, match="never delivered"):
            g.ack(10)


def test_nack_redelivers_before_newer_with_attempts(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never") as log:
        fill(log, 6)
        g = log.group("g")
        a, b, c = g.poll(3)
        g.nack(b)
        again = g.poll(2)
        assert [(m.offset, m.attempts) for m in again] == [(1, 2), (3, 1)]
        g.nack(again[0])
        assert [(m.offset, m.attempts) for m in g.poll(1)] == [(1, 3)]
        g.ack(a, 1, c, 3)
        assert g.committed == 4


def test_seek_and_fan_out(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never") as log:
        fill(log, 5)
        g1, g2 = log.group("one"), log.group("two")
        g1.ack(*g1.poll(5))
        assert g1.lag == 0 and g2.lag == 5  # independent cursors
        assert [m.offset for m in g2.poll(2)] == [0, 1]
        g1.seek(2)
        assert g1.lag == 3 and [m.offset for m in g1.poll(10)] == [2, 3, 4]
        g2.seek(99)  # clamped to the end
        assert g2.committed == 5 and g2.poll(10) == []
        fill(log, 1, 5)
        assert [m.bytes() for m in g2.poll(10)] == [b"m5"]


def test_ttl_skips_and_counts_expired(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never") as log:
        fill(log, 3)
        ts = next(iter(log.read(0))).timestamp_us / 1e6
        g = log.group("g", ttl=10.0)
        # Given a clock 11 s after the appends, when polling, then all three have expired
        assert g.poll(10, now=ts + 11) == []
        assert g.expired == 3 and g.committed == 3 and g.lag == 0
        fill(log, 1, 3)
        assert [m.offset for m in g.poll(10, now=ts + 1)] == [3]


def test_max_lag_drop_oldest(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never") as log:
        g = log.group("g", max_lag_items=5, overflow="drop")
        fill(log, 12)
        assert [m.offset for m in g.poll(100)] == [7, 8, 9, 10, 11]
        assert g.dropped == 7
        gb = log.group("b", max_lag_bytes=3 * 32, overflow="drop")  # 3 frames of 32 bytes
        assert [m.offset for m in gb.poll(100)] == [9, 10, 11]


def test_max_lag_refuse_blocks_producer_until_acked(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never") as log:
        g = log.group("slow", max_lag_items=3, overflow="refuse")
        fill(log, 3)
        with pytest.raises(LogLagError, match="'slow' is 3 records behind"):
            log.append(b"x")
        assert log.next_offset == 3  # nothing written
        g.ack(g.poll(1)[0])
        assert log.append(b"ok") == 3
        g.ack(*g.poll(10))
        log.group("bytes", max_lag_bytes=200, overflow="refuse")  # 4 frames of 32 B = 128 B behind
        with pytest.raises(LogLagError, match="bytes behind"):
            log.append(b"z" * 100)


def test_blocking_poll_is_woken_by_append(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="always") as log:
        g = log.group("g")
        started = threading.Event()
        got: list[int] = []

        def consumer() -> None:
            started.set()
            got.extend(m.offset for m in g.poll(10, timeout=60))

        th = threading.Thread(target=consumer)
        th.start()
        started.wait()
        log.append(b"wake")
        th.join(timeout=60)
        assert not th.is_alive() and got == [0]
        assert g.poll(10, timeout=0.05) == []  # times out empty


def test_async_poll_is_woken_by_append(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="always") as log:
        g = log.group("g")

        async def main() -> list[bytes]:
            task = asyncio.create_task(g.poll_async(10, timeout=60))
            await asyncio.sleep(0)  # let the poll start waiting
            await log.submit([b"a", b"b"])
            return [m.bytes() for m in await task]

        assert asyncio.run(main()) == [b"a", b"b"]
        assert asyncio.run(g.poll_async(10, timeout=0.01)) == []


def test_cursor_torn_slot_falls_back_to_previous(tmp_path: Path) -> None:
    path = str(tmp_path / "c.cur")
    f = CursorFile(path)
    f.write(CursorState(1, 10, 0, 0, 64, 0, 0, ((12, 14),)), fsync=True)
    f.write(CursorState(2, 20, 0, 0, 64, 1, 2, ()), fsync=True)
    assert read_cursor(path) == CursorState(2, 20, 0, 0, 64, 1, 2, ())
    # Given a torn write of slot 1 (seq 3), when reading, then seq 2 wins... and if slot 0 tears, seq 1
    os.pwrite(f.fd, b"\xff" * 40, 0)  # slot 0 holds seq 2
    assert read_cursor(path) == CursorState(1, 10, 0, 0, 64, 0, 0, ((12, 14),))
    os.pwrite(f.fd, b"\xff" * 40, SLOT_SIZE)
    assert read_cursor(path) is None
    f.close()


def test_retention_respects_groups_and_floor(tmp_path: Path) -> None:
    with Log.open(tmp_path, segment_size=2048, durability="never", archive=True) as log:
        fill(log, 300)
        g = log.group("g")
        g.ack(*g.poll(150))
        bounds = log.segment_bounds()
        assert len(bounds) > 4
        moved = log.retain(floor=10**9)
        assert moved and all("archive" in p for p in moved)
        assert log.segment_bounds()[0][0] <= 150  # nothing the group still needs went
        # archived segments stay readable through the same API
        assert [f.offset for f in log.read(0, 3)] == [0, 1, 2]
        assert log.retain(floor=0) == []
    with Log.open(tmp_path / "plain", segment_size=2048, durability="never") as log:
        fill(log, 300)
        removed = log.retain(floor=200)
        assert removed and not any(os.path.exists(p) for p in removed)
        first = log.segment_bounds()[0][0]
        assert 0 < first <= 200
        assert next(iter(log.read(0))).offset == first  # reading below the floor starts at the oldest


def test_removed_group_no_longer_holds_back_retention(tmp_path: Path) -> None:
    with Log.open(tmp_path, segment_size=2048, durability="never") as log:
        log.group("stale")
        fill(log, 300)
        assert log.retain(floor=10**9) == []  # the stale group is at 0
        log.remove_group("stale")
        assert log.retain(floor=10**9)
        with pytest.raises(LogError, match="no consumer group"):
            log.remove_group("stale")
    with Log.open(tmp_path, segment_size=2048, durability="never") as log:
        assert "stale" not in log.groups()


def test_archived_segments_read_through_the_reader(tmp_path: Path) -> None:
    from stalkd.log import LogReader

    with Log.open(tmp_path, segment_size=2048, durability="never", archive=True) as log:
        fill(log, 300)
        moved = log.retain(floor=200)
    reader = LogReader(tmp_path, archive="only")
    segs = reader.segments()
    assert segs and all(s.archived and s.sealed for s in segs)
    assert [s.path for s in segs] == moved
    assert [f.offset for f in reader.read(0)] == list(range(segs[-1].end_offset or 0))
    everything = LogReader(tmp_path, archive=True)
    assert [f.bytes() for f in everything.read(0)] == [b"m%d" % i for i in range(300)]
    assert [f.offset for f in LogReader(tmp_path, archive=False).read(0)][0] == segs[-1].end_offset


def test_nacked_too_often_goes_to_the_dead_letter_log(tmp_path: Path) -> None:
    with Log.open(tmp_path / "main", durability="never") as log, Log.open(tmp_path / "dead", durability="always") as dead:
        fill(log, 3)
        g = log.group("g", max_attempts=2, dead_letter=dead)
        a, b, c = g.poll(3)
        g.ack(a, c)
        g.nack(b)
        (again,) = g.poll(3)
        assert again.offset == 1 and again.attempts == 2
        g.nack(again)  # second failure: dead-lettered, acked here
        assert g.poll(3) == [] and g.committed == 3 and g.dead_lettered == 1
        assert [f.bytes() for f in dead.read(0)] == [b"m1"]
    with Log.open(tmp_path / "x", durability="never") as log, pytest.raises(ValueError, match="max_attempts"):
        log.group("bad", max_attempts=0)


def test_reader_follows_segments_archived_while_it_reads(tmp_path: Path) -> None:
    from stalkd.log import LogReader

    with Log.open(tmp_path, segment_size=2048, durability="never", archive=True) as log:
        fill(log, 300)
        it = LogReader(tmp_path).read(0)
        first = next(it)  # the listing is taken: every segment is still live
        assert log.retain(floor=250)  # now most of them move to archive/
        rest = [f.offset for f in it]
        assert [first.offset, *rest] == list(range(300))


def test_thousands_of_out_of_order_acks_survive_reopen(tmp_path: Path) -> None:
    # Given every other record acked (1,000 gaps: four times what a 4 KiB slot holds)
    with Log.open(tmp_path, durability="never") as log:
        fill(log, 2000)
        g = log.group("g", durability="always")
        msgs = g.poll(2000)
        g.ack(*[m for m in msgs if m.offset % 2])
        path = os.path.join(tmp_path, "groups", "g.cur")
        state = read_cursor(path)
        assert state is not None and len(state.acked) == 1000
        assert os.path.getsize(path) > 2 * SLOT_SIZE
        g.ack(msgs[0])  # a checkpoint written in place, into a grown slot
    # When reopened, then exactly the unacked records come back, none of the acked ones
    with Log.open(tmp_path, durability="never") as log:
        g = log.group("g")
        assert [m.offset for m in g.poll(5000)] == list(range(2, 2000, 2))


def test_grown_cursor_torn_slot_falls_back_and_stale_grow_file_is_ignored(tmp_path: Path) -> None:
    path = str(tmp_path / "c.cur")
    many = tuple((i, i + 1) for i in range(100, 1100, 2))  # 500 ranges
    f = CursorFile(path)
    f.write(CursorState(1, 10, 0, 0, 64, 0, 0, ((12, 14),)), fsync=True)
    f.write(CursorState(2, 20, 0, 0, 64, 0, 0, many), fsync=True)  # grows the file
    f.write(CursorState(3, 30, 0, 0, 64, 0, 0, many[1:]), fsync=True)
    size = f.slot_size
    assert size > SLOT_SIZE and os.path.getsize(path) == 2 * size
    assert read_cursor(path) == CursorState(3, 30, 0, 0, 64, 0, 0, many[1:])
    # Given a torn write of the slot holding seq 3, then seq 2 (all 500 ranges) is read
    os.pwrite(f.fd, b"\xff" * 40, 1 * size)
    assert read_cursor(path) == CursorState(2, 20, 0, 0, 64, 0, 0, many)
    f.close()
    # Given a crash while growing again (a half-written .grow file), then the file stands
    with open(path + ".grow", "wb") as junk:
        junk.write(b"\0" * 100)
    assert read_cursor(path) == CursorState(2, 20, 0, 0, 64, 0, 0, many)
    f = CursorFile(path)
    assert not os.path.exists(path + ".grow") and f.slot_size == size
    f.close()


def test_acks_from_before_a_reopen_are_not_delivered_again_when_the_head_jumps_them(tmp_path: Path) -> None:
    """Offsets acked out of order before a reopen, then joined to the committed head by acks of
    the records before them: the head jumps past where the group had read to, and the next poll
    must start there, not hand out the jumped records again (the power-loss campaign saw acked
    records redelivered under `always`)."""
    with Log.open(tmp_path, durability="always") as log:
        log.append_many([b"r%d" % i for i in range(12)])
        g = log.group("g")
        got = g.poll(12)
        g.ack(*got[5:10])  # out of order: the head stays at 0
    with Log.open(tmp_path, durability="always") as log:
        g = log.group("g")
        first = g.poll(5)
        assert [m.offset for m in first] == [0, 1, 2, 3, 4]  # the poll stops before 5..9
        g.ack(*first)  # the head joins 5..9 and jumps to 10
        assert g.committed == 10
        assert [m.offset for m in g.poll(10)] == [10, 11]


def test_more_gaps_than_a_u16_counts_are_acked_and_survive_reopen(tmp_path: Path) -> None:
    # Given every other record of 140,000 acked: 70,000 gaps, more than version 1's u16 count
    # holds (acking the 65,536th raised struct.error from the checkpoint)
    n = 140_000
    with Log.open(tmp_path, durability="never") as log:
        log.append_many([b"x"] * n)
        g = log.group("g", durability="always")
        msgs = []
        while len(msgs) < n:
            msgs.extend(g.poll(20_000, timeout=0))
        g.ack(*[m for m in msgs if m.offset % 2])
        state = read_cursor(os.path.join(tmp_path, "groups", "g.cur"))
        assert state is not None and len(state.acked) == n // 2
    # When reopened, then exactly the unacked records come back
    with Log.open(tmp_path, durability="never") as log:
        g = log.group("g")
        assert g.lag == n // 2
        back = []
        while len(back) < n // 2:
            got = g.poll(20_000, timeout=0)
            assert got
            back.extend(m.offset for m in got)
        assert back == list(range(0, n, 2))


def test_a_slot_is_version_1_up_to_65535_ranges_and_version_2_beyond() -> None:
    # (a build that knows only version 1 keeps reading the files of groups with fewer gaps)
    for count, version in ((0, 1), (65_535, 1), (65_536, 2)):
        state = CursorState(7, 3, 0, 0, 64, 1, 2, tuple((10 + 2 * i, 11 + 2 * i) for i in range(count)))
        slot = encode_slot(state)
        assert int.from_bytes(slot[4:6], "little") == version
        assert decode_slot(slot + b"\0" * 16) == state  # (a slot is followed by its unused room)
        # a damaged byte anywhere, the count included, makes the slot unreadable, not wrong
        for at in (6, 8, len(slot) - 9, len(slot) - 1):
            assert decode_slot(slot[:at] + bytes([slot[at] ^ 1]) + slot[at + 1:]) is None
