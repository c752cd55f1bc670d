"""End to end: the pure engine on a simulated clock writes a WAL through stalkd.log; ``stalkd
analyze`` turns it into tables, plots and a page; headless Chromium renders the page."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from spark_scenario import percentile

from stalkd.engine import Engine
from stalkd.engine.model import encode
from stalkd.log import Log
from stalkd.protocol import commands as C
from stalkd.spark.cli import analyze

pytestmark = pytest.mark.spark

T = 1_700_000_000.0
PRODUCER, WORKER = 1, 2


class History:
    """Drives the engine and notes, from the script's side, every wait and run it set up."""

    def __init__(self, log: Log) -> None:
        self.e = Engine()
        self.log = log
        self.waits: list[float] = []
        self.runs: list[float] = []
        self.ops: dict[str, int] = {}
        for conn in (PRODUCER, WORKER):
            self.e.connect(conn, T)
        self.do(PRODUCER, C.Use("work"), 0)
        self.do(WORKER, C.Watch("work"), 0)
        self.do(WORKER, C.Ignore("default"), 0)

    def _keep(self, outcome: Any) -> Any:
        for r in outcome.records:
            self.ops[r.op.name.lower()] = self.ops.get(r.op.name.lower(), 0) + 1
        if outcome.records:
            self.log.append_many(encode(r) for r in outcome.records)
        return outcome

    def do(self, conn: int, cmd: Any, t: float) -> Any:
        return self._keep(self.e.apply(conn, cmd, T + t)).reply

    def tick(self, t: float) -> None:
        self._keep(self.e.tick(T + t))

    def reserve(self, t: float, wait: float) -> int:
        reply = self.do(WORKER, C.ReserveWithTimeout(0), t)
        assert reply.word == "RESERVED", reply
        self.waits.append(wait)
        return int(reply.id)


def make_history(path: Path) -> History:
    """20 jobs put 10 s apart (ttr 5). The worker takes each 1-3 s after its put and runs it 2 s.
    i % 5 == 3: the TTR runs out, the job is taken again 0.5 s later, runs 1 s, deleted.
    i % 4 == 1: released, taken again 1 s later, runs 1 s, deleted.
    i % 6 == 5: buried. Otherwise deleted."""
    with Log.open(path, segment_size=8192, durability="never") as log:
        h = History(log)
        for i in range(20):
            t = 10.0 * i
            assert h.do(PRODUCER, C.Put(10, 0, 5, b"job %d" % i), t).word == "INSERTED"
            w = 1.0 + i % 3
            jid = h.reserve(t + w, w)
            if i % 5 == 3:
                h.tick(t + w + 5)
                h.runs.append(5.0)
                h.reserve(t + w + 5.5, 0.5)
                h.do(WORKER, C.Delete(jid), t + w + 6.5)
                h.runs.append(1.0)
            elif i % 4 == 1:
                h.do(WORKER, C.Release(jid, 10, 0), t + w + 2)
                h.runs.append(2.0)
                h.reserve(t + w + 3, 1.0)
                h.do(WORKER, C.Delete(jid), t + w + 4)
                h.runs.append(1.0)
            elif i % 6 == 5:
                h.do(WORKER, C.Bury(jid, 10), t + w + 2)
                h.runs.append(2.0)
            else:
                h.do(WORKER, C.Delete(jid), t + w + 2)
                h.runs.append(2.0)
    return h


@pytest.fixture(scope="module")
def analyzed(spark: Any, tmp_path_factory: Any) -> tuple[History, Path, str]:
    root = tmp_path_factory.mktemp("report")
    history = make_history(root / "wal")
    assert history.ops["timeout"] == 4 and history.ops["bury"] >= 1  # the script did what it says
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        # the server's data directory, as people type it (-b DIR): its wal/ is read
        code = analyze([str(root), "--out", str(root / "out"), "--window", "60", "--no-progress"])
    assert code == 0
    return history, root / "out", buf.getvalue()


def test_analyze_writes_tables_and_report_with_the_scripts_figures(spark: Any, analyzed: Any) -> None:
    history, out, printed = analyzed
    for name in ("jobs", "windows", "tubes"):
        assert (out / name / "_SUCCESS").exists()
    for png in ("throughput.png", "latency.png", "backlog.png", "rates.png"):
        assert (out / png).stat().st_size > 5000
    tubes = {r.tube: r for r in spark.read.parquet(str(out / "tubes")).collect()}
    work = tubes["work"]
    assert (work.jobs, work.puts, work.reserves) == (20, 20, len(history.waits))
    assert (work.timeouts, work.releases, work.buries) == (
        history.ops["timeout"], history.ops["release"], history.ops["bury"])
    assert work.wait_p50_s == pytest.approx(percentile(history.waits, 0.5))
    assert work.wait_p99_s == pytest.approx(percentile(history.waits, 0.99))
    assert work.run_p90_s == pytest.approx(percentile(history.runs, 0.9))
    windows = spark.read.parquet(str(out / "windows")).where("tube = 'work'").orderBy("window_start").collect()
    assert sum(w.puts for w in windows) == 20 and len(windows) == 4  # 200 s of history, 60 s windows
    assert windows[-1].backlog == history.ops["bury"]  # buried jobs are never deleted
    assert "work" in printed and "20 jobs" in printed
    page = (out / "report.html").read_text()
    assert 'src="throughput.png"' in page and "<td>work</td>" in page


def test_report_renders_in_headless_chromium(analyzed: Any) -> None:
    _, out, _ = analyzed
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("chromium is not installed (scripts/system-deps.sh installs it)")
    shot = out / "screenshot.png"
    subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1100,2400",
         f"--screenshot={shot}", (out / "report.html").as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1100, 2400)
    # The page's images loaded: a blank or broken page compresses to far less than this.
    assert len(data) > 60_000


def test_a_log_that_is_not_a_wal_fails_clearly_and_keeps_the_previous_report(spark: Any, analyzed: Any,
                                                                            tmp_path: Path) -> None:
    from stalkd.spark.pipeline import run_analysis

    _, out, _ = analyzed
    before = sorted(p.name for p in out.iterdir())
    with Log.open(tmp_path / "notwal", durability="never") as log:
        log.append_many([encode_ok() for _ in range(3)] + [b"\x01\x01 not a record"])
    with pytest.raises(Exception, match="log offset 3: not a valid WAL record"):
        run_analysis(spark, str(tmp_path / "notwal"), out, progress=False)
    assert sorted(p.name for p in out.iterdir()) == before


def encode_ok() -> bytes:
    from stalkd.engine.model import Op, Record

    return encode(Record(Op.PUT, 1, 1_700_000_000_000_000, 1, tube="t", ttr=5, body=b"x"))


@pytest.mark.parametrize("what", ["empty-dir", "missing", "empty-log"])
def test_analyze_without_records_is_an_error_not_an_empty_report(spark: Any, tmp_path: Path, what: str,
                                                                 capsys: Any) -> None:
    target = tmp_path / "d"
    if what == "empty-dir":
        (target / "wal").mkdir(parents=True)
    elif what == "empty-log":
        Log.open(target / "wal", durability="never").close()
    code = analyze([str(target), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert str(target) in err
    assert ("no records" if what == "empty-log" else "stalkd log") in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()
