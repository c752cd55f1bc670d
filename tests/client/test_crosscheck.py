"""The client's wire code against the server's, without sockets.

Every request the client builds must parse, in ``stalkd.protocol``'s parser (beanstalkd's
grammar), into exactly the command meant; every reply the server's encoder writes must come
back out of the client's reader as the value it encoded. Random arguments via hypothesis.
"""

from __future__ import annotations

import string
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from stalkd.client import _requests as rq
from stalkd.client._wire import ReplyReader
from stalkd.client.job import Job
from stalkd.protocol import NEED_DATA, Parser, encode_reply
from stalkd.protocol import commands as c
from stalkd.protocol.stats import STATS_JOB_KEYS, STATS_KEYS, STATS_TUBE_KEYS

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
tube_chars = string.ascii_letters + string.digits + "-+/;.$_()"
tubes = st.text(tube_chars, min_size=1, max_size=200).filter(lambda t: not t.startswith("-"))
bodies = st.binary(max_size=300)


def parse_one(data: bytes) -> Any:
    p = Parser()
    p.feed(data)
    item = p.next()
    assert p.next() is NEED_DATA, "the request must be exactly one command"
    return item


@given(bodies, u32, u32, u32)
def test_put(body: bytes, pri: int, delay: int, ttr: int) -> None:
    cmd = parse_one(rq.put(body, pri, delay, ttr).data)
    assert cmd == c.Put(pri, delay, max(ttr, 1), body)  # the server raises ttr 0 to 1


@given(tubes)
def test_tube_commands(tube: str) -> None:
    assert parse_one(rq.use(tube).data) == c.Use(tube)
    assert parse_one(rq.watch(tube).data) == c.Watch(tube)
    assert parse_one(rq.ignore(tube).data) == c.Ignore(tube)
    assert parse_one(rq.stats_tube(tube).data) == c.StatsTube(tube)


@given(tubes, u32)
def test_pause_tube(tube: str, delay: int) -> None:
    assert parse_one(rq.pause_tube(tube, delay).data) == c.PauseTube(tube, delay)


@given(u64, u32, u32)
def test_job_commands(jid: int, pri: int, delay: int) -> None:
    assert parse_one(rq.delete(jid).data) == c.Delete(jid)
    assert parse_one(rq.touch(Job(jid, b"")).data) == c.Touch(jid)
    assert parse_one(rq.peek(jid).data) == c.Peek(jid)
    assert parse_one(rq.kick_job(jid).data) == c.KickJob(jid)
    assert parse_one(rq.stats_job(jid).data) == c.StatsJob(jid)
    assert parse_one(rq.reserve_job(jid).data) == c.ReserveJob(jid)
    assert parse_one(rq.release(jid, pri, delay).data) == c.Release(jid, pri, delay)
    assert parse_one(rq.bury(jid, pri).data) == c.Bury(jid, pri)


@given(st.integers(0, 2**31 - 1), u32)
def test_reserve_and_kick(timeout: int, bound: int) -> None:
    assert parse_one(rq.reserve(timeout).data) == c.ReserveWithTimeout(timeout)
    assert parse_one(rq.kick(bound).data) == c.Kick(bound)


def test_argumentless_commands() -> None:
    cases = [(rq.reserve(None), c.Reserve()), (rq.peek_ready(), c.PeekReady()),
             (rq.peek_delayed(), c.PeekDelayed()), (rq.peek_buried(), c.PeekBuried()),
             (rq.stats(), c.Stats()), (rq.list_tubes(), c.ListTubes()),
             (rq.list_tube_used(), c.ListTubeUsed()),
             (rq.list_tubes_watched(), c.ListTubesWatched())]
    for req, cmd in cases:
        assert parse_one(req.data) == cmd
    assert parse_one(rq.QUIT) == c.Quit()


def read_back(reply: Any) -> Any:
    r = ReplyReader()
    r.feed(encode_reply(reply))
    resp = r.next()
    assert resp is not None and r.buffered == 0
    return resp


@given(u64, bodies, st.sampled_from(["RESERVED", "FOUND"]))
def test_job_replies(jid: int, body: bytes, word: Any) -> None:
    req = rq.peek(1) if word == "FOUND" else rq.reserve(None)
    assert rq.interpret(req, read_back(c.JobReply(word, jid, body))) == Job(jid, body)


text_values = st.text(string.ascii_letters + string.digits + " #.-_()", max_size=40).map(str.strip)


@given(st.data())
def test_stats_bodies(data: st.DataObject) -> None:
    def value(key: str) -> int | float | bool | str:
        if key in ("version", "hostname", "os", "platform"):
            return data.draw(text_values)
        if key == "id":
            return data.draw(st.text("0123456789abcdef", min_size=16, max_size=16))
        if key.startswith("rusage-"):
            return data.draw(st.integers(0, 10**9)) / 1e6  # microseconds, as the server has
        if key == "draining":
            return data.draw(st.booleans())
        if key == "role":
            return data.draw(st.sampled_from(["primary", "standby"]))
        return data.draw(u64)

    values = {k: value(k) for k in STATS_KEYS}
    got = rq.interpret(rq.stats(), read_back(c.YamlDict("stats", values)))
    assert list(got) == list(STATS_KEYS)
    for k, v in values.items():
        assert got[k] == v and type(got[k]) is type(v), k


@given(tubes, u64, st.sampled_from(["ready", "delayed", "reserved", "buried"]))
def test_stats_job_and_tube_bodies(tube: str, n: int, state: str) -> None:
    job = {k: n for k in STATS_JOB_KEYS} | {"tube": tube, "state": state}
    assert rq.interpret(rq.stats_job(1), read_back(c.YamlDict("stats-job", job))) == job
    tube_stats = {k: n for k in STATS_TUBE_KEYS} | {"name": tube}
    got = rq.interpret(rq.stats_tube("x"), read_back(c.YamlDict("stats-tube", tube_stats)))
    assert got == tube_stats and type(got["name"]) is str


@given(st.lists(tubes, max_size=20))
def test_list_replies(names: list[str]) -> None:
    assert rq.interpret(rq.list_tubes(), read_back(c.YamlList(tuple(names)))) == names


@given(st.sampled_from(["INSERTED", "WATCHING", "KICKED"]), u64)
def test_number_replies(word: str, n: int) -> None:
    req = {"INSERTED": rq.put(b"", 0, 0, 1), "WATCHING": rq.watch("a"), "KICKED": rq.kick(1)}[word]
    assert rq.interpret(req, read_back(c.Reply(word, (n,)))) == n
