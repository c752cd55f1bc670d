"""Write PNGs of the dashboard with some live traffic (``make dashboard-screenshot``): the page,
and (``-job.png``) the view of a buried job with its dead-letter traceback.

Starts ``stalkd serve --admin`` on port 0 (in a temporary directory), runs a producer and a
consumer for ~20 s so the charts have history, buries a few jobs with dead-letter records,
then screenshots the page with Debian's Chromium through Playwright. Everything it starts is
stopped by PID. Usage: python scripts/dashboard_screenshot.py [OUT.png]
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import greenstalk  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from admin.adminproc import start_admin_server  # noqa: E402
from stalkd.worker.actions import DeadLetter  # noqa: E402

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
SECONDS = float(os.environ.get("SCREENSHOT_SECONDS", "20"))


def traffic(port: int, stop: threading.Event) -> None:
    prod = greenstalk.Client(("127.0.0.1", port))
    work = greenstalk.Client(("127.0.0.1", port), watch=["emails", "thumbnails"])
    rng = random.Random(7)
    t0 = time.monotonic()
    while not stop.is_set():
        phase = (time.monotonic() - t0) / SECONDS
        burst = int(20 + 60 * abs(((phase * 3) % 2) - 1))
        for i in range(burst):
            prod.use(rng.choice(["emails", "emails", "thumbnails", "reports"]))
            prod.put(f'{{"n": {i}, "to": "user{rng.randrange(1000)}@example.org"}}',
                     delay=rng.choice([0, 0, 0, 0, 30]))
        for _ in range(int(burst * 0.8)):
            try:
                j = work.reserve(timeout=0)
            except greenstalk.TimedOutError:
                break
            work.delete(j)
        time.sleep(0.1)


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "build/dashboard.png"
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        srv = start_admin_server("--dir", os.path.join(d, "data"))
        stop = threading.Event()
        try:
            c = greenstalk.Client(("127.0.0.1", srv.port), use="emails", watch="emails")
            errs = ["SMTPRecipientsRefused({'bob@example.org': (550, b'mailbox unavailable')})",
                    "TimeoutError('connect to smtp.example.org:587 timed out')",
                    "KeyError('template')"]
            for e in errs:
                jid = c.put('{"to": "bob@example.org", "template": "welcome"}')
                c.bury(c.reserve())
                c.use("stalkd.failed")
                c.put(DeadLetter(job_id=jid, tube="emails", task="send_email", attempts=5, error=e,
                                 traceback=f"Traceback (most recent call last):\n  File \"app.py\", line 42, in send_email\n    smtp.send(msg)\n{e}",
                                 failed_at=time.time(), body=b"{}").to_json().decode())
                c.use("emails")
            c.use("reports")
            c.put("nightly")
            srv.post("/api/v1/tubes/reports/pause", {"seconds": 3600})
            t = threading.Thread(target=traffic, args=(srv.port, stop), daemon=True)
            t.start()
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=FLAGS)
                page = browser.new_page(viewport={"width": 1360, "height": 1000}, device_scale_factor=1)
                page.goto(srv.admin + "/")
                time.sleep(SECONDS)  # let the charts collect history (a demo, not a test)
                page.screenshot(path=out, full_page=True)
                # and the job view of a buried job, with its dead letter
                page.locator("#buried [data-act=view]").first.click()
                page.locator("#job-tb").wait_for()
                page.screenshot(path=out.replace(".png", "-job.png"), full_page=False)
                browser.close()
            stop.set()
            t.join()
        finally:
            stop.set()
            srv.stop()
    print(out, out.replace(".png", "-job.png"))


if __name__ == "__main__":
    main()
