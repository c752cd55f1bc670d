"""stalkd's side of bench/worker_bench.py (``stalkd worker stalkd_tasks:app``)."""

import os

from _common import noop, stamp

from stalkd.worker import App

app = App(os.environ.get("BENCH_STALKD", "127.0.0.1:11300"))
noop_task = app.task(noop, name="noop", tube="bench")
stamp_task = app.task(stamp, name="stamp", tube="bench")
