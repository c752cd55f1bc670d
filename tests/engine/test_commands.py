"""Every command's effect and reply, organised like docs/protocol.md's "Commands" (table-driven)."""

from __future__ import annotations

from typing import Any

import pytest

from stalkd.protocol.commands import (
    Bury,
    Close,
    Delete,
    Ignore,
    Kick,
    KickJob,
    ListTubes,
    ListTubesWatched,
    ListTubeUsed,
    PauseTube,
    Peek,
    PeekBuried,
    PeekDelayed,
    PeekReady,
    Put,
    Quit,
    Release,
    Reserve,
    ReserveJob,
    ReserveWithTimeout,
    Stats,
    StatsJob,
    StatsTube,
    Touch,
    Use,
    Watch,
    YamlList,
)  # fmt: skip

from .harness import FOUND, RES, Harness, R, yaml_of

NF = R("NOT_FOUND")

# name -> script; each script runs on a fresh engine (connection 1 and 2 auto-connect)
CASES: dict[str, list[tuple[Any, ...]]] = {
    # put
    "put returns increasing ids": [
        (1, Put(0, 0, 10, b"a"), R("INSERTED", 1)),
        (1, Put(0, 0, 10, b"b"), R("INSERTED", 2)),
    ],
    "zero-byte job can be put, reserved, released, deleted": [
        (1, Put(0, 0, 0, b""), R("INSERTED", 1)),
        (1, Reserve(), RES(1, b"")),
        (1, Release(1, 0, 0), R("RELEASED")),
        (1, Delete(1), R("DELETED")),
    ],
    "JOB_TOO_BIG uses no id": [
        (1, Put(0, 0, 10, b"", error="JOB_TOO_BIG"), R("JOB_TOO_BIG")),
        (1, Put(0, 0, 10, b"x"), R("INSERTED", 1)),
    ],
    "EXPECTED_CRLF uses up an id": [
        (1, Put(0, 0, 10, b"abc", error="EXPECTED_CRLF"), R("EXPECTED_CRLF")),
        (1, Put(0, 0, 10, b"x"), R("INSERTED", 2)),
    ],
    "max priority accepted": [(1, Put(2**32 - 1, 0, 1, b"x"), R("INSERTED", 1))],
    # use / watch / ignore / lists
    "use replies USING": [(1, Use("x_y"), R("USING", "x_y")), (1, ListTubeUsed(), R("USING", "x_y"))],
    "watch counts, twice is unchanged": [
        (1, Watch("t1"), R("WATCHING", 2)),
        (1, Watch("t1"), R("WATCHING", 2)),
    ],
    "ignore unknown or unwatched tube keeps count": [
        (1, Ignore("nosuch"), R("WATCHING", 1)),
        (2, Watch("w"), R("WATCHING", 2)),
        (1, Ignore("w"), R("WATCHING", 1)),
    ],
    "ignore last tube is NOT_IGNORED": [
        (1, Ignore("default"), R("NOT_IGNORED")),
        (1, Watch("a"), R("WATCHING", 2)),
        (1, Ignore("default"), R("WATCHING", 1)),
        (1, Ignore("a"), R("NOT_IGNORED")),
        (1, ListTubesWatched(), YamlList(("a",))),
    ],
    "list-tubes in creation order": [
        (1, Watch("w"), R("WATCHING", 2)),
        (1, Use("u"), R("USING", "u")),
        (1, ListTubes(), YamlList(("default", "w", "u"))),
    ],
    "removed tube's slot is taken by the last one": [
        (1, Watch("a"), R("WATCHING", 2)),
        (1, Watch("b"), R("WATCHING", 3)),
        (1, Watch("c"), R("WATCHING", 4)),
        (1, ListTubesWatched(), YamlList(("default", "a", "b", "c"))),
        (1, Ignore("a"), R("WATCHING", 3)),
        (1, ListTubesWatched(), YamlList(("default", "c", "b"))),
        (1, ListTubes(), YamlList(("default", "c", "b"))),
    ],
    "tube with jobs outlives its users": [
        (1, Use("keep"), R("USING", "keep")),
        (1, Put(0, 0, 5, b"x"), R("INSERTED", 1)),
        (1, Use("default"), R("USING", "default")),
        (1, ListTubes(), YamlList(("default", "keep"))),
        (1, Delete(1), R("DELETED")),
        (1, ListTubes(), YamlList(("default",))),
    ],
    "quit closes and releases": [
        (1, Put(0, 0, 100, b"x"), R("INSERTED", 1)),
        (1, Reserve(), RES(1, b"x")),
        (1, Quit(), Close()),
        (2, ReserveWithTimeout(0), RES(1, b"x")),
    ],
    # reserve
    "reserve order is (pri, id) across watched tubes": [
        (1, Use("abc"), R("USING", "abc")),
        (1, Put(999999, 0, 5, b"low"), R("INSERTED", 1)),
        (1, Use("def"), R("USING", "def")),
        (1, Put(99, 0, 5, b"high"), R("INSERTED", 2)),
        (1, Put(99, 0, 5, b"high2"), R("INSERTED", 3)),
        (2, Watch("abc"), R("WATCHING", 2)),
        (2, Watch("def"), R("WATCHING", 3)),
        (2, Reserve(), RES(2, b"high")),
        (2, Reserve(), RES(3, b"high2")),
        (2, Reserve(), RES(1, b"low")),
    ],
    "reserve-with-timeout 0 with nothing ready times out at once": [
        (1, ReserveWithTimeout(0), R("TIMED_OUT")),
    ],
    "reserve waits and is woken by a put": [
        (2, Reserve(), None),
        (1, Put(0, 0, 5, b"x"), R("INSERTED", 1)),
        ("wake", 2, RES(1, b"x")),
    ],
    "waiters are served in arrival order": [
        (2, Reserve(), None),
        (3, Reserve(), None),
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        ("wake", 2, RES(1, b"a")),
        (1, Put(0, 0, 5, b"b"), R("INSERTED", 2)),
        ("wake", 3, RES(2, b"b")),
    ],
    "waiter gets only jobs of tubes it watches": [
        (2, Watch("other"), R("WATCHING", 2)),
        (2, Ignore("default"), R("WATCHING", 1)),
        (2, Reserve(), None),
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, Use("other"), R("USING", "other")),
        (1, Put(0, 0, 5, b"b"), R("INSERTED", 2)),
        ("wake", 2, RES(2, b"b")),
    ],
    "reserve-with-timeout times out after N seconds": [
        (2, ReserveWithTimeout(1), None),
        (1, Watch("foo"), R("WATCHING", 2)),
        ("sleep", 0.999),
        ("sleep", 0.001),
        ("wake", 2, R("TIMED_OUT")),
    ],
    # reserve-job
    "reserve-job of ready, then again is NOT_FOUND": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, ReserveJob(1), RES(1, b"a")),
        (1, ReserveJob(1), NF),
        (2, ReserveJob(1), NF),
        (1, ReserveJob(99), NF),
        (2, Release(1, 0, 0), NF),
    ],
    "reserve-job of delayed keeps delay, release makes it ready": [
        (1, Put(0, 100, 5, b"a"), R("INSERTED", 1)),
        (1, ReserveJob(1), RES(1, b"a")),
        (1, Release(1, 0, 0), R("RELEASED")),
        (1, PeekReady(), FOUND(1, b"a")),
    ],
    "reserve-job of buried jobs in any order": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, Put(0, 0, 5, b"b"), R("INSERTED", 2)),
        (1, Reserve(), RES(1, b"a")),
        (1, Bury(1, 0), R("BURIED")),
        (1, Reserve(), RES(2, b"b")),
        (1, Bury(2, 0), R("BURIED")),
        (1, ReserveJob(2), RES(2, b"b")),
        (1, ReserveJob(1), RES(1, b"a")),
        (1, Release(1, 0, 0), R("RELEASED")),
        (1, Release(2, 0, 0), R("RELEASED")),
        (1, PeekReady(), FOUND(1, b"a")),
    ],
    "reserve-job works on a paused tube": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, PauseTube("default", 100), R("PAUSED")),
        (1, ReserveWithTimeout(0), R("TIMED_OUT")),
        (1, ReserveJob(1), RES(1, b"a")),
    ],
    # delete
    "delete ready, delayed, buried, own reserved": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, Put(0, 9, 5, b"b"), R("INSERTED", 2)),
        (1, Put(0, 0, 5, b"c"), R("INSERTED", 3)),
        (1, Delete(1), R("DELETED")),
        (1, Delete(2), R("DELETED")),
        (1, Reserve(), RES(3, b"c")),
        (1, Delete(3), R("DELETED")),
        (1, Delete(3), NF),
    ],
    "delete of a job reserved by another connection is NOT_FOUND": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (2, Reserve(), RES(1, b"a")),
        (1, Delete(1), NF),
        (2, Delete(1), R("DELETED")),
    ],
    # release / bury / touch
    "release with delay goes to delayed, then ready": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, Reserve(), RES(1, b"a")),
        (1, Release(1, 7, 2), R("RELEASED")),
        (1, PeekDelayed(), FOUND(1, b"a")),
        ("sleep", 1.9),
        (1, PeekReady(), NF),
        ("sleep", 0.1),
        (1, PeekReady(), FOUND(1, b"a")),
    ],
    "bury needs a reservation; kick brings it back": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, Bury(1, 0), NF),
        (1, Reserve(), RES(1, b"a")),
        (1, Bury(1, 5), R("BURIED")),
        (1, PeekBuried(), FOUND(1, b"a")),
        (1, Kick(1), R("KICKED", 1)),
        (1, PeekReady(), FOUND(1, b"a")),
        (1, Kick(1), R("KICKED", 0)),
    ],
    "touch needs own reservation": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, Touch(1), NF),
        (1, Touch(100000000000000), NF),
        (2, Reserve(), RES(1, b"a")),
        (1, Touch(1), NF),
        (2, Touch(1), R("TOUCHED")),
    ],
    # peek
    "peek any state; bounds": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, Peek(1), FOUND(1, b"a")),
        (1, Peek(2), NF),
        (1, Peek(0), NF),
        (1, Peek(2**64 - 1), NF),
        (2, Reserve(), RES(1, b"a")),
        (1, Peek(1), FOUND(1, b"a")),
    ],
    "peek-delayed is soonest deadline": [
        (1, PeekDelayed(), NF),
        (1, Put(0, 99, 5, b"late"), R("INSERTED", 1)),
        (1, Put(0, 1, 5, b"soon"), R("INSERTED", 2)),
        (1, PeekDelayed(), FOUND(2, b"soon")),
    ],
    "peek-* look only at the used tube": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, Use("other"), R("USING", "other")),
        (1, PeekReady(), NF),
        (1, PeekBuried(), NF),
    ],
    # kick
    "kick prefers buried over delayed": [
        (1, Put(0, 50, 5, b"d1"), R("INSERTED", 1)),
        (1, Put(0, 60, 5, b"d2"), R("INSERTED", 2)),
        (1, Put(0, 0, 5, b"b"), R("INSERTED", 3)),
        (1, Reserve(), RES(3, b"b")),
        (1, Bury(3, 0), R("BURIED")),
        (1, Kick(10), R("KICKED", 1)),
        (1, Kick(10), R("KICKED", 2)),
    ],
    "kick-job: buried, delayed, ready and unknown": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, Put(0, 9, 5, b"b"), R("INSERTED", 2)),
        (1, KickJob(1), NF),
        (1, KickJob(2), R("KICKED")),
        (1, KickJob(2), NF),
        (1, Reserve(), RES(1, b"a")),
        (1, Bury(1, 0), R("BURIED")),
        (1, KickJob(1), R("KICKED")),
        (1, KickJob(1), NF),
        (1, KickJob(77), NF),
    ],
    # pause-tube
    "pause-tube on a missing tube is NOT_FOUND": [(1, PauseTube("nope", 5), NF)],
    "paused tube is skipped until the pause ends": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, PauseTube("default", 1), R("PAUSED")),
        (2, Reserve(), None),
        ("sleep", 0.999),
        ("sleep", 0.001),
        ("wake", 2, RES(1, b"a")),
    ],
    "pause-tube 0 wakes waiters at once": [
        (1, Put(0, 0, 5, b"a"), R("INSERTED", 1)),
        (1, PauseTube("default", 86400), R("PAUSED")),
        (2, Reserve(), None),
        (1, PauseTube("default", 0), R("PAUSED")),
        ("wake", 2, RES(1, b"a")),
    ],
    # DEADLINE_SOON
    "ttr=1: reserve again gives DEADLINE_SOON, job still reserved": [
        (1, Put(0, 0, 1, b"a"), R("INSERTED", 1)),
        (1, Reserve(), RES(1, b"a")),
        ("sleep", 0.2),
        (1, ReserveWithTimeout(1), R("DEADLINE_SOON")),
        (1, Release(1, 0, 0), R("RELEASED")),
        (1, PeekReady(), FOUND(1, b"a")),
    ],
    "deadline soon but a ready job exists: reserved normally": [
        (1, Put(0, 0, 1, b"a"), R("INSERTED", 1)),
        (1, Put(0, 0, 1, b"b"), R("INSERTED", 2)),
        (1, Reserve(), RES(1, b"a")),
        (1, Reserve(), RES(2, b"b")),
    ],
    "waiting reserve gets DEADLINE_SOON when the margin starts": [
        (1, Put(0, 0, 3, b"a"), R("INSERTED", 1)),
        (1, Reserve(), RES(1, b"a")),
        (1, Reserve(), None),
        ("sleep", 1.9),
        ("sleep", 0.1),
        ("wake", 1, R("DEADLINE_SOON")),
        (1, PeekReady(), NF),
    ],
    "reserve-job of delayed then DEADLINE_SOON then auto-release": [
        (1, Put(0, 100, 1, b"a"), R("INSERTED", 1)),
        (1, ReserveJob(1), RES(1, b"a")),
        (1, ReserveWithTimeout(0), R("DEADLINE_SOON")),
        ("sleep", 1.0),
        (2, PeekReady(), FOUND(1, b"a")),
    ],
    "TTR expiry returns the job to ready and wakes a waiter": [
        (1, Put(0, 0, 2, b"a"), R("INSERTED", 1)),
        (1, Reserve(), RES(1, b"a")),
        (2, Reserve(), None),
        ("sleep", 2.0),
        ("wake", 2, RES(1, b"a")),
    ],
    # connections
    "close releases the job for another connection": [
        (1, Put(0, 0, 100, b"x"), R("INSERTED", 1)),
        (1, Reserve(), RES(1, b"x")),
        (2, Reserve(), None),
        ("close", 1),
        ("wake", 2, RES(1, b"x")),
    ],
    "drain mode: DRAINING still uses an id": [
        ("drain",),
    ],
}


