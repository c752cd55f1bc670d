"""Process concurrency: ``concurrency`` forked child processes, each a thread worker.

The parent only supervises: it passes a stop on to its children (SIGTERM: drain; SIGUSR1:
release now), replaces a child that dies unexpectedly (its jobs come back to the queue when the
server sees its connections close, or after their TTR), and exits 0 once all children have
exited after a stop. Children that outlive the grace period (after a stop now,
``RELEASE_NOW_WITHIN`` seconds) are killed; the server then releases their jobs as their
connections close.

Ensures: until ``stop()``, ``concurrency`` children are running or being replaced (at most one
replacement per slot per ``respawn_delay`` seconds, so a crash loop cannot spin); a stop reaches
every child, one being forked as it comes included, and no child is forked after it; a child
handles a stop with its own handlers however early it comes (it waits, blocked, until they are in).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import time
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

from stalkd.worker.middleware.shutdown import Shutdown
from stalkd.worker.registry import Registry
from stalkd.worker.runner import ThreadWorker, WorkerBase

log = logging.getLogger("stalkd.worker")

__all__ = ["ProcessWorker"]

# A child told to release now (SIGUSR1) closes its connections and exits, which takes a moment;
# one still running this long after is wedged (a handler stuck in C code, a hook that never
# returns), and a stop now must not wait the whole drain grace period for it.
RELEASE_NOW_WITHIN = 5.0

# The signals a child handles itself. They are blocked in the forking thread across the fork, so
# a child starts with them blocked and they wait (pending) until its own handlers are in: a stop
# sent to a child just forked would otherwise meet the parent's handlers (a copy of the parent's
# stop, forwarding the signal to the child's siblings a second time) or the default action (the
# child dies by the signal, skipping its graceful stop).
_CHILD_SIGNALS = frozenset({signal.SIGTERM, signal.SIGUSR1, signal.SIGINT})


def _child(app: Registry, tubes: list[str], threads: int, grace: float, reserve_timeout: int,
           unblock: frozenset[int] = frozenset()) -> None:
    _each_hook(app, "after_fork")
    worker = ThreadWorker(app, concurrency=threads, tubes=tubes, grace=grace,
                          reserve_timeout=reserve_timeout)
    received = 0

    def on_term(signum: int, frame: FrameType | None) -> None:
        nonlocal received
        received += 1
        worker.stop(now=received > 1)

    def on_now(signum: int, frame: FrameType | None) -> None:
        worker.stop(now=True)

    # The parent sends SIGTERM to drain and SIGUSR1 to release now: two SIGTERMs sent in quick
    # succession can arrive as one, a distinct signal cannot. Ctrl-C reaches the whole process
    # group, so only the parent acts on it.
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, on_now)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    app.middleware[:] = [m for m in app.middleware if not isinstance(m, Shutdown)]
    # A stop sent since the fork is delivered here, to the handlers above: worker.run() then
    # finds the worker stopping and exits by its graceful path.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, unblock)
    os._exit(worker.run())


def _each_hook(app: Registry, hook: str, *args: object) -> None:
    for m in app.middleware:
        try:
            getattr(m, hook)(*args)
        except Exception:
            log.exception("middleware hook %s.%s failed", type(m).__name__, hook)


class ProcessWorker(WorkerBase):
    """Forks ``concurrency`` children running ``threads`` slots each (Linux/macOS: fork)."""

    def __init__(self, app: Registry, *, threads: int = 1, respawn_delay: float = 1.0,
                 **kw: object) -> None:
        super().__init__(app, **kw)  # type: ignore[arg-type]
        if threads < 1:  # a child could not start: it would be replaced forever
            raise ValueError(f"threads per process must be >= 1, got {threads}")
        self.threads = threads
        self.respawn_delay = respawn_delay
        self.replaced = 0
        self.children: list[BaseProcess] = []
        self._live: set[int] = set()
        self._told: dict[tuple[int, int], object] = {}  # (pid, signal) sent, each sent once

    def stop(self, now: bool = False) -> None:
        # Forward at once (this runs in the signal handler): a child polling its queue could
        # otherwise reserve another job before the supervision loop passed the signal on.
        first = not self.stopping.is_set()
        super().stop(now)
        if now:
            self._signal_children(signal.SIGUSR1)
        elif first:
            self._signal_children(signal.SIGTERM)

    def run(self) -> int:
        ctx = multiprocessing.get_context("fork")
        _each_hook(self.app, "before_fork", self)
        self.children = []
        for i in range(self.concurrency):
            if self.stopping.is_set():  # stopped before all were forked: fork no more
                break
            self.children.append(self._spawn(ctx, i))
        spawned_at = [time.monotonic()] * len(self.children)
        for m in self.app.middleware:
            m.on_worker_start(self)
        try:
            deadline: float | None = None
            now_seen = killed = False
            while any(p.is_alive() for p in self.children) or not self.stopping.is_set():
                if self.stopping.is_set() and deadline is None:
                    log.info("draining: asked %d worker processes to finish within %.0fs",
                             len(self.children), self.grace)
                    deadline = time.monotonic() + self.grace + 5.0
                if self.stop_now.is_set() and not now_seen:
                    now_seen = True
                    deadline = min(deadline or float("inf"), time.monotonic() + RELEASE_NOW_WITHIN)
                if not killed and deadline is not None and time.monotonic() > deadline:
                    log.warning("children still running after %s; killing them",
                                "a stop now" if now_seen else "the grace period")
                    self._signal_children(signal.SIGKILL)
                    killed = True
                for i, p in enumerate(self.children):
                    p.join(timeout=0.1)
                    if p.exitcode is None or p.pid is None:
                        continue
                    self._live.discard(p.pid)
                    if self.stopping.is_set() or time.monotonic() - spawned_at[i] < self.respawn_delay:
                        continue
                    log.error("worker process %d exited with %s; starting a replacement",
                              p.pid, p.exitcode)
                    self.children[i] = self._spawn(ctx, i)
                    spawned_at[i] = time.monotonic()
                    self.replaced += 1
                if not any(p.is_alive() for p in self.children):
                    self.stopping.wait(0.1)  # every join returned at once: do not spin
        finally:
            for m in self.app.middleware:
                m.on_worker_stop(self)
        return 0

    def _spawn(self, ctx: Any, i: int) -> BaseProcess:
        # Only this thread's mask changes: in the parent a stop signal still reaches its handler
        # (on another thread, or here right after the fork), and then this child too (below).
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _CHILD_SIGNALS)
        try:
            p: BaseProcess = ctx.Process(
                target=_child, name=f"stalkd-worker-{i}",
                args=(self.app, self.tubes, self.threads, self.grace, self.reserve_timeout,
                      _CHILD_SIGNALS - blocked))
            p.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        assert p.pid is not None
        self._live.add(p.pid)
        if self.stopping.is_set():
            # A stop that came while this child was being forked passed it by (it signals the
            # pids recorded then): tell it now, or it runs until the grace period's kill.
            self._signal_children(signal.SIGUSR1 if self.stop_now.is_set() else signal.SIGTERM)
        return p

    def _signal_children(self, sig: int) -> None:
        # Only pids the supervision loop has not reaped (no multiprocessing calls here: this
        # runs inside a signal handler, possibly interrupting a join or this very function).
        # Each pid gets each signal once (dict.setdefault claims it in one step): a second
        # SIGTERM would turn a child's drain into a release now.
        for pid in list(self._live):
            if sig != signal.SIGKILL:
                claim = object()
                if self._told.setdefault((pid, sig), claim) is not claim:
                    continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
