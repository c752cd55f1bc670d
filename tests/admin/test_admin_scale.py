"""Issue 30, the admin endpoint at scale: answers whose size does not grow with the tubes.

With 100k tubes, one overview was 19 MB of JSON and one scrape 38 MB. Here (a real server, a
few hundred tubes, smaller pages and the same rules): the overview answers a page of tubes and
the offset of the next; /metrics names the ``TOP_TUBES`` busiest tubes and sums the rest and
stalkd's own tubes; a move's answer (its old -> new ids) is the same JSON a single encoding
would give, built a slice at a time."""

from __future__ import annotations

import asyncio
import json
import re

import greenstalk

from admin.adminproc import AdminServer
from stalkd.admin.metrics import TOP_TUBES
from stalkd.admin.ops import IDS_PER_SLICE, answer_parts, encode_answer


def _tube_metrics(text: str) -> dict[tuple[str, str], float]:
    return {(m.group(2), m.group(1)): float(m.group(3)) for m in re.finditer(
        r'^stalkd_tube_jobs\{state="(\w+)",tube="([^"]*)"\} (\S+)$', text, re.M)}


def _make_tubes(srv: AdminServer, n: int) -> None:
    c = greenstalk.Client(("127.0.0.1", srv.port))
    try:
        for i in range(n):
            c.use(f"t{i:05d}")
            for _ in range(1 + i % 3):  # 1 to 3 jobs: the busiest are those with 3
                c.put("x")
        c.use("stalkd.failed")
        c.put("dead letter")
    finally:
        c.close()


def test_overview_is_paged_and_metrics_name_only_the_busiest(server: AdminServer) -> None:
    n = TOP_TUBES + 150
    _make_tubes(server, n)
    # When the overview is asked for pages of 40 tubes
    seen: list[str] = []
    offset: int | None = 0
    pages = 0
    while offset is not None:
        status, page = server.request("GET", f"/api/v1/overview?offset={offset}&limit=40")
        assert status == 200 and len(page["tubes"]) <= 40
        assert page["tubes_total"] == n + 2  # default and stalkd.failed
        seen.extend(t["name"] for t in page["tubes"])
        offset = page["next"]
        pages += 1
    # Then the pages hold every tube once, in creation order
    assert pages == -(-(n + 2) // 40)
    assert seen == ["default", *(f"t{i:05d}" for i in range(n)), "stalkd.failed"]
    assert server.request("GET", "/api/v1/overview?limit=x")[0] == 400
    # When /metrics is scraped
    status, text = server.request("GET", "/metrics")
    assert status == 200
    ready = {tube: v for (tube, state), v in _tube_metrics(text).items() if state == "ready"}
    # Then it names the busiest tubes up to the limit, the rest and stalkd's own summed
    named = set(ready) - {"*", "stalkd.*"}
    assert len(named) == TOP_TUBES
    counts = sorted((1 + i % 3 for i in range(n)), reverse=True)
    assert sorted((ready[t] for t in named), reverse=True) == counts[:TOP_TUBES]  # the busiest
    assert ready["stalkd.*"] == 1
    total_jobs = sum(1 + i % 3 for i in range(n))
    assert sum(ready.values()) == total_jobs + 1  # every job counted once
    assert re.search(r"^stalkd_tubes (\S+)$", text, re.M).group(1) == f"{float(n + 2)}"  # type: ignore[union-attr]
    assert re.search(r"^stalkd_memory_budget_bytes \d", text, re.M)


def test_a_move_answer_is_the_json_of_all_its_ids() -> None:
    # Given a move's old ids (not in order) and their new ids, more than two slices of them
    old = [(i * 7919) % 50_001 + 1 for i in range(50_001)]
    new = [i + 1_000_000 for i in range(50_001)]
    pairs = [(str(k), v) for k, v in zip(old, new, strict=True)]
    head = {"requested": 50_001, "outcomes": {"moved": 50_001}, "seconds": 1.5}
    # When they are encoded
    text = asyncio.run(encode_answer({**head, "new_ids": (old, new)}))
    # Then the answer maps each old id to its new one, in the order moved
    got = json.loads(text)
    assert got == {**head, "new_ids": dict(pairs)}
    assert list(got["new_ids"].items()) == pairs
    # and the lists were let go as they were encoded
    assert old == [] and new == []
    small = {"requested": 0, "outcomes": {}, "seconds": 0.0, "new_ids": ([], [])}
    assert json.loads(asyncio.run(encode_answer(small))) == {**small, "new_ids": {}}


def test_a_move_answer_is_written_a_slice_at_a_time() -> None:
    # Given a move of a little more than three slices of ids
    n = 3 * IDS_PER_SLICE + 1
    old = list(range(1, n + 1))
    new = [i + 10**7 for i in old]

    async def write() -> tuple[list[bytes], list[int]]:
        parts, left = [], []
        async for part in answer_parts({"requested": n, "new_ids": (old, new)}):
            parts.append(part)
            left.append(len(old))
        return parts, left

    # When its answer is written part by part
    parts, left = asyncio.run(write())
    # Then it comes as the head, one part per slice and the end, none of them the whole answer
    assert len(parts) == 1 + 4 + 1
    assert max(map(len, parts)) < sum(map(len, parts)) / 2
    # and each slice's ids were let go once written
    assert left == [n, n - IDS_PER_SLICE, n - 2 * IDS_PER_SLICE, n - 3 * IDS_PER_SLICE, 0, 0]
    assert json.loads(b"".join(parts))["new_ids"] == {str(i): i + 10**7 for i in range(1, n + 1)}


def test_any_tube_can_be_found_by_search_or_sort(server: AdminServer) -> None:
    n = 260
    _make_tubes(server, n)  # t{i} holds 1 + i % 3 jobs; stalkd.failed one
    # When a page is asked busiest first, by name, or by a search
    status, busiest = server.request("GET", "/api/v1/overview?sort=jobs&limit=5&internal=0")
    assert status == 200
    # Then the busiest come first (3 jobs, in creation order), stalkd's own left out
    assert [t["name"] for t in busiest["tubes"]] == ["t00002", "t00005", "t00008", "t00011", "t00014"]
    assert busiest["tubes_total"] == n + 1  # default, not stalkd.failed
    # and the totals sum every tube, not only the page
    assert busiest["totals"]["other"]["ready"] == sum(1 + i % 3 for i in range(n))
    assert busiest["totals"]["other"]["tubes"] == n + 1
    assert busiest["totals"]["internal"] == {"tubes": 1, "ready": 1, "reserved": 0, "delayed": 0,
                                             "buried": 0, "puts": 1, "deletes": 0}
    # a search finds a tube far past the first page, whatever the order
    for sort in ("created", "name", "jobs"):
        status, found = server.request("GET", f"/api/v1/overview?q=t0025&sort={sort}")
        assert status == 200 and found["tubes_total"] == 10, sort
        assert sorted(t["name"] for t in found["tubes"]) == [f"t{i:05d}" for i in range(250, 260)]
    status, page = server.request("GET", "/api/v1/overview?sort=name&offset=250&limit=20")
    # ("default" < "stalkd.failed" < "t00000")
    assert [t["name"] for t in page["tubes"]] == [f"t{i:05d}" for i in range(248, 260)]
    assert page["next"] is None
    # and a bad order or flag is refused by name
    status, err = server.request("GET", "/api/v1/overview?sort=size")
    assert status == 400 and "unknown sort 'size'" in err["error"]
    assert server.request("GET", "/api/v1/overview?internal=yes")[0] == 400
