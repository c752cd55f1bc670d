"""Dramatiq's side of bench/worker_bench.py (``dramatiq dramatiq_tasks``), its default
middleware, on Redis."""

import dramatiq
from _common import noop, redis_url, stamp
from dramatiq.brokers.redis import RedisBroker

broker = RedisBroker(url=redis_url())
dramatiq.set_broker(broker)
noop_actor = dramatiq.actor(noop, actor_name="noop", queue_name="bench", max_retries=0)
stamp_actor = dramatiq.actor(stamp, actor_name="stamp", queue_name="bench", max_retries=0)
