"""Every client command against a real server (beanstalkd and stalkd), through both clients.

Each test: Given a fresh server and a connected client, When the commands run, Then the
results are typed values and error replies raise the class for their word.
"""

from __future__ import annotations

from typing import Any

import pytest

from stalkd.client import Job, errors


def test_put_reserve_delete_round_trip_keeps_bytes_exactly(client: Any) -> None:
    # Given bodies with CRLF inside, every byte value, an empty one and a str
    bodies = [b"a\r\nb\r\n", bytes(range(256)), b"", "h\u00e9llo \u2603"]
    ids = [client.put(b) for b in bodies]
    # Then ids increase and each job comes back byte for byte, in FIFO order (same priority)
    assert ids == sorted(ids) and len(set(ids)) == 4
    for jid, body in zip(ids, bodies, strict=True):
        job = client.reserve(timeout=0)
        expected = body.encode() if isinstance(body, str) else body
        assert job == Job(jid, expected)
        client.delete(job)
    with pytest.raises(errors.TimedOut):
        client.reserve(timeout=0)


def test_put_many_is_ordered_and_all_inserted(client: Any) -> None:
    # Given more jobs than one pipelined batch holds
    bodies = [f"job-{i}".encode() for i in range(2500)]
    client.use("bulk")
    ids = client.put_many(bodies, priority=5, ttr=30)
    # Then every id is new, in order, and each body is where its id says
    assert len(ids) == 2500 and ids == sorted(set(ids))
    assert client.stats_tube("bulk")["current-jobs-ready"] == 2500
    for i in (0, 1023, 1024, 2499):
        assert client.peek(ids[i]).body == bodies[i]
    assert client.stats_job(ids[7])["pri"] == 5 and client.stats_job(ids[7])["ttr"] == 30


def test_put_many_reports_first_failure_and_keeps_the_rest(client: Any) -> None:
    # Given one body over the default max-job-size (65535) among good ones
    bodies = [b"a", b"x" * 65536, b"c", b"x" * 70000]
    # When they are put in one pipeline
    with pytest.raises(errors.JobTooBig) as info:
        client.put_many(bodies)
    # Then the first failure is raised with its position and the ids of the others
    assert info.value.batch_index == 1
    ids = info.value.batch_ids
    assert ids is not None and ids[1] is None and ids[3] is None
    assert client.peek(ids[0]).body == b"a" and client.peek(ids[2]).body == b"c"
    # and the connection is still in step
    assert client.put(b"after") == ids[2] + 1


def test_job_too_big_single_put_leaves_connection_usable(client: Any) -> None:
    with pytest.raises(errors.JobTooBig, match="JOB_TOO_BIG"):
        client.put(b"x" * 65536)
    assert client.peek(client.put(b"x" * 65535)).body == b"x" * 65535


def test_use_watch_ignore_and_lists(client: Any) -> None:
    assert client.use("emails") == "emails"
    assert client.list_tube_used() == "emails"
    assert client.watch("emails") == 2
    assert client.watch("emails") == 2  # watching twice changes nothing
    assert client.ignore("default") == 1
    assert client.ignore("nosuch") == 1
    with pytest.raises(errors.NotIgnored):
        client.ignore("emails")
    assert client.list_tubes_watched() == ["emails"]
    assert client.list_tubes() == ["default", "emails"]
    assert client.watching == ("emails",) and client.using == "emails"


def test_reserve_across_tubes_by_priority(client: Any) -> None:
    client.use("abc")
    low = client.put(b"low", priority=999999)
    client.use("def")
    high = client.put(b"high", priority=99)
    client.watch("abc")
    client.watch("def")
    assert client.reserve(timeout=0).id == high
    assert client.reserve(timeout=0).id == low


def test_release_with_delay_peek_delayed_and_kick(client: Any) -> None:
    jid = client.put(b"d")
    job = client.reserve(timeout=0)
    client.release(job, priority=7, delay=100)
    st = client.stats_job(jid)
    assert (st["state"], st["pri"], st["delay"], st["releases"]) == ("delayed", 7, 100, 1)
    assert client.peek_delayed() == Job(jid, b"d")
    with pytest.raises(errors.NotFound, match="no ready job"):
        client.peek_ready()
    assert client.kick(10) == 1
    assert client.peek_ready().id == jid
    assert client.stats_job(jid)["kicks"] == 1


