"""Stored job results in the engine: TTL expiry with injected time, durability through the WAL,
snapshots and compaction (old segments dropped), and recovery dropping what expired."""

from __future__ import annotations

import os
from pathlib import Path

from stalkd.engine import Engine
from stalkd.engine.model import Op
from stalkd.engine.replay import finish, replay
from stalkd.persist.snapshot import list_snapshots
from stalkd.protocol import commands as C

from .test_wal import reopen
from .walutil import T0

FOUND = C.JobReply


def _engine_with_job(now: float = T0) -> Engine:
    e = Engine()
    e.connect(1, now)
    assert e.apply(1, C.Put(0, 0, 60, b"job"), now).reply == C.Reply("INSERTED", (1,))
    assert e.apply(1, C.ReserveJob(1), now).reply == C.JobReply("RESERVED", 1, b"job")
    return e


def test_a_result_is_found_until_its_deadline_and_not_at_it() -> None:
    e = _engine_with_job()
    assert e.apply(1, C.ResultPut(1, 10, b"42"), T0).reply == C.Reply("STORED")
    assert e.apply(1, C.ResultGet(1), T0 + 9.999999).reply == FOUND("FOUND", 1, b"42")
    # no tick ran: the deadline alone hides it
    assert e.apply(1, C.ResultGet(1), T0 + 10).reply == C.Reply("NOT_FOUND")


def test_a_result_outlives_its_job_and_a_later_one_replaces_it() -> None:
    e = _engine_with_job()
    e.apply(1, C.ResultPut(1, 100, b"first"), T0)
    e.apply(1, C.Delete(1), T0)
    assert e.apply(1, C.StatsJob(1), T0).reply == C.Reply("NOT_FOUND")
    assert e.apply(1, C.ResultGet(1), T0 + 1).reply == FOUND("FOUND", 1, b"first")
    e.apply(1, C.Put(0, 0, 60, b"copy"), T0 + 1)
    e.apply(1, C.ReserveJob(2), T0 + 1)  # a copy of job 1, in its tube: stores under the first id
    assert e.apply(1, C.ResultPut(1, 5, b"second"), T0 + 1).reply == C.Reply("STORED")
    assert e.apply(1, C.ResultGet(1), T0 + 2).reply == FOUND("FOUND", 1, b"second")
    assert e.result_bytes == len(b"second")
    # the replaced result's longer deadline no longer counts
    assert e.apply(1, C.ResultGet(1), T0 + 7).reply == C.Reply("NOT_FOUND")


def test_tick_gives_back_the_memory_of_expired_results() -> None:
    e = _engine_with_job()
    e.apply(1, C.Put(0, 0, 60, b"two"), T0)
    e.apply(1, C.ReserveJob(2), T0)
    e.apply(1, C.ResultPut(1, 10, b"a" * 100), T0)
    e.apply(1, C.ResultPut(2, 20, b"b" * 50), T0)
    e.tick(T0 + 10)
    assert sorted(e.results) == [2] and e.result_bytes == 50
    e.tick(T0 + 20)
    assert e.results == {} and e.result_bytes == 0


def test_ttl_zero_forgets_and_an_id_never_put_is_not_found() -> None:
    e = _engine_with_job()
    e.apply(1, C.ResultPut(1, 10, b"x"), T0)
    out = e.apply(1, C.ResultPut(1, 0, b""), T0)
    assert out.reply == C.Reply("STORED") and out.records[0].deadline_us == 0
    assert e.apply(1, C.ResultGet(1), T0).reply == C.Reply("NOT_FOUND")
    assert e.apply(1, C.ResultPut(2, 10, b"x"), T0).reply == C.Reply("NOT_FOUND")
    assert e.apply(1, C.ResultPut(1, 10, b"", "JOB_TOO_BIG"), T0).reply == C.Reply("JOB_TOO_BIG")


def test_result_records_replay_into_a_fresh_engine() -> None:
    e = _engine_with_job()
    out = e.apply(1, C.ResultPut(1, 30, b"v"), T0)
    (rec,) = out.records
    assert (rec.op, rec.job_id, rec.deadline_us, rec.body) == (Op.RESULT, 1, round((T0 + 30) * 1e6), b"v")
    fresh = Engine()
    replay(fresh, rec)
    finish(fresh)
    fresh.connect(1, T0)
    assert fresh.apply(1, C.ResultGet(1), T0 + 1).reply == FOUND("FOUND", 1, b"v")


