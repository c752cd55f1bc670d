"""Rebuilding an engine from a WAL directory: the newest complete snapshot, then every later record.

``Wal.recover`` calls ``rebuild`` and then takes over the result (its space budget, the snapshot
reserve, a log begun again at the snapshot after a repair). What is decided here: which snapshot serves (an
unreadable one is skipped for an older one and named, a ``.tmp`` left by a crash is deleted),
whether the log still reaches it (a gap is refused, or with ``repair`` crossed by continuing from
the snapshot), and the replay of the tail after it.
"""

from __future__ import annotations

import gc
import os
import time

from stalkd.engine.engine import Engine
from stalkd.engine.replay import finish
from stalkd.log import Log
from stalkd.log.repairs import DROPPED_DIR
from stalkd.persist.compaction import WalError
from stalkd.persist.snapshot import (
    SnapshotError,
    SnapshotHeader,
    list_snapshots,
    load_into,
    read_header,
    snapshot_gap,
)
from stalkd.persist.tail import TailError, replay_tail
from stalkd.values import Value

__all__ = ["Rebuilt", "RecoveryInfo", "rebuild"]


class RecoveryInfo(Value):
    """What ``recover`` did: ``jobs`` live jobs; ``records_replayed`` WAL records applied after the
    snapshot (``snapshot`` path or None); ``discarded`` incomplete snapshot files removed."""

    __slots__ = ("jobs", "snapshot", "snapshot_jobs", "records_replayed", "seconds", "discarded",
                 "snapshot_seconds", "snapshot_start")  # fmt: skip
    jobs: int
    snapshot: str | None
    snapshot_jobs: int
    records_replayed: int
    seconds: float
    discarded: tuple[str, ...]
    snapshot_seconds: float  # part of ``seconds`` spent loading the snapshot
    snapshot_start: int  # the log offset the snapshot covers up to (0: no snapshot)

    def __init__(self, jobs: int, snapshot: str | None, snapshot_jobs: int, records_replayed: int, seconds: float,
                 discarded: tuple[str, ...], snapshot_seconds: float = 0.0, snapshot_start: int = 0) -> None:  # fmt: skip
        self.jobs = jobs
        self.snapshot = snapshot
        self.snapshot_jobs = snapshot_jobs
        self.records_replayed = records_replayed
        self.seconds = seconds
        self.discarded = discarded
        self.snapshot_seconds = snapshot_seconds
        self.snapshot_start = snapshot_start


class Rebuilt(Value):
    """``rebuild``'s result; ``restart_at``: the log no longer reaches the snapshot (a repair), so
    it must begin again, empty, at the snapshot's offset; ``note``: what the repair did, for the
    operator."""

    __slots__ = ("engine", "header", "replayed", "snapshot_seconds", "discarded", "restart_at", "note")
    engine: Engine
    header: SnapshotHeader | None
    replayed: int
    snapshot_seconds: float
    discarded: tuple[str, ...]
    restart_at: int | None
    note: str | None

    def __init__(self, engine: Engine, header: SnapshotHeader | None, replayed: int, snapshot_seconds: float,
                 discarded: tuple[str, ...], restart_at: int | None, note: str | None) -> None:  # fmt: skip
        self.engine = engine
        self.header = header
        self.replayed = replayed
        self.snapshot_seconds = snapshot_seconds
        self.discarded = discarded
        self.restart_at = restart_at
        self.note = note


def rebuild(directory: str, snap_dir: str, log: Log, now: float, *, max_job_size: int,
            into: Engine | None, repair: bool) -> Rebuilt:  # fmt: skip
    """The engine the directory holds (``into``: an empty engine to rebuild, rather than a new one)."""
    discarded = []
    for name in os.listdir(snap_dir):
        if name.endswith(".tmp"):
            os.unlink(os.path.join(snap_dir, name))
            discarded.append(name)
    header: SnapshotHeader | None = None
    for path in list_snapshots(snap_dir):
        try:
            header = read_header(path)
            break
        except SnapshotError:
            discarded.append(path)  # kept on disk for a human; an older snapshot may serve
    bounds = log.segment_bounds()
    oldest = bounds[0][0] if bounds else 0
    need = header.start_offset if header else 0
    gap = snapshot_gap(header, oldest, log.next_offset, log.path)
    note = None
    if gap is not None and oldest > need:
        raise WalError(f"{gap}; restore the missing snapshot or segments (see discarded: "
                       + ", ".join(discarded) + ")")  # fmt: skip
    if gap is not None:
        if not repair:
            raise WalError(f"{gap}. To continue from the snapshot (the missing records are lost), run: "
                           f"stalkd log repair {directory}   (or start the server with --repair)")  # fmt: skip
        note = (f"{gap}; continuing from the snapshot: the log begins again at offset {need}, its "
                f"segments before it moved to {os.path.join(log.path, DROPPED_DIR)}")  # fmt: skip
    # A million new objects would trigger full collections over a heap that only grows here;
    # the collector stays off for the rebuild, then everything recovered is frozen out of
    # its sight (it lives until deleted), so later collections do not walk it either.
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        e, replayed, t_snap = _replay(log, header, need, now, max_job_size, into)
        gc.freeze()
    finally:
        if gc_was_on:
            gc.enable()
    return Rebuilt(e, header, replayed, t_snap, tuple(discarded), need if gap is not None else None, note)


def _replay(
    log: Log, header: SnapshotHeader | None, need: int, now: float, max_job_size: int, into: Engine | None
) -> tuple[Engine, int, float]:
    e = Engine(max_job_size=max_job_size) if into is None else into
    fresh: dict[int, int] = {}
    start_seq = 0
    t_snap = time.perf_counter()
    if header is not None:
        try:
            fresh = load_into(e, header)
        except SnapshotError as exc:
            raise WalError(f"{exc}; move the file away to fall back to an older snapshot") from exc
        start_seq = header.start_seq
        e.seq = max(e.seq, header.end_seq)
        e.next_id = max(e.next_id, header.next_id)
    t_snap = time.perf_counter() - t_snap
    try:
        replayed = replay_tail(e, log.read_columns(need), start_seq, fresh)
    except TailError as exc:
        raise WalError(f"{log.path}: {exc}") from exc
    finish(e)
    e.tick(now)
    while e.behind():  # nobody to serve yet: every job due at start-up moves now
        e.tick(now)
    return e, replayed, t_snap