@pytest.mark.parametrize("name", list(CASES))
def test_script(name: str) -> None:
    h = Harness()
    steps = CASES[name]
    if steps == [("drain",)]:
        h.e.set_draining(True)
        assert h.do(1, Put(0, 0, 5, b"x")) == R("DRAINING")
        h.e.set_draining(False)
        assert h.do(1, Put(0, 0, 5, b"x")) == R("INSERTED", 2)
        assert yaml_of(h.do(1, Stats()))["cmd-put"] == 2
        return
    h.run(steps)
    for cid in list(h.woken):
        assert h.woken[cid] == [], f"unexpected wakeups for conn {cid}: {h.woken[cid]}"


def test_small_max_job_size() -> None:
    h = Harness(max_job_size=10)
    assert h.do(1, Put(0, 0, 0, b"x" * 11)) == R("JOB_TOO_BIG")
    assert h.do(1, Put(0, 0, 0, b"x" * 10)) == R("INSERTED", 1)


def test_a_body_over_the_limit_is_too_big_whatever_else_the_parser_found() -> None:
    # beanstalkd checks the size before the text after it and before the body's CRLF: a put
    # refused as too big uses no id and does not make its client a producer
    h = Harness(max_job_size=10)
    for error in ("BAD_FORMAT", "EXPECTED_CRLF"):
        assert h.do(1, Put(0, 0, 0, b"x" * 11, error=error)) == R("JOB_TOO_BIG")  # type: ignore[arg-type]
    assert yaml_of(h.do(1, Stats()))["current-producers"] == 0
    assert h.do(1, Put(0, 0, 0, b"x")) == R("INSERTED", 1)