def test_bury_peek_buried_kick_and_kick_job(client: Any) -> None:
    a, b = client.put(b"a"), client.put(b"b")
    with pytest.raises(errors.NotFound, match=f"bury {a}"):
        client.bury(a)  # not reserved
    client.bury(client.reserve(timeout=0), priority=3)
    client.bury(client.reserve(timeout=0).id)
    assert client.peek_buried().id == a
    assert client.stats_job(a)["buries"] == 1 and client.stats_job(a)["state"] == "buried"
    client.kick_job(b)
    with pytest.raises(errors.NotFound, match=f"kick-job {b}"):
        client.kick_job(b)  # now ready
    assert client.kick(10) == 1 and client.kick(10) == 0
    with pytest.raises(errors.NotFound):
        client.peek_buried()


def test_touch_and_not_found_names_the_job(client: Any) -> None:
    jid = client.put(b"t")
    with pytest.raises(errors.NotFound, match=f"touch {jid}"):
        client.touch(jid)
    client.touch(client.reserve(timeout=0))
    with pytest.raises(errors.NotFound, match="peek 999999"):
        client.peek(999999)
    with pytest.raises(errors.NotFound, match="delete 999999"):
        client.delete(999999)
    with pytest.raises(errors.NotFound):
        client.release(999999)
    with pytest.raises(errors.NotFound):
        client.stats_job(999999)


def test_deadline_soon_when_a_held_job_is_in_its_last_second(client: Any) -> None:
    # Given a reserved job with ttr=1 (inside the 1 s safety margin at once)
    jid = client.put(b"soon", ttr=1)
    client.reserve(timeout=0)
    # When reserving again with nothing ready
    with pytest.raises(errors.DeadlineSoon):
        client.reserve(timeout=1)
    # Then the job is still ours and can be released
    assert client.stats_job(jid)["state"] == "reserved"
    client.release(jid)
    assert client.stats_job(jid)["state"] == "ready"


def test_reserve_job_takes_a_specific_job(client: Any) -> None:
    a, b = client.put(b"a"), client.put(b"b")
    assert client.reserve_job(b) == Job(b, b"b")
    with pytest.raises(errors.NotFound, match=f"reserve-job {b}"):
        client.reserve_job(b)
    assert client.reserve(timeout=0).id == a


def test_stats_values_are_typed(client: Any) -> None:
    client.put(b"x")
    s = client.stats()
    assert s["current-jobs-ready"] == 1 and s["cmd-put"] == 1
    assert isinstance(s["version"], str) and isinstance(s["id"], str)
    assert isinstance(s["rusage-utime"], float)
    assert s["draining"] is False
    assert isinstance(s["os"], str) and isinstance(s["hostname"], str)
    assert s["max-job-size"] == 65535


def test_stats_tube_and_pause(client: Any) -> None:
    with pytest.raises(errors.NotFound, match="stats-tube nosuch: no such tube"):
        client.stats_tube("nosuch")
    with pytest.raises(errors.NotFound):
        client.pause_tube("nosuch", 10)
    client.use("p")
    client.put(b"x", priority=10)
    client.pause_tube("p", 100)
    st = client.stats_tube("p")
    assert st["name"] == "p" and st["pause"] == 100 and st["cmd-pause-tube"] == 1
    assert st["current-jobs-urgent"] == 1 and st["current-using"] == 1
    assert list(st)[:2] == ["name", "current-jobs-urgent"]


def test_numeric_tube_name_stays_a_string(client: Any) -> None:
    client.use("123")
    jid = client.put(b"x")
    assert client.stats_tube("123")["name"] == "123"
    assert client.stats_job(jid)["tube"] == "123"
    assert client.list_tubes() == ["default", "123"]


def test_closing_releases_reserved_jobs(server: Any, connect: Any) -> None:
    a = connect(server)
    jid = a.put(b"x", ttr=100)
    assert a.reserve(timeout=0).id == jid
    a.close()
    b = connect(server)
    assert b.reserve(timeout=5).id == jid


def test_explicit_reconnect_restores_use_and_watch(client: Any) -> None:
    client.use("u")
    client.watch("w")
    client.ignore("default")
    client.reconnect()
    assert client.list_tube_used() == "u"
    assert client.list_tubes_watched() == ["w"]


