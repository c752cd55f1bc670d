"""The campaign's checker on hand-made histories: each rule finds what it is for and stays quiet
where the uncertainty of an unknown outcome or a fault allows it (no socket, no clock)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the campaign package; after the rest

from campaign.checker import check, count  # noqa: E402
from campaign.history import WATCH, Event, History, Op, pair, read_events  # noqa: E402


def op(process: str, f: str, t0: float, t1: float | None, type_: str = "ok", node: str = "", **value: Any) -> Op:
    return Op(process, f, type_, t0, t1, value, node)


def put(jid: int | None, body: str, t0: float, t1: float, *, pri: int = 10, delay: int = 0, ttr: int = 5,
        tube: str = "t0", type_: str = "ok", node: str = "") -> Op:
    extra = {} if jid is None else {"id": jid}
    return op(f"producer-{body}", "put", t0, t1, type_, node, body=body, tube=tube, pri=pri, delay=delay,
              ttr=ttr, **extra)


def reserve(process: str, jid: int, body: str, t0: float, t1: float, tube: str = "t0") -> Op:
    return op(process, "reserve", t0, t1, tube=tube, id=jid, body=body)


def final(t: float, *jobs: tuple[int, str]) -> Op:
    return op("final", "final", t, t + 0.1,
              jobs=[{"id": j, "body": b, "state": "ready", "tube": "t0", "pri": 10} for j, b in jobs])


def kinds(*ops: Op) -> dict[str, int]:
    return {k: n for k, n in count(check(ops)).items() if n}


def test_a_clean_history_has_no_anomaly() -> None:
    assert kinds(put(1, "a", 0, 0.1), put(2, "b", 0.2, 0.3), reserve("w", 1, "a", 0.4, 0.5),
                 op("w", "delete", 0.6, 0.7, id=1), final(1, (2, "b"))) == {}


def test_an_acknowledged_put_missing_at_the_end_is_lost_unless_a_delete_may_have_run() -> None:
    assert kinds(put(1, "a", 0, 0.1), final(1)) == {"lost": 1}
    assert kinds(put(1, "a", 0, 0.1), op("w", "delete", 0.2, None, "info", id=1), final(1)) == {}
    # a put of unknown outcome may be lost: that is what unknown means
    assert kinds(put(None, "a", 0, None, type_="info"), final(1)) == {}


def test_a_deleted_job_delivered_again_or_read_at_the_end_is_resurrected() -> None:
    base = [put(1, "a", 0, 0.1), reserve("w", 1, "a", 0.2, 0.3), op("w", "delete", 0.4, 0.5, id=1)]
    assert kinds(*base, reserve("v", 1, "a", 0.6, 0.7), final(1)) == {"resurrected": 1}
    assert kinds(*base, final(1, (1, "a"))) == {"resurrected": 1}
    # a reserve sent before the delete was acknowledged may have been served before it
    assert kinds(*base, reserve("v", 1, "a", 0.45, 0.7), final(1)) == {}


def test_a_body_nobody_put_is_invented_and_one_put_under_two_ids_is_duplicated() -> None:
    assert kinds(put(1, "a", 0, 0.1), final(1, (1, "a"), (2, "zz"))) == {"invented": 1}
    assert kinds(put(1, "a", 0, 0.1), final(1, (1, "a"), (2, "a"))) == {"duplicated": 1}
    assert kinds(put(None, "a", 0, None, type_="info"), final(1, (4, "a"), (5, "a"))) == {"duplicated": 1}


def test_an_id_given_twice_or_delivered_with_another_body_is_reused() -> None:
    assert kinds(put(1, "a", 0, 0.1), put(1, "b", 0.2, 0.3), final(1, (1, "b"))) == {"reused-id": 1}
    assert kinds(put(1, "a", 0, 0.1), put(None, "b", 0.2, None, type_="info"),
                 reserve("w", 1, "b", 0.5, 0.6), op("w", "delete", 0.7, 0.8, id=1), final(1)) == {"reused-id": 1}


def test_two_holders_before_the_ttr_ran_out_is_a_double_hold_unless_the_first_let_go() -> None:
    a = [put(1, "a", 0, 0.1, ttr=5), reserve("w", 1, "a", 1.0, 1.1)]
    assert kinds(*a, reserve("v", 1, "a", 3.0, 3.1), final(9, (1, "a"))) == {"double-hold": 1}
    assert kinds(*a, reserve("v", 1, "a", 6.0, 6.1), final(9, (1, "a"))) == {}  # after the TTR
    released = op("w", "release", 2.0, 2.1, id=1, pri=10, delay=0)
    assert kinds(*a, released, reserve("v", 1, "a", 3.0, 3.1), final(9, (1, "a"))) == {}
    dropped = op("w", "reserve", 2.0, 2.5, "info", tube="t0")  # w's connection broke
    assert kinds(*a, dropped, reserve("v", 1, "a", 3.0, 3.1), final(9, (1, "a"))) == {}
    kill = op("nemesis", "start", 2.0, 2.1, nemesis="kill", breaks=True)
    assert kinds(*a, kill, reserve("v", 1, "a", 3.0, 3.1), final(9, (1, "a"))) == {}
    pause = op("nemesis", "start", 2.0, 2.1, nemesis="pause", breaks=False)
    assert kinds(*a, pause, reserve("v", 1, "a", 3.0, 3.1), final(9, (1, "a"))) == {"double-hold": 1}


def test_a_less_urgent_job_served_while_a_more_urgent_one_was_ready_breaks_priority() -> None:
    jobs = [put(1, "a", 0, 0.1, pri=5), put(2, "b", 0.2, 0.3, pri=1)]
    assert kinds(*jobs, reserve("w", 1, "a", 1, 1.1), final(9, (1, "a"), (2, "b"))) == {"priority": 1}
    assert kinds(*jobs, reserve("w", 2, "b", 1, 1.1), final(9, (1, "a"), (2, "b"))) == {}
    # another tube's urgent job is not this tube's business
    other = put(2, "b", 0.2, 0.3, pri=1, tube="t1")
    assert kinds(jobs[0], other, reserve("w", 1, "a", 1, 1.1), final(9, (1, "a"), (2, "b"))) == {}
    # the urgent put acknowledged only after the reserve was sent: it may have come too late
    late = put(2, "b", 0.2, 1.05, pri=1)
    assert kinds(jobs[0], late, reserve("w", 1, "a", 1, 1.1), final(9, (1, "a"), (2, "b"))) == {}
    # a reserve of unknown outcome in the tube may be holding the urgent job
    lost_reply = op("v", "reserve", 0.5, None, "info", tube="t0")
    assert kinds(*jobs, lost_reply, reserve("w", 1, "a", 1, 1.1), final(9, (1, "a"), (2, "b"))) == {}


def test_a_job_delivered_before_its_delay_ran_is_early() -> None:
    assert kinds(put(1, "a", 0, 0.1, delay=2), reserve("w", 1, "a", 1, 1.5), final(9, (1, "a"))) == {
        "early-delay": 1}
    assert kinds(put(1, "a", 0, 0.1, delay=2), reserve("w", 1, "a", 1, 2.1), final(9, (1, "a"))) == {}
    rel = [put(1, "a", 0, 0.1), reserve("w", 1, "a", 1, 1.1), op("w", "release", 1.2, 1.3, id=1, pri=10, delay=3)]
    assert kinds(*rel, reserve("v", 1, "a", 2, 2.5), final(9, (1, "a"))) == {"early-delay": 1}
    assert kinds(*rel, reserve("v", 1, "a", 2, 4.5), final(9, (1, "a"))) == {}


def test_an_acknowledgement_from_a_fenced_primary_is_flagged() -> None:
    promote = op("nemesis", "promote", 5, 5.5, old="p", new="s")
    assert kinds(put(1, "a", 0, 0.1, node="p"), promote, put(2, "b", 6, 6.1, node="p"),
                 final(9, (1, "a"), (2, "b"))) == {"fenced-ack": 1}
    assert kinds(put(1, "a", 0, 0.1, node="p"), promote, put(2, "b", 6, 6.1, node="s"),
                 final(9, (1, "a"), (2, "b"))) == {}


def test_a_promotion_the_harness_saw_fences_like_one_it_made() -> None:
    # under automatic failover the watch records it, while the nemesis's own op is outstanding
    seen = op(WATCH, "promote", 5, 5.5, old="p", new="s")
    assert kinds(put(1, "a", 0, 0.1, node="p"), op("nemesis", "start", 4, 8), seen,
                 put(2, "b", 6, 6.1, node="p"), final(9, (1, "a"), (2, "b"))) == {"fenced-ack": 1}


def test_a_history_round_trips_through_its_file_and_pairs_its_events(tmp_path: Path) -> None:
    clock = iter([0.0, 0.25, 0.5, 0.75, 1.0]).__next__
    h = History(tmp_path / "h.jsonl", clock=clock)
    a = h.invoke("producer-0", "put", {"body": "a"}, node="p")
    b = h.invoke("worker-0", "reserve", {"tube": "t0"})
    h.complete(a, "ok", {"id": 1})
    h.complete(b, "info", {"error": "ConnectionClosed"})
    h.invoke("producer-0", "put", {"body": "b"})
    h.close()
    events = read_events(tmp_path / "h.jsonl")
    assert events == h.events
    ops = pair(events)
    assert [(o.process, o.type, o.invoke, o.complete) for o in ops] == [
        ("producer-0", "ok", 0.0, 0.5), ("worker-0", "info", 0.25, 0.75), ("producer-0", "info", 1.0, None)]
    assert ops[0].value == {"body": "a", "id": 1} and ops[0].node == "p"


def test_a_completion_nobody_invoked_is_a_harness_error() -> None:
    with pytest.raises(ValueError, match="never invoked"):
        pair([Event("w", "ok", "reserve", 1.0)])
    with pytest.raises(ValueError, match="still outstanding"):
        pair([Event("w", "invoke", "reserve", 1.0), Event("w", "invoke", "delete", 2.0)])


def test_a_node_promoted_back_is_no_longer_fenced() -> None:
    away = op("nemesis", "start", 5, 5.5, old="p", new="s")
    back = op("nemesis", "start", 8, 8.5, old="s", new="p")
    assert kinds(put(1, "a", 0, 0.1, node="p"), away, back, put(2, "b", 9, 9.1, node="p"),
                 final(10, (1, "a"), (2, "b"))) == {}
    assert kinds(put(1, "a", 0, 0.1, node="p"), away, back, put(2, "b", 7, 7.1, node="p"),
                 final(10, (1, "a"), (2, "b"))) == {"fenced-ack": 1}