def test_refused_put_and_missed_reserve_job_do_not_change_roles() -> None:
    # beanstalkd marks a producer only after the size check, and a worker only when reserve-job
    # finds its job (seen by the differential test against Debian's beanstalkd).
    h = Harness(max_job_size=10)
    assert h.do(1, Put(0, 0, 0, b"x" * 11)) == R("JOB_TOO_BIG")
    assert h.do(1, ReserveJob(99)) == R("NOT_FOUND")
    s = yaml_of(h.do(1, Stats()))
    assert (s["current-producers"], s["current-workers"]) == (0, 0)
    assert h.do(1, Put(0, 0, 0, b"x")) == R("INSERTED", 1)
    assert h.do(1, ReserveJob(1)) == RES(1, b"x")
    s = yaml_of(h.do(1, Stats()))
    assert (s["current-producers"], s["current-workers"]) == (1, 1)


# --- stats (values the engine owns) -----------------------------------------------------------


def test_ttr_values_read_back_and_zero_is_raised_to_one() -> None:
    h = Harness()
    for i, ttr in enumerate([120, 4294, 4295, 4296, 4297, 5000, 21600, 0], start=1):
        assert h.do(1, Put(0, 0, ttr, b"x")) == R("INSERTED", i)
        assert yaml_of(h.do(1, StatsJob(i)))["ttr"] == max(ttr, 1)


