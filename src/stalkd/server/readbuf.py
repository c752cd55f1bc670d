"""How a connection reads: the loop's own reads, or smaller ones into a shared buffer.

With the default ``--max-output`` a connection may read as much at once as the loop does
(``READ_MAX``), so it is a plain ``Connection`` and the loop hands each read to
``data_received`` (one Python call per read). Under a smaller limit its reads must be smaller
too, so the loop reads into a buffer of ``read_size`` shared by the thread's connections
(``BufferedConnection``: ``get_buffer`` and ``buffer_updated``, two calls and a copy per read).
Which class serves a socket is ``fastconn.new_connection``'s choice.
"""

from __future__ import annotations

import asyncio
import threading

from stalkd.server.connection import Connection

__all__ = ["BufferedConnection"]


_buffers = threading.local()  # one read buffer per size, per event loop thread


def _read_buffer(size: int) -> memoryview:
    """A buffer the transport reads into, shared by the connections of this thread: the loop
    hands it to ``buffer_updated`` straight after the read, which copies what it needs."""
    by_size: dict[int, memoryview] | None = getattr(_buffers, "by_size", None)
    if by_size is None:
        by_size = _buffers.by_size = {}
    buf = by_size.get(size)
    if buf is None:
        buf = by_size[size] = memoryview(bytearray(size))
    return buf


class BufferedConnection(Connection, asyncio.BufferedProtocol):
    """A connection whose reads are smaller than the loop's (a ``max_output`` under 1 MiB): the
    loop reads into a buffer shared by the thread's connections, at most ``read_size`` at once."""

    _rbuf: memoryview | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        rbuf = self._rbuf
        if rbuf is None:
            rbuf = self._rbuf = _read_buffer(self.read_size)
        return rbuf

    def buffer_updated(self, nbytes: int) -> None:
        assert self._rbuf is not None
        self.data_received(self._rbuf[:nbytes].tobytes())
