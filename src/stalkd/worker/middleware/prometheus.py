"""Prometheus metrics for the worker (``prometheus-client``): jobs by task and outcome,
durations, retries, dead letters and jobs in progress.

>>> from prometheus_client import CollectorRegistry
>>> registry = CollectorRegistry()
>>> m = Metrics(registry=registry)
>>> m.jobs.labels(task="t", outcome="done").inc()
>>> registry.get_sample_value("stalkd_worker_jobs_total", {"task": "t", "outcome": "done"})
1.0

Serve them with ``Metrics(port=9100)`` (``start_http_server`` on 127.0.0.1; ``port=0`` picks a
free one, see ``.port``) or expose ``registry`` yourself.

With ``--mode processes`` the jobs run in forked children, while ``/metrics`` is served by the
parent. Each child writes its totals to a file of its own in a private directory (a background
thread, every ``flush_interval`` seconds while something changed, and once more when the child
stops), and the parent's registry adds them up when scraped. So the served figures trail the
children by at most ``flush_interval``, a child killed with SIGKILL loses at most its last
interval, counters keep the counts of children that have exited, and the in-progress gauge
counts only children still alive.

Ensures: what ``registry`` reports is the sum over this process and every child forked from it
since (for counters and histograms) or every such child alive now (for gauges).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from stalkd.pids import pid_alive
from stalkd.worker.actions import GiveUp, RetryLater
from stalkd.worker.cancel import JobCancelled
from stalkd.worker.context import JobContext
from stalkd.worker.middleware.base import Middleware

log = logging.getLogger("stalkd.worker")

if TYPE_CHECKING:
    from stalkd.worker.middleware.base import RunningWorker

__all__ = ["Metrics"]

_Key = tuple[str, tuple[tuple[str, str], ...]]


class Metrics(Middleware):
    """Counters and histograms labelled by task; pass ``registry`` to keep tests isolated."""

    def __init__(self, *, registry: CollectorRegistry | None = None, port: int | None = None,
                 addr: str = "127.0.0.1", flush_interval: float = 0.25) -> None:
        self.registry = registry or CollectorRegistry()
        self.flush_interval = flush_interval
        self.shared_dir: str | None = None  # where children write their totals (parent-made)
        self._owner = os.getpid()
        self._dump_path: str | None = None  # set in a child
        self._new_local()
        self.registry.register(_Merged(self))
        self._http: Any = None
        if port is not None:
            self._http, _ = start_http_server(port, addr=addr, registry=self.registry)
            # With port=0 the kernel chose: say which, or nobody can scrape it.
            log.info("metrics: serving /metrics on http://%s:%d", addr, self.port)

    def _new_local(self) -> None:
        """This process's own counts (``registry`` serves them merged with the children's),
        and what its flusher shares with the threads that count."""
        self.local = CollectorRegistry()
        self.jobs = Counter("stalkd_worker_jobs", "Finished deliveries by outcome",
                            ["task", "outcome"], registry=self.local)
        self.duration = Histogram("stalkd_worker_job_duration_seconds", "Handler run time",
                                  ["task"], registry=self.local)
        self.in_progress = Gauge("stalkd_worker_jobs_in_progress", "Handlers running now",
                                 ["task"], registry=self.local)
        self.retries = Counter("stalkd_worker_retries", "Jobs released for another attempt",
                               ["task"], registry=self.local)
        self.dead = Counter("stalkd_worker_dead_letters", "Jobs buried after their last attempt",
                            ["task"], registry=self.local)
        self._dirty = threading.Event()
        self._stop_flusher = threading.Event()
        self._dump_lock = threading.Lock()

    @property
    def port(self) -> int | None:
        """The port ``/metrics`` is served on (useful with ``port=0``)."""
        return None if self._http is None else int(self._http.server_port)

    def close(self) -> None:
        """Stop serving ``/metrics`` and remove the children's files (in the creating process)."""
        if os.getpid() != self._owner:
            return
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self.shared_dir is not None:
            shutil.rmtree(self.shared_dir, ignore_errors=True)
            self.shared_dir = None

    # --- process mode -----------------------------------------------------------------------

    def before_fork(self, worker: RunningWorker) -> None:
        if self.shared_dir is None:
            self.shared_dir = tempfile.mkdtemp(prefix="stalkd-metrics-")
            atexit.register(self.close)

    def after_fork(self) -> None:
        if self._http is not None:
            # The child's copy of the /metrics listening socket: closed here, or the port stays
            # bound for as long as any child lives (a restarted worker could not listen while one
            # is still draining). Only this process's descriptor goes: the parent still serves.
            self._http.socket.close()
            self._http = None
        if self.shared_dir is None:
            return
        # Count in new objects, none of them made by the parent: a scrape on another thread of
        # the parent (its /metrics server, a test polling the registry) may have held one of
        # their locks at the fork, and the child's copy of a lock held then stays held for ever
        # (its flusher, then its last dump, then its exit waited on it: a child that never
        # reports nor stops). New counts also start at zero, as the sum the parent serves
        # expects: the parent reports its own.
        self._new_local()
        # pid plus start time: a recycled pid must not overwrite a dead child's totals.
        self._dump_path = os.path.join(self.shared_dir, f"{os.getpid()}-{time.monotonic_ns()}.json")
        threading.Thread(target=self._flusher, name="stalkd-metrics-flush", daemon=True).start()

    def _flusher(self) -> None:
        while not self._stop_flusher.wait(self.flush_interval):
            if self._dirty.is_set():
                self._dump()

    def _dump(self) -> None:
        path = self._dump_path
        if path is None:
            return
        with self._dump_lock:
            self._dirty.clear()
            rows = [[fam.name, fam.type, s.name, s.labels, s.value]
                    for fam in self.local.collect() for s in fam.samples]
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"pid": os.getpid(), "samples": rows}, f)
            os.replace(tmp, path)  # a scrape never reads half a file

    def _changed(self) -> None:
        if self._dump_path is not None:
            self._dirty.set()

    # --- hooks ------------------------------------------------------------------------------

    def on_worker_stop(self, worker: RunningWorker) -> None:
        if self._dump_path is not None:
            self._stop_flusher.set()
            self._dump()

    def before_process(self, ctx: JobContext) -> None:
        self.in_progress.labels(task=ctx.task.name).inc()
        self._changed()

    def after_process(self, ctx: JobContext) -> None:
        name = ctx.task.name
        self.in_progress.labels(task=name).dec()
        if ctx.duration is not None:
            self.duration.labels(task=name).observe(ctx.duration)
        outcome = ("cancelled" if isinstance(ctx.exception, JobCancelled)
                   else "failed" if ctx.exception else "done")
        self.jobs.labels(task=name, outcome=outcome).inc()
        self._changed()

    def on_retry(self, ctx: JobContext, action: RetryLater) -> None:
        self.retries.labels(task=ctx.task.name).inc()
        self._changed()

    def on_dead_letter(self, ctx: JobContext, action: GiveUp) -> None:
        self.dead.labels(task=ctx.task.name).inc()
        self._changed()

    # --- reading the children's files --------------------------------------------------------

    def child_samples(self) -> Iterator[tuple[str, str, str, dict[str, str], float]]:
        """(family, type, sample, labels, value) rows from every child's latest file; gauge
        rows only from children still running."""
        if self.shared_dir is None or self._dump_path is not None:
            return
        try:
            names = sorted(os.listdir(self.shared_dir))
        except FileNotFoundError:
            return
        for name in names:
            if not name.endswith(".json"):
                continue
            try:
                with open(os.path.join(self.shared_dir, name)) as f:
                    data = json.load(f)
            except (OSError, ValueError):
                continue  # removed by close() meanwhile
            alive = pid_alive(int(data["pid"]))
            for fam, kind, sample, labels, value in data["samples"]:
                if kind != "gauge" or alive:
                    yield fam, kind, sample, labels, float(value)


class _Merged(Collector):
    """What ``Metrics.registry`` serves: this process's families plus the children's rows."""

    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics

    def collect(self) -> Iterator[Metric]:
        extra: dict[str, list[tuple[str, dict[str, str], float]]] = {}
        for family, _kind, sample, labels, value in self.m.child_samples():
            extra.setdefault(family, []).append((sample, labels, value))
        for fam in self.m.local.collect():
            values: dict[_Key, float] = {}
            for s in fam.samples:
                values[(s.name, tuple(sorted(s.labels.items())))] = s.value
            for sample, labels, value in extra.get(fam.name, ()):
                key = (sample, tuple(sorted(labels.items())))
                if key not in values:
                    values[key] = value
                elif sample.endswith("_created"):
                    values[key] = min(values[key], value)  # a creation time, not a count
                else:
                    values[key] += value
            out = Metric(fam.name, fam.documentation, fam.type, fam.unit)
            for (sample, labels_t), value in values.items():
                out.add_sample(sample, dict(labels_t), value)
            yield out
