"""AdminOps against an in-process server: chunking, selection, and the views it reads."""

from __future__ import annotations

import asyncio

from stalkd.admin import views
from stalkd.admin.ops import CHUNK, AdminOps
from stalkd.engine import Engine
from stalkd.engine import commands as C
from stalkd.engine.model import JobState
from stalkd.server.app import Server
from stalkd.server.config import Config


def _server(jobs: int, *, bury: int = 0) -> Server:
    """An in-memory server whose tube ``t`` holds ``jobs`` jobs, the first ``bury`` buried."""
    eng = Engine()
    eng.connect(1, 0.0)
    eng.apply(1, C.Use("t"), 0.0)
    eng.apply(1, C.Watch("t"), 0.0)
    for i in range(jobs):
        eng.apply(1, C.Put(i % 7, 0, 60, b"x%d" % i), 0.0)
    for _ in range(bury):
        got = eng.apply(1, C.Reserve(), 0.0).reply
        assert isinstance(got, C.JobReply)
        eng.apply(1, C.Bury(got.id, 0), 0.0)
    eng.disconnect(1, 0.0)
    return Server(Config(), eng, clock=lambda: 1.0)


def test_bulk_delete_yields_to_other_clients_between_chunks() -> None:
    # Given 4 chunks' worth of buried jobs
    n = 4 * CHUNK
    srv = _server(n, bury=n)
    ops = AdminOps(srv)
    seen: list[int] = []

    async def other_client() -> None:
        # Runs whenever the loop gets a turn: records how many jobs were left then
        while True:
            seen.append(len(srv.engine.jobs))
            if not srv.engine.jobs:
                return
            await asyncio.sleep(0)

    async def main() -> dict[str, object]:
        other = asyncio.create_task(other_client())
        out = await ops.delete(ops.select(None, "t", "buried"))
        await other
        return out

    # When they are deleted in bulk
    out = asyncio.run(main())
    # Then all are gone, and another task ran while some were still there (between chunks)
    assert out["outcomes"] == {"deleted": n}
    assert not srv.engine.jobs
    assert any(0 < k < n for k in seen), seen[:10]


def test_select_by_state_and_by_ids() -> None:
    srv = _server(10, bury=3)
    ops = AdminOps(srv)
    assert ops.select(None, "t", "buried") == sorted(
        j.id for j in srv.engine.jobs.values() if j.state is JobState.BURIED)
    assert len(ops.select(None, "t", "ready")) == 7
    assert len(ops.select(None, "t", None)) == 10
    assert ops.select([3, 1], None, None) == [3, 1]
    assert ops.select(None, "nope", "ready") == []


def test_kick_by_ids_kicks_only_buried_or_delayed() -> None:
    srv = _server(5, bury=2)
    ops = AdminOps(srv)
    buried = ops.select(None, "t", "buried")
    ready = ops.select(None, "t", "ready")
    out = asyncio.run(ops.kick([*buried, ready[0], 999]))
    assert out["outcomes"] == {"kicked": 2, "skipped_ready": 1, "not_found": 1}
    assert all(srv.engine.jobs[j].state is JobState.READY for j in buried)


def test_jobs_page_walks_every_state_without_repeats() -> None:
    srv = _server(25, bury=5)
    seen: list[int] = []
    after = 0
    while True:
        page, after_next = views.jobs_page(srv.engine, "t", None, after=after, limit=4)
        seen += [j.id for j in page]
        if after_next is None:
            break
        after = after_next
    assert seen == sorted(srv.engine.jobs)


def test_dead_letters_parsed_once_per_change_of_the_failed_tube() -> None:
    from stalkd.worker.context import DeadLetter

    srv = _server(1)
    ops = AdminOps(srv)
    eng = srv.engine
    eng.connect(2, 0.0)
    eng.apply(2, C.Use("stalkd.failed"), 0.0)
    rec = DeadLetter(job_id=1, tube="t", task="f", attempts=1, error="E", traceback="tb",
                     failed_at=0.0, body=b"")
    eng.apply(2, C.Put(0, 0, 60, rec.to_json()), 0.0)
    eng.apply(2, C.Put(0, 0, 60, b"not json"), 0.0)  # a foreign job: ignored
    first = ops.dead_letters()
    assert first[1]["error"] == "E"
    assert ops.dead_letters() is first  # nothing changed: the cached map
    newer = DeadLetter(job_id=1, tube="t", task="f", attempts=2, error="E2", traceback="tb",
                       failed_at=1.0, body=b"")
    eng.apply(2, C.Put(0, 0, 60, newer.to_json()), 0.0)
    assert ops.dead_letters()[1]["error"] == "E2"  # the newest record per job wins
