"""After a promotion, jobs the old primary had reserved stay reserved until their TTR ends
(then they are ready again), delayed jobs keep their deadline, and new puts are accepted."""

from __future__ import annotations

from pathlib import Path

import stalkd

from .cluster import caught_up, primary, promote_by_signal, standby, until


def test_reserved_jobs_come_back_when_their_ttr_ends(tmp_path: Path) -> None:
    p = primary(tmp_path / "p", "--sync-standbys", "1")
    s = standby(tmp_path / "s", p)
    try:
        with stalkd.Client(p.address) as c:
            long_ = c.put(b"long", ttr=3600)
            short = c.put(b"short", ttr=2)
            delayed = c.put(b"later", delay=3600)
            assert c.reserve(timeout=0).id == long_
            assert c.reserve(timeout=0).id == short
            until(lambda: caught_up(p, s), "the standby to see the reservations", logs=(p, s))
            p.kill9()
        promote_by_signal(s)
        with stalkd.Client(s.address) as c:
            # The holder of the old primary's reservations is nobody's connection: only this one counts.
            st, default = c.stats(), c.stats_tube("default")
            assert (st["current-connections"], default["current-using"], default["current-watching"]) == (1, 1, 1)
            assert c.stats_job(long_)["state"] == "reserved"
            assert c.stats_job(delayed)["state"] == "delayed"
            until(lambda: c.stats_job(short)["state"] == "ready", "the short TTR to end", logs=(s,))
            assert c.reserve(timeout=0).id == short  # the long one is still held
            assert c.stats_job(long_)["state"] == "reserved"
            assert c.put(b"new") > delayed
    finally:
        s.stop()
        p.stop()
