"""The engine's job table (engine/jobtable.py) against a plain dict, and the room it gives back."""

from __future__ import annotations

import random
import sys

from stalkd.engine.jobtable import CHUNK, JobTable


def test_the_job_table_answers_as_a_dict_would() -> None:
    rng = random.Random(30)
    t = JobTable()
    d: dict[int, str] = {}
    next_id = 1
    for step in range(60_000):
        r = rng.random()
        if r < 0.5 or not d:
            jid = next_id
            next_id += rng.choice((1, 1, 1, 7, CHUNK))  # gaps, as after an unclean stop
            t[jid] = d[jid] = f"j{jid}"
        elif r < 0.9:
            jid = rng.choice(list(d)) if step % 50 == 0 else min(d)
            del t[jid], d[jid]
        else:
            jid = rng.randrange(next_id + 2)
            assert t.get(jid) == d.get(jid) and (jid in t) == (jid in d)
        if step % 997 == 0:
            assert len(t) == len(d) and bool(t) == bool(d)
            assert sorted(t) == sorted(d) and sorted(t.values()) == sorted(d.values())
            assert sorted(t.items()) == sorted(d.items())
    assert sum(n for _, n in t.chunks()[:-1]) == len(d)
    assert all(n > 0 for _, n in t.chunks()[:-1])  # an emptied chunk is dropped


def test_a_bulk_update_takes_runs_and_stray_ids_alike() -> None:
    t = JobTable()
    ids = list(range(5, 3 * CHUNK, 3)) + [CHUNK + 1, 7 * CHUNK, 2, CHUNK + 2]
    t.update(ids, ids)
    assert len(t) == len(set(ids)) and all(t[i] == i for i in ids)
    assert t.get(CHUNK) is None and 4 not in t
    t.update([2, 3], [20, 30])  # 2 is replaced, not counted twice
    assert len(t) == len(set(ids)) + 1 and t[2] == 20


def test_an_old_chunk_emptied_down_gives_its_room_back() -> None:
    t = JobTable()
    t.update(list(range(2 * CHUNK)), list(range(2 * CHUNK)))  # chunk 0 full, chunk 1 the newest
    full = sys.getsizeof(t._chunks[0])
    for jid in range(CHUNK - 8):
        del t[jid]
    assert len(t) == CHUNK + 8 and sys.getsizeof(t._chunks[0]) * 20 < full
    newest = sys.getsizeof(t._chunks[1])
    for jid in range(CHUNK, 2 * CHUNK - 8):
        del t[jid]
    assert sys.getsizeof(t._chunks[1]) == newest  # the newest chunk still takes puts: kept


def test_the_newest_chunk_stays_while_empty_and_goes_when_a_newer_one_comes() -> None:
    """A queue that drains and fills again keeps its one chunk (the compiled engine's delete
    stays in C for it); an empty chunk left behind by newer ids is dropped, not kept for ever."""
    t = JobTable()
    for _ in range(3):
        t[1] = "a"
        del t[1]
    assert len(t) == 0 and list(t) == [] and len(t._chunks) == 1
    t[CHUNK + 1] = "b"  # a newer chunk: the empty one before it goes
    assert len(t._chunks) == 1 and list(t) == [CHUNK + 1]
    t[2 * CHUNK + 1] = "c"  # the one before it holds a job: it stays
    assert len(t._chunks) == 2 and list(t) == [CHUNK + 1, 2 * CHUNK + 1]


def test_a_chunk_holds_the_ids_of_one_chunk_size_run() -> None:
    t = JobTable()
    for jid in (0, CHUNK - 1, CHUNK, 2 * CHUNK - 1, 2 * CHUNK, 5):
        t[jid] = jid
    assert {k: sorted(c) for k, c in t._chunks.items()} == {
        0: [0, 5, CHUNK - 1], 1: [CHUNK, 2 * CHUNK - 1], 2: [2 * CHUNK]}
    t.update([3 * CHUNK - 2, 3 * CHUNK - 1, 3 * CHUNK], ["a", "b", "c"])  # one run across a boundary
    assert sorted(t._chunks[2]) == [2 * CHUNK, 3 * CHUNK - 2, 3 * CHUNK - 1] and list(t._chunks[3]) == [3 * CHUNK]
