"""Which classes serve a socket and its server: those with a compiled core, or the reference.

``stalkd.server._conn`` (built from ``_conn.c`` with the other accelerators, ``make ext``) holds
``ConnectionCore``: the state a read touches, as slots, and ``data_received``, ``process``
(the turn's deadline asked of the same ``turns.Turns``), ``send``, ``flush`` (its report to the
memory budget included), ``release_held`` and ``resume`` in C, so a read in the common state runs its
commands without a Python frame of the connection's own, nor of ``Server.execute`` (the core
runs its common case, with or without a WAL; the rest is app.py's). With a WAL the server's
``BarriersCore`` and ``AdmissionCore`` do the same for the barriers' per-command bookkeeping, a
lone writer's write and fsync, the release of held replies, and WAL room (the syncs on the
thread, the standbys' gate and failures stay barriers.py's). The classes here put each core
before its reference (``Connection``, ``BufferedConnection``, ``Barriers``, ``Admission``), so
every other method, and every case a core does not take, is the reference's.
``STALKD_NO_EXTENSIONS=1``, a missing build or the pure-Python parser selects the references;
tests/server/test_conn_differential.py holds both to the same bytes and engine states.

Example:
    >>> IMPLEMENTATION in ("c", "python")
    True
    >>> issubclass(CONNECTION, Connection) and issubclass(BUFFERED, BufferedConnection)
    True
    >>> issubclass(BARRIERS, Barriers) and issubclass(ADMISSION, Admission)
    True
"""

from __future__ import annotations

from typing import Literal

from stalkd.engine.model import DURABLE_OPS
from stalkd.extensions import compiled_module
from stalkd.protocol import accel
from stalkd.protocol.commands import Close, JobReply
from stalkd.replication.wire import REPLICATE
from stalkd.server.admission import Admission
from stalkd.server.barriers import INLINE_AFTER, Barriers
from stalkd.server.budget import GRAIN
from stalkd.server.connection import _DENIED, READ_MAX, Connection, Host, read_size
from stalkd.server.readbuf import BufferedConnection

__all__ = ["IMPLEMENTATION", "CONNECTION", "BUFFERED", "BARRIERS", "ADMISSION", "new_connection"]


def _compiled() -> tuple[type[Connection], type[BufferedConnection], type[Barriers], type[Admission]] | None:
    if accel.speedups is None:  # STALKD_NO_EXTENSIONS=1, or the reference parser runs
        return None
    mod = compiled_module("stalkd.server._conn")
    if mod is None:
        return None
    mod.configure(send=Connection.send, close=Close, job_reply=JobReply, denied=_DENIED,
                  replicate=REPLICATE, durable_ops=DURABLE_OPS, inline_after=INLINE_AFTER,
                  reached=Barriers._reached, grain=GRAIN)
    core = mod.ConnectionCore
    conn: type[Connection] = type("CConnection", (core, Connection), {
        "__doc__": Connection.__doc__, "__module__": __name__})
    buffered: type[BufferedConnection] = type("CBufferedConnection", (conn, BufferedConnection), {
        "__doc__": BufferedConnection.__doc__, "__module__": __name__})
    barriers: type[Barriers] = type("CBarriers", (mod.BarriersCore, Barriers), {
        "__doc__": Barriers.__doc__, "__module__": __name__})
    admission: type[Admission] = type("CAdmission", (mod.AdmissionCore, Admission), {
        "__doc__": Admission.__doc__, "__module__": __name__})
    return conn, buffered, barriers, admission


_classes = _compiled()
CONNECTION: type[Connection] = Connection if _classes is None else _classes[0]
"""The class of a connection that reads as much as the loop does."""
BUFFERED: type[BufferedConnection] = BufferedConnection if _classes is None else _classes[1]
"""The class of a connection that reads into the shared buffer (a small ``max_output``)."""
BARRIERS: type[Barriers] = Barriers if _classes is None else _classes[2]
"""The class of a server's barriers (its step hooks and per-command bookkeeping)."""
ADMISSION: type[Admission] = Admission if _classes is None else _classes[3]
"""The class of a durable server's WAL admission."""
IMPLEMENTATION: Literal["c", "python"] = "python" if _classes is None else "c"


def new_connection(server: Host, conn_id: int, max_job_size: int, max_output: int) -> Connection:
    """The protocol object for one accepted socket."""
    cls = CONNECTION if read_size(max_output) >= READ_MAX else BUFFERED
    return cls(server, conn_id, max_job_size, max_output)
