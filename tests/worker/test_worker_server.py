"""The worker through a real server (Debian's beanstalkd): retries with the backoff schedule,
dead letters and the failed/retry commands, heartbeats past the TTR, time limits, unique keys,
dependencies, and the three concurrency modes. Workers run in a thread of the test process and
are stopped with ``worker.stop()``; the server is observed with greenstalk."""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import greenstalk
import pytest
from worker_probe import Probe, queue_server, running, start_server, wait_for

from stalkd.worker import App, Backoff, NonRetryable, unique
from stalkd.worker.actions import RetryLater
from stalkd.worker.cli import failed, retry
from stalkd.worker.context import JobContext
from stalkd.worker.middleware import Heartbeat, Middleware, Retries, TimeLimit

_FIXTURES = (queue_server,)  # the parametrised `server` fixture (beanstalkd, stalkd)



class Recorder(Middleware):
    """Remembers what the worker decided, and the server's view right after each release."""

    def __init__(self, address: str) -> None:
        self.probe = Probe(address)  # its own connection: hooks run on worker threads
        self.retries: list[tuple[int, int, dict[str, Any] | None]] = []
        self.done: list[int] = []

    def on_retry(self, ctx: JobContext, action: RetryLater) -> None:
        self.retries.append((ctx.attempt or 0, action.delay, self.probe.job(ctx.job_id)))

    def after_process(self, ctx: JobContext) -> None:
        if ctx.exception is None:
            self.done.append(ctx.job_id)




@pytest.fixture
def probe(server: Any) -> Iterator[Probe]:
    p = Probe(server.address)
    yield p
    p.close()


