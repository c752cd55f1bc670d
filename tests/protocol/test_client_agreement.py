"""The protocol layer and the client agree on the wire: every request the client builds parses
to the command it means, and every reply we encode reads back to the values we encoded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from stalkd.client import _requests as rq
from stalkd.client import _yaml
from stalkd.client._wire import ReplyReader
from stalkd.protocol import NEED_DATA, Parser, encode_reply
from stalkd.protocol.commands import (
    Bury,
    Delete,
    Ignore,
    JobReply,
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
    Release,
    Reply,
    Reserve,
    ReserveJob,
    ReserveWithTimeout,
    Stats,
    StatsJob,
    StatsTube,
    Touch,
    Use,
    Watch,
    YamlDict,
    YamlList,
)  # fmt: skip
from stalkd.protocol.stats import STATS_JOB_KEYS, STATS_TUBE_KEYS

_FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/;.$_()"
tubes = st.builds(lambda a, b: a + b, st.sampled_from(_FIRST), st.text(_FIRST + "-", max_size=199))
ids = st.integers(1, 2**64 - 1)
u32 = st.integers(0, 2**32 - 1)


def _parse(data: bytes) -> object:
    p = Parser(max_job_size=2**20)
    p.feed(data)
    item = p.next()
    assert p.next() is NEED_DATA
    return item


@settings(max_examples=200, deadline=None)
@given(tubes, ids, u32, u32, u32, st.binary(max_size=300), st.integers(0, 2**31 - 1))
def test_client_requests_parse_to_their_commands(tube: str, jid: int, pri: int, delay: int, ttr: int,
                                                 body: bytes, timeout: int) -> None:  # fmt: skip
    cases = [
        (rq.put(body, pri, delay, ttr), Put(pri, delay, max(ttr, 1), body)),
        (rq.use(tube), Use(tube)), (rq.watch(tube), Watch(tube)), (rq.ignore(tube), Ignore(tube)),
        (rq.reserve(None), Reserve()), (rq.reserve(timeout), ReserveWithTimeout(timeout)),
        (rq.reserve_job(jid), ReserveJob(jid)), (rq.delete(jid), Delete(jid)),
        (rq.release(jid, pri, delay), Release(jid, pri, delay)), (rq.bury(jid, pri), Bury(jid, pri)),
        (rq.touch(jid), Touch(jid)), (rq.peek(jid), Peek(jid)), (rq.peek_ready(), PeekReady()),
        (rq.peek_delayed(), PeekDelayed()), (rq.peek_buried(), PeekBuried()),
        (rq.kick(pri), Kick(pri)), (rq.kick_job(jid), KickJob(jid)), (rq.stats_job(jid), StatsJob(jid)),
        (rq.stats_tube(tube), StatsTube(tube)), (rq.stats(), Stats()), (rq.list_tubes(), ListTubes()),
        (rq.list_tube_used(), ListTubeUsed()), (rq.list_tubes_watched(), ListTubesWatched()),
        (rq.pause_tube(tube, delay), PauseTube(tube, delay)),
    ]  # fmt: skip
    for request, command in cases:
        assert _parse(request.data) == command, request.data[:80]


def _read(wire: bytes) -> object:
    r = ReplyReader()
    r.feed(wire)
    resp = r.next()
    assert resp is not None and r.next() is None and r.buffered == 0
    return resp


@settings(max_examples=200, deadline=None)
@given(ids, st.binary(max_size=300), tubes, st.lists(tubes, max_size=5), u32)
def test_encoded_replies_read_back(jid: int, body: bytes, tube: str, names: list[str], n: int) -> None:
    resp = _read(encode_reply(JobReply("RESERVED", jid, body)))
    assert (resp.word, resp.args, resp.body) == ("RESERVED", (str(jid), str(len(body))), body)  # type: ignore[attr-defined]
    assert _read(encode_reply(Reply("INSERTED", (jid,)))) == ("INSERTED", (str(jid),), None)
    assert _read(encode_reply(Reply("USING", (tube,)))) == ("USING", (tube,), None)
    resp = _read(encode_reply(YamlList(tuple(names))))
    assert _yaml.parse_list(resp.body) == names  # type: ignore[attr-defined]
    job = dict.fromkeys(STATS_JOB_KEYS, n) | {"tube": tube, "state": "buried", "id": jid}
    resp = _read(encode_reply(YamlDict("stats-job", job)))
    assert _yaml.parse_dict(resp.body, _yaml.STATS_JOB_STR_KEYS) == job  # type: ignore[attr-defined]
    tube_stats = dict.fromkeys(STATS_TUBE_KEYS, n) | {"name": tube}
    resp = _read(encode_reply(YamlDict("stats-tube", tube_stats)))
    assert _yaml.parse_dict(resp.body, _yaml.STATS_TUBE_STR_KEYS) == tube_stats  # type: ignore[attr-defined]
