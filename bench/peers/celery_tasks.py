"""Celery's side of bench/worker_bench.py (``celery -A celery_tasks worker``), Redis as broker
and no result backend (as the other systems: no results stored)."""

from _common import noop, redis_url, stamp
from celery import Celery

app = Celery("bench", broker=redis_url().replace("unix://", "redis+socket://"))
app.conf.task_default_queue = "bench"
app.conf.worker_hijack_root_logger = False
noop_task = app.task(noop, name="noop", ignore_result=True)
stamp_task = app.task(stamp, name="stamp", ignore_result=True)
