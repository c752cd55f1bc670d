"""A consumer group's acks above its head, kept as ranges (``ackranges.AckedRanges``): the same
answers as the set of offsets they replaced, memory by gaps not by offsets, and checkpoints
byte for byte as before."""

from __future__ import annotations

import os
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stalkd.log import Log, ackranges
from stalkd.log.ackranges import AckedRanges
from stalkd.log.cursor import CursorFile, CursorState, encode_slot, read_cursor


def runs(offsets: set[int]) -> tuple[tuple[int, int], ...]:
    """The old checkpoint's ranges of a set of offsets (group.py's ``_ranges`` before ranges)."""
    out: list[tuple[int, int]] = []
    for o in sorted(offsets):
        if out and out[-1][1] == o:
            out[-1] = (out[-1][0], o + 1)
        else:
            out.append((o, o + 1))
    return tuple(out)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 200)),
        st.tuples(st.just("range"), st.integers(0, 200), st.integers(0, 30)),
        st.tuples(st.just("front"), st.integers(0, 200)),
        st.tuples(st.just("drop"), st.integers(0, 220)),
        st.tuples(st.just("clear")),
    ),
    max_size=300,
)


def check_chunks(r: AckedRanges, max_words: int) -> None:
    """No chunk empty, over size or (unless alone) under a quarter full; each head its chunk's
    first word."""
    assert all(0 < len(c) <= max_words and len(c) % 2 == 0 for c in r._chunks)
    assert len(r._chunks) == 1 or all(len(c) >= max_words // 4 for c in r._chunks)
    assert r._heads == [c[0] for c in r._chunks]


@pytest.mark.parametrize("max_words", [4, 12, 16, 1024])  # small chunks: splits and cross-chunk merges
@settings(max_examples=200, deadline=None)
@given(ops=OPS)
def test_ranges_answer_as_the_set_of_offsets_does(max_words: int, ops: list[tuple[object, ...]]) -> None:
    saved, ackranges._MAX_WORDS = ackranges._MAX_WORDS, max_words
    try:
        run_against_a_set(ops, max_words)
    finally:
        ackranges._MAX_WORDS = saved


def run_against_a_set(ops: list[tuple[object, ...]], max_words: int) -> None:
    r = AckedRanges()
    model: set[int] = set()
    for op in ops:
        kind = op[0]
        if kind == "add":
            off = int(op[1])  # type: ignore[call-overload]
            assert r.add(off) == (off not in model)
            model.add(off)
        elif kind == "range":
            a, k = int(op[1]), int(op[2])  # type: ignore[call-overload]
            r.add_range(a, a + k)
            model.update(range(a, a + k))
        elif kind == "front":
            head = int(op[1])  # type: ignore[call-overload]
            want = head
            if model and min(model) == head:
                while want in model:
                    model.remove(want)
                    want += 1
            assert r.take_front(head) == want
        elif kind == "drop":
            target = int(op[1])  # type: ignore[call-overload]
            below = {o for o in model if o < target}
            assert r.drop_below(target) == len(below)
            model -= below
        else:
            r.clear()
            model.clear()
        # Then every question gets the set's answer, and there is one range per run of offsets
        assert r.pairs() == runs(model)
        assert r.n_ranges == len(runs(model))  # memory: 2 words per range, nothing per offset
        assert len(r) == len(model) and bool(r) == bool(model)
        assert sorted(r) == sorted(model)
        assert r.first == (min(model) if model else None)
        assert [o for o in range(-1, 235) if o in r] == sorted(model)
        assert list(r.words()) == [x for pair in runs(model) for x in pair]
        check_chunks(r, max_words)


def test_many_ranges_in_random_order_stay_in_bounded_chunks() -> None:
    # Given 200,000 offsets acked in a random order (up to ~50,000 ranges on the way)
    import random

    offs = list(range(200_000))
    random.Random(7).shuffle(offs)
    r = AckedRanges()
    model: set[int] = set()
    for i, off in enumerate(offs):
        assert r.add(off)
        model.add(off)
        if i % 20_000 == 0:
            assert r.pairs() == runs(model)
            check_chunks(r, ackranges._MAX_WORDS)
            # Then chunks stay at least a quarter full: memory by ranges, whatever came before
            assert len(r._chunks) <= r.n_ranges // 128 + 1
    assert r.pairs() == ((0, 200_000),) and len(r._chunks) == 1
    # When the head takes ranges off the front one by one, then the chunks go with them
    r.clear()
    for off in range(1, 6000, 2):
        r.add(off)
    head = 0
    for _ in range(2000):
        head = r.take_front(head + 1)
    assert head == 4000 and r.first == 4001 and r.n_ranges == 1000 and len(r) == 1000
    check_chunks(r, ackranges._MAX_WORDS)
    assert 4000 not in r and 4002 not in r and 4001 in r and 4003 in r and 5999 in r and 6000 not in r


def test_a_stuck_head_under_a_million_acks_in_order_holds_one_range(tmp_path: Path) -> None:
    # Given a head that is never acked (a poison message) and every record after it acked in
    # order, or every other one
    n = 1_000_000
    with Log.open(tmp_path, durability="never") as log:
        for i in range(0, n + 1, 100_000):
            log.append_many([b"x"] * min(100_000, n + 1 - i))
        g = log.group("g", durability="every:100000000")
        h = log.group("h", durability="every:100000000")
        while g.poll(50_000):
            pass
        while h.poll(50_000):
            pass
        for off in range(1, n + 1):
            g.ack(off)
        for off in range(1, n + 1, 2):
            h.ack(off)
        # Then what each group keeps is one range per gap: 1, and n / 2, not one entry per ack
        assert g.committed == 0 and g._acked.n_ranges == 1 and g.lag == 1
        assert h.committed == 0 and h._acked.n_ranges == n // 2 and h.lag == n // 2 + 1
        assert sum(len(c) for c in h._acked._chunks) == n  # two words a range
        # When the head is acked, then it jumps the whole range at once
        g.ack(0)
        assert g.committed == n + 1 and g._acked.n_ranges == 0 and g.lag == 0


def test_a_checkpoint_of_words_is_the_slot_of_the_same_ranges_as_pairs() -> None:
    # (version 1 up to 65,535 ranges, version 2 beyond: the slot format is unchanged)
    for count in (0, 1, 65_535, 65_536):
        pairs = tuple((10 + 3 * i, 12 + 3 * i) for i in range(count))
        words = array("Q", [x for p in pairs for x in p])
        state = CursorState(9, 4, 0, 0, 64, 5, 6)
        slot = encode_slot(CursorState(9, 4, 0, 0, 64, 5, 6, pairs))
        assert encode_slot(state, [words]) == slot
        assert encode_slot(state, [words[:2 * (count // 3)], array("Q"), words[2 * (count // 3):]]) == slot
        r = AckedRanges(pairs)
        assert encode_slot(state, r.chunks()) == slot and r.n_ranges == count


def test_acks_ahead_of_the_log_end_in_a_cursor_are_void(tmp_path: Path) -> None:
    # Given a cursor that acked offsets 7 and 8 of a log that holds 5 records (those records
    # lost to a power loss: the offsets will be new records)
    with Log.open(tmp_path, durability="never") as log:
        log.append_many([b"r%d" % i for i in range(5)])
        os.makedirs(tmp_path / "groups", exist_ok=True)
        f = CursorFile(str(tmp_path / "groups" / "g.cur"))
        f.write(CursorState(1, 2, 0, 0, 0, 0, 0, ((3, 4), (7, 9))), fsync=True)
        f.close()
        g = log.group("g")
        # When records 5..9 are appended, then all of them are delivered but 3, acked before
        log.append_many([b"r%d" % i for i in range(5, 10)])
        assert g.lag == 7
        assert [m.offset for m in g.poll(20)] == [2, 4, 5, 6, 7, 8, 9]


def test_a_drop_onto_acked_records_moves_the_head_past_them(tmp_path: Path) -> None:
    # Given records 3..5 acked above a head at 0, and a lag limit that drops the oldest records
    with Log.open(tmp_path, durability="never") as log:
        log.append_many([b"r%d" % i for i in range(6)])
        g = log.group("g", max_lag_items=6, overflow="drop", durability="always")
        got = g.poll(6)
        g.ack(*got[3:6])
        assert (g.committed, g.lag) == (0, 3)
        # When four more records take the lag to 7, over the limit: the drop ends at 4, acked
        log.append_many([b"r6", b"r7", b"r8", b"r9"])
        g.enforce_lag()
        # Then the head joins 4..5 (0..2 counted as dropped, 3 was acked) and moves on from 6
        # (before, the head stopped at 4, acked already, and no ack could move it again)
        assert (g.committed, g.dropped, g.lag) == (6, 3, 4)
        assert [m.offset for m in g.poll(5)] == [6, 7, 8, 9]
        g.ack(6)
        assert g.committed == 7
    with Log.open(tmp_path, durability="never") as log:
        state = read_cursor(str(tmp_path / "groups" / "g.cur"))
        assert state is not None and state.committed == 7 and state.acked == ()


GROUP_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("poll"), st.integers(1, 12)),
        st.tuples(st.just("ack_run"), st.integers(0, 40), st.integers(1, 10)),  # one call, a run
        st.tuples(st.just("ack"), st.integers(0, 40)),
        st.tuples(st.just("nack"), st.integers(0, 40)),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(ops=GROUP_OPS)
def test_a_group_acks_as_the_set_it_kept_did(tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[int, ...]]) -> None:
    """Random polls, acks (single, and runs in one call: the path that adds a whole range),
    nacks and a reopen, against a model of the old set of acked offsets."""
    d = tmp_path_factory.mktemp("g")
    n = 40
    with Log.open(d, durability="never") as log:
        log.append_many([b"r%d" % i for i in range(n)])
        g = log.group("g", durability="always")
        committed, acked, next_read = 0, set[int](), 0
        out: set[int] = set()
        redeliver: set[int] = set()
        for op in ops:
            if op[0] == "poll":
                want = sorted(redeliver)[: op[1]]
                while len(want) < op[1] and next_read < n:
                    if next_read not in acked and next_read >= committed:
                        want.append(next_read)
                    next_read += 1
                assert [m.offset for m in g.poll(op[1])] == want
                redeliver -= set(want)
                out |= set(want)
                continue
            if op[0] == "ack_run":
                run = [o for o in range(op[1], op[1] + op[2]) if o < next_read]
            else:
                run = [op[1]] if op[1] < next_read else []
            if not run or not set(run) <= out | acked | set(range(committed)):
                continue  # only what was delivered (or acked already) may be acked or nacked
            if op[0] == "nack":
                if run[0] in out:
                    g.nack(run[0])
                    out.discard(run[0])
                    redeliver.add(run[0])
                continue
            g.ack(*run)
            out -= set(run)
            acked |= {o for o in run if o >= committed}
            while committed in acked:
                acked.remove(committed)
                committed += 1
            next_read = max(next_read, committed)
            assert g.committed == committed and g._acked.pairs() == runs(acked)
            assert g.lag == n - committed - len(acked)
            state = read_cursor(str(d / "groups" / "g.cur"))
            assert state is not None and (state.committed, state.acked) == (committed, runs(acked))
    # When reopened, then exactly the offsets not acked come back, in order
    with Log.open(d, durability="never") as log:
        g = log.group("g")
        assert [m.offset for m in g.poll(n)] == [o for o in range(committed, n) if o not in acked]