def test_results_survive_a_restart_and_expire_while_the_server_is_down(tmp_path: Path) -> None:
    wal, d = reopen(tmp_path, T0, durability="always")
    d.do(1, C.Put(0, 0, 60, b"a"))
    d.do(1, C.Put(0, 0, 60, b"b"))
    d.do(1, C.ReserveJob(1))
    d.do(1, C.ReserveJob(2))
    d.do(1, C.ResultPut(1, 100, b"long"))
    d.do(1, C.ResultPut(2, 5, b"short"))
    d.do(1, C.Delete(1))
    wal.close()
    wal, d = reopen(tmp_path, T0 + 10)
    assert d.do(1, C.ResultGet(1)) == FOUND("FOUND", 1, b"long")
    assert d.do(1, C.ResultGet(2)) == C.Reply("NOT_FOUND")
    assert sorted(d.e.results) == [1]  # recovery's tick dropped the expired one
    wal.close()


def test_results_survive_compaction_that_drops_the_segments_they_were_written_in(tmp_path: Path) -> None:
    wal, d = reopen(tmp_path, T0, segment_size=4096, compact_min_bytes=0, chunk_jobs=4, background=False)
    d.do(1, C.Put(0, 0, 60, b"kept"))  # job 1 stays live
    for i in range(2, 40):
        d.do(1, C.Put(0, 0, 60, b"x" * 200))
        d.do(1, C.ReserveJob(i))
        d.do(1, C.ResultPut(i, 1000, b"result-%d" % i))
        d.do(1, C.Delete(i))
    d.do(1, C.ReserveJob(1))
    d.do(1, C.ResultPut(1, 1000, b"of the live job"))
    first_segment = min(n for n in os.listdir(tmp_path / "wal") if n.startswith("seg-"))
    for _ in range(3):  # several snapshots: the result records are rewritten each time
        wal.snapshot(d.e)
        d.do(1, C.Put(0, 0, 60, b"y" * 300))
    wal.snapshot(d.e)
    assert list_snapshots(str(tmp_path / "snapshots"))
    assert first_segment not in os.listdir(tmp_path / "wal")  # the old WAL is gone
    wal.close()
    wal, d = reopen(tmp_path, T0 + 1)
    for i in range(2, 40):
        assert d.do(1, C.ResultGet(i)) == FOUND("FOUND", i, b"result-%d" % i)
    assert d.do(1, C.ResultGet(1)) == FOUND("FOUND", 1, b"of the live job")
    assert d.e.jobs[1].body == b"kept"
    wal.close()


def test_a_result_written_while_a_fuzzy_snapshot_copies_its_job_is_kept(tmp_path: Path) -> None:
    # The job is copied into the snapshot after its result record was written; the tail replay
    # skips that job's older records (the copy has them), but never its result.
    wal, d = reopen(tmp_path, T0, segment_size=4096, compact_min_bytes=0, chunk_jobs=1, background=False)
    for _ in range(3):
        d.do(1, C.Put(0, 0, 60, b"j"))
    wal.maintain(d.e, d.now, force=True)  # snapshot begun; nothing copied yet
    d.do(1, C.ReserveJob(3))
    d.do(1, C.ResultPut(3, 100, b"late"))
    while wal.maintain(d.e, d.now):  # copies jobs 1..3 (stamped after the result record)
        pass
    wal.close()
    wal, d = reopen(tmp_path, T0 + 1)
    assert d.do(1, C.ResultGet(3)) == FOUND("FOUND", 3, b"late")
    wal.close()


def test_a_full_disk_refuses_a_result_and_changes_nothing() -> None:
    class Full:
        def put(self, body_len: int) -> bool:
            return False

        def updates(self, n: int) -> int:
            return 0

    e = _engine_with_job()
    e.room = Full()
    out = e.apply(1, C.ResultPut(1, 10, b"x"), T0)
    assert (out.reply, out.records, e.results) == (C.Reply("OUT_OF_MEMORY"), (), {})
    assert e.apply(1, C.ResultGet(1), T0).reply == C.Reply("NOT_FOUND")  # reads still work


