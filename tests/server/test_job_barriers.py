"""Job barriers (barriers.py): a job is shown only once its own records are durable, whatever
the batches in between, and the map behind them stays bounded while durability lags (a gate
that holds every batch back) and while it keeps up (a lone writer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from stalkd.engine.model import Op, Record
from stalkd.server.barriers import JOB_PRUNE_AT, Barriers


class Disk:
    """A storage that keeps what it is given (``Barriers`` only writes and syncs)."""

    persistent = True

    def write(self, records: Sequence[Record]) -> None:
        pass

    def sync(self) -> None:
        pass


class Loop:
    """Callbacks run when the test says (``run``)."""

    def __init__(self) -> None:
        self.soon: list[Callable[[], object]] = []

    def call_soon(self, callback: Callable[[], object]) -> None:
        self.soon.append(callback)

    def run(self) -> None:
        todo, self.soon = self.soon, []
        for cb in todo:
            cb()


class Gate:
    """The standbys' acknowledgements, moved by the test."""

    replicated = 0

    def note(self, batch: int, end_offset: int) -> None:
        pass


def _barriers() -> tuple[Barriers, Loop]:
    loop = Loop()
    b = Barriers(Disk(), group_commit=False, loop=lambda: loop, on_fatal=print)  # type: ignore[arg-type]
    return b, loop


def _put(b: Barriers, loop: Loop, job_id: int) -> int:
    """One loop iteration with one put of ``job_id``: its batch, written."""
    barrier = b.add(None, [Record(Op.PUT, job_id, 0, job_id, "t", body=b"x")])
    loop.run()
    return barrier


def test_a_job_waits_for_its_own_batch_however_many_follow_it_behind_a_gate() -> None:
    b, loop = _barriers()
    gate = Gate()
    b.gate = gate  # type: ignore[assignment]
    n = 3 * JOB_PRUNE_AT
    batches = {job: _put(b, loop, job) for job in range(1, n + 1)}
    assert b.durable == 0 and b.written == n
    # Nothing is durable past the gate: every job waits for its own batch
    assert all(b.job_barrier(job) == batch for job, batch in batches.items())
    # When the standbys hold the first half, those jobs show at once, the rest still wait
    gate.replicated = n // 2
    b.replicated()
    assert b.durable == n // 2
    assert all(b.job_barrier(job) == (batch if batch > n // 2 else 0) for job, batch in batches.items())
    # A later record of a job moves its barrier to the later batch
    again = _put(b, loop, 1)
    assert b.job_barrier(1) == again > n // 2
    gate.replicated = b.written
    b.replicated()
    assert all(b.job_barrier(job) == 0 for job in batches)


def test_the_job_map_stays_bounded_while_batches_become_durable() -> None:
    b, loop = _barriers()
    for job in range(1, 5 * JOB_PRUNE_AT):
        _put(b, loop, job)
        assert b.job_barrier(job) == 0  # never: durable once written
    assert len(b._job_batch) <= JOB_PRUNE_AT + 1


def test_the_job_map_stays_bounded_behind_a_gate_that_keeps_up_late() -> None:
    b, loop = _barriers()
    gate = Gate()
    b.gate = gate  # type: ignore[assignment]
    # The standbys are always 10 batches behind
    for job in range(1, 10 * JOB_PRUNE_AT):
        barrier = _put(b, loop, job)
        gate.replicated = max(0, barrier - 10)
        b.replicated()
        assert b.job_barrier(job) == barrier
        if job > 10:
            assert b.job_barrier(job - 10) == 0
    assert len(b._job_batch) <= 2 * JOB_PRUNE_AT + 1