def test_stats_job_fields_and_time_left() -> None:
    h = Harness()
    h.do(1, Use("tubea"))
    h.do(1, Put(3, 0, 10, b"abc"))
    s = yaml_of(h.do(1, StatsJob(1)))
    assert list(s) == ["id", "tube", "state", "pri", "age", "delay", "ttr", "time-left", "file",
                       "reserves", "timeouts", "releases", "buries", "kicks"]  # fmt: skip
    assert (s["tube"], s["state"], s["pri"], s["time-left"]) == ("tubea", "ready", 3, 0)
    h.do(1, Watch("tubea"))
    h.do(1, Reserve())
    assert yaml_of(h.do(1, StatsJob(1)))["time-left"] == 10  # exactly ttr at the same instant
    h.sleep(0.001)
    assert yaml_of(h.do(1, StatsJob(1)))["time-left"] == 9
    h.sleep(1.0)
    s = yaml_of(h.do(1, StatsJob(1)))
    assert (s["time-left"], s["age"], s["state"], s["reserves"]) == (8, 1, "reserved", 1)
    h.do(1, Touch(1))
    h.sleep(0.001)
    assert yaml_of(h.do(1, StatsJob(1)))["time-left"] == 9
    h.sleep(10.0)
    s = yaml_of(h.do(1, StatsJob(1)))
    assert (s["state"], s["timeouts"], s["time-left"]) == ("ready", 1, 0)
    assert yaml_of(h.do(1, Stats()))["job-timeouts"] == 1
    assert h.do(1, StatsJob(2)) == NF


