"""Syncer: the persistent fsync thread reports each request once, on the loop thread."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from stalkd.server.syncer import Syncer


def test_each_request_is_reported_once_on_the_loop_thread_with_its_error() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        sync_threads: list[int] = []
        reports: list[tuple[int, str | None, int]] = []
        failing = {3}
        done = asyncio.Event()

        def sync() -> None:
            sync_threads.append(threading.get_ident())
            if len(sync_threads) in failing:
                raise OSError(5, "injected")

        def report(target: int, exc: BaseException | None) -> None:
            reports.append((target, None if exc is None else str(exc), threading.get_ident()))
            if target < 4:
                syncer.request(target + 1)  # the next batch, as the server does
            else:
                done.set()

        syncer = Syncer(sync, report, loop)
        # Given a request while none runs; When the sync thread finishes each one
        assert not syncer.busy
        syncer.request(1)
        assert syncer.busy
        with pytest.raises(RuntimeError, match="already running"):
            syncer.request(2)
        await asyncio.wait_for(done.wait(), 10)
        # Then every request got exactly one report, in order, on the loop thread, with the error
        assert [(t, e) for t, e, _ in reports] == [(1, None), (2, None), (3, "[Errno 5] injected"), (4, None)]
        assert {th for _, _, th in reports} == {loop_thread}
        assert loop_thread not in sync_threads and len(set(sync_threads)) == 1  # one thread
        assert not syncer.busy
        syncer.stop()
        with pytest.raises(RuntimeError, match="stopped"):
            syncer.request(5)

    asyncio.run(main())


def test_stop_waits_for_the_sync_in_progress() -> None:
    async def main() -> None:
        gate = threading.Event()
        entered = threading.Event()
        finished: list[bool] = []

        def sync() -> None:
            entered.set()
            assert gate.wait(10)
            finished.append(True)

        syncer = Syncer(sync, lambda t, e: None, asyncio.get_running_loop())
        syncer.request(1)
        assert await asyncio.to_thread(entered.wait, 10)
        stopper = threading.Thread(target=syncer.stop)
        stopper.start()
        stopper.join(0.2)
        assert stopper.is_alive()  # still syncing: stop waits
        gate.set()
        stopper.join(10)
        assert not stopper.is_alive() and finished == [True]

    asyncio.run(main())


def test_timing_reports_the_fsync_and_the_handoff_before_done() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        events: list[tuple[str, float, float]] = []
        done = asyncio.Event()
        gate = threading.Event()

        def sync() -> None:
            gate.wait(10)  # the "disk" takes as long as the test holds it

        def report(target: int, exc: BaseException | None) -> None:
            events.append(("done", 0.0, 0.0))
            done.set()

        syncer = Syncer(sync, report, loop, timing=lambda h, f: events.append(("timing", h, f)))
        t0 = time.perf_counter()
        syncer.request(1)
        await asyncio.sleep(0.05)  # the fsync is still held: this is the duration being measured
        gate.set()
        await asyncio.wait_for(done.wait(), 10)
        elapsed = time.perf_counter() - t0
        # Then timing came first, with an fsync of at least the held time, and the two parts
        # add up to no more than the whole request
        assert [e[0] for e in events] == ["timing", "done"]
        _, handoff, fsync = events[0]
        assert fsync >= 0.05 and handoff >= 0
        assert handoff + fsync <= elapsed
        syncer.stop()

    asyncio.run(main())
