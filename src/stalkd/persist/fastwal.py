"""Which ``Wal.write`` runs: its compiled twin, or the reference alone.

``stalkd.engine._wal`` (built from ``_wal.c`` with the other accelerators, ``make ext``) runs
``Wal.write`` in one C call: records encoded (``model.encode``), priced against the space budget
(``SpaceBudget.written`` inlined), handed to the log's ``write_many`` (``stalkd.log.fastwrite``'s
compiled one when built), counters moved; ``Wal.write`` and ``SpaceBudget.written`` are two Python
frames per batch otherwise, and with the log's twin the whole server batch reaches ``pwrite``
without one; ``Wal.sync`` is one C step to the log's (compiled) sync; ``Wal.admit`` and
``Wal.settle``, the room the server promises per command, are one C call each while the room is
there (``WalSpace``'s and ``SpaceBudget``'s frames, and the log's ``active_span``, otherwise).
Anything else (a record the encoder refuses, a subclass, a replaced method) is the
reference's, unchanged; a full log still goes through ``Wal._retry_full``.
``STALKD_NO_EXTENSIONS=1`` or a missing build selects the reference; ``set_compiled(False)``
does for a while (tests/engine/test_wal_chain_differential.py compares both).

Example:
    >>> IMPLEMENTATION in ("c", "python")
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from stalkd.engine.model import DURABLE_OPS, PUT_FIXED, RESULT_FIXED, Op, encode
from stalkd.engine.space import SHORT_FRAME, SpaceBudget
from stalkd.extensions import compiled_module
from stalkd.log import Log, LogFullError
from stalkd.log.frame import FRAME_HEADER_SIZE

__all__ = ["IMPLEMENTATION", "accelerated", "counts", "set_compiled"]

IMPLEMENTATION: Literal["c", "python"] = "python"
"""Whether ``accelerated`` installed the compiled path."""



def _module() -> Any:
    return compiled_module("stalkd.engine._wal")


def accelerated(wal: type, methods: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """``wal``'s ``write``, ``sync``, ``admit`` and ``settle`` (the references, by name), or the
    compiled descriptors that stand in for them on ``wal`` (instances of subclasses get the
    references' behaviour)."""
    global IMPLEMENTATION
    mod = _module()
    if mod is None:
        return methods
    # What the path does in one call: if a test replaces one of these, the call is the reference's.
    originals = tuple((SpaceBudget, name, SpaceBudget.__dict__[name]) for name in (
        "written", "admit", "settle", "fits", "room"))  # fmt: skip
    mod.configure({"Wal": wal, "SpaceBudget": SpaceBudget, "Op": Op, "PUT": Op.PUT, "RESULT": Op.RESULT,
                   "DELETE": Op.DELETE, "DURABLE_OPS": DURABLE_OPS, "encode": encode, "SHORT_FRAME": SHORT_FRAME,
                   "FRAME_HEADER_SIZE": FRAME_HEADER_SIZE, "LogFullError": LogFullError, "Log": Log,
                   "active_span": Log.__dict__["active_span"], "RESULT_FIXED": RESULT_FIXED,
                   "PUT_FRAME": FRAME_HEADER_SIZE + PUT_FIXED + 7,  # space.put_frame's rule
                   "originals": originals})  # fmt: skip
    IMPLEMENTATION = "c"
    return {name: mod.FastMethod(name, ref) for name, ref in methods.items()}


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