def test_stats_tube_after_put_and_delete() -> None:
    h = Harness()
    h.do(1, Use("tubea"))
    h.do(1, Put(0, 0, 5, b"x"))
    h.do(1, Delete(1))
    s = yaml_of(h.do(1, StatsTube("tubea")))
    assert list(s)[0] == "name" and len(s) == 14
    assert (s["total-jobs"], s["current-using"], s["current-watching"], s["cmd-delete"]) == (1, 1, 0, 1)
    d = yaml_of(h.do(1, StatsTube("default")))
    assert (d["current-watching"], d["current-using"]) == (1, 0)
    assert h.do(1, StatsTube("nope")) == NF


def test_stats_tube_pause_fields() -> None:
    h = Harness()
    h.do(1, PauseTube("default", 10))
    h.sleep(2.5)
    s = yaml_of(h.do(1, StatsTube("default")))
    assert (s["pause"], s["pause-time-left"], s["cmd-pause-tube"]) == (10, 7, 1)
    h.sleep(8)
    s = yaml_of(h.do(1, StatsTube("default")))
    assert (s["pause"], s["pause-time-left"]) == (0, 0)


def test_stats_counts_fresh_and_after_work() -> None:
    h = Harness()
    s = yaml_of(h.do(1, Stats()))
    assert (s["cmd-stats"], s["current-tubes"], s["current-connections"], s["total-connections"]) == (1, 1, 1, 1)
    assert s["draining"] is False and s["max-job-size"] == 65535
    h.do(1, PauseTube("missing", 1))
    h.do(1, Put(5, 0, 5, b"u"))
    h.do(1, Put(2000, 0, 5, b"n"))
    h.do(1, Put(0, 30, 5, b"d"))
    h.do(2, Reserve())
    h.do(3, Reserve())
    h.do(4, Reserve())  # waits
    s = yaml_of(h.do(1, Stats()))
    assert s["cmd-pause-tube"] == 1
    assert (s["current-jobs-urgent"], s["current-jobs-ready"], s["current-jobs-reserved"],
            s["current-jobs-delayed"]) == (0, 0, 2, 1)  # fmt: skip
    assert (s["current-producers"], s["current-workers"], s["current-waiting"]) == (1, 3, 1)
    assert (s["cmd-put"], s["cmd-reserve"], s["total-jobs"]) == (3, 3, 3)


