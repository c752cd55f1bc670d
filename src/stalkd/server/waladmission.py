"""WAL admission for a server with a data directory: ``Admission`` over the WAL's compiled
per-batch object (``stalkd.persist.wal.WalBatches``), whose ``admit`` and ``settle`` it calls
as C functions when compiled (a put's promise and its settlement were two Python calls, ~650
instructions a put together).

A module of its own so that a server without a data directory never imports the WAL (the log
package costs ~0.1 s to import): ``admission_for`` is imported once a storage exists.

Ensures: the same promises, refusals and settlements as ``Admission`` (its ``put`` and
``settle``: only the two storage calls are overridden here).
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
    """``Admission`` whose storage steps are the WAL's ``WalBatches``, called directly (the
    rules are Admission's: only ``_admit`` and ``_settle`` differ)."""

    _wal: WalBatches

    def __init__(self, storage: Storage, data_dir: str | None) -> None:
        super().__init__(storage, data_dir)
        self._wal = storage.batches  # type: ignore[attr-defined]

    def _admit(self, cost: int) -> bool:
        return self._wal.admit(cost)

    def _settle(self, promised: int, records: Sequence[Record]) -> None:
        self._wal.settle(promised, records)
