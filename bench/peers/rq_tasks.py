"""RQ's side of bench/worker_bench.py: RQ runs functions by import path (``rq_tasks.noop``)."""

from _common import noop, stamp

__all__ = ["noop", "stamp"]
