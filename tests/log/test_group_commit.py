"""Group commit (commit.py) driven directly: real files, real fsyncs, threads as appenders."""

from __future__ import annotations

import errno
import itertools
import os
import threading
from pathlib import Path

from stalkd.log import Log, LogError
from stalkd.log.active import ActiveSegment, create_segment
from stalkd.log.commit import GroupCommit
from stalkd.log.fs import REAL, Faults


class FilePinner:
    """The writer side GroupCommit syncs through, over one real segment file: ``write`` puts a
    record's bytes in it and advances ``next``; every fsync is counted, and ``covered`` lists
    the end each one was pinned at (everything below it is what that fsync made durable)."""

    def __init__(self, seg: ActiveSegment) -> None:
        self.seg = seg
        self.next = 0
        self.syncs = 0
        self.covered: list[int] = []
        self.writers: list[int] = []  # the appender of each record, in record order
        self._lock = threading.Lock()

    def write(self, data: bytes, writer: int = 0) -> int:
        with self._lock:
            os.pwrite(self.seg.fd, data, self.seg.pos)
            self.seg.pos += len(data)
            self.writers.append(writer)
            self.next += 1
            return self.next

    def pin_end(self) -> tuple[int, ActiveSegment]:
        with self._lock:
            self.covered.append(self.next)
            return self.next, self.seg

    def unpin(self, seg: ActiveSegment) -> None:
        pass

    def fdatasync(self, fd: int) -> None:
        self.syncs += 1
        os.fdatasync(fd)


def _commit(tmp_path: Path, gather_share: float) -> tuple[GroupCommit, FilePinner]:
    seg = create_segment(str(tmp_path), 0, 1 << 20, 1, "pwrite", fsync=False, fs=REAL)
    pinner = FilePinner(seg)
    commit = GroupCommit(str(tmp_path), "always", 0.0, 0, gather_share=gather_share)
    commit.start(pinner)
    return commit, pinner


def _appenders(commit: GroupCommit, pinner: FilePinner, threads: int, rounds: int) -> None:
    def work(k: int) -> None:
        for i in range(rounds):
            end = pinner.write(b"%d-%d;" % (k, i))
            assert commit.sync_to(end) >= end

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def test_each_fsync_covers_the_next_record_of_every_appender_it_released(tmp_path: Path) -> None:
    # Given 8 threads that each write a record and wait until it is durable, until each has
    # done 40, and a leader that waits as long as it takes for the appenders the last fsync
    # released (so what each fsync covers does not depend on how the threads are scheduled)
    commit, pinner = _commit(tmp_path, gather_share=1e9)
    threads, rounds = 8, 40
    done = [0] * threads
    errors: list[BaseException] = []
    progress = threading.Condition()
    stop = threading.Event()

    def work(k: int) -> None:
        try:
            while not stop.is_set():
                end = pinner.write(b"%d;" % k, k)
                assert commit.sync_to(end) >= end
                with progress:
                    done[k] += 1
                    progress.notify()
        except BaseException as e:
            with progress:
                errors.append(e)
                progress.notify()

    ts = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(threads)]
    for t in ts:
        t.start()
    try:
        with progress:
            progress.wait_for(lambda: errors or min(done) >= rounds, timeout=600)
    finally:
        # A stopped appender is not coming back: closing ends the leader's wait for it, so
        # only the fsyncs pinned before then are sure to have waited for everyone
        stop.set()
        pinned = len(pinner.covered)
        commit.close()
        for t in ts:
            t.join(timeout=60)
        pinner.seg.close()
    assert not errors and min(done) >= rounds, (errors, done)
    assert not any(t.is_alive() for t in ts)
    assert commit.durable == pinner.next
    # Then each fsync covers the next record of every appender the fsync before it released.
    # Without gathering, the released leader fsyncs its next record alone before the others
    # write theirs (batches of 1 and 7). The leader counts arrivals rather than naming them,
    # so an fsync covering an appender's first record is not checked: that appender may have
    # asked only once the record was durable (not waiting, not counted as released), and its
    # next arrival then counted in place of a released appender's.
    batches, start = [], 0
    for end in pinner.covered[:pinned]:
        batches.append(pinner.writers[start:end])
        start = end
    seen: set[int] = set()
    checked = 0
    for released, covering in itertools.pairwise(batches):
        first_records = set(released) - seen
        seen.update(released)
        if not first_records:
            assert set(released) <= set(covering), (released, covering)
            checked += 1
    assert checked >= rounds - threads - 1, (checked, [len(b) for b in batches])


def test_a_lone_appender_never_waits_to_gather(tmp_path: Path) -> None:
    # Given one appender and a leader that would wait "forever" for released appenders
    commit, pinner = _commit(tmp_path, gather_share=1e9)
    try:
        # When it appends and syncs 30 times (it is the only one each sync releases)
        _appenders(commit, pinner, threads=1, rounds=30)
        # Then it never waited for anyone (the test would hang), one fsync per record
        assert (commit.durable, pinner.syncs) == (30, 30)
    finally:
        commit.close()
        pinner.seg.close()


def test_a_failed_fsync_fails_every_appender_and_none_returns_a_record_that_is_not_durable(tmp_path: Path) -> None:
    # Given 8 threads appending with always, and an fsync that starts failing once 200 records
    # have been appended (whoever leads the batch then, the others wait on it or on the next)
    fs = Faults()
    log = Log.open(tmp_path / "log", durability="always", fs=fs)
    returned: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work() -> None:
        try:
            for _ in range(1000):
                off = log.append(b"r")
                with lock:
                    returned.append(off)
                    if len(returned) == 200:
                        fs.fail("fdatasync", errno.EIO)
        except LogError as e:
            with lock:
                errors.append(e)

    ts = [threading.Thread(target=work, daemon=True) for _ in range(8)]  # a hung one must not hang pytest
    try:
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)
        # Then every thread stopped on the error (none waits for ever on a batch that failed),
        # and every record whose append returned is below the durable end
        assert not any(t.is_alive() for t in ts)
        assert len(errors) == 8, errors
        assert max(returned) < log.durable_offset
        assert fs.failures["fdatasync"] >= 1
    finally:
        fs.heal()
        log.abandon()


def test_a_sync_ahead_of_the_writes_returns_only_once_they_are_written_and_durable(tmp_path: Path) -> None:
    # Given a caller syncing to an end two records ahead of what is written
    commit, pinner = _commit(tmp_path, gather_share=0)
    try:
        pinner.write(b"a;")
        done = threading.Event()
        got: list[int] = []

        def sync_ahead() -> None:
            got.append(commit.sync_to(3))
            done.set()

        t = threading.Thread(target=sync_ahead, daemon=True)
        t.start()
        # When the records are written one by one, each synced by another caller
        for _ in range(2):
            assert not done.is_set()
            end = pinner.write(b"b;")
            commit.sync_to(end)
        # Then it returns, and with everything below its end durable
        assert done.wait(60)
        assert got[0] >= 3 and commit.durable >= 3
    finally:
        commit.close()
        pinner.seg.close()
