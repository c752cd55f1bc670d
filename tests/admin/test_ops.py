"""AdminOps against an in-process server: chunking, selection, and the views it reads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from stalkd.admin.ops import CHUNK, AdminOps
from stalkd.engine import Engine
from stalkd.engine.model import JobState
from stalkd.protocol import commands as C
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
        out = await ops.delete(await ops.select(None, "t", "buried"))
        await other
        return out

    # When they are deleted in bulk
    out = asyncio.run(main())
    # Then all are gone, and another task ran while some were still there (between chunks)
    assert out["outcomes"] == {"deleted": n}
    assert not srv.engine.jobs
    assert any(0 < k < n for k in seen), seen[:10]


def test_a_bulk_call_lets_its_selection_go_as_it_works_through_it() -> None:
    # Given a selection of 4 chunks' worth of jobs, to delete and then (as many again) to move
    n = 4 * CHUNK
    srv = _server(2 * n)
    ops = AdminOps(srv)
    held: list[int] = []  # how many ids the call still held, at each loop turn

    async def main(call: Callable[[list[int]], Coroutine[Any, Any, dict[str, Any]]]) -> tuple[dict[str, Any], list[int]]:
        ids = (await ops.select(None, "t", "ready"))[:n]
        chosen = list(ids)
        task = asyncio.create_task(call(ids))
        while not task.done():
            held.append(len(ids))
            await asyncio.sleep(0)
        held.append(len(ids))
        return task.result(), chosen

    # When they are deleted, or moved
    for call, word in ((ops.delete, "deleted"), (lambda ids: ops.move(ids, "u"), "moved")):
        held.clear()
        out, chosen = asyncio.run(main(call))
        # Then all are done, and after each chunk the call held only the ids it had still to
        # do: nothing of the selection is left to be freed at once as it returns
        assert out["outcomes"] == {word: n} and out["requested"] == n
        assert any(0 < k < n for k in held), held[:5]
        assert held == sorted(held, reverse=True) and held[-1] == 0
        if word == "moved":  # in the order selected
            assert out["new_ids"][0] == chosen and len(out["new_ids"][1]) == n


def _select(ops: AdminOps, *args: object) -> list[int]:
    return asyncio.run(ops.select(*args))  # type: ignore[arg-type]


def test_select_by_state_and_by_ids() -> None:
    srv = _server(10, bury=3)
    ops = AdminOps(srv)
    assert _select(ops, None, "t", "buried") == [  # oldest buried first
        j.id for j in srv.engine.tubes["t"].buried.values()]
    assert sorted(_select(ops, None, "t", "ready")) == sorted(
        j.id for j in srv.engine.jobs.values() if j.state is JobState.READY)
    assert sorted(_select(ops, None, "t", None)) == sorted(srv.engine.jobs)
    assert _select(ops, [3, 1], None, None) == [3, 1]
    assert _select(ops, None, "nope", "ready") == []


def test_selecting_many_jobs_yields_to_the_loop() -> None:
    # Given more ready jobs than one slice of the selection
    n = CHUNK * 16 * 2 + 5
    srv = _server(n)
    ops = AdminOps(srv)
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    async def main() -> list[int]:
        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        before = turns
        ids = await ops.select(None, "t", "ready")
        task.cancel()
        assert turns - before >= 2  # the loop ran others between slices
        return ids

    assert len(asyncio.run(main())) == n


def test_kick_by_ids_kicks_only_buried_or_delayed() -> None:
    srv = _server(5, bury=2)
    ops = AdminOps(srv)
    buried = _select(ops, None, "t", "buried")
    ready = _select(ops, None, "t", "ready")
    out = asyncio.run(ops.kick([*buried, ready[0], 999]))
    assert out["outcomes"] == {"kicked": 2, "skipped_ready": 1, "not_found": 1}
    assert all(srv.engine.jobs[j].state is JobState.READY for j in buried)


def test_jobs_page_walks_every_state_without_repeats() -> None:
    srv = _server(25, bury=5)
    ops = AdminOps(srv)
    seen: list[int] = []
    after = 0
    while True:
        page = asyncio.run(ops.jobs("t", "all", after, 4))
        seen += [j["id"] for j in page["jobs"]]
        if page["next"] is None:
            break
        after = page["next"]
    assert seen == sorted(srv.engine.jobs)


def test_a_page_of_a_large_state_is_read_in_slices() -> None:
    n = CHUNK * 16 * 2 + 5
    srv = _server(n, bury=n)
    ops = AdminOps(srv)
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    async def main() -> dict[str, Any]:
        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        before = turns
        page = await ops.jobs("t", "buried", 0, 3)
        task.cancel()
        assert turns - before >= 2
        return page

    page = asyncio.run(main())
    assert [j["id"] for j in page["jobs"]] == [1, 2, 3] and page["next"] == 3


def test_dead_letters_parsed_once_per_change_of_the_failed_tube() -> None:
    from stalkd.worker.actions import DeadLetter

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


def test_dead_letters_are_parsed_a_budget_at_a_time() -> None:
    from stalkd.admin import ops as ops_module
    from stalkd.worker.actions import DeadLetter

    srv = _server(0)
    ops = AdminOps(srv)
    eng = srv.engine
    eng.connect(2, 0.0)
    eng.apply(2, C.Use("stalkd.failed"), 0.0)
    n = ops_module.PARSE_BUDGET + 10
    for i in range(n):
        rec = DeadLetter(job_id=10_000 + i, tube="t", task="f", attempts=1, error=f"E{i}",
                         traceback="", failed_at=0.0, body=b"")
        eng.apply(2, C.Put(0, 0, 60, rec.to_json()), 0.0)
    first = ops.dead_letters()
    assert len(first) == ops_module.PARSE_BUDGET  # one call parses at most the budget
    second = ops.dead_letters()  # the rest on the next call, the parsed ones kept
    assert len(second) == n and second[10_000 + n - 1]["error"] == f"E{n - 1}"
    assert ops.dead_letters() is second  # complete and unchanged: cached


def test_buried_selection_survives_burials_between_slices() -> None:
    from stalkd.admin.ops import FIFO_STEP

    # Given more buried jobs than one slice, and a worker burying one more between slices
    n = FIFO_STEP * 2 + 3
    srv = _server(n + 1, bury=n)
    ops = AdminOps(srv)
    eng = srv.engine

    async def worker() -> None:
        await asyncio.sleep(0)
        eng.connect(9, 0.0)
        eng.apply(9, C.Watch("t"), 0.0)
        got = eng.apply(9, C.Reserve(), 0.0).reply
        assert isinstance(got, C.JobReply)
        eng.apply(9, C.Bury(got.id, 0), 0.0)

    async def main() -> list[int]:
        task = asyncio.create_task(worker())
        ids = await ops.select(None, "t", "buried")
        await task
        return ids

    ids = asyncio.run(main())
    # Then the selection is still exactly the buried jobs, none twice
    assert sorted(ids) == sorted(j.id for j in eng.jobs.values() if j.state is JobState.BURIED)
    assert len(ids) == len(set(ids)) == n + 1
