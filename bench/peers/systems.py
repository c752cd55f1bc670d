"""One adapter per queue system, for a child process of bench/worker_bench.py: how it puts
(one at a time and in bulk), how many jobs it still holds, and the worker commands that give it
8 job slots.

Every system runs the same functions (``_common.noop`` and ``_common.stamp``) with its own
defaults, except that none stores results (stalkd and Dramatiq store none by default; RQ gets
``result_ttl=0``, Celery has no result backend, huey stores no ``None`` result).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PAYLOAD = "x" * 100
HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)


@dataclass
class Adapter:
    name: str
    put: Callable[[], Any]                 # one no-op job
    stamp: Callable[[float], Any]          # one stamp job (sent = time.time())
    fill: Callable[[int], Any]             # n no-op jobs, as fast as the library allows
    bulk: bool                             # fill is a real bulk API (else a loop of puts)
    remaining: Callable[[], int]           # jobs not yet done (queued + in flight, where seen)
    configs: list[tuple[str, list[list[str]]]] = field(default_factory=list)  # label, commands


def _redis() -> Any:
    from redis import Redis

    return Redis(unix_socket_path=os.environ["BENCH_REDIS"])


def stalkd() -> Adapter:
    from stalkd.client import Client
    from stalkd.worker import App

    address = os.environ["BENCH_STALKD"]
    app = App(address)
    sys.path.insert(0, HERE)
    from _common import noop, stamp

    noop_task = app.task(noop, name="noop", tube="bench")
    stamp_task = app.task(stamp, name="stamp", tube="bench")
    watcher = Client(address)

    def remaining() -> int:
        s = watcher.stats_tube("bench")
        return int(s["current-jobs-ready"]) + int(s["current-jobs-reserved"])

    base = [sys.executable, "-m", "stalkd.cli", "worker", "stalkd_tasks:app", "-a", address]
    return Adapter(
        "stalkd", lambda: noop_task.put(PAYLOAD), stamp_task.put,
        lambda n: noop_task.put_many([PAYLOAD] * n), True, remaining,
        [("threads 8", [base + ["-c", "8"]]),
         ("processes 2x4", [base + ["-m", "processes", "-c", "2", "--threads-per-process", "4"]])])


def dramatiq() -> Adapter:
    sys.path.insert(0, HERE)
    import dramatiq_tasks as m

    r = _redis()

    def fill(n: int) -> None:
        for _ in range(n):
            m.noop_actor.send(PAYLOAD)

    cmd = [os.path.join(BIN, "dramatiq"), "dramatiq_tasks"]
    return Adapter(
        "dramatiq", lambda: m.noop_actor.send(PAYLOAD), m.stamp_actor.send, fill, False,
        lambda: int(r.hlen("dramatiq:bench.msgs")),
        [("1 process x 8 threads", [cmd + ["-p", "1", "-t", "8"]]),
         ("2 processes x 4 threads", [cmd + ["-p", "2", "-t", "4"]])])


def celery() -> Adapter:
    sys.path.insert(0, HERE)
    import celery_tasks as m

    r = _redis()

    def fill(n: int) -> None:
        for _ in range(n):
            m.noop_task.delay(PAYLOAD)

    cmd = [os.path.join(BIN, "celery"), "-A", "celery_tasks", "worker", "--loglevel", "WARNING"]
    return Adapter(
        "celery", lambda: m.noop_task.delay(PAYLOAD), m.stamp_task.delay, fill, False,
        lambda: int(r.llen("bench")) + int(r.hlen("unacked")),
        [("prefork 8", [cmd + ["-P", "prefork", "-c", "8"]]),
         ("threads 8", [cmd + ["-P", "threads", "-c", "8"]])])


def huey() -> Adapter:
    sys.path.insert(0, HERE)
    import huey_tasks as m

    def fill(n: int) -> None:
        for _ in range(n):
            m.noop_task(PAYLOAD)

    cmd = [os.path.join(BIN, "huey_consumer"), "huey_tasks.huey", "-q"]
    return Adapter(
        "huey", lambda: m.noop_task(PAYLOAD), m.stamp_task, fill, False,
        lambda: int(m.huey.pending_count()),
        [("threads 8", [cmd + ["-k", "thread", "-w", "8"]]),
         ("processes 8", [cmd + ["-k", "process", "-w", "8"]])])


def rq() -> Adapter:
    from rq import Queue

    sys.path.insert(0, HERE)
    import rq_tasks as m

    conn = _redis()
    q = Queue("bench", connection=conn)

    def fill(n: int) -> None:
        for i in range(0, n, 1000):
            with conn.pipeline() as pipe:
                q.enqueue_many([Queue.prepare_data(m.noop, (PAYLOAD,), result_ttl=0)
                                for _ in range(min(1000, n - i))], pipeline=pipe)
                pipe.execute()

    one = [os.path.join(BIN, "rq"), "worker", "-u", "unix://" + os.environ["BENCH_REDIS"],
           "-w", "rq.worker.SimpleWorker", "-q", "bench"]
    return Adapter(
        "rq", lambda: q.enqueue(m.noop, PAYLOAD, result_ttl=0),
        lambda sent: q.enqueue(m.stamp, sent, result_ttl=0), fill, True, lambda: int(q.count),
        [("8 SimpleWorker processes", [one] * 8)])


ADAPTERS: dict[str, Callable[[], Adapter]] = {
    "stalkd": stalkd, "dramatiq": dramatiq, "celery": celery, "huey": huey, "rq": rq}
