"""huey's side of bench/worker_bench.py (``huey_consumer huey_tasks.huey``), on Redis."""

from _common import noop, redis_url, stamp
from huey import RedisHuey

huey = RedisHuey("bench", url=redis_url())
noop_task = huey.task()(noop)
stamp_task = huey.task()(stamp)
