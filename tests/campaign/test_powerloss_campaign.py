"""The power-loss campaign, short: a few kills and power cuts of a real stalkd (and of the
embedded log) on the strict power-loss file system, and the checker's verdict. The long run
is ``make powerloss-campaign``; docs of the rules: campaign/powercut.py, campaign/logcut.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from campaign.logcut import run as run_log
from campaign.powercut import Counts, Run, check, run

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("fuse")]


def _clean(c: Counts) -> None:
    assert (c.lost, c.invented, c.resurrected, c.restart_failures) == (0, 0, 0, 0), c.details[:10]
    assert c.acknowledged > 0 and c.cuts > 0


def test_always_loses_nothing_acknowledged_across_power_cuts(tmp_path: Path) -> None:
    c = run(Run(policy="always", faults=4, cut_share=0.75, seed=11), work=str(tmp_path / "run"))
    _clean(c)
    assert c.lost_in_window == c.resurrected_in_window == c.reused_ids == 0


def test_every_ms_loses_only_inside_its_window_and_restarts_by_itself(tmp_path: Path) -> None:
    c = run(Run(policy="every:50", faults=3, cut_share=1.0, seed=12, old=True),
            work=str(tmp_path / "run"))
    _clean(c)


def test_the_checker_catches_a_planted_skipped_fsync(tmp_path: Path) -> None:
    """The server runs with every fsync of its WAL segments dropped by the file system (a disk
    that lies), judged as `always`: acknowledged changes are lost and the checker says so."""
    c = run(Run(policy="always", faults=2, cut_share=1.0, seed=13, workers=1, ignore_fsync="seg-"),
            work=str(tmp_path / "run"))
    assert c.lost + c.resurrected > 0, c
    assert any(d.startswith(("lost:", "resurrected:")) for d in c.details)


def test_the_embedded_logs_records_and_cursor_acks_survive_power_cuts(tmp_path: Path) -> None:
    c = run_log("always", faults=4, cut_share=0.75, seed=14, work=str(tmp_path / "run"))
    assert (c.lost, c.redelivered, c.invented, c.restart_failures) == (0, 0, 0, 0), c.details[:10]
    assert c.appended > 0 and c.acked > 0 and c.cuts > 0


def test_the_log_checker_catches_cursor_fsyncs_dropped(tmp_path: Path) -> None:
    c = run_log("always", faults=3, cut_share=1.0, seed=15, work=str(tmp_path / "run"),
                   ignore_fsync=".cur")
    assert c.redelivered > 0, c


def _ev(p: str, type_: str, f: str, t: float, **value: object) -> dict[str, object]:
    return {"p": p, "type": type_, "f": f, "t": t, "value": value}


def test_the_window_rule_on_a_hand_made_history() -> None:
    """A put acknowledged 0.04 s before a cut may be lost under every:50, not under always;
    one acknowledged 5 s before it may not be lost under either; a body nobody put is invented."""
    events = [
        _ev("p", "invoke", "put", 0.0, body="old"), _ev("p", "ok", "put", 0.1, id=1),
        _ev("p", "invoke", "put", 5.0, body="late"), _ev("p", "ok", "put", 5.06, id=2),
        _ev("nemesis", "invoke", "cut", 5.1), _ev("nemesis", "ok", "cut", 5.2),
        _ev("final", "invoke", "final", 9.0),
        _ev("final", "ok", "final", 9.1, jobs=[{"id": 3, "body": "nobody's"}]),
    ]
    weak, strict = check(events, "every:50", slack=0.0), check(events, "always")
    assert (weak.lost, weak.lost_in_window, weak.invented) == (1, 1, 1)
    assert (strict.lost, strict.lost_in_window) == (2, 0)
