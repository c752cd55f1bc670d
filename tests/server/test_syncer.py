"""Syncer: the persistent fsync thread reports each request once, on the loop thread."""

from __future__ import annotations

import asyncio
import threading

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
        # The clock's readings in the order the syncer takes them: request, sync start, sync
        # end, report on the loop. Each step happens-after the previous one (lock release,
        # call_soon_threadsafe), so the order is fixed whichever thread reads.
        readings = iter([10.0, 12.0, 17.0, 18.5])
        taken: list[float] = []

        def clock() -> float:
            taken.append(next(readings))
            return taken[-1]

        def report(target: int, exc: BaseException | None) -> None:
            events.append(("done", 0.0, 0.0))
            done.set()

        syncer = Syncer(lambda: None, report, loop,
                        timing=lambda h, f: events.append(("timing", h, f)), clock=clock)
        # Given a request at 10 whose sync runs from 12 to 17 and is reported at 18.5
        syncer.request(1)
        await asyncio.wait_for(done.wait(), 10)
        syncer.stop()
        # Then timing came first, with the fsync (17 - 12) and the hand-off both ways
        # ((12 - 10) + (18.5 - 17)), and the clock was read exactly those four times
        assert [e[0] for e in events] == ["timing", "done"]
        assert events[0][1:] == (3.5, 5.0)
        assert taken == [10.0, 12.0, 17.0, 18.5]

    asyncio.run(main())


def test_a_failed_sync_reports_no_timing() -> None:
    async def main() -> None:
        timings: list[tuple[float, float]] = []
        errors: list[BaseException | None] = []
        done = asyncio.Event()

        def sync() -> None:
            raise OSError(5, "injected")

        def report(target: int, exc: BaseException | None) -> None:
            errors.append(exc)
            done.set()

        syncer = Syncer(sync, report, asyncio.get_running_loop(),
                        timing=lambda h, f: timings.append((h, f)), clock=lambda: 1.0)
        syncer.request(1)
        await asyncio.wait_for(done.wait(), 10)
        syncer.stop()
        # Then the error is reported and no timing is (a failed fsync measures nothing)
        assert timings == [] and isinstance(errors[0], OSError)

    asyncio.run(main())
