"""What the delivery pipeline and its drivers need from an app (``App`` provides it).

A protocol rather than ``App`` itself, so the pipeline, the drivers and ``app.testing()`` sit
below ``app`` in the import graph.
"""

from __future__ import annotations

from typing import Any, Protocol

from stalkd.worker.middleware.base import Middleware
from stalkd.worker.results import ResultBackend
from stalkd.worker.serializer import Serializer
from stalkd.worker.task import Task

__all__ = ["Registry"]


class Registry(Protocol):
    """Tasks by name, middleware, and where the server is."""

    @property
    def address(self) -> str: ...

    @property
    def client_timeout(self) -> float: ...

    @property
    def failed_tube(self) -> str: ...

    @property
    def serializer(self) -> Serializer: ...

    @property
    def middleware(self) -> list[Middleware]: ...

    @property
    def tubes(self) -> list[str]: ...

    @property
    def results(self) -> ResultBackend: ...

    def task_for(self, name: str | None, tube: str | None, job_id: int) -> Task[Any]: ...
