"""The clients' failover against a real standby: a client given every address finds the
primary whatever the order, and carries on (tube in use restored) after the standby is
promoted and the old primary is gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import stalkd
from stalkd.client import AsyncClient, errors

from .cluster import caught_up, primary, promote_by_signal, standby, until


def test_a_client_listing_the_standby_first_uses_the_primary(tmp_path: Path) -> None:
    p = primary(tmp_path / "p")
    s = standby(tmp_path / "s", p)
    try:
        with stalkd.Client(f"{s.address},{p.address}", failover_timeout=30) as c:
            jid = c.put(b"x")  # a standby would have answered NOT_PRIMARY
        until(lambda: caught_up(p, s), "the standby to catch up", logs=(p, s))
        with stalkd.Client(s.address) as c:
            assert c.peek(jid).body == b"x"
    finally:
        s.stop()
        p.stop()


def test_sync_and_async_clients_follow_a_promotion(tmp_path: Path) -> None:
    p = primary(tmp_path / "p", "--sync-standbys", "1")
    s = standby(tmp_path / "s", p)
    addresses = f"{p.address},{s.address}"
    try:
        sync = stalkd.Client(addresses, failover_timeout=30)
        sync.use("jobs")
        first = sync.put(b"one")  # acknowledged only once the standby holds it

        async def open_async() -> AsyncClient:
            a = AsyncClient(addresses, failover_timeout=30)
            await a.connect()
            await a.use("jobs")
            return a

        loop = asyncio.new_event_loop()
        aio = loop.run_until_complete(open_async())
        p.kill9()
        promote_by_signal(s)
        second = sync.put(b"two")
        third = loop.run_until_complete(aio.put(b"three"))
        assert first < second and first < third
        with stalkd.Client(s.address) as c:
            assert c.stats_job(first)["state"] == "ready"
            assert {c.stats_job(j)["tube"] for j in (first, second, third)} == {"jobs"}
        sync.close()
        loop.run_until_complete(aio.close())
        loop.close()
    finally:
        s.stop()
        p.stop()


def test_the_spark_sink_given_every_address_puts_on_the_primary(tmp_path: Path) -> None:
    # the sink's driver check and per-partition writer, run directly (no Spark session needed)
    pytest.importorskip("pyspark")
    from stalkd.spark.sink import JobDefaults, ServerWriter, put_rows

    p = primary(tmp_path / "p")
    s = standby(tmp_path / "s", p)
    addresses = f"{s.address},{p.address}"
    try:
        ServerWriter(addresses, "payload", ["payload"], JobDefaults(), 8)  # the list is accepted
        rows = iter([{"payload": b"a"}, {"payload": b"b"}])
        done = put_rows(addresses, rows, "payload", ["payload"], JobDefaults(tube="emails"))
        assert done.rows == 2
        with stalkd.Client(p.address) as c:
            assert c.stats_tube("emails")["current-jobs-ready"] == 2
    finally:
        s.stop()
        p.stop()


def test_finish_through_failover_acknowledges_then_reserves_on_the_primary(tmp_path: Path) -> None:
    # With several addresses, finish's commands go one by one through the failover driver:
    # the acknowledgement is reported once it is in, and the next job comes back reserved.
    p = primary(tmp_path / "p")
    s = standby(tmp_path / "s", p)
    addresses = f"{s.address},{p.address}"
    try:
        with stalkd.Client(addresses, failover_timeout=30) as c:
            for body in (b"a", b"b", b"c"):
                c.put(body)
            job = c.reserve(timeout=0)
            seen: list[bool] = []
            done = c.finish(job, "delete", reserve=True, timeout=0, on_acked=seen.append)
            assert seen == [True] and done.acked
            assert done.reserved is not None and done.reserved.body == b"b"
            gone = job.id

        async def finish_async() -> tuple[bool, bytes | None]:
            async with AsyncClient(addresses, failover_timeout=30) as a:
                nxt = await a.reserve(timeout=0)
                out = await a.finish(nxt, "delete", reserve=True, timeout=0)
                return out.acked, None if out.reserved is None else out.reserved.body

        acked, body = asyncio.run(finish_async())
        # The sync client's reserved "b" went back to ready when its connection closed.
        assert acked and body in (b"b", b"c")
        with stalkd.Client(p.address) as c, pytest.raises(errors.NotFound):
            c.stats_job(gone)
    finally:
        s.stop()
        p.stop()
