"""WAL admission: the engine's ``Room`` over the server's storage.

The engine decides *whether* a command needs room and asks for it after its own job look-up
(``Engine.room``, derived from the command table); this object turns the request into bytes
(the frame sizes of ``stalkd.engine.space``), promises them from the storage, remembers what the
running command was promised, and settles it against the records the command really produced.

Ensures: after ``settle`` nothing is left promised for the command; a refusal promised nothing
and is logged at most once per ``warn_every`` seconds (a full disk refuses every put).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from stalkd.engine.model import Record
from stalkd.engine.room import RoomBase
from stalkd.server.storage import Storage

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["Admission"]

log = logging.getLogger("stalkd.server")


@cython.cclass
class Admission(RoomBase):
    """Room for one command's records at a time, promised from ``storage``. A ``RoomBase``:
    the compiled engine asks ``put`` as a C call. The rules (a put's cost, what ``settle``
    skips) are here once; a subclass changes only how the storage is asked (``_admit``,
    ``_settle``: ``waladmission.WalAdmission``'s C calls into the WAL).

    >>> from stalkd.server.storage import MemoryStorage
    >>> a = Admission(MemoryStorage(), "/tmp"); a.put(100), a.updates(3), a.promised > 0
    (True, 3, True)
    >>> a.settle(()); a.promised
    0
    """

    # The state: C fields when compiled, with the C methods, declared in admission.pxd (readable and
    # writable from Python as attributes).
    _storage: Storage
    _costless: tuple[bool, ...]
    _short: int
    _put_base: int
    _data_dir: str | None
    _warn_every: float
    _clock: Callable[[], float]
    _warned: float
    promised: int
    refused: int

    def __init__(
        self, storage: Storage, data_dir: str | None, *, warn_every: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        # Imported here: the log package costs ~0.1 s to import, which an in-memory server
        # does not need before it listens.
        from stalkd.engine.space import COSTLESS_OPS, PUT_FRAME_BASE, SHORT_FRAME

        # A WAL hands its per-command steps to a compiled object (``Wal.batches``): called here
        # directly, one Python call per admit and per settle rather than two.
        self._storage = getattr(storage, "batches", storage)
        # by op code: an IntEnum indexes a tuple without hashing (its hash is a Python-level call)
        self._costless = tuple(code in COSTLESS_OPS for code in range(256))
        self._short = SHORT_FRAME
        self._put_base = PUT_FRAME_BASE  # a put's room: space.put_frame, its rule inline
        self._data_dir = data_dir
        self._warn_every = warn_every
        self._clock = clock
        self._warned = -warn_every
        self.promised = 0  # bytes promised to the command being run
        self.refused = 0  # requests refused for lack of room (a metric)

    @cython.locals(cost=cython.Py_ssize_t)
    def put(self, body_len: int) -> bool:
        # space.put_frame(body_len), without a Python call per put: (PUT_FRAME_BASE + n) & ~7
        cost = (self._put_base + body_len) & ~7
        if self._admit(cost):
            self.promised += cost
            return True
        self._refused("put")
        return False

    def updates(self, n: int) -> int:
        if n <= 0:
            return 0
        short = self._short
        k = (n if self._storage.admit(short) else 0) if n == 1 else self._storage.admit_upto(n, short)
        self.promised += k * short
        if k == 0:
            self._refused("change")
        return k

    @cython.locals(rec=Record, code=cython.Py_ssize_t)
    def settle(self, records: Sequence[Record]) -> None:
        """The command ran (or failed): promise exactly what ``records`` need."""
        if not self.promised and len(records) == 1:
            rec = records[0]  # compiled: its C fields
            code = rec.op
            if self._costless[code]:
                return  # a delete, a reserve: nothing promised for it, nothing to settle
        if self.promised or records:
            self._settle(self.promised, records)
            self.promised = 0

    def _admit(self, cost: int) -> bool:
        """The storage promises ``cost`` bytes, or refuses (False)."""
        return bool(self._storage.admit(cost))

    def _settle(self, promised: int, records: Sequence[Record]) -> None:
        """The storage turns ``promised`` bytes into what ``records`` need."""
        self._storage.settle(promised, records)

    def _refused(self, what: str) -> None:
        self.refused += 1
        now = self._clock()
        if now - self._warned > self._warn_every:
            self._warned = now
            log.warning("WAL full: refusing a %s; reads and deletes still work; free space in %s",
                        what, self._data_dir)
