"""Bench-only: the longest loop turn of a server in CPU time (bench/floods.py puts this
directory on the server's PYTHONPATH and names a file in ``STALKD_BENCH_LOOPMETER``).

A task wakes every 2 ms and records the loop thread's CPU time since it last woke. A turn
that runs 30 ms of work shows as a gap of at least 30 ms of CPU however loaded the machine is,
where the probe's wall-clock wait also counts the time the scheduler gave other processes
(on 2 cores at load 15, five to ten times as much). Written when the server exits: one line
per wake-up, "cpu_seconds wall_seconds".
"""

import os

_OUT = os.environ.get("STALKD_BENCH_LOOPMETER")
if _OUT:
    import asyncio
    import atexit
    import time

    _gaps: list[tuple[float, float]] = []

    async def _meter() -> None:
        cpu, wall = time.thread_time, time.perf_counter
        while True:
            c, w = cpu(), wall()
            await asyncio.sleep(0.002)
            _gaps.append((cpu() - c, wall() - w))

    def _dump() -> None:
        with open(_OUT, "w") as f:
            f.writelines(f"{c:.6f} {w:.6f}\n" for c, w in _gaps)

    atexit.register(_dump)
    _run = asyncio.runners.Runner.run

    def _metered(self, coro, **kw):  # type: ignore[no-untyped-def]
        async def main():  # type: ignore[no-untyped-def]
            task = asyncio.ensure_future(_meter())
            try:
                return await coro
            finally:
                task.cancel()

        return _run(self, main(), **kw)

    asyncio.runners.Runner.run = _metered  # type: ignore[method-assign]
