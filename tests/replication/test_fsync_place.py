"""A standby fsyncs inline on its loop while its disk is quick, and moves its fsyncs to the log's
committer thread once they average longer than ``INLINE_FSYNC_MAX`` (the loop keeps serving
meanwhile); either way each read is acknowledged once durable, and only then."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import cast

from stalkd.log.fs import FileSystem
from stalkd.persist.wal import Wal
from stalkd.replication import wire
from stalkd.replication.receiver import INLINE_FSYNC_MAX, INLINE_RETRY, _Feed

from .streams import Acks, put_payload, standby, until

SLOW = 0.01  # seconds per fdatasync: 5x the bound, so one such fsync moves the average past it


class _SlowDisk(FileSystem):
    """A disk whose every fdatasync takes ``SLOW`` seconds (after doing it)."""

    def fdatasync(self, fd: int) -> None:
        super().fdatasync(fd)
        time.sleep(SLOW)


def test_a_slow_disk_moves_the_standbys_fsyncs_to_the_thread_and_every_ack_is_durable(tmp_path: Path) -> None:
    assert SLOW * 0.25 > INLINE_FSYNC_MAX  # (the moving average's first step)
    with Wal.open(tmp_path, durability="always", fs=_SlowDisk()) as wal:
        rc = standby(wal, 1)  # (never connects: its reads are fed to it below)
        acks = Acks(wal)
        left: list[int] = []

        async def main() -> None:
            feed = _Feed(cast(asyncio.BaseTransport, None), 1 << 20, b"")
            stream = asyncio.ensure_future(
                rc._stream(feed, cast(asyncio.StreamWriter, acks), wire.RecordDecoder(), [0.0]))
            for i in range(4):
                feed.data_received(b"".join(wire.encode_records(i, [put_payload(i + 1)])))
                await until(lambda i=i: rc.durable_end == i + 1, f"read {i} acknowledged")  # type: ignore[misc]
                left.append(rc.fsync_place._thread_left)
            rc.stop()
            feed.connection_lost(None)
            with contextlib.suppress(EOFError):
                await stream

        asyncio.run(main())
        # the first read's fsync ran inline and was slow: the next reads went to the thread
        assert left == [INLINE_RETRY, INLINE_RETRY - 1, INLINE_RETRY - 2, INLINE_RETRY - 3]
        assert acks.sent == [1, 2, 3, 4]
        assert all(end <= durable for end, durable in zip(acks.sent, acks.durable_at, strict=True))  # never ahead of the disk
        assert sorted(rc.engine.jobs) == [1, 2, 3, 4]
