"""WAL admission for a server with a data directory: ``Admission`` over the WAL's compiled
per-batch object (``stalkd.persist.wal.WalBatches``), whose ``admit`` and ``settle`` it calls
as C functions when compiled (a put's promise and its settlement were two Python calls, ~650
instructions a put together).

A module of its own so that a server without a data directory never imports the WAL (the log
package costs ~0.1 s to import): ``admission_for`` is imported once a storage exists.

Ensures: the same promises, refusals and settlements as ``Admission`` (this is the same
arithmetic, only the calls differ).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from stalkd.engine.model import Record
from stalkd.persist.wal import WalBatches
from stalkd.server.admission import Admission
from stalkd.server.storage import Storage

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = ["WalAdmission", "admission_for"]


def admission_for(storage: Storage, data_dir: str | None) -> Admission:
    """The admission for ``storage``: a WAL's (C calls into its batches) or the generic one."""
    if isinstance(getattr(storage, "batches", None), WalBatches):
        return WalAdmission(storage, data_dir)
    return Admission(storage, data_dir)


@cython.cclass
class WalAdmission(Admission):
    """``Admission`` whose storage steps are the WAL's ``WalBatches``, called directly."""

    _wal: WalBatches

    def __init__(self, storage: Storage, data_dir: str | None) -> None:
        super().__init__(storage, data_dir)
        self._wal = storage.batches  # type: ignore[attr-defined]

    @cython.locals(cost=cython.Py_ssize_t)
    def put(self, body_len: int) -> bool:
        # space.put_frame(body_len), as Admission.put
        cost = (self._put_base + body_len) & ~7
        if self._wal.admit(cost):
            self.promised += cost
            return True
        self._refused("put")
        return False

    def settle(self, records: Sequence[Record]) -> None:
        """The command ran (or failed): promise exactly what ``records`` need."""
        if not self.promised and len(records) == 1 and records[0].op in self._costless:
            return  # a delete: its room was promised with its put, nothing to settle
        if self.promised or records:
            self._wal.settle(self.promised, records)
            self.promised = 0