def test_only_the_connection_holding_the_job_stores_its_result() -> None:
    e = _engine_with_job()  # conn 1 holds job 1 (tube default)
    e.connect(2, T0)
    e.apply(2, C.Use("other"), T0)
    e.apply(2, C.Put(0, 0, 60, b"elsewhere"), T0)
    e.apply(2, C.ReserveJob(2), T0)
    assert e.apply(2, C.ResultPut(1, 10, b"forged"), T0).reply == C.Reply("NOT_FOUND")
    assert e.apply(1, C.ResultPut(1, 10, b"real"), T0).reply == C.Reply("STORED")
    e.apply(1, C.Delete(1), T0)
    # the job is gone: only a connection holding a job of its tube may replace the result
    assert e.apply(2, C.ResultPut(1, 99_999_999, b"forged"), T0).reply == C.Reply("NOT_FOUND")
    assert e.apply(1, C.ResultPut(1, 10, b"again"), T0).reply == C.Reply("NOT_FOUND")  # holds nothing now
    assert e.apply(2, C.ResultGet(1), T0).reply == FOUND("FOUND", 1, b"real")
    assert e.result_tube(1) == "default" and e.result_tube(2) is None
    # a job that is ready (held by nobody) takes no result either
    e.apply(1, C.Put(0, 0, 60, b"ready"), T0)
    assert e.apply(1, C.ResultPut(3, 10, b"x"), T0).reply == C.Reply("NOT_FOUND")


def _held_jobs(e: Engine, conn: int, n: int) -> list[int]:
    ids = []
    for _ in range(n):
        jid = e.apply(conn, C.Put(0, 0, 600, b"j"), T0).reply.args[0]  # type: ignore[union-attr]
        e.apply(conn, C.ReserveJob(jid), T0)
        ids.append(jid)
    return ids


def test_results_are_bounded_per_owner_in_count_bytes_and_ttl() -> None:
    from stalkd.engine.results import ResultLimits

    e = Engine()
    e.result_limits = ResultLimits(count=3, bytes=100, ttl=60)
    for conn, owner in ((1, "CN=a"), (2, "CN=b")):
        e.connect(conn, T0)
        e.name_owner(conn, owner)
    a, b = _held_jobs(e, 1, 5), _held_jobs(e, 2, 2)
    assert e.apply(1, C.ResultPut(a[0], 61, b"x"), T0).reply == C.Reply("RESULT_LIMIT")  # TTL
    assert [e.apply(1, C.ResultPut(j, 60, b"x"), T0).reply.word for j in a[:4]] == [  # type: ignore[union-attr]
        "STORED", "STORED", "STORED", "RESULT_LIMIT"]
    assert e.apply(1, C.ResultPut(a[0], 60, b"y" * 100), T0).reply == C.Reply("RESULT_LIMIT")  # bytes
    assert e.apply(1, C.ResultPut(a[0], 60, b"y" * 98), T0).reply == C.Reply("STORED")  # replaces its own
    assert a[3] not in e.results and e.result_usage["CN=a"] == [3, 100]
    # another identity is not crowded out
    assert e.apply(2, C.ResultPut(b[0], 60, b"z" * 100), T0).reply == C.Reply("STORED")
    # expiry gives the room back
    e.tick(T0 + 60)
    assert e.apply(1, C.ResultPut(a[3], 60, b"x"), T0 + 60).reply == C.Reply("STORED")
    assert e.result_usage == {"CN=a": [1, 1]}
    values = e.apply(1, C.Stats(), T0 + 60).reply.values  # type: ignore[union-attr]
    assert (values["current-results"], values["max-results"], values["max-result-bytes"],
            values["max-result-ttl"]) == (1, 3, 100, 60)


def test_a_result_keeps_its_tube_through_a_restart_while_its_job_lives(tmp_path: Path) -> None:
    wal, d = reopen(tmp_path, T0, durability="always")
    d.do(1, C.Use("emails"))
    d.do(1, C.Put(0, 0, 60, b"a"))
    d.do(1, C.ReserveJob(1))
    d.do(1, C.ResultPut(1, 100, b"r"))
    wal.close()
    wal, d = reopen(tmp_path, T0 + 1)
    assert d.e.result_tube(1) == "emails"
    wal.close()