def test_command_counts_are_read_and_set_by_key_as_a_standby_carries_them_over_a_clear() -> None:
    h = Harness()
    h.do(1, Put(0, 0, 5, b"a"))
    h.do(1, Put(0, 0, 5, b"b"))
    h.do(2, Reserve())
    h.do(2, Delete(1))
    h.do(2, Delete(1))  # NOT_FOUND still counts, as in beanstalkd
    h.do(1, Quit())  # quit has no counter
    counts = h.e.command_counts()
    assert (counts["cmd-put"], counts["cmd-reserve"], counts["cmd-delete"], counts["cmd-stats"]) == (2, 1, 2, 0)
    h.e.clear()
    assert set(h.e.command_counts().values()) == {0}
    h.e.set_command_counts(counts)
    s = yaml_of(h.do(1, Stats()))
    assert (s["cmd-put"], s["cmd-reserve"], s["cmd-delete"], s["cmd-stats"]) == (2, 1, 2, 1)
    with pytest.raises(KeyError, match="cmd-nothing"):
        h.e.set_command_counts({"cmd-put": 9, "cmd-nothing": 1})
    assert h.e.command_counts()["cmd-put"] == 2  # a refused set changes nothing


def test_half_close_times_out_a_waiting_reserve() -> None:
    h = Harness()
    h.ensure(1)
    assert h.do(1, Reserve()) is None
    out = h.e.half_close(1, h.now)
    assert out.reply == R("TIMED_OUT")
    assert h.do(1, Reserve()) == R("TIMED_OUT")  # later reserves with nothing ready end at once
    h.do(2, Put(0, 0, 5, b"x"))
    assert h.do(1, Reserve()) == RES(1, b"x")


def test_next_deadline_is_the_soonest_timer() -> None:
    h = Harness()
    h.ensure(1)
    assert h.e.tick(h.now).next_deadline is None
    h.do(1, Put(0, 50, 5, b"a"))
    out = h.e.apply(1, Put(0, 0, 20, b"b"), h.now)
    assert out.next_deadline == pytest.approx(h.now + 50)
    h.do(1, Reserve())
    assert h.e.tick(h.now).next_deadline == pytest.approx(h.now + 20)
    assert h.do(2, ReserveWithTimeout(3)) is None
    assert h.e.tick(h.now).next_deadline == pytest.approx(h.now + 3)


def test_command_while_waiting_is_a_contract_error() -> None:
    from stalkd.engine import EngineError

    h = Harness()
    h.do(1, Reserve())
    with pytest.raises(EngineError, match="connection 1"):
        h.do(1, Stats())
    with pytest.raises(EngineError, match="connection 9"):
        h.e.apply(9, Stats(), h.now)


def test_longest_command_pause_tube_200_chars() -> None:
    h = Harness()
    name = "a" * 200
    assert h.do(1, Watch(name)) == R("WATCHING", 2)
    assert h.do(1, PauseTube(name, 4294967295)) == R("PAUSED")
    assert yaml_of(h.do(1, StatsTube(name)))["pause"] == 4294967295


def test_delayed_job_becomes_ready_after_its_delay() -> None:
    # testserv: delay 1 -> after ~1 s stats-tube ready 0 -> 1, delayed 1 -> 0, total-jobs stays 1
    h = Harness()
    assert h.do(1, Put(0, 1, 5, b"x")) == R("INSERTED", 1)
    s = yaml_of(h.do(1, StatsTube("default")))
    assert (s["current-jobs-ready"], s["current-jobs-delayed"], s["total-jobs"]) == (0, 1, 1)
    out = h.sleep(1.0)
    assert out.next_deadline is None
    s = yaml_of(h.do(1, StatsTube("default")))
    assert (s["current-jobs-ready"], s["current-jobs-delayed"], s["total-jobs"]) == (1, 0, 1)


def test_urgent_counts_follow_ready_jobs() -> None:
    h = Harness()
    h.do(1, Put(1023, 0, 5, b"u"))
    h.do(1, Put(1024, 0, 5, b"n"))
    assert yaml_of(h.do(1, StatsTube("default")))["current-jobs-urgent"] == 1
    h.do(1, Reserve())
    assert yaml_of(h.do(1, Stats()))["current-jobs-urgent"] == 0
    h.do(1, Release(1, 5, 0))
    assert yaml_of(h.do(1, Stats()))["current-jobs-urgent"] == 1
