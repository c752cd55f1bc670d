"""Bench-only: the longest loop turn of a server in CPU time (bench/floods.py puts this
directory on the server's PYTHONPATH and names a file in ``STALKD_BENCH_LOOPMETER``).

A task wakes every 2 ms and measures the loop thread's CPU time since it last woke. A turn
that runs 30 ms of work shows as a gap of at least 30 ms of CPU however loaded the machine is,
where the probe's wall-clock wait also counts the time the scheduler gave other processes
(on 2 cores at load 15, five to ten times as much). Written when the server exits: one line,
"cpu_seconds wall_seconds", the longest gap of each.

Only the maxima are kept. An earlier meter kept every gap (a tuple per 2 ms for the server's
whole life) and was itself the stall it reported: with it, a 900k-job admin move showed a turn
of 320-420 ms of CPU that the probe confirmed, and turns of ~60 ms every 3 s; without it (or
with this one) the same move's longest turn was 35 ms and the probe's worst wait 33 ms.
"""

import os

_OUT = os.environ.get("STALKD_BENCH_LOOPMETER")
if _OUT:
    import asyncio
    import atexit
    import time

    _longest = [0.0, 0.0]  # CPU, wall

    async def _meter() -> None:
        cpu, wall = time.thread_time, time.perf_counter
        longest = _longest
        while True:
            c, w = cpu(), wall()
            await asyncio.sleep(0.002)
            c, w = cpu() - c, wall() - w
            if c > longest[0]:
                longest[0] = c
            if w > longest[1]:
                longest[1] = w

    def _dump() -> None:
        with open(_OUT, "w") as f:
            f.write(f"{_longest[0]:.6f} {_longest[1]:.6f}\n")

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
