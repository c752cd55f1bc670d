"""The analytics report as a person sees it: rendered by headless Chromium at 1,400 px wide, for
an app that uses stalkd's features (13 tubes of its own, 16 internal ones). No Spark: the
report is pure over the collected rows, which are made here as the pipeline would give them."""

from __future__ import annotations

import shutil
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from stalkd.spark.report import LEGEND_MAX, PLOTS, write_report

APP = ["emails", "thumbnails", "reports", "invoices", "webhooks", "search-index", "sms",
       "exports", "imports", "billing", "notifications", "cleanup", "a-rather-long-tube-name-for-exports"]
INTERNAL = (["stalkd.failed", "stalkd.limit.smtp", "stalkd.wait.ab12", "stalkd.cancel.3"]
            + [f"stalkd.key.{i:040x}" for i in range(12)])
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def _rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    t0 = datetime(2026, 11, 1, 10, 0)
    windows, tubes = [], []
    for n, tube in enumerate(APP + INTERNAL):
        jobs = 0
        for w in range(30):
            puts = (n * 7 + w * 3) % 50 + 1
            jobs += puts
            windows.append({"tube": tube, "window_start": t0 + timedelta(minutes=w), "puts": puts,
                            "deletes": max(0, puts - 1), "backlog": (w * n) % 17,
                            "retry_rate": (n % 5) / 10, "bury_rate": (n % 3) / 20})
        tubes.append({"tube": tube, "jobs": jobs, "puts": jobs, "reserves": jobs + n,
                      "deletes": jobs - 1, "buried_jobs": n % 4, "retry_rate": 0.01 * n,
                      **{f"{k}_{p}_s": 0.1 * (n + 1) * i for k in ("wait", "run")
                         for i, p in enumerate(("p50", "p90", "p99"), 1)}})
    return windows, tubes


def _report(out: Path, internal: bool) -> tuple[Path, str]:
    windows, tubes = _rows()
    return write_report(out, windows, tubes, source="data", records=123_456,
                        span="2026-11-01 10:00 - 10:30 UTC", window_seconds=60, internal=internal)


def test_internal_tubes_are_hidden_unless_asked(tmp_path: Path) -> None:
    page, summary = _report(tmp_path / "a", internal=False)
    text = page.read_text()
    assert "stalkd.key." not in text and "stalkd.failed" not in text
    assert "16 internal stalkd.* tubes hidden" in text and "--all shows them" in summary
    assert all(f"<td>{t}</td>" in text for t in APP if len(t) < 20)
    page, summary = _report(tmp_path / "b", internal=True)
    assert "stalkd.failed" in page.read_text() and "hidden" not in summary


@pytest.mark.parametrize("internal", [False, True], ids=["app-tubes", "all-tubes"])
def test_report_reads_well_at_1400_px_in_chromium(tmp_path: Path, internal: bool) -> None:
    exe = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(exe).exists():
        pytest.skip("chromium is not installed (scripts/system-deps.sh installs it)")
    playwright = pytest.importorskip("playwright.sync_api")
    page_path, _ = _report(tmp_path / "out", internal)
    with tempfile.TemporaryDirectory() as profile, playwright.sync_playwright() as p:
        browser = p.chromium.launch_persistent_context(
            profile, executable_path=exe, headless=True, args=FLAGS,
            viewport={"width": 1400, "height": 900}, device_scale_factor=1)
        try:
            page = browser.new_page()
            page.goto(page_path.as_uri())
            page.wait_for_function("[...document.images].every(i => i.complete && i.naturalWidth > 0)")
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            # Then no element reaches past the page's right edge, the page does not scroll
            # sideways, and no element's content is wider than the element itself
            found = page.evaluate("""() => {
                const width = document.documentElement.clientWidth;
                const out = [];
                for (const el of document.body.querySelectorAll('*')) {
                    const r = el.getBoundingClientRect();
                    if (r.right > width + 0.5 || el.scrollWidth > el.clientWidth + 1 && el.clientWidth)
                        out.push(el.tagName + '.' + el.className + ' ' + (el.textContent || '').slice(0, 30));
                }
                return {out, scroll: document.documentElement.scrollWidth, width,
                        legends: [...document.querySelectorAll('ul.legend')].map(u => u.children.length),
                        images: [...document.images].map(i => [i.naturalWidth, i.clientWidth])};
            }""")
        finally:
            browser.close()
    assert found["out"] == [] and found["scroll"] <= found["width"], found
    # and every chart has a legend of at most LEGEND_MAX tubes plus one "others" entry
    assert len(found["legends"]) == len(PLOTS)
    assert all(0 < n <= LEGEND_MAX + 1 for n in found["legends"]), found["legends"]
    # and the charts are shown at their own size or smaller, never stretched
    assert all(0 < shown <= natural for natural, shown in found["images"]), found["images"]
