"""A consumer group's read hints (one per poll) stay within ``HINTS_MAX`` while its head is stuck,
and the head moving into a thinned stretch still gets its exact position: ``lag_bytes`` counts
from the head itself, and redelivery reads the right record."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stalkd.log import Log, group
from stalkd.log.frame import frame_size

POLLS = 3 * group.HINTS_MAX  # thinned twice or more


def payload(i: int) -> bytes:
    return b"record-%06d-" % i + b"x" * (i % 37)  # sizes vary: a position off by a record shows


def test_a_stuck_head_keeps_the_hints_bounded_and_the_head_exact_when_it_moves(tmp_path: Path) -> None:
    with Log.open(tmp_path, durability="never") as log:
        n = POLLS
        log.append_many([payload(i) for i in range(n)])
        g = log.group("g")
        msgs = []
        # Given a head stuck on offset 0 and a gap at k (both polled, never acked) while every
        # other record is polled one at a time and acked
        k = n // 3 + 37  # in the thinned middle by the end, between two hints kept there
        for _ in range(n):
            (m,) = g.poll(1)
            msgs.append(m)
            if m.offset not in (0, k):
                g.ack(m)
            assert len(g._hint_offs) <= group.HINTS_MAX
        assert g.committed == 0
        assert g._sparse_below > k  # (the stretch around k was thinned)
        # When the head is acked, the head moves to the gap at k
        g.ack(msgs[0])
        assert g.committed == k
        # Then lag_bytes counts from k exactly: the frames of k..n-1
        assert g.lag_bytes == sum(frame_size(len(payload(i))) for i in range(k, n))
        # And k, nacked, is redelivered as itself
        g.nack(msgs[k])
        (again,) = g.poll(1)
        assert again.offset == k and again.bytes() == payload(k)
        g.ack(again)
        assert g.committed == n and g.lag_bytes == 0


def test_a_group_reopened_after_thinning_resumes_where_its_head_is(tmp_path: Path) -> None:
    n = POLLS
    with Log.open(tmp_path, durability="never") as log:
        log.append_many([payload(i) for i in range(n)])
        g = log.group("g")
        held = None
        for _ in range(n):
            (m,) = g.poll(1)
            if m.offset == n // 2:
                held = m  # a head stuck halfway: thinned hints below it, none needed
            else:
                g.ack(m)
        assert held is not None and g.committed == n // 2
        g.close()
    with Log.open(tmp_path, durability="never") as log:
        g = log.group("g")
        assert g.committed == n // 2
        assert g.lag_bytes == sum(frame_size(len(payload(i))) for i in range(n // 2, n))
        (m,) = g.poll(1)  # the one never acked comes back
        assert m.offset == n // 2 and m.bytes() == payload(n // 2)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.sampled_from(["poll", "ack_some", "ack_head", "nack_one"]), st.integers(1, 9)),
                    min_size=1, max_size=120))  # fmt: skip
def test_hints_stay_bounded_and_the_head_exact_whatever_the_polls_and_acks(
        ops: list[tuple[str, int]], tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Random polls, acks (in and out of order) and nacks with a small HINTS_MAX: the hints stay
    within it, every delivery is the record of its offset, and wherever the head lands below the
    thinned mark (``_sparse_below``) after an ack, lag_bytes counts from the head exactly."""
    monkeypatch.setattr(group, "HINTS_MAX", 8)
    n = 200
    sizes = [frame_size(len(payload(i))) for i in range(n)]
    with Log.open(tmp_path_factory.mktemp("g"), durability="never") as log:
        log.append_many([payload(i) for i in range(n)])
        g = log.group("g")
        out: list[int] = []  # delivered, not yet acked nor nacked
        for op, k in ops:
            before = g.committed
            if op == "poll":
                for m in g.poll(k):
                    assert m.bytes() == payload(m.offset)
                    out.append(m.offset)
            elif op == "ack_some" and out:
                done = out[1::2] or out[:1]  # every other one out, or the last one left
                out = [o for o in out if o not in done]
                g.ack(*done)
            elif op == "ack_head" and out:
                head = min(out)
                out.remove(head)
                g.ack(head)
            elif op == "nack_one" and out:
                g.nack(out.pop(k % len(out)))
            assert len(g._hint_offs) <= group.HINTS_MAX
            if g.committed != before and g.committed < g._sparse_below:
                assert g.lag_bytes == sum(sizes[g.committed:])
        # then everything delivered and acked: the head at the end, nothing behind
        while msgs := g.poll(50):
            for m in msgs:
                assert m.bytes() == payload(m.offset)
            g.ack(*msgs)
        if out:
            g.ack(*out)
        assert g.committed == n and g.lag_bytes == 0


def test_acks_without_polls_move_the_head_through_thinned_stretches_within_the_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setattr(group, "HINTS_MAX", 8)
    n = 100
    with Log.open(tmp_path, durability="never") as log:
        log.append_many([payload(i) for i in range(n)])
        g = log.group("g")
        msgs = [g.poll(1)[0] for _ in range(n)]  # all out at once: the head stays at 0
        assert g._sparse_below > 0
        for m in msgs:  # then acked one by one, no poll in between
            g.ack(m)
            assert len(g._hint_offs) <= group.HINTS_MAX
            if g.committed < g._sparse_below:
                assert g.lag_bytes == sum(frame_size(len(payload(i))) for i in range(g.committed, n))
        assert g.committed == n