def test_retries_follow_the_backoff_schedule_then_dead_letter(server: Any, probe: Probe,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    rec = Recorder(server.address)
    app = App(server.address, middleware=[rec, Retries(), Heartbeat()])

    @app.task(tube="flaky", max_attempts=3, backoff=Backoff(base=1, factor=2, jitter=0), ttr=10)
    def flaky(payload: dict[str, int]) -> None:
        raise ConnectionError(f"upstream down for order {payload['order']}")

    # Given a job whose handler always fails
    job_id = flaky.put({"order": 7})
    assert job_id is not None
    with running(app):
        # When the worker has tried it max_attempts times
        wait_for(lambda: (probe.job(job_id) or {}).get("state") == "buried", what="bury")
    # Then it was released with delays 1 s and 2 s (the server saw them), then buried
    assert [(a, d) for a, d, _ in rec.retries] == [(1, 1), (2, 2)]
    assert [s["delay"] for _, _, s in rec.retries if s] == [1, 2]
    stats = probe.job(job_id)
    assert stats is not None and stats["releases"] == 2 and stats["buries"] == 1
    # And `stalkd failed` shows the error where a person can find it
    assert failed(["--address", server.address]) == 0
    out = capsys.readouterr().out
    assert f"job {job_id}  tube=flaky task=flaky attempts=3" in out
    assert "ConnectionError: upstream down for order 7" in out
    # And listing did not consume the record
    assert probe.count("stalkd.failed", "ready") == 1
    # When `stalkd retry` is run for it, Then the job is ready again and the record gone
    assert retry(["--address", server.address, str(job_id)]) == 0
    assert (probe.job(job_id) or {}).get("state") == "ready"
    assert probe.count("stalkd.failed", "ready") == 0


def test_non_retryable_error_is_buried_on_first_failure(server: Any, probe: Probe) -> None:
    app = App(server.address, middleware=[Retries()])

    @app.task(max_attempts=5)
    def charge(payload: int) -> None:
        raise NonRetryable("card declined")

    job_id = charge.put(1)
    assert job_id is not None
    with running(app):
        wait_for(lambda: (probe.job(job_id) or {}).get("state") == "buried", what="bury")
    assert (probe.job(job_id) or {})["releases"] == 0


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_heartbeat_keeps_a_job_past_its_ttr(server: Any, probe: Probe, mode: str) -> None:
    hb = Heartbeat()
    app = App(server.address, middleware=[Retries(), hb])
    release = threading.Event()
    started = threading.Event()

    @app.task(ttr=120)
    def slow(payload: None) -> None:
        started.set()
        release.wait(30)

    # Given a job put with a 2 s TTR (overriding the task's 120 s: the heartbeat must follow it)
    job_id = slow.put(None, ttr=2)
    assert job_id is not None and (probe.job(job_id) or {}).get("ttr") == 2
    thief = Probe(server.address)
    thief.c.watch("slow")
    try:
        with running(app, mode=mode):
            assert started.wait(10)
            # When another worker waits on the tube for longer than the job's TTR
            # (beanstalkd 1.12 only expires a TTR while someone waits, so the thief is needed)
            with pytest.raises(greenstalk.TimedOutError):
                thief.c.reserve(timeout=3)
            # Then it never got the job: the worker kept it alive, and it never timed out
            stats = probe.job(job_id)
            assert stats is not None and stats["state"] == "reserved" and stats["timeouts"] == 0
            assert hb.touches >= 2
            release.set()
            wait_for(lambda: probe.job(job_id) is None, what="delete")
    finally:
        thief.close()


@pytest.mark.parametrize("mode", ["threads", "asyncio", "asyncio-sync"])
def test_time_limit_fails_the_attempt(server: Any, probe: Probe, mode: str) -> None:
    rec = Recorder(server.address)
    app = App(server.address, middleware=[rec, Retries(), TimeLimit()])
    gate = threading.Event()
    limits = {"max_attempts": 2, "time_limit": 0.5, "backoff": Backoff(base=0, jitter=0)}

    if mode in ("threads", "asyncio-sync"):  # a sync handler, in a slot or a handler thread
        @app.task(**limits)  # type: ignore[call-overload]
        def stuck(payload: None) -> None:
            while not gate.is_set():  # pure-Python loop, so the async exception can land
                gate.wait(0.01)
    else:
        @app.task(**limits)  # type: ignore[call-overload]
        async def stuck(payload: None) -> None:
            while not gate.is_set():
                await asyncio.sleep(0.01)

    job_id = stuck.put(None)
    assert job_id is not None
    try:
        with running(app, mode=mode.removesuffix("-sync")):
            wait_for(lambda: (probe.job(job_id) or {}).get("state") == "buried", what="bury")
    finally:
        gate.set()
    # Then the first overrun was retried and the second dead-lettered, both as time limits
    assert [a for a, _, _ in rec.retries] == [1]
    assert _record_error(probe, job_id) == (f"TimeLimitExceeded: job {job_id}: task stuck ran "
                                            f"past its time limit of 0.5s")


@pytest.mark.parametrize("mode", ["threads", "asyncio-sync", "processes"])
@pytest.mark.parametrize("blocked", ["sleep", "lock"])
def test_time_limit_interrupts_a_handler_blocked_in_a_c_call(server: Any, probe: Probe,
                                                             mode: str, blocked: str) -> None:
    # An exception raised asynchronously lands only at the next bytecode: a handler blocked in
    # time.sleep (or on a lock) used to overrun its limit by as long as the call lasted.
    app = App(server.address, middleware=[Retries(), TimeLimit()])
    gate = threading.Event()

    @app.task(max_attempts=1, time_limit=0.5)
    def stuck(payload: None) -> None:
        if blocked == "sleep":
            time.sleep(60)
        else:
            gate.wait()  # no timeout: one blocking lock acquire in C

    job_id = stuck.put(None)
    assert job_id is not None
    try:
        with running(app, mode=mode.removesuffix("-sync")):
            # far less than the 60 s sleep, far more than the 0.5 s limit
            wait_for(lambda: (probe.job(job_id) or {}).get("state") == "buried", timeout=15,
                     what="bury at the time limit")
    finally:
        gate.set()
    assert _record_error(probe, job_id) == (f"TimeLimitExceeded: job {job_id}: task stuck ran "
                                            f"past its time limit of 0.5s")


def _record_error(probe: Probe, job_id: int) -> str:
    """The error in ``job_id``'s dead-letter record (peeking the failed tube)."""
    from stalkd.worker.actions import DeadLetter

    probe.c.use("stalkd.failed")
    job = probe.c.peek_ready()
    record = DeadLetter.from_json(bytes(job.body))
    assert record.job_id == job_id
    return record.error


def test_unique_key_makes_duplicates_no_ops_until_the_job_completes(server: Any,
                                                                    probe: Probe) -> None:
    app = App(server.address, middleware=[Retries()])
    runs: list[int] = []
    task = app.task(runs.append, name="charge")
    # Given a pending job holding key "order-9"
    first = task.put(1, key="order-9")
    # When the same key is put again, Then nothing is queued: the handle is the pending job's
    dup = task.put(2, key="order-9")
    assert first is not None and dup == first and dup is not None and dup.duplicate
    assert probe.count("charge", "ready") == 1
    with running(app):
        wait_for(lambda: probe.job(first) is None, what="completion")
    # When it has completed, Then the key is free again
    again = task.put(3, key="order-9")
    assert again is not None and again != first and not again.duplicate
    assert runs == [1]
    # and the completed job's pointer went with its key (only the new one's is left)
    assert probe.count(unique.key_tube("order-9"), "delayed") == 1


def test_a_dependent_job_waits_for_its_dependency(server: Any, probe: Probe) -> None:
    app = App(server.address, middleware=[Retries()])
    order: list[str] = []
    gate = threading.Event()

    @app.task(tube="a")
    def a(p: None) -> None:
        gate.wait(30)
        order.append("a")

    @app.task(tube="b", depends_poll=3600)  # only a's completion can wake it in time
    def b(p: None) -> None:
        order.append("b")

    a.put(None, key="A")
    b.put(None, depends_on=["A"])
    with running(app, concurrency=2):
        # While a is running, b keeps being deferred (re-put with a delay), never run
        wait_for(lambda: probe.count("b", "delayed") == 1, what="b deferred")
        assert order == []
        gate.set()
        wait_for(lambda: order == ["a", "b"], what="a then b")


@pytest.mark.parametrize("mode", ["threads", "asyncio", "processes"])
def test_every_mode_runs_every_job_once(server: Any, probe: Probe, mode: str,
                                        tmp_path: Any) -> None:
    app = App(server.address, middleware=[Retries()])
    out = tmp_path / "done"
    out.mkdir()

    @app.task(tube="m")
    def mark(p: int) -> None:
        # A file per job: works across processes too.
        (out / str(p)).touch()

    n = 40
    for i in range(n):
        mark.put(i)
    with running(app, mode=mode, concurrency=3):
        wait_for(lambda: len(list(out.iterdir())) == n and probe.count("m", "ready") == 0
                 and probe.count("m", "reserved") == 0, what=f"{n} jobs done")
    assert sorted(int(p.name) for p in out.iterdir()) == list(range(n))
    assert (probe.tube("m") or {}).get("current-jobs-buried", 0) == 0


def test_a_stop_that_comes_while_the_children_are_forked_reaches_every_child(server: Any) -> None:
    from stalkd.worker import make_worker

    app = App(server.address, middleware=[Retries()])

    @app.task(tube="sf")
    def idle(p: int) -> None:
        pass

    # grace 60: a child the stop passed by would run until the kill, 65 s after the stop
    worker = make_worker(app, mode="processes", concurrency=2, reserve_timeout=1, grace=60)
    armed = [worker]

    def stop_at_the_first_fork() -> None:
        # in the parent, just after the fork and before the worker has recorded its child
        if armed:
            armed.pop().stop(now=True)

    os.register_at_fork(after_in_parent=stop_at_the_first_fork)  # inert once it has fired
    t = threading.Thread(target=worker.run, daemon=True)
    try:
        # Given a stop (release now) that comes as the first child is being forked
        t.start()
        # Then that child is told too, no other child is forked, and the worker stops
        wait_for(lambda: not t.is_alive(), what="the worker stopped")
        assert len(worker.children) == 1
    finally:
        for p in worker.children:
            if p.is_alive():
                p.kill()
        t.join(timeout=20)


class _HeldAfterFork(Middleware):
    """In a forked child, before it installs its own signal handlers: says so through a pipe,
    then waits until the test says it has sent the child its stop."""

    def __init__(self) -> None:
        self.forked_r, self.forked_w = os.pipe()
        self.sent_r, self.sent_w = os.pipe()
        self.parent = os.getpid()

    def after_fork(self) -> None:
        if os.getpid() != self.parent:
            os.write(self.forked_w, b"f")
            os.read(self.sent_r, 1)

    def close(self) -> None:
        for fd in (self.forked_r, self.forked_w, self.sent_r, self.sent_w):
            os.close(fd)


@pytest.mark.parametrize("parent_handler", [False, True], ids=["parent-default", "parent-handler"])
def test_a_drain_stop_sent_before_a_child_installed_its_handlers_takes_the_graceful_path(
        server: Any, parent_handler: bool) -> None:
    """A child signalled between its fork and its handlers used to meet the parent's SIGTERM
    disposition: the default (it died by the signal, no graceful exit) or the parent's handler
    (say Shutdown's, installed before a replacement is forked: the child ran the parent's stop
    and then worked on, unstopped, until the grace period's kill)."""
    from stalkd.worker import make_worker

    held = _HeldAfterFork()
    app = App(server.address, middleware=[held])

    @app.task(tube="hf")
    def idle(p: int) -> None:
        pass

    previous = signal.getsignal(signal.SIGTERM)
    if parent_handler:
        signal.signal(signal.SIGTERM, lambda *_: None)
    worker = make_worker(app, mode="processes", concurrency=1, reserve_timeout=1, grace=1)
    t = threading.Thread(target=worker.run, daemon=True)
    try:
        t.start()
        # Given a child held in after_fork, before its own handlers exist
        wait_for(lambda: select.select([held.forked_r], [], [], 0)[0], what="the child is in after_fork")
        # When the worker is stopped (drain: SIGTERM to the child) and only then the child goes on
        worker.stop()
        os.write(held.sent_w, b"s")
        # Then the child stops by its graceful path (exit 0), neither killed by the signal nor
        # left running until the grace period's SIGKILL
        wait_for(lambda: not t.is_alive(), what="the worker stopped")
        assert [p.exitcode for p in worker.children] == [0]
    finally:
        signal.signal(signal.SIGTERM, previous)
        for p in worker.children:
            if p.is_alive():
                p.kill()
        t.join(timeout=20)
        held.close()


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_a_drain_stop_hands_back_the_jobs_reserved_with_the_last_acknowledgements(
        server: Any, probe: Probe, mode: str) -> None:
    # Given a queue of quick jobs and a worker whose slots reserve the next job in the write
    # that deletes the last one
    from stalkd.worker import make_worker

    app = App(server.address, middleware=[Retries()])
    ran: list[int] = []
    n = 60

    @app.task(tube="d")
    def quick(p: int) -> None:
        ran.append(p)
        if len(ran) == 10:
            worker.stop()  # When a drain stop comes in the middle of the queue

    for i in range(n):
        quick.put(i)
    worker = make_worker(app, mode=mode, concurrency=3, reserve_timeout=1)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive(), "worker did not stop"
    # Then every job that ran is deleted, and every other one is ready again, none held
    wait_for(lambda: probe.count("d", "reserved") == 0, what="reserved jobs handed back")
    assert 10 <= len(ran) < n and len(set(ran)) == len(ran)
    assert probe.count("d", "ready") == n - len(ran)


@pytest.mark.parametrize("mode", ["threads", "asyncio"])
def test_done_hooks_run_once_the_delete_is_in_not_when_the_next_reserve_returns(
        server: Any, probe: Probe, mode: str) -> None:
    # Given a worker whose slot waits up to 60 s for its next job, in the write that deletes
    # the last one
    from stalkd.worker import make_worker

    done: list[int] = []

    class Done(Middleware):
        def on_done(self, ctx: JobContext) -> None:
            done.append(ctx.job_id)

    app = App(server.address, middleware=[Done()])

    @app.task(tube="h")
    def one(p: int) -> None:
        return None

    jid = one.put(1)
    worker = make_worker(app, mode=mode, concurrency=1, reserve_timeout=60)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        # Then the job's done hook runs while that reserve still waits on an empty queue
        wait_for(lambda: done == [jid], timeout=20, what="on_done of the only job")
        assert probe.job(jid) is None
    finally:
        worker.stop()
        t.join(timeout=20)
    assert not t.is_alive(), "worker did not stop"


def test_retry_fresh_requeues_a_copy_with_fresh_attempts(server: Any, probe: Probe,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    app = App(server.address, middleware=[Retries()])
    runs: list[int] = []

    @app.task(max_attempts=1)
    def once(p: int) -> None:
        runs.append(p)
        if len(runs) == 1:
            raise ValueError("first run fails")

    job_id = once.put(5)
    assert job_id is not None
    with running(app):
        wait_for(lambda: (probe.job(job_id) or {}).get("state") == "buried", what="bury")
        # When the dead letter is retried with --fresh
        assert retry(["--address", server.address, "--fresh", "--all"]) == 0
        # Then the buried original is gone and a new job ran to completion
        wait_for(lambda: runs == [5, 5], what="second run")
    assert probe.job(job_id) is None
    assert f"job {job_id}: requeued as " in capsys.readouterr().out
    assert probe.count("stalkd.failed", "ready") == 0


def test_racing_producers_of_one_unique_key_queue_exactly_one_job(server: Any, probe: Probe) -> None:
    app = App(server.address, middleware=[])
    task = app.task(lambda p: None, name="u")
    results: list[int | None] = []
    lock = threading.Lock()
    go = threading.Barrier(6)

    def produce(i: int) -> None:
        # Each thread has its own connection (the producer keeps one per thread).
        go.wait()
        r = task.put(i, key="only-once")
        with lock:
            results.append(r)

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    # Then exactly one put won, one job is queued, and one marker holds the key; the others
    # got a handle to that job, or None if they looked before the winner recorded it
    winners = [r for r in results if r is not None and not r.duplicate]  # type: ignore[attr-defined]
    assert len(results) == 6 and len(winners) == 1
    assert all(r is None or r == winners[0] for r in results)
    assert probe.count("u", "ready") == 1
    from stalkd.worker.unique import key_tube

    assert probe.count(key_tube("only-once"), "ready") == 1


@pytest.mark.parametrize("kind", [pytest.param("beanstalkd", marks=pytest.mark.beanstalkd),
                                  "stalkd"])
def test_workers_reconnect_after_a_server_restart(kind: str, tmp_path: Any, held_port: int) -> None:
    # On a port held for the test: nothing else can take it while the server is down
    port = held_port
    first = start_server(kind, "-b", str(tmp_path), port=port)
    address = first.address
    app = App(address, middleware=[Retries()])
    done: list[int] = []
    task = app.task(done.append, name="r")
    second = None
    try:
        with running(app, concurrency=2):
            first_id = task.put(1)
            assert first_id is not None
            # Wait for the delete, not only the handler: a job still reserved when the server
            # stops comes back ready from the binlog and runs again (at-least-once), which made
            # this test flaky under load.
            probe = Probe(address)
            try:
                wait_for(lambda: done == [1] and probe.job(first_id) is None, what="first job")
            finally:
                probe.close()
            # When the server restarts on the same port (same binlog directory)
            first.stop()
            second = start_server(kind, "-b", str(tmp_path), port=port)
            # Then the workers reconnect, watch their tubes again, and take new jobs
            app.producer.close()  # type: ignore[attr-defined]  # the producer's socket died too
            task.put(2)
            wait_for(lambda: done == [1, 2], timeout=30, what="job after restart")
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_a_job_that_outran_its_ttr_does_not_stop_the_slot(server: Any, probe: Probe,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    if server.kind == "beanstalkd":
        pytest.skip("beanstalkd 1.12 does not reliably expire the TTR of an idle connection's job")
    app = App(server.address, middleware=[Retries()])  # no heartbeat: the TTR will run out
    runs: list[int] = []

    @app.task(ttr=1, max_attempts=5)
    def slow_then_fail(p: int) -> None:
        runs.append(p)
        if p == 1:
            # Keep running until the server has taken the job back.
            wait_for(lambda: (probe_in_handler.job(first) or {}).get("timeouts", 0) >= 1,
                     what="TTR expiry")
            raise RuntimeError("too late")

    probe_in_handler = Probe(server.address)
    first = slow_then_fail.put(1)
    assert first is not None
    try:
        with caplog.at_level("WARNING", "stalkd.worker"), running(app):
            wait_for(lambda: "no longer reserved by this worker" in caplog.text, what="warning")
            # Then the slot lives on and runs the next job
            second = slow_then_fail.put(2)
            assert second is not None
            wait_for(lambda: probe.job(second) is None, what="next job done")
    finally:
        probe_in_handler.close()
    assert 2 in runs


def test_a_killed_worker_process_is_replaced_and_its_job_done(server: Any, probe: Probe,
                                                              tmp_path: Any) -> None:
    import os
    import signal

    app = App(server.address, middleware=[Retries()])
    out = tmp_path

    @app.task(tube="k")
    def work(p: int) -> None:
        (out / f"pid-{p}-{os.getpid()}").touch()
        # Job 1 runs until its first process is killed; a later delivery completes at once.
        while p == 1 and len(list(out.glob("pid-1-*"))) < 2:
            threading.Event().wait(0.02)
        (out / f"done-{p}").touch()

    first = work.put(1)
    assert first is not None
    with running(app, mode="processes", concurrency=1) as w:
        started = wait_for(lambda: list(out.glob("pid-1-*")), what="job 1 started")
        victim = int(started[0].name.split("-")[2])
        # When the child running job 1 is SIGKILLed
        os.kill(victim, signal.SIGKILL)
        # Then a replacement process takes over and job 1 is redelivered and completed
        wait_for(lambda: (out / "done-1").exists(), timeout=30, what="job 1 done")
        wait_for(lambda: probe.job(first) is None, what="job 1 deleted")
        assert w.replaced == 1
        work.put(2)
        wait_for(lambda: (out / "done-2").exists(), what="job 2 done")


def test_metrics_add_up_across_worker_processes(server: Any, probe: Probe) -> None:
    from prometheus_client import CollectorRegistry

    from stalkd.worker.middleware import Metrics

    registry = CollectorRegistry()
    metrics = Metrics(registry=registry, flush_interval=0.05)
    app = App(server.address, middleware=[Retries(), metrics])

    @app.task(tube="pm", max_attempts=1)
    def work(p: int) -> None:
        if p % 5 == 0:
            raise NonRetryable("multiple of five")

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    n = 30
    for i in range(n):
        work.put(i)
    try:
        # Given jobs run by two forked children, then the parent's registry sees all of them
        # (a dead letter is counted once the server has it, after its job's outcome: a child's
        # flush may come between the two)
        with running(app, mode="processes", concurrency=2):
            wait_for(lambda: value("stalkd_worker_jobs_total", task="work", outcome="done") == 24
                     and value("stalkd_worker_jobs_total", task="work", outcome="failed") == 6
                     and value("stalkd_worker_dead_letters_total", task="work") == 6,
                     what="all outcomes counted in the parent")
            assert value("stalkd_worker_job_duration_seconds_count", task="work") == n
        # and once the children have exited, the counts stay and the gauge is gone
        assert value("stalkd_worker_jobs_total", task="work", outcome="done") == 24
        assert registry.get_sample_value("stalkd_worker_jobs_in_progress", {"task": "work"}) is None
    finally:
        metrics.close()
    assert metrics.shared_dir is None


def _sockets_of(pid: int) -> set[str]:
    """The sockets process ``pid`` holds a descriptor of, as /proc names them (socket:[inode])."""
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # a descriptor closed while we list
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:"):
                held.add(link)
    return held


def test_worker_processes_do_not_hold_the_metrics_listening_socket(server: Any, probe: Probe,
                                                                   tmp_path: Any) -> None:
    from prometheus_client import CollectorRegistry

    from stalkd.worker.middleware import Metrics

    metrics = Metrics(registry=CollectorRegistry(), port=0)
    listening = f"socket:[{os.fstat(metrics._http.socket.fileno()).st_ino}]"
    app = App(server.address, middleware=[metrics])
    seen = tmp_path / "pids"
    seen.mkdir()

    @app.task(tube="msock")
    def where(p: None) -> None:
        # each child runs one job and holds it until both have one: then both children are
        # past their after_fork hooks (one slot each, so the second job goes to the other)
        (seen / str(os.getpid())).touch()
        wait_for(lambda: len(os.listdir(seen)) == 2, what="a job in each child")

    try:
        with running(app, mode="processes", concurrency=2):
            where.put(None)
            where.put(None)
            wait_for(lambda: len(os.listdir(seen)) == 2, what="a job in each child")
            children = [int(pid) for pid in os.listdir(seen)]
            assert os.getpid() not in children
            # Then no child keeps the port bound: only the parent holds the listening socket
            for pid in children:
                assert listening not in _sockets_of(pid), f"child {pid} holds the /metrics socket"
            assert listening in _sockets_of(os.getpid())
            # and the parent still serves /metrics
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics.port}/metrics", timeout=30) as r:
                assert r.status == 200 and b"stalkd_worker_jobs" in r.read()
    finally:
        metrics.close()


class _WedgedAtStop(Middleware):
    """In a forked child, a stop hook that never returns: a worker process wedged at its exit."""

    def __init__(self) -> None:
        self.parent = os.getpid()

    def on_worker_stop(self, worker: Any) -> None:
        if os.getpid() != self.parent:
            threading.Event().wait()


def test_a_stop_now_does_not_wait_the_grace_period_for_a_wedged_worker_process(
        server: Any, probe: Probe, tmp_path: Any) -> None:  # fmt: skip
    app = App(server.address, middleware=[_WedgedAtStop()])
    done = tmp_path / "done"

    @app.task(tube="wedge")
    def job(p: None) -> None:
        done.touch()

    # Given a child that will never finish its stop, and a drain grace of an hour
    w = None
    try:
        with running(app, mode="processes", concurrency=1, grace=3600) as w:
            job.put(None)
            wait_for(done.exists, what="the child ran a job")
        # When running() stopped it now, then the worker stopped (running() checks) long before
        # the grace period, having killed the wedged child
        assert [p.exitcode for p in w.children] == [-signal.SIGKILL]
    finally:  # a failed run leaves the child wedged, and multiprocessing's exit would join it
        for p in w.children if w is not None else []:
            if p.is_alive() and p.pid is not None:
                os.kill(p.pid, signal.SIGKILL)


class _LocksHeldAtFork(Middleware):
    """Holds ``locks`` in the parent from just before it forks its children until they are
    forked: what another thread of the parent does for a moment when a fork catches it inside
    them (a /metrics scrape, a schedule's put), made certain."""

    def __init__(self, locks: Callable[[], list[Any]]) -> None:
        self.locks = locks
        self.held: list[Any] = []
        self.parent = os.getpid()

    def before_fork(self, worker: Any) -> None:
        self.held = self.locks()
        for lock in self.held:
            lock.acquire()

    def on_worker_start(self, worker: Any) -> None:
        if os.getpid() == self.parent:  # a child's copies stay as the fork left them: held
            for lock in self.held:
                lock.release()


def test_locks_the_parent_held_when_it_forked_do_not_wedge_the_children(
        server: Any, probe: Probe) -> None:
    from prometheus_client import CollectorRegistry

    from stalkd.worker.middleware import Metrics

    registry = CollectorRegistry()
    metrics = Metrics(registry=registry, flush_interval=0.05)
    # the locks a scrape of the registry takes (prometheus_client offers no public handle on
    # them), and the app's, taken by every put
    families = [metrics.jobs, metrics.duration, metrics.in_progress, metrics.retries, metrics.dead]
    held = _LocksHeldAtFork(lambda: [metrics.local._lock, *(f._lock for f in families),
                                     app._lock])
    app = App(server.address, middleware=[Retries(), metrics, held])

    @app.task(tube="lk", max_attempts=1)
    def work(p: int) -> None:
        echo.put(p)  # a put from the child: takes the app's lock

    @app.task(tube="lk-echo")
    def echo(p: int) -> None:
        pass

    def value(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    n = 10
    for i in range(n):
        work.put(i)
    # the parent's own counts are its own: a child counts from zero
    metrics.jobs.labels(task="work", outcome="done").inc()
    try:
        # Given children forked while the parent held the locks of its metrics and of its app
        with running(app, tubes=["lk"], mode="processes", concurrency=2):
            # Then the children run every job, count each once in the parent, and stop
            wait_for(lambda: probe.count("lk-echo", "ready") == n, what="every job's put")
            wait_for(lambda: value("stalkd_worker_jobs_total", task="work", outcome="done") == n + 1,
                     what="every job counted in the parent")
        assert value("stalkd_worker_jobs_total", task="work", outcome="done") == n + 1
    finally:
        metrics.close()


def test_a_dead_letter_whose_job_was_deleted_or_kicked_by_hand_is_not_listed(
        server: Any, probe: Probe) -> None:
    from stalkd.worker.actions import dead_letter
    from stalkd.worker.deadletter import list_failed

    # Given two buried jobs, each with its dead-letter record
    c = probe.c
    c.use("t")
    ids = [c.put(b"x"), c.put(b"y")]
    c.watch("t")
    for _ in ids:
        c.bury(c.reserve(timeout=1))
    c.use("stalkd.failed")
    for jid in ids:
        c.put(dead_letter(jid, b"x", ValueError("no"), tube="t", task="t", now=0.0).to_json())
    assert [f.record.job_id for f in list_failed(server.address, "stalkd.failed")] == ids
    # When one is deleted and the other kicked by hand
    c.delete(ids[0])
    c.kick_job(ids[1])
    # Then neither is listed as dead any more
    assert list_failed(server.address, "stalkd.failed") == []


def test_task_puts_use_the_tasks_tube_ttr_and_priority_and_send_use_once(
        server: Any, probe: Probe) -> None:
    # Given a task declared with its own tube, TTR and priority
    app = App(server.address, middleware=[])
    task = app.task(lambda p: None, name="slow", tube="reports", ttr=600, priority=7)
    uses = int(probe.c.stats()["cmd-use"])
    # When it is put one by one and in bulk
    single = [task.put(i) for i in range(3)]
    bulk = task.put_many(range(5))
    # Then every job carries the task's settings, in the task's tube
    for jid in [*single, *bulk]:
        assert jid is not None
        info = probe.job(jid)
        assert info is not None
        assert (info["tube"], info["ttr"], info["pri"]) == ("reports", 600, 7)
    # And the producer's connection chose the tube once
    assert int(probe.c.stats()["cmd-use"]) == uses + 1
