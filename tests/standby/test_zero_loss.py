"""Zero loss on failover: kill -9 the primary (``--sync-standbys 1``) under load, promote its
standby, and check every acknowledgement against the crash harness's rules: no acknowledged job
lost, no deleted job back, no duplicate, nothing invented; an acknowledged bury is buried. A
command the crash interrupted (sent, not acknowledged) may have happened or not. With
``--sync-standbys 0`` the promotion may lose the last changes, but nothing is invented or
doubled, and no id the old primary handed out is handed out again.

STALKD_FAILOVER_CYCLES sets the number of cycles (default 3; `make failover-campaign` runs
hundreds), STALKD_FAILOVER_SEED the random seed.
"""

from __future__ import annotations

import os
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import stalkd
from stalkd.client import errors

from .cluster import caught_up, primary, promote_by_signal, standby, until

CYCLES = int(os.environ.get("STALKD_FAILOVER_CYCLES", "3"))
SEED = int(os.environ.get("STALKD_FAILOVER_SEED", "20261124"))
WORKERS = 4


@dataclass
class Ledger:
    """What the clients were told, per body (bodies are unique)."""

    attempted: set[bytes] = field(default_factory=set)
    put: dict[bytes, int] = field(default_factory=dict)  # INSERTED: body -> id
    deleting: set[bytes] = field(default_factory=set)  # delete sent (it may or may not have happened)
    deleted: set[bytes] = field(default_factory=set)  # DELETED
    buried: set[bytes] = field(default_factory=set)  # BURIED
    lock: threading.Lock = field(default_factory=threading.Lock)


def _load(address: str, ledger: Ledger, worker: int, stop: threading.Event) -> None:
    """Put unique bodies; delete one in three and bury one in five of those acknowledged.
    Ends at the first error: the primary was killed."""
    try:
        with stalkd.Client(address) as c:
            i = 0
            while not stop.is_set():
                body = f"{worker}-{i}".encode()
                with ledger.lock:
                    ledger.attempted.add(body)
                jid = c.put(body)
                with ledger.lock:
                    ledger.put[body] = jid
                if i % 3 == 0:
                    with ledger.lock:
                        ledger.deleting.add(body)
                    c.delete(jid)
                    with ledger.lock:
                        ledger.deleted.add(body)
                elif i % 5 == 1:
                    c.reserve_job(jid)
                    c.bury(jid)
                    with ledger.lock:
                        ledger.buried.add(body)
                i += 1
    except (errors.ClientConnectionError, OSError):
        return


def id_ranges(ledger: Ledger) -> list[range]:
    """The ids a server could have given the ledger's puts: per epoch's band
    (``engine.replay.ID_BAND``), from its start to the highest acknowledged id in it plus one
    per attempted put (unacknowledged puts took ids too), and as much of the band after."""
    from stalkd.engine.replay import ID_BAND

    ids = list(ledger.put.values())
    slack = len(ledger.attempted) + 1
    top_band = max((i // ID_BAND for i in ids), default=0) + 1
    out = []
    for band in range(top_band + 1):
        lo = max(1, band * ID_BAND)
        in_band = [i for i in ids if i // ID_BAND == band]
        out.append(range(lo, max(in_band, default=lo) + slack + 1))
    return out


def check(address: str, ledger: Ledger, synchronous: bool = True) -> None:
    """The promoted standby against what the clients were told (asynchronous: only that
    nothing is invented or doubled)."""
    seen: dict[bytes, int] = {}
    with stalkd.Client(address) as c:
        for jid in (j for r in id_ranges(ledger) for j in r):
            try:
                job = c.peek(jid)
            except errors.NotFound:
                continue
            assert job.body in ledger.attempted, f"job {jid} {job.body!r} was never put (invented)"
            assert job.body not in seen, f"{job.body!r} is there twice: jobs {seen[job.body]} and {jid}"
            seen[job.body] = jid
        if not synchronous:
            return
        for body, jid in ledger.put.items():
            if body in ledger.deleted:
                assert body not in seen, f"job {jid} {body!r} was deleted (acknowledged) and is back"
                continue
            if body in ledger.deleting:
                continue  # the crash came before DELETED: either outcome keeps the promise
            assert seen.get(body) == jid, f"acknowledged job {jid} {body!r} is lost"
            if body in ledger.buried:
                assert c.stats_job(jid)["state"] == "buried", f"job {jid} was buried (acknowledged)"


def one_cycle(tmp: Path, rng: random.Random, sync: str = "1") -> None:
    p = primary(tmp / "p", "--sync-standbys", sync)
    s = standby(tmp / "s", p)
    try:
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        ledger = Ledger()
        stop = threading.Event()
        threads = [threading.Thread(target=_load, args=(p.address, ledger, w, stop)) for w in range(WORKERS)]
        for t in threads:
            t.start()
        kill_after = rng.randrange(10, 300)  # acknowledged puts before the crash
        until(lambda: len(ledger.put) >= kill_after, "load on the primary", logs=(p, s))
        p.kill9()
        stop.set()
        for t in threads:
            t.join()
        promote_by_signal(s)
        check(s.address, ledger, synchronous=sync != "0")
        with stalkd.Client(s.address) as c:
            after = {c.put(b"accepted after the failover %d" % i) for i in range(20)}
        reused = after & set(ledger.put.values())
        assert not reused, f"ids {sorted(reused)} were handed out by both primaries"
        assert max(after) < 2**53
    finally:
        s.stop()
        p.stop()


@pytest.mark.slow
@pytest.mark.parametrize("sync", ["1", "0"])
def test_kill9_primary_then_promote_loses_nothing_acknowledged(tmp_path: Path, sync: str) -> None:
    rng = random.Random(SEED)
    for cycle in range(CYCLES):
        one_cycle(tmp_path / f"c{cycle}", rng, sync)


@pytest.mark.parametrize("how", ["cli"])
def test_promote_through_the_admin_endpoint(tmp_path: Path, how: str) -> None:
    import subprocess
    import sys

    from .cluster import admin_port, stats

    p = primary(tmp_path / "p")
    s = standby(tmp_path / "s", p, "--admin", "127.0.0.1:0")
    try:
        port = admin_port(s)
        until(lambda: caught_up(p, s), "the standby to follow", logs=(p, s))
        cmd = [sys.executable, "-m", "stalkd.cli", "promote", "--admin", f"127.0.0.1:{port}"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert "promoted: primary of epoch 1" in out.stdout
        assert stats(s)["role"] == "primary"
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert again.returncode != 0 and "not a standby" in again.stderr
    finally:
        s.stop()
        p.stop()
