"""stalkd.client: Python clients for stalkd and any beanstalkd server.

``Client`` is blocking; ``AsyncClient`` is its asyncio twin with the same methods, awaited.
Every beanstalkd command is a method; error replies raise the class for their word from
``stalkd.client.errors``.

Example::

    from stalkd.client import Client, errors

    with Client("127.0.0.1:11300") as c:
        c.use("emails")
        c.put("hello")
        c.watch("emails")
        job = c.reserve(timeout=5)
        c.delete(job)

Importing this package does not import asyncio; ``AsyncClient`` is loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stalkd.client import errors
from stalkd.client._address import Address, TlsParams, parse_address
from stalkd.client._core import Finished, PutSpec
from stalkd.client.errors import BeanstalkError
from stalkd.client.job import Job
from stalkd.client.sync import Client

if TYPE_CHECKING:
    from stalkd.client.aio import AsyncClient

__all__ = ["Client", "AsyncClient", "Job", "PutSpec", "Finished", "BeanstalkError", "errors",
           "Address", "TlsParams", "parse_address"]


def __getattr__(name: str) -> Any:
    if name == "AsyncClient":
        from stalkd.client.aio import AsyncClient

        return AsyncClient
    raise AttributeError(f"module 'stalkd.client' has no attribute {name!r}")
