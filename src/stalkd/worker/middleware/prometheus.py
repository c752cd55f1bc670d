"""Prometheus metrics for the worker (``prometheus-client``): jobs by task and outcome,
durations, retries, dead letters and jobs in progress.

>>> from prometheus_client import CollectorRegistry
>>> m = Metrics(registry=CollectorRegistry())
>>> m.jobs.labels(task="t", outcome="done").inc()

Serve them with ``Metrics(port=9100)`` (``start_http_server`` on 127.0.0.1; ``port=0`` picks a
free one, see ``.port``) or expose ``registry`` yourself.

BUG: with ``--mode processes`` each child counts in its own copy of the registry and the
parent serves its own (empty) one; aggregating needs prometheus-client's multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``), not wired up yet. Threads and asyncio modes are exact.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from stalkd.worker.context import Bury, JobContext, Release
from stalkd.worker.middleware.base import Middleware

__all__ = ["Metrics"]


class Metrics(Middleware):
    """Counters and histograms labelled by task; pass ``registry`` to keep tests isolated."""

    def __init__(self, *, registry: CollectorRegistry | None = None, port: int | None = None,
                 addr: str = "127.0.0.1") -> None:
        self.registry = registry or CollectorRegistry()
        self.jobs = Counter("stalkd_worker_jobs", "Finished deliveries by outcome",
                            ["task", "outcome"], registry=self.registry)
        self.duration = Histogram("stalkd_worker_job_duration_seconds", "Handler run time",
                                  ["task"], registry=self.registry)
        self.in_progress = Gauge("stalkd_worker_jobs_in_progress", "Handlers running now",
                                 ["task"], registry=self.registry)
        self.retries = Counter("stalkd_worker_retries", "Jobs released for another attempt",
                               ["task"], registry=self.registry)
        self.dead = Counter("stalkd_worker_dead_letters", "Jobs buried after their last attempt",
                            ["task"], registry=self.registry)
        self._http: Any = None
        if port is not None:
            self._http, _ = start_http_server(port, addr=addr, registry=self.registry)

    @property
    def port(self) -> int | None:
        """The port ``/metrics`` is served on (useful with ``port=0``)."""
        return None if self._http is None else int(self._http.server_port)

    def close(self) -> None:
        """Stop serving ``/metrics`` (call from the process that created it)."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def before_process(self, ctx: JobContext) -> None:
        self.in_progress.labels(task=ctx.task.name).inc()

    def after_process(self, ctx: JobContext) -> None:
        name = ctx.task.name
        self.in_progress.labels(task=name).dec()
        if ctx.duration is not None:
            self.duration.labels(task=name).observe(ctx.duration)
        self.jobs.labels(task=name, outcome="failed" if ctx.exception else "done").inc()

    def on_retry(self, ctx: JobContext, action: Release) -> None:
        self.retries.labels(task=ctx.task.name).inc()

    def on_dead_letter(self, ctx: JobContext, action: Bury) -> None:
        self.dead.labels(task=ctx.task.name).inc()
