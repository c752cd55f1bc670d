"""The overview's page of tubes (admin/tubepage.py), on a real engine's tubes, without a loop:
orders, search, the internal tubes, offsets deep in the list, and sums over every tube, with
slices far smaller than the list so that every page crosses slice boundaries."""

from __future__ import annotations

import pytest

from stalkd.admin.tubepage import SORTS, TubePage
from stalkd.engine import Engine
from stalkd.engine.objects import Tube
from stalkd.protocol import commands as C


def _engine() -> Engine:
    """Tubes t000..t059 (t{i} holds i % 7 ready jobs and, when i % 5 == 0, one buried; the
    empty ones are dropped), then stalkd.failed with 2 jobs."""
    eng = Engine()
    eng.connect(1, 0.0)
    for i in range(60):
        eng.apply(1, C.Use(f"t{i:03d}"), 0.0)
        for _ in range(i % 7):
            eng.apply(1, C.Put(0, 0, 60, b"x"), 0.0)
        if i % 5 == 0:
            eng.apply(1, C.Watch(f"t{i:03d}"), 0.0)
            eng.apply(1, C.Put(0, 0, 60, b"b"), 0.0)
            got = eng.apply(1, C.ReserveJob(max(eng.jobs)), 0.0).reply
            assert isinstance(got, C.JobReply)
            eng.apply(1, C.Bury(got.id, 0), 0.0)
            eng.apply(1, C.Ignore(f"t{i:03d}"), 0.0)
    eng.apply(1, C.Use("stalkd.failed"), 0.0)
    eng.apply(1, C.Put(0, 0, 60, b"dead"), 0.0)
    eng.apply(1, C.Put(0, 0, 60, b"dead"), 0.0)
    eng.apply(1, C.Use("default"), 0.0)
    return eng


def _page(tubes: list[Tube], **kw: object) -> TubePage:
    p = TubePage(tubes, step=7, **kw)  # type: ignore[arg-type]
    steps = 0
    while not p.step():
        steps += 1
        assert steps < 1000
    return p


def _names(p: TubePage) -> list[str]:
    return [t.name for t in p.page()]


def _jobs(t: Tube) -> int:
    return len(t.ready) + t.reserved + len(t.delayed) + len(t.buried)


def test_every_order_pages_through_the_same_tubes_once() -> None:
    eng = _engine()
    tubes = list(eng.tube_order)
    for sort in SORTS:
        seen: list[str] = []
        for offset in range(0, len(tubes), 9):
            seen.extend(_names(_page(tubes, sort=sort, offset=offset, limit=9)))
        assert sorted(seen) == sorted(t.name for t in tubes), sort
        assert len(seen) == len(tubes), sort


def test_orders() -> None:
    eng = _engine()
    tubes = list(eng.tube_order)
    everything = len(tubes)
    assert _names(_page(tubes, limit=everything)) == [t.name for t in tubes]  # created
    assert _names(_page(tubes, sort="name", limit=everything)) == sorted(t.name for t in tubes)
    busiest = _page(tubes, sort="jobs", limit=everything).page()
    assert [_jobs(t) for t in busiest] == sorted((_jobs(t) for t in tubes), reverse=True)
    for a, b in zip(busiest, busiest[1:], strict=False):  # ties in creation order
        if _jobs(a) == _jobs(b):
            assert tubes.index(a) < tubes.index(b)
    buried = _page(tubes, sort="buried", limit=12).page()
    assert [t.name for t in buried] == [f"t{i:03d}" for i in range(0, 60, 5)]
    # a page deep in the list: the same as that part of the whole order
    assert _names(_page(tubes, sort="jobs", offset=31, limit=5)) == [t.name for t in busiest[31:36]]
    assert _names(_page(tubes, sort="jobs", offset=500, limit=5)) == []


def test_search_and_internal_tubes() -> None:
    eng = _engine()
    tubes = list(eng.tube_order)
    found = [t.name for t in tubes if "t04" in t.name]  # t042 and t049, empty, are gone
    assert len(found) == 8
    p = _page(tubes, q="t04", limit=50)
    assert _names(p) == found and p.matched == 8
    p = _page(tubes, q="t04", sort="jobs", limit=3)
    assert p.matched == 8 and _names(p) == ["t040", "t041", "t048"]  # 5 + 1 buried, 6, 6
    assert "stalkd.failed" in _names(_page(tubes, limit=100))
    p = _page(tubes, internal=False, limit=100)
    assert "stalkd.failed" not in _names(p) and p.matched == len(tubes) - 1
    assert _page(tubes, q="no such tube").page() == []


def test_totals_sum_every_tube_whatever_the_page() -> None:
    eng = _engine()
    tubes = list(eng.tube_order)
    p = _page(tubes, q="t00", sort="name", limit=1)
    other = [t for t in tubes if not t.name.startswith("stalkd.")]
    assert p.totals["other"] == {
        "tubes": len(other), "ready": sum(len(t.ready) for t in other), "reserved": 0, "delayed": 0,
        "buried": 12, "puts": sum(t.total_jobs for t in other), "deletes": 0}
    assert p.totals["internal"] == {"tubes": 1, "ready": 2, "reserved": 0, "delayed": 0,
                                    "buried": 0, "puts": 2, "deletes": 0}


def test_an_unknown_order_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown sort"):
        TubePage([], sort="size")
