"""Dead letters that work on plain beanstalkd: the job is buried in its own tube, and a record
of why (error, traceback, attempts, original body) is put as a JSON job into the app's failed
tube (``stalkd.failed`` by default). beanstalkd cannot annotate a buried job, so the record lives
beside it; nobody watches the failed tube, so records stay ready until retried or purged.

* ``stalkd failed`` lists records: it reserves every record on one connection and then closes it,
  which puts them all back unchanged (counters aside), in the same order. A record whose job is
  no longer buried (deleted or kicked by hand) is not listed; ``stalkd retry`` removes it.
* ``stalkd retry`` kicks the buried original (``kick-job``) and deletes its record. The job then
  gets one more attempt, numbered as one (the attempt is ``releases`` + ``buries`` + 1); with
  ``fresh=True`` a copy is put with fresh attempts and the buried original deleted instead.

Order of writes when dead-lettering: record first, then bury. A crash in between leaves a
record for a job that comes back after its TTR, fails its last attempt again and writes a second
record: ``list_failed`` shows only the newest record per job id.
"""

from __future__ import annotations

from dataclasses import dataclass

from stalkd.worker.actions import DeadLetter
from stalkd.worker.ops import ServerOps

__all__ = ["FailedJob", "RetryResult", "list_failed", "retry_failed"]


@dataclass(frozen=True)
class FailedJob:
    """A record as found in the failed tube: its own job id there, and the record."""

    record_id: int
    record: DeadLetter


def list_failed(address: str, failed_tube: str, *, timeout: float = 10.0,
                limit: int = 10_000) -> list[FailedJob]:
    """Every dead-letter record in ``failed_tube`` (newest per original job) whose job is
    still buried, oldest first."""
    conn = ServerOps(address, timeout=timeout)
    try:
        failed = _collect(conn, failed_tube, limit)[0]
        return [f for f in failed if _state(conn, f.record.job_id) == "buried"]
    finally:
        conn.close()  # releases every record we reserved


def _state(conn: ServerOps, job_id: int) -> str | None:
    info = conn.stats_job(job_id)
    return None if info is None else str(info.get("state"))


def _collect(conn: ServerOps, failed_tube: str, limit: int) -> tuple[list[FailedJob], list[int]]:
    """Reserve every record on ``conn`` (they return to ready when it closes); the newest
    record per original job, and the ids of older duplicates."""
    conn.watch_only([failed_tube])
    latest: dict[int, FailedJob] = {}
    superseded: list[int] = []
    for _ in range(limit):
        got = conn.reserve(timeout=0)
        if got is None:
            break
        rid, body = got
        try:
            rec = DeadLetter.from_json(body)
        except ValueError:
            continue  # a foreign job in the failed tube: leave it alone
        old = latest.get(rec.job_id)
        if old is not None:
            superseded.append(old.record_id)
        latest[rec.job_id] = FailedJob(rid, rec)
    return sorted(latest.values(), key=lambda f: f.record_id), superseded


@dataclass(frozen=True)
class RetryResult:
    """What ``retry_failed`` did for one dead-lettered job."""

    job_id: int
    outcome: str   # "kicked", "requeued as <id>", "gone" (original no longer exists)


def retry_failed(address: str, failed_tube: str, *, job_ids: set[int] | None = None,
                 fresh: bool = False, timeout: float = 10.0) -> list[RetryResult]:
    """Retry dead-lettered jobs (all, or those whose original id is in ``job_ids``)."""
    conn = ServerOps(address, timeout=timeout)
    out: list[RetryResult] = []
    try:
        failed, superseded = _collect(conn, failed_tube, 10_000)
        for f in failed:
            rec = f.record
            if job_ids is not None and rec.job_id not in job_ids:
                continue
            info = conn.stats_job(rec.job_id)
            if info is None or info.get("state") != "buried":
                # Deleted, or already kicked by hand: the record is stale either way.
                out.append(RetryResult(rec.job_id, "gone" if info is None else f"already {info.get('state')}"))
                conn.delete(f.record_id)
                continue
            if fresh:
                new_id = conn.put(rec.tube, rec.body, int(str(info["pri"])), 0,
                                  int(str(info["ttr"])))
                conn.delete(rec.job_id)
                out.append(RetryResult(rec.job_id, f"requeued as {new_id}"))
            else:
                conn.kick_job(rec.job_id)
                out.append(RetryResult(rec.job_id, "kicked"))
            conn.delete(f.record_id)
        for rid in superseded:
            conn.delete(rid)
    finally:
        conn.close()
    return out
