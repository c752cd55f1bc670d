"""A server data directory as a whole (``DIR/wal`` + ``DIR/snapshots``): the checks recovery
runs on the pair, the explicit repair, and what ``stalkd log`` reports of a data directory.

``snapshot.snapshot_gap`` is the one statement of "the WAL can give back what the snapshot
needs": ``Wal.recover`` raises on it and ``stalkd log inspect`` reports it (``stalkd.node.logcmd``
plugs these checks into the log layer's command, so the log layer never imports the engine).

Ensures: ``check`` is read-only; ``repair`` changes the directory only through a log repair
(bytes quarantined in ``wal/dropped/``, never deleted) and, when the log ends before the newest
snapshot's start, a fresh snapshot taken at the log's end (the same jobs, nothing replayed twice).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

from stalkd.engine.model import Op, RecordFormatError, decode
from stalkd.log.layout import DATA_LOG_DIR
from stalkd.persist.snapshot import (
    SnapshotError,
    SnapshotHeader,
    list_snapshots,
    read_header,
    read_snapshot,
    snapshot_gap,
)
from stalkd.persist.wal import Wal

__all__ = ["SNAP_DIR", "check", "describe_records", "is_data_log", "job_id_ranges", "repair"]

SNAP_DIR = "snapshots"


def is_data_log(log_dir: str) -> bool:
    """Whether ``log_dir`` is the log of a server data directory (``DATA/wal`` beside ``DATA/snapshots``)."""
    return os.path.basename(os.path.normpath(log_dir)) == DATA_LOG_DIR and os.path.isdir(
        os.path.join(os.path.dirname(os.path.normpath(log_dir)), SNAP_DIR)
    )


def check(log_dir: str, next_offset: int, oldest: int, verify: bool) -> list[dict[str, Any]]:
    """Problems of a data directory's snapshots, as ``stalkd log inspect`` rows: every snapshot
    must be complete (``verify``: every block's CRC too), and the WAL must serve the newest."""
    snap_dir = os.path.join(os.path.dirname(os.path.normpath(log_dir)), SNAP_DIR)
    out: list[dict[str, Any]] = []
    newest: SnapshotHeader | None = None
    for path in list_snapshots(snap_dir):
        try:
            h = read_header(path)
            if verify:
                read_snapshot(path)
        except SnapshotError as e:
            out.append({"path": path, "position": 0, "offset": None, "error": f"snapshot: {e}"})
            continue
        newest = newest or h
    gap = snapshot_gap(newest, oldest, next_offset, log_dir)
    if gap is not None:
        out.append({"path": newest.path if newest else log_dir, "position": 0,
                    "offset": newest.start_offset if newest else oldest, "error": gap})  # fmt: skip
    return out


def describe_records(records: Iterable[tuple[int, bytes]]) -> list[str]:
    """One line per job named in salvaged WAL records: its id and what the records say of it.

    >>> from stalkd.engine.model import Record, encode
    >>> describe_records([(7, encode(Record(Op.PUT, 1, 0, 42, "mail", body=b"x")))])
    ['job 42: put (tube mail, 1 bytes) at offset 7']
    """
    jobs: dict[int, list[str]] = {}
    for offset, payload in records:
        try:
            r = decode(payload)
        except RecordFormatError:
            continue
        if r.job_id == 0:
            continue
        what = r.op.name.lower()
        if r.op in (Op.PUT, Op.JOB):
            what += f" (tube {r.tube}, {len(r.body)} bytes)"
        jobs.setdefault(r.job_id, []).append(f"{what} at offset {offset}")
    return [f"job {jid}: {', '.join(v)}" for jid, v in sorted(jobs.items())]


def job_id_ranges(records: Iterable[tuple[int, bytes]]) -> str:
    """The job ids named in salvaged WAL records, as compact ranges (for one log line).

    >>> from stalkd.engine.model import Record, encode
    >>> job_id_ranges([(o, encode(Record(Op.PUT, 1, 0, j, "t"))) for o, j in enumerate([3, 4, 5, 9])])
    '3-5, 9'
    """
    ids = set()
    for _, payload in records:
        try:
            jid = decode(payload).job_id
        except RecordFormatError:
            continue
        if jid:
            ids.add(jid)
    out: list[str] = []
    for jid in sorted(ids):
        if out and jid - 1 in ids:
            lo = out[-1].split("-")[0]
            out[-1] = f"{lo}-{jid}"
        else:
            out.append(str(jid))
    return ", ".join(out)


def repair(log_dir: str, segment_size: int) -> tuple[list[str], list[tuple[int, bytes]]]:
    """Repair a data directory: cut its log at the damage (``Wal.open(repair=True)``), rebuild
    the jobs, and begin the log again at the newest snapshot if it ends before it. Returns the report's
    lines and the records still readable in what was dropped and not already in the snapshot
    (those before its start offset came back with it: a line counts them instead)."""

    data = os.path.dirname(os.path.normpath(log_dir))
    with Wal.open(data, durability="always", segment_size=segment_size, repair=True) as wal:
        rep = wal.log.repair_report  # the cut made by the open (recover may begin the log again)
        _engine, info = wal.recover(time.time())
        lines = list(wal.repair_notes)
        dropped = list(rep.salvaged) if rep else []
        lines.append(f"{data}: {info.jobs} jobs now recoverable ({info.snapshot or 'no snapshot'} "
                     f"+ {info.records_replayed} WAL records)")  # fmt: skip
    covered = [r for r in dropped if r[0] < info.snapshot_start]
    if covered:
        lines.append(f"{len(covered)} records in the dropped bytes (offsets {covered[0][0]}.."
                     f"{covered[-1][0]}) precede the snapshot's start (offset {info.snapshot_start}): "
                     "what they did came back with the snapshot, nothing of them is lost")
    return lines, [r for r in dropped if r[0] >= info.snapshot_start]
