"""Which class serves a socket, and whether the connection runs compiled.

``connection.py`` (and ``readbuf.py``, ``barriers.py``, ``admission.py``, ``app.py``) are the one
implementation of a connection and the server parts a command touches; setup.py compiles them
with Cython (``stalkd.extensions.CYTHON_MODULES``). ``IMPLEMENTATION`` says which runs here:
``"cython"`` (built, and ``STALKD_NO_EXTENSIONS`` unset) or ``"python"`` (the same files
interpreted).

Example:
    >>> IMPLEMENTATION in ("cython", "python")
    True
"""

from __future__ import annotations

from typing import Literal

from stalkd.server import connection
from stalkd.server.connection import READ_MAX, Connection, Host, read_size
from stalkd.server.readbuf import BufferedConnection

__all__ = ["IMPLEMENTATION", "new_connection"]

IMPLEMENTATION: Literal["cython", "python"] = (
    "python" if (connection.__file__ or "").endswith(".py") else "cython")


def new_connection(server: Host, conn_id: int, max_job_size: int, max_output: int) -> Connection:
    """The protocol object for one accepted socket: reads as large as the loop's
    (``Connection``), or smaller ones into a shared buffer (``BufferedConnection``)."""
    cls = Connection if read_size(max_output) >= READ_MAX else BufferedConnection
    return cls(server, conn_id, max_job_size, max_output)
