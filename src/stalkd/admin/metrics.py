"""/metrics: Prometheus text computed at scrape time, plus the few timings only the hot path sees.

Gauges (jobs per tube and state for the ``TOP_TUBES`` busiest tubes, the rest summed; waiting
workers, pauses, connections, the memory budget, bytes on disk) and the
engine's own counters (commands, timeouts) are read from the engine and the server when
/metrics is scraped (``Reading``, one pass on the loop thread; the Prometheus objects and the
text are built from it in a worker thread): nothing is kept per job. What cannot be read later is observed as it
happens, into ``Buckets`` (one bisect per observation):

* put -> reserve wait and reserve -> delete run time, by ``Instruments.observe``, which the
  server calls with each engine step (``Server.observer``);
* fsync latency and records per fsync, snapshot and compaction-step durations, by
  ``TimedStorage``, a pass-through around the WAL (per batch and per maintenance step, never
  per job).

Names follow Prometheus conventions: ``stalkd_`` prefix, ``_total`` counters, base units
(``_seconds``, ``_bytes``), a ``tube``/``state``/``command`` label where it varies.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

from stalkd.admin.histogram import COUNTS, JOB_SECONDS, LATENCY, Buckets
from stalkd.engine.model import Record
from stalkd.engine.objects import US
from stalkd.engine.state import Outcome
from stalkd.protocol import commands as C
from stalkd.protocol.grammar import COUNTERS as CMD_KEYS
from stalkd.tubes import INTERNAL_PREFIX, is_internal

if TYPE_CHECKING:
    from stalkd.engine import Engine
    from stalkd.server.app import Server, Storage

__all__ = ["Instruments", "TimedStorage", "Reading", "families", "exposition"]

_JobReply = C.JobReply
_Delete, _Release, _Bury = C.Delete, C.Release, C.Bury


class Instruments:
    """Timings observed as they happen (see the module docstring)."""

    def __init__(self, clock: Any = time.time) -> None:
        self.clock = clock
        self.wait = Buckets(JOB_SECONDS)  # put -> reserve
        self.run = Buckets(JOB_SECONDS)  # reserve -> delete
        self.fsync = Buckets(LATENCY)
        self.fsync_records = Buckets(COUNTS)
        self.snapshot = Buckets(LATENCY)  # a whole snapshot, first step to last
        self.maintain_step = Buckets(LATENCY)  # one call of Storage.maintain (loop time)
        self.engine: Engine | None = None
        # job id -> when it was reserved, until deleted, released or buried
        self._reserved_at: dict[int, float] = {}

    def observe(self, cmd: C.Command | None, out: Outcome) -> None:
        """``Server.observer``: called with every engine step."""
        reply = out.reply
        wakeups = out.wakeups
        if type(reply) is _JobReply and reply.word == "RESERVED":
            self._reserved(reply.id)
        if wakeups:
            for _, r in wakeups:
                if type(r) is _JobReply:
                    self._reserved(r.id)
        kind = type(cmd)
        if kind is _Delete or kind is _Release or kind is _Bury:
            t = self._reserved_at.pop(cmd.id, None)  # type: ignore[union-attr]
            if t is not None and kind is _Delete and getattr(reply, "word", "") == "DELETED":
                self.run.observe(self.clock() - t)

    def _reserved(self, job_id: int) -> None:
        now = self.clock()
        self._reserved_at[job_id] = now
        eng = self.engine
        j = eng.jobs.get(job_id) if eng is not None else None
        if j is not None:
            self.wait.observe(max(0.0, now - j.created_us / US))


class TimedStorage:
    """The WAL with timings: every call goes straight through (``Storage`` protocol)."""

    def __init__(self, inner: Storage, instruments: Instruments) -> None:
        self.inner = inner
        self.ins = instruments
        self._written = 0  # records handed to write()
        self._synced = 0  # of which covered by an fsync that started
        self._snap_started: float | None = None
        self.last_refusal = -1e9  # time.monotonic() of the last command refused for space

    @property
    def persistent(self) -> bool:
        return self.inner.persistent

    def admit(self, cost: int) -> bool:
        if self.inner.admit(cost):
            return True
        self.last_refusal = time.monotonic()
        return False

    def admit_upto(self, n: int, unit: int) -> int:
        k = self.inner.admit_upto(n, unit)
        if k < n:
            self.last_refusal = time.monotonic()
        return k

    def settle(self, admitted: int, records: Sequence[Record]) -> None:
        self.inner.settle(admitted, records)

    def write(self, records: Sequence[Record]) -> None:
        self.inner.write(records)
        self._written += len(records)

    def sync(self) -> None:
        # Runs on the sync thread or inline; one sync at a time (the server's invariant).
        covered = self._written
        t0 = time.perf_counter()
        self.inner.sync()
        self.ins.fsync.observe(time.perf_counter() - t0)
        self.ins.fsync_records.observe(covered - self._synced)
        self._synced = covered

    def maintain(self, engine: Engine, now: float) -> bool:
        t0 = time.perf_counter()
        busy = self.inner.maintain(engine, now)
        t1 = time.perf_counter()
        if busy or self._snap_started is not None:
            self.ins.maintain_step.observe(t1 - t0)
        if busy and self._snap_started is None:
            self._snap_started = t0
        elif not busy and self._snap_started is not None:
            self.ins.snapshot.observe(t1 - self._snap_started)
            self._snap_started = None
        return busy

    def on_segment(self, hook: Callable[[], object] | None) -> None:
        self.inner.on_segment(hook)

    def stats(self) -> dict[str, int]:
        return self.inner.stats()

    def final_snapshot(self, engine: Engine) -> str | None:
        return self.inner.final_snapshot(engine)

    def close(self) -> None:
        self.inner.close()

    def disk_usage(self) -> dict[str, int]:
        """Bytes of WAL segments and snapshots on disk (apparent sizes; archive excluded)."""
        wal = self.inner
        out = {"wal": 0, "snapshot": 0}
        log_dir = getattr(getattr(wal, "log", None), "path", None)
        snap_dir = getattr(wal, "snap_dir", None)
        for key, d in (("wal", log_dir), ("snapshot", snap_dir)):
            if not d:
                continue
            try:
                with os.scandir(d) as it:
                    for e in it:
                        if e.is_file(follow_symlinks=False):
                            with contextlib.suppress(FileNotFoundError):  # compacted meanwhile
                                out[key] += e.stat(follow_symlinks=False).st_size
            except FileNotFoundError:
                pass
        return out


def _hist(name: str, doc: str, b: tuple[list[tuple[str, int]], float]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, buckets=b[0], sum_value=b[1])


TOP_TUBES = 100
"""Tubes shown by name in /metrics, the busiest (most jobs) first; the rest are summed as
``tube="*"`` and stalkd's own (``stalkd.*``) as ``tube="stalkd.*"``, so a scrape has a bounded
number of series however many tubes clients make (Prometheus's guidance on cardinality)."""
TUBE_SLICE = 5000  # tubes read per loop turn (~5 ms)
OTHER_TUBES = "*"  # not a possible tube name
INTERNAL_TUBES = INTERNAL_PREFIX + "*"

TubeRow = tuple[str, int, int, int, int, int, int, int]
"""name, ready, reserved, delayed, buried, waiting connections, paused (0/1), jobs ever put"""


def _summed(name: str, rows: list[TubeRow]) -> TubeRow:
    sums = [sum(col) for col in zip(*(r[1:] for r in rows), strict=True)] if rows else [0] * 7
    sums[5] = 1 if sums[5] else 0  # paused: whether any is
    return (name, *sums)  # type: ignore[return-value]


class Reading:
    """Every number /metrics shows, read on the loop thread (plain values, no Prometheus
    objects: building and encoding those costs ~10 us per sample, so it runs in a worker
    thread from this reading, never on the loop). Build it with ``await Reading.take(...)``:
    the tubes are read ``TUBE_SLICE`` at a time with the loop served in between."""

    def __init__(self, server: Server, ins: Instruments, storage: TimedStorage | None) -> None:
        eng = server.engine
        self.tubes: list[TubeRow] = []
        self.tube_count = len(eng.tube_order)
        counts = eng.command_counts()
        self.commands = [(k[4:], counts[k]) for k in CMD_KEYS]
        self.timeouts = eng.job_timeouts
        self.body_bytes = eng.body_bytes
        self.connections = len(server.conns)
        self.accepted = eng.total_connections
        self.refused = server.refused_connections
        self.disk_full = server.refused_for_space
        self.uptime = server.clock() - server.started
        self.hists = {name: (b.cumulative(), b.sum) for name, b in (
            ("wait", ins.wait), ("run", ins.run), ("fsync", ins.fsync),
            ("fsync_records", ins.fsync_records), ("snapshot", ins.snapshot),
            ("step", ins.maintain_step))}
        self.storage = storage  # its disk scan runs in the thread too (file-system calls)
        self.records_written = storage.stats().get("binlog-records-written", 0) if storage else 0
        self.standby = server.role.standby
        self.epoch = server.role.state.epoch
        self.standby_lags = server.replicas.lags() if server.replicas is not None else []
        self.replication = server.replication.stats()
        self.primary_lag = self.replication.get("primary-lag")
        self.refused_replication = server.replicas.refused if server.replicas is not None else 0
        self.sync_waiting = server.replicas is not None and server.replicas.waiting() is not None
        self.cluster = server.cluster() if server.cluster is not None else None
        m = server.memory
        self.memory = (m.limit, m.used, len(m.held), m.closed)
        self.handshakes = server.conns.handshakes

    @classmethod
    async def take(cls, server: Server, ins: Instruments, storage: TimedStorage | None,
                   top: int = TOP_TUBES) -> Reading:
        r = cls(server, ins, storage)
        now_us = round(server.clock() * US)
        tubes = list(server.engine.tube_order)  # a C copy; the tubes are read from it
        best: list[TubeRow] = []
        rest: list[TubeRow] = []
        internal: list[TubeRow] = []
        for i in range(0, len(tubes), TUBE_SLICE):
            if i:
                await asyncio.sleep(0)
            rows = [(t.name, len(t.ready), t.reserved, len(t.delayed), len(t.buried),
                     len(t.waiting), 1 if t.is_paused(now_us) else 0, t.total_jobs)
                    for t in tubes[i:i + TUBE_SLICE]]
            internal.extend(row for row in rows if is_internal(row[0]))
            rows = [row for row in rows if not is_internal(row[0])]
            merged = best + rows
            best = heapq.nlargest(top, merged, key=_jobs)
            if len(merged) > len(best):
                kept = {row[0] for row in best}
                rest = [_summed(OTHER_TUBES, rest + [row for row in merged if row[0] not in kept])]
        r.tubes = best + rest
        if internal:
            r.tubes.append(_summed(INTERNAL_TUBES, internal))
        return r


def _jobs(row: TubeRow) -> tuple[int, int]:
    return row[1] + row[2] + row[3] + row[4], row[7]


def families(r: Reading) -> Iterator[Metric]:
    """The Prometheus metric families of one reading (runs off the loop thread)."""
    tube_jobs = GaugeMetricFamily("stalkd_tube_jobs", "Jobs in a tube, by state",
                                  labels=["tube", "state"])
    waiting = GaugeMetricFamily("stalkd_tube_waiting_connections",
                                "Connections blocked in reserve watching the tube", labels=["tube"])
    paused = GaugeMetricFamily("stalkd_tube_paused", "1 while the tube is paused", labels=["tube"])
    put = CounterMetricFamily("stalkd_tube_jobs_put", "Jobs ever put into the tube", labels=["tube"])
    for name, ready, reserved, delayed, buried, waits, pause, total in r.tubes:
        tube_jobs.add_metric([name, "ready"], ready)
        tube_jobs.add_metric([name, "reserved"], reserved)
        tube_jobs.add_metric([name, "delayed"], delayed)
        tube_jobs.add_metric([name, "buried"], buried)
        waiting.add_metric([name], waits)
        paused.add_metric([name], pause)
        put.add_metric([name], total)
    yield from (tube_jobs, waiting, paused, put)
    cmds = CounterMetricFamily("stalkd_commands", "Protocol commands run, by command",
                               labels=["command"])
    for k, v in r.commands:
        cmds.add_metric([k], v)
    yield cmds
    yield CounterMetricFamily("stalkd_job_timeouts", "Reservations whose TTR ran out", value=r.timeouts)
    yield GaugeMetricFamily("stalkd_job_body_bytes", "Bytes of live job bodies", value=r.body_bytes)
    yield GaugeMetricFamily("stalkd_tubes", "Tubes (each shown above by name, or summed)",
                            value=r.tube_count)
    yield GaugeMetricFamily("stalkd_connections", "Open client connections", value=r.connections)
    yield GaugeMetricFamily("stalkd_tls_handshakes", "TLS handshakes in progress", value=r.handshakes)
    limit, used, held, closed = r.memory
    yield GaugeMetricFamily("stalkd_memory_budget_bytes", "--max-memory", value=limit)
    yield GaugeMetricFamily("stalkd_memory_used_bytes",
                            "Unparsed input and unsent replies connections hold", value=used)
    yield GaugeMetricFamily("stalkd_memory_paused_connections",
                            "Connections the memory budget stopped reading", value=held)
    yield CounterMetricFamily("stalkd_memory_closed_connections",
                              "Connections closed for holding the most past --max-memory", value=closed)
    yield CounterMetricFamily("stalkd_connections_accepted", "Connections accepted", value=r.accepted)
    yield CounterMetricFamily("stalkd_connections_refused",
                              "Connections refused at --max-connections", value=r.refused)
    yield CounterMetricFamily("stalkd_disk_full_refusals",
                              "Commands refused because the WAL had no room", value=r.disk_full)
    h = r.hists
    yield _hist("stalkd_job_wait_seconds", "Put to reserve (each reservation)", h["wait"])
    yield _hist("stalkd_job_run_seconds", "Reserve to delete", h["run"])
    if r.storage is not None:
        yield _hist("stalkd_fsync_duration_seconds", "WAL fsync latency", h["fsync"])
        yield _hist("stalkd_fsync_records", "WAL records made durable per fsync", h["fsync_records"])
        yield _hist("stalkd_snapshot_duration_seconds", "A snapshot, first step to last", h["snapshot"])
        yield _hist("stalkd_compaction_step_seconds", "Loop time of one snapshot/compaction step",
                    h["step"])
        disk = r.storage.disk_usage()
        yield GaugeMetricFamily("stalkd_wal_bytes", "WAL segment bytes on disk", value=disk["wal"])
        yield GaugeMetricFamily("stalkd_snapshot_bytes", "Snapshot bytes on disk", value=disk["snapshot"])
        yield CounterMetricFamily("stalkd_wal_records_written", "WAL records written",
                                  value=r.records_written)
    yield GaugeMetricFamily("stalkd_up_seconds", "Seconds since the server started", value=r.uptime)
    yield GaugeMetricFamily("stalkd_standby", "1 on a standby, 0 on a primary", value=int(r.standby))
    yield GaugeMetricFamily("stalkd_epoch", "Replication epoch (promotions so far)", value=r.epoch)
    lag = GaugeMetricFamily("stalkd_standby_lag_records",
                            "Records a connected standby has not acknowledged", labels=["standby"])
    lag_s = GaugeMetricFamily("stalkd_standby_lag_seconds",
                              "Seconds since a connected standby last held the whole log", labels=["standby"])
    for peer, n, sec in r.standby_lags:
        lag.add_metric([peer], n)
        lag_s.add_metric([peer], sec)
    yield lag
    yield lag_s
    yield CounterMetricFamily("stalkd_replication_refused", "Replication attempts refused (not authenticated)",
                              value=r.refused_replication)
    yield GaugeMetricFamily("stalkd_sync_waiting", "1 while replies wait for --sync-standbys standbys",
                            value=int(r.sync_waiting))
    yield GaugeMetricFamily("stalkd_fenced", "1 on a former primary that learnt of a newer epoch",
                            value=int("fenced-by-epoch" in r.replication))
    if r.primary_lag is not None:
        yield GaugeMetricFamily("stalkd_primary_lag_records",
                                "Records the primary has that this standby has not", value=r.primary_lag)
        yield GaugeMetricFamily("stalkd_primary_lag_seconds",
                                "Seconds since this standby last held the primary's whole log",
                                value=r.replication.get("primary-lag-seconds", 0.0))
        yield GaugeMetricFamily("stalkd_standby_in_sync", "1 while this standby holds what its primary sends",
                                value=int(bool(r.replication.get("in-sync"))))
    if r.cluster is not None:  # --ha
        lease = int(r.cluster["lease-left-ms"])
        yield GaugeMetricFamily("stalkd_lease_seconds_left",
                                "Seconds before this node must stop acknowledging as primary "
                                "(-1: it does not hold the leader lease)",
                                value=lease / 1000 if lease >= 0 else -1)
        leader = InfoMetricFamily("stalkd_cluster", "The cluster's leader as this node sees it")
        leader.add_metric([], {"node": str(r.cluster["cluster-node"]),
                               "leader": str(r.cluster["cluster-leader"]),
                               "epoch": str(r.cluster["cluster-epoch"])})
        yield leader


class _Frozen:
    def __init__(self, reading: Reading) -> None:
        self.reading = reading

    def collect(self) -> Iterator[Metric]:
        return families(self.reading)

    def describe(self) -> Iterable[Metric]:
        return []


def exposition(reading: Reading) -> bytes:
    """The Prometheus text of one reading (call it in a worker thread)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Frozen(reading))
    return generate_latest(reg)
