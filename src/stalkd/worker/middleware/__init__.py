"""Built-in middleware, one concern per module.

>>> [type(m).__name__ for m in default_middleware()]
['StructuredLogging', 'Retries', 'TimeLimit', 'Heartbeat', 'Shutdown', 'Cancellation', 'Presence']

``Metrics`` (Prometheus) is opt-in: ``app.add_middleware(Metrics(port=9100))``.
"""

from __future__ import annotations

from stalkd.worker.middleware.base import Middleware
from stalkd.worker.middleware.cancellation import Cancellation
from stalkd.worker.middleware.heartbeat import Heartbeat
from stalkd.worker.middleware.logging import StructuredLogging
from stalkd.worker.middleware.prometheus import Metrics
from stalkd.worker.middleware.retries import Retries
from stalkd.worker.middleware.shutdown import Shutdown
from stalkd.worker.middleware.time_limit import TimeLimit

__all__ = ["Middleware", "Cancellation", "Heartbeat", "StructuredLogging", "Metrics", "Retries", "Shutdown",
           "TimeLimit", "default_middleware"]


def default_middleware() -> list[Middleware]:
    """Logging outermost (it sees the final decision), then retries, time limit, heartbeat."""
    from stalkd.worker.presence import Presence

    return [StructuredLogging(), Retries(), TimeLimit(), Heartbeat(), Shutdown(), Cancellation(),
            Presence()]
