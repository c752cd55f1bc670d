"""The worker's stop flag set by a signal handler that interrupts a wait on that same flag.

A handler runs in the main thread between two bytecodes; the worker's main loop spends its life
in ``stopping.wait(0.5)``. With ``threading.Event`` a handler that came while that wait held
the event's lock (a plain one) blocked for ever in ``set()``, and the worker process never
stopped. The moment is made exact with a trace function that raises the signal from inside
``wait``, in a child process (a deadlock there fails the test instead of hanging it).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import signal, sys
from stalkd.worker.stopflag import StopFlag

flag = StopFlag()
signal.signal(signal.SIGTERM, lambda *_: flag.set())  # what a worker's SIGTERM handler does

def tracer(frame, event, arg):
    if frame.f_code is StopFlag.wait.__code__:
        return inner
    return None

lines = []

def inner(frame, event, arg):
    if event == "line":
        lines.append(frame.f_lineno)
        if len(lines) == 2:  # the line after `with self._cond:`: the lock is held
            sys.settrace(None)
            signal.raise_signal(signal.SIGTERM)  # its handler runs now, in this thread
    return inner

sys.settrace(tracer)
print("stopped" if flag.wait(30) else "not stopped", flush=True)
"""


def test_a_signal_handler_sets_the_stop_flag_while_the_thread_it_interrupts_waits_on_it() -> None:
    try:
        done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the handler's set() waited for the lock its own thread held in wait()")
    assert (done.returncode, done.stdout, done.stderr) == (0, "stopped\n", "")


@pytest.mark.parametrize("mode", ["threads", "processes", "asyncio"])
def test_every_worker_mode_stops_on_that_flag(mode: str) -> None:
    from stalkd.worker import App, make_worker
    from stalkd.worker.stopflag import StopFlag

    app = App(middleware=[])
    app.task(lambda p: None, name="t")
    worker = make_worker(app, mode=mode)
    assert isinstance(worker.stopping, StopFlag) and isinstance(worker.stop_now, StopFlag)
