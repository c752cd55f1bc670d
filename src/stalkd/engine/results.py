"""Job results kept by the server for a time-to-live (stalkd's ``result-put`` / ``result-get``).

A result is opaque bytes stored under a job id until an absolute deadline. It outlives its job
(that is its point: a producer asks for it after the worker deleted the job), is durable as one
RESULT record (``model.py``), and is rewritten to the WAL when a snapshot begins so compaction
never drops a live one (``compaction.py``). Expiry needs no record: the deadline is in the
RESULT record, so recovery drops what expired while the server was down.

Ensures: ``result-get`` never shows a result at or after its deadline (checked against the
step's ``now``, whether or not the expiry timer has run); memory of expired results is given
back by ``tick`` and by each ``result-put``; ``result_bytes`` is the sum of live result bodies.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator

from stalkd.engine.model import Op, Record
from stalkd.engine.objects import US, ConnState
from stalkd.engine.state import STEP_JOBS, EngineState, Outcome
from stalkd.protocol import commands as C

__all__ = ["Results"]

_NOT_FOUND = C.Reply("NOT_FOUND")
_STORED = C.Reply("STORED")


class Results(EngineState):
    """Results by job id and their expiry (mixed into ``Engine``)."""

    def __init__(self, max_job_size: int = 65535, records: bool = True, step_jobs: int = STEP_JOBS) -> None:
        super().__init__(max_job_size, records, step_jobs)
        self.results: dict[int, tuple[int, bytes]] = {}  # job id -> (deadline_us, body)
        self.result_bytes = 0
        # (deadline_us, job id); an entry whose deadline no longer matches ``results`` is stale
        self._result_heap: list[tuple[int, int]] = []

    def tick(self, now: float) -> Outcome:
        out: Outcome = super().tick(now)  # type: ignore[misc]
        self.expire_results(self._now)
        return out

    def expire_results(self, now_us: int) -> int:
        """Forget every result due at or before ``now_us``; how many were forgotten."""
        heap, results = self._result_heap, self.results
        n = 0
        while heap and heap[0][0] <= now_us:
            deadline, jid = heapq.heappop(heap)
            held = results.get(jid)
            if held is not None and held[0] == deadline:
                del results[jid]
                self.result_bytes -= len(held[1])
                n += 1
        return n

    def store_result(self, job_id: int, deadline_us: int, body: bytes) -> None:
        """Keep ``body`` for ``job_id`` until ``deadline_us`` (0: forget it). Also recovery's."""
        old = self.results.pop(job_id, None)
        if old is not None:
            self.result_bytes -= len(old[1])
        if deadline_us:
            self.results[job_id] = (deadline_us, body)
            self.result_bytes += len(body)
            heapq.heappush(self._result_heap, (deadline_us, job_id))

    def result_records(self) -> list[Record]:
        """Every live result as a RESULT record with a fresh seq (compaction rewrites them
        after a snapshot's start, so the WAL it keeps still holds them)."""
        out = []
        for jid in sorted(self.results):
            deadline, body = self.results[jid]
            self.seq += 1
            out.append(Record(Op.RESULT, self.seq, self._now, jid, deadline_us=deadline, body=body))
        return out

    def iter_results(self) -> Iterator[tuple[int, int, bytes]]:
        """(job id, deadline_us, body) of every result held, expired or not."""
        for jid, (deadline, body) in self.results.items():
            yield jid, deadline, body

    # --- commands -------------------------------------------------------------------------------

    def _result_put(self, c: ConnState, cmd: C.ResultPut) -> C.AnyReply:
        if cmd.error is not None:
            return C.Reply(cmd.error)
        if len(cmd.body) > self.max_job_size:
            return C.Reply("JOB_TOO_BIG")
        if cmd.id >= self.next_id or cmd.id == 0:
            return _NOT_FOUND  # no such job was ever put
        now = self._now
        self.expire_results(now)
        deadline = now + cmd.ttl * US if cmd.ttl else 0
        self.store_result(cmd.id, deadline, cmd.body)
        self._rec_fields(Op.RESULT, cmd.id, deadline_us=deadline, body=cmd.body)
        return _STORED

    def _result_get(self, c: ConnState, cmd: C.ResultGet) -> C.AnyReply:
        held = self.results.get(cmd.id)
        if held is None or held[0] <= self._now:
            return _NOT_FOUND
        return C.JobReply("FOUND", cmd.id, held[1])
