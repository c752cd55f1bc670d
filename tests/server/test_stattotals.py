"""stats' job totals past many tubes, counted a slice per loop turn (server/stattotals.py): the
core on a list of tubes and a hand-run queue, then a server whose stats waits for them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from server.test_conn import RecordingTransport
from stalkd.engine import Engine
from stalkd.engine.objects import Tube
from stalkd.engine.stats import TOTALS, TOTALS_AT_ONCE, totals
from stalkd.protocol import commands as C
from stalkd.server.app import Server
from stalkd.server.config import Config
from stalkd.server.stattotals import StatsTotals


def _tubes(n: int) -> list[Tube]:
    tubes = [Tube(f"t{i}", i) for i in range(n)]
    for i, t in enumerate(tubes):
        t.urgent, t.reserved = i % 3, i % 5
    return tubes


def test_a_count_reads_one_slice_per_turn() -> None:
    tubes = _tubes(10)
    later: list[Callable[[], None]] = []
    st = StatsTotals(lambda: tubes, later.append, step=3)
    got: list[dict[str, int]] = []
    st.ask(got.append)
    turns = 0
    while later:
        assert got == []  # nothing answered before the last slice
        later.pop(0)()
        turns += 1
    assert turns == 4  # 10 tubes, 3 a turn
    assert got == [dict(zip(TOTALS, totals(tubes), strict=True))]
    assert got[0]["current-jobs-reserved"] == 20 and not st.counting()


def test_who_asks_during_a_count_waits_for_the_next_one_which_sees_what_changed() -> None:
    tubes = _tubes(6)
    later: list[Callable[[], None]] = []
    st = StatsTotals(lambda: tubes, later.append, step=2)
    got: list[tuple[str, int]] = []
    st.ask(lambda f: got.append(("first", f["current-jobs-urgent"])))
    later.pop(0)()  # the first slice (tubes 0 and 1) is read
    tubes[0].urgent += 100  # then a client changes a tube already read, and asks
    st.ask(lambda f: got.append(("second", f["current-jobs-urgent"])))
    st.ask(lambda f: got.append(("third", f["current-jobs-urgent"])))
    turns = 0
    while later:
        later.pop(0)()
        turns += 1
    before = sum(i % 3 for i in range(6))
    assert got == [("first", before), ("second", before + 100), ("third", before + 100)]
    assert turns == 2 + 3 and not st.counting()  # the second and third share one count


def test_stats_past_many_tubes_waits_for_its_totals_and_the_next_command_waits_too() -> None:
    async def main() -> None:
        eng = Engine()
        srv = Server(Config(), eng)
        eng.connect(999, 0.0)
        n = TOTALS_AT_ONCE + 1
        for i in range(n):  # a tube of one ready job each, and one urgent job
            eng.apply(999, C.Use(f"a{i}"), 0.0)
            eng.apply(999, C.Put(0 if i == 0 else 5000, 0, 60, b"x"), 0.0)
        c = srv.new_connection()
        t = RecordingTransport()
        c.connection_made(t)  # type: ignore[arg-type]
        # Given a client that puts a job, then asks for stats and its tube in one read
        c.data_received(b"put 1 0 60 1\r\ny\r\nstats\r\nlist-tube-used\r\n")
        # Then stats is not answered in that loop turn, and list-tube-used not run before it
        sent = b"".join(t.sent)
        assert sent.startswith(b"INSERTED ") and b"OK " not in sent and b"USING" not in sent
        for _ in range(100):
            if b"USING" in b"".join(t.sent):
                break
            await asyncio.sleep(0)
        # And once counted, the reply has every job, its own put included, before USING
        sent = b"".join(t.sent)
        assert sent.endswith(b"USING default\r\n") and sent.index(b"OK ") < sent.index(b"USING")
        yaml = dict(line.split(": ", 1) for line in sent.decode().splitlines() if ": " in line)
        assert yaml["current-jobs-ready"] == str(n + 1)
        assert yaml["current-jobs-urgent"] == "2"
        assert yaml["current-tubes"] == str(n + 1) and "pid" in yaml
        assert list(yaml)[:5] == list(TOTALS)  # beanstalkd's order: the totals first

    asyncio.run(main())
