"""The dashboard in a real browser: Playwright driving Debian's Chromium (headless) against a
real ``stalkd serve --admin`` started on port 0. No browser is downloaded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import greenstalk
import pytest

from admin.adminproc import AdminServer, make_tubes
from support import require_binary

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def page(server: AdminServer) -> Iterator[Any]:
    chromium = require_binary("chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_FLAGS)
        try:
            pg = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.goto(server.admin + "/")
            yield pg
            assert errors == [], errors
        finally:
            browser.close()


def test_dashboard_shows_puts_dead_letters_and_kicks(server: AdminServer, page: Any) -> None:
    from playwright.sync_api import expect

    from stalkd.worker.actions import DeadLetter

    # The page loads and shows the server as ready
    expect(page.locator("#server-state")).to_have_text("ready")
    # A put shows up in the tube's count
    c = greenstalk.Client(("127.0.0.1", server.port), use="emails", watch="emails")
    c.put("hello")
    row = page.locator('#tubes tr[data-tube="emails"]')
    expect(row.locator(".ready-n")).to_have_text("1")
    # A buried job's dead-letter error is shown
    job = c.reserve()
    c.bury(job)
    letter = DeadLetter(job_id=job.id, tube="emails", task="send_email", attempts=3,
                        error="SMTPError('mailbox full')", traceback="Traceback (most recent call last):\n  ...",
                        failed_at=0.0, body=b"hello")
    c.use("stalkd.failed")
    c.put(letter.to_json().decode())
    buried = page.locator(f'#buried tr[data-id="{job.id}"]')
    expect(buried.locator(".error-cell")).to_have_text("SMTPError('mailbox full')")
    # The job view shows the traceback
    buried.locator('[data-act="view"]').click()
    expect(page.locator("#job-tb")).to_contain_text("Traceback")
    page.locator("#job-view [data-close]").click()
    # Clicking kick, then confirming, moves it back to ready on the server
    buried.locator('[data-act="kick"]').click()
    expect(page.locator("#confirm")).to_be_visible()
    page.locator("#confirm-ok").click()
    expect(page.locator("#buried-empty")).to_be_visible()
    assert c.stats_job(job.id)["state"] == "ready"
    expect(row.locator(".ready-n")).to_have_text("1")
    c.close()


def test_cancel_leaves_the_job_alone(server: AdminServer, page: Any) -> None:
    from playwright.sync_api import expect

    c = greenstalk.Client(("127.0.0.1", server.port))
    c.put("x")
    c.bury(c.reserve())
    buried = page.locator('#buried tr[data-id="1"]')
    buried.locator('[data-act="delete"]').click()
    page.locator("#confirm-cancel").click()
    expect(page.locator("#confirm")).to_be_hidden()
    assert c.stats_job(1)["state"] == "buried"
    c.close()


def test_internal_tubes_are_hidden_until_the_toggle_shows_them(server: AdminServer, page: Any) -> None:
    from playwright.sync_api import expect

    c = greenstalk.Client(("127.0.0.1", server.port), use="emails")
    c.put("a")
    for tube in ("stalkd.failed", "stalkd.key.ab12"):
        c.use(tube)
        c.put("internal")
    c.close()
    emails = page.locator('#tubes tr[data-tube="emails"]')
    expect(emails.locator(".ready-n")).to_have_text("1")
    expect(page.locator("#internal-hidden")).to_have_text("(2 hidden)")
    expect(page.locator('#tubes tr[data-tube="stalkd.failed"]')).to_have_count(0)
    expect(page.locator("#c-jobs")).to_have_text("1")  # the cards count visible tubes only
    page.locator("#show-internal").check()
    expect(page.locator('#tubes tr[data-tube="stalkd.failed"] .ready-n')).to_have_text("1")
    expect(page.locator('#tubes tr[data-tube="stalkd.key.ab12"]')).to_have_count(1)
    expect(page.locator("#c-jobs")).to_have_text("3")
    # the choice survives a reload
    page.reload()
    expect(page.locator('#tubes tr[data-tube="stalkd.failed"]')).to_have_count(1)
    page.locator("#show-internal").uncheck()
    expect(page.locator('#tubes tr[data-tube="stalkd.key.ab12"]')).to_have_count(0)
    expect(emails).to_have_count(1)


def test_any_of_many_tubes_can_be_found_by_page_order_or_search(server: AdminServer, page: Any) -> None:
    from playwright.sync_api import expect

    # Given 250 tubes (more than a page of 100), t00249 the busiest, stalkd.failed hidden
    make_tubes(server.port, 250, more=4, internal=True)
    # The table shows the first page, the cards every tube
    expect(page.locator("#tube-range")).to_have_text("1–100 of 251")  # and "default"
    expect(page.locator("#tubes tbody tr")).to_have_count(100)
    expect(page.locator("#c-jobs")).to_have_text("254")
    expect(page.locator('#tubes tr[data-tube="t00249"]')).to_have_count(0)
    expect(page.locator("#tube-prev")).to_be_disabled()
    # The next pages go on to the last tube
    page.locator("#tube-next").click()
    expect(page.locator("#tube-range")).to_have_text("101–200 of 251")
    page.locator("#tube-next").click()
    expect(page.locator("#tube-range")).to_have_text("201–251 of 251")
    expect(page.locator('#tubes tr[data-tube="t00249"] .ready-n')).to_have_text("5")
    expect(page.locator("#tube-next")).to_be_disabled()
    # Ordered by jobs, the busiest is first, on the first page again
    page.locator("#tube-sort").select_option("jobs")
    expect(page.locator("#tube-range")).to_have_text("1–100 of 251")
    expect(page.locator("#tubes tbody tr").first).to_have_attribute("data-tube", "t00249")
    # A search finds the tubes whose name holds the text, whatever page they were on
    page.locator("#tube-search").fill("t0017")
    expect(page.locator("#tube-range")).to_have_text("1–10 of 10")
    expect(page.locator("#tubes tbody tr")).to_have_count(10)
    expect(page.locator('#tubes tr[data-tube="t00175"]')).to_have_count(1)
    page.locator("#tube-search").fill("no such tube")
    expect(page.locator("#tube-range")).to_have_text("no tube matches")
    expect(page.locator("#tubes tbody tr")).to_have_count(0)
    # stalkd's own tubes are found only with the toggle on
    page.locator("#tube-search").fill("stalkd.")
    expect(page.locator("#tube-range")).to_have_text("no tube matches")
    page.locator("#show-internal").check()
    expect(page.locator('#tubes tr[data-tube="stalkd.failed"]')).to_have_count(1)


def test_chart_axes_never_repeat_a_label(page: Any) -> None:
    # Given the axis the chart draws, for job counts and rates from tiny to large
    got = page.evaluate("""() => [1, 2, 3, 5, 7, 10, 99, 1234, 56789].flatMap(m => [
        [m, ...axis(m, true, fmt)], [m / 10, ...axis(m / 10, false, axisRate)]])""")
    for top_of_data, top, labels in got:
        # Then its top holds the data, and its five labels all differ (not "1, 1, 1, 0, 0")
        assert top >= top_of_data and len(set(labels)) == 5, (top_of_data, labels)


def test_the_workers_panel_shows_a_running_worker_and_its_job(server: AdminServer, page: Any,
                                                              tmp_path: Any) -> None:
    import threading

    from playwright.sync_api import expect

    from stalkd.worker import App, make_worker
    from stalkd.worker.presence import Presence

    # Given a worker of 2 slots running one job that waits for the test
    release = threading.Event()
    app = App(server.address, middleware=[Presence(interval=0.2)])

    @app.task(tube="emails")
    def send(p: int) -> None:
        release.wait(60)

    job = send.put(1)
    w = make_worker(app, concurrency=2, reserve_timeout=1)
    t = threading.Thread(target=w.run, daemon=True)
    t.start()
    try:
        # Then the dashboard lists it, with its slots and the job it runs
        row = page.locator("#workers tbody tr")
        expect(row).to_have_count(1, timeout=30_000)
        expect(row.locator("td").nth(3)).to_have_text("1 / 2", timeout=30_000)
        expect(row.locator(f'a.job[data-id="{job}"]')).to_have_count(1)
        # and its job opens in the job view
        row.locator(f'a.job[data-id="{job}"]').click()
        expect(page.locator("#job-title")).to_contain_text(str(job))
        expect(page.locator("#job-fields")).to_contain_text("reserved")
    finally:
        release.set()
        w.stop(now=True)
        t.join(timeout=20)
    # and once it stopped, it is gone
    expect(page.locator("#workers tbody tr")).to_have_count(0, timeout=30_000)
