"""Which ``Wal.write`` runs: its compiled twin, or the reference alone.

``stalkd.engine._wal`` (built from ``_wal.c`` with the other accelerators, ``make ext``) runs
``Wal.write`` in one C call: records encoded (``fastrecords``), priced against the space budget
(``SpaceBudget.written`` inlined), handed to the log's ``write_many`` (``stalkd.log.fastwrite``'s
compiled one when built), counters moved; ``Wal.write`` and ``SpaceBudget.written`` are two Python
frames per batch otherwise, and with the log's twin the whole server batch reaches ``pwrite``
without one; ``Wal.sync`` is one C step to the log's (compiled) sync. Anything else (a record the encoder refuses, a subclass, a replaced method) is the
reference's, unchanged; a full log still goes through ``Wal._retry_full``.
``STALKD_NO_EXTENSIONS=1`` or a missing build selects the reference; ``set_compiled(False)``
does for a while (tests/engine/test_wal_chain_differential.py compares both).

Example:
    >>> IMPLEMENTATION in ("c", "python")
    True
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any, Literal

from stalkd.engine.fastrecords import encode
from stalkd.engine.model import DURABLE_OPS, Op, Record
from stalkd.engine.space import SHORT_FRAME, SpaceBudget
from stalkd.extensions import extensions_disabled
from stalkd.log import LogFullError
from stalkd.log.frame import FRAME_HEADER_SIZE

__all__ = ["IMPLEMENTATION", "accelerated", "counts", "set_compiled"]

IMPLEMENTATION: Literal["c", "python"] = "python"
"""Whether ``accelerated`` installed the compiled path."""

Write = Callable[[Any, Sequence[Record]], None]
Sync = Callable[[Any], None]


def _module() -> Any:
    if extensions_disabled():
        return None
    try:
        return importlib.import_module("stalkd.engine._wal")
    except ImportError:
        return None


def accelerated(wal: type, write: Write, sync: Sync) -> tuple[Write, Sync]:
    """``wal``'s ``write`` and ``sync`` (the references), or the compiled descriptors that stand
    in for them on ``wal`` (instances of subclasses get the references' behaviour)."""
    global IMPLEMENTATION
    mod = _module()
    if mod is None:
        return write, sync
    originals = ((SpaceBudget, "written", SpaceBudget.__dict__["written"]),)
    mod.configure({"Wal": wal, "SpaceBudget": SpaceBudget, "Op": Op, "PUT": Op.PUT, "RESULT": Op.RESULT,
                   "DURABLE_OPS": DURABLE_OPS, "encode": encode, "SHORT_FRAME": SHORT_FRAME,
                   "FRAME_HEADER_SIZE": FRAME_HEADER_SIZE, "LogFullError": LogFullError,
                   "originals": originals})  # fmt: skip
    IMPLEMENTATION = "c"
    return mod.FastMethod("write", write), mod.FastMethod("sync", sync)


def set_compiled(on: bool) -> None:
    """False: every call goes to the reference until ``set_compiled(True)`` (tests)."""
    mod = _module()
    if mod is not None:
        mod.set_enabled(on)


def counts() -> tuple[int, int]:
    """(batches the compiled path wrote, batches it handed to the reference) in this process;
    (0, 0) without it."""
    mod = _module()
    counted: tuple[int, int] = (0, 0) if mod is None else mod.counts()
    return counted