def test_bad_arguments_fail_before_anything_is_sent(client: Any) -> None:
    for bad in ["", "-x", "a b", "a*b", "x" * 201]:
        with pytest.raises(ValueError, match="invalid tube name"):
            client.use(bad)
    with pytest.raises(ValueError, match="priority"):
        client.put(b"x", priority=2**32)
    with pytest.raises(ValueError, match="delay"):
        client.put(b"x", delay=-1)
    with pytest.raises(TypeError, match="body"):
        client.put(123)
    # nothing reached the server
    assert client.stats()["cmd-put"] == 0 and client.list_tube_used() == "default"


def test_large_bodies_cross_many_reads(start_server: Any, connect: Any) -> None:
    # Given a server accepting 2 MB jobs, and bodies larger than one socket read or batch
    server = start_server("-z", "2000000")
    c = connect(server)
    big = bytes(range(256)) * 6000  # 1.5 MB
    bodies = [big, b"\r\n" * 300_000, big[::-1]]  # 1.5 MB, 600 kB, 1.5 MB: several batches
    # When they are put (one, then pipelined) and read back
    first = c.put(big)
    ids = c.put_many(bodies)
    # Then every byte comes back
    assert c.reserve(timeout=0) == Job(first, big)
    for jid, body in zip(ids, bodies, strict=True):
        assert c.peek(jid).body == body
    assert c.stats()["max-job-size"] == 2000000


def test_the_tube_in_use_is_remembered_so_use_is_sent_once(client: Any) -> None:
    # Given a client that used a tube
    client.use("mail")
    sent = client.stats()["cmd-use"]
    # When it uses that tube again and puts into it by name
    client.use("mail")
    client.put(b"a", tube="mail")
    client.put_many([b"b", b"c"], tube="mail")
    # Then no further `use` reached the server, and the jobs are in that tube
    assert client.stats()["cmd-use"] == sent
    assert client.stats_tube("mail")["current-jobs-ready"] == 3
    # When a put names another tube, Then it is used once and stays in use
    client.put(b"d", tube="sms")
    assert client.stats()["cmd-use"] == sent + 1
    assert client.using == "sms" and client.list_tube_used() == "sms"


def test_finish_acknowledges_and_reserves_the_next_job_in_one_call(client: Any) -> None:
    # Given two ready jobs, the first reserved
    first, second = client.put(b"one"), client.put(b"two")
    job = client.reserve(timeout=0)
    seen: list[bool] = []
    # When the first is finished with the next reserve in the same write
    done = client.finish(job, "delete", reserve=True, timeout=0, on_acked=seen.append)
    # Then it is deleted, the second comes back reserved, and on_acked saw the delete first
    assert done.acked and done.reserved == Job(second, b"two") and seen == [True]
    assert done.result_error is None
    with pytest.raises(errors.NotFound):
        client.peek(first)
    assert client.stats_job(second)["state"] == "reserved"
    # And a release with nothing left to reserve reports no job (TIMED_OUT is not an error)
    done = client.finish(second, "release", priority=7, delay=60, reserve=True, timeout=0)
    assert done.acked and done.reserved is None
    assert client.stats_job(second)["state"] == "delayed"


def test_finish_of_a_job_not_reserved_here_says_so_and_still_reserves(client: Any) -> None:
    # Given a ready job nobody reserved
    jid = client.put(b"x")
    # When a finish buries it (only the reserving connection may), with a reserve behind
    done = client.finish(jid, "bury", reserve=True, timeout=0)
    # Then the bury is refused (not acked) and the reserve still ran, taking that job
    assert not done.acked and done.reserved == Job(jid, b"x")
    with pytest.raises(ValueError, match="how must be one of"):
        client.finish(jid, "kick")


def test_finish_keeps_the_result_on_stalkd_and_beanstalkd_drops_the_connection(
        client: Any, server_kind: str) -> None:
    # Given a reserved job
    client.put(b"x")
    job = client.reserve(timeout=0)
    if server_kind == "stalkd":
        # When it is finished with a result to keep, Then stalkd keeps it and deletes the job
        done = client.finish(job, "delete", result=(job.id, 60, b"42"))
        assert done.acked and done.reserved is None and done.result_error is None
        assert client.result_get(job.id) == b"42"
        # And a result for a job never put is refused while the acknowledgement stands
        other = client.put(b"y")
        client.reserve(timeout=0)
        done = client.finish(other, "delete", result=(10**9, 60, b"1"))
        assert done.acked and isinstance(done.result_error, errors.NotFound)
    else:
        # beanstalkd takes the result's body for a command: the replies are out of step
        with pytest.raises(errors.ProtocolError, match="result-put"):
            client.finish(job, "delete", result=(job.id, 60, b"42"))
        assert not client.connected
