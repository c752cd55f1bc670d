"""Which ``Log.write_many`` and ``Log.sync`` run: compiled twins of their common cases, or the references.

``stalkd.log._write`` (built from ``_write.c`` with the other accelerators, ``make ext``) writes a
batch that fits the active segment in one C call: frames built and pwritten under the writer's
lock, offsets advanced, waiters told, as ``Log.write_many`` over ``SegmentWriter.write_many``,
``ActiveSegment.write`` and ``FileSystem.pwrite`` do; each of those is one Python frame per
batch otherwise, which is most of what a WAL write costs at depth 1. Anything else (a roll-over,
zeros to write first, io="mmap", a failed or closed log, lag limits, a file system other than
``fs.REAL`` with its own methods, as a test's ``Faults``) is the reference's, unchanged, so
faults injected through the seam still fire. ``Log.sync`` likewise for a caller alone (nobody
else syncing, waiting or expected back: a lone writer, the server's inline fsync), which is
``GroupCommit``'s sync_to, _sync_alone, _fsync_end, _synced_locked and the writer's pin_end,
fdatasync and unpin otherwise, eight Python frames per sync. ``STALKD_NO_EXTENSIONS=1`` or a missing build
selects the reference; ``set_compiled(False)`` does for a while (a test comparing both).

Example:
    >>> IMPLEMENTATION in ("c", "python")
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from stalkd.extensions import compiled_module

from .active import ActiveSegment
from .commit import GroupCommit
from .errors import LogError
from .frame import MAX_PAYLOAD
from .fs import REAL, FileSystem
from .writer import SegmentWriter

__all__ = ["IMPLEMENTATION", "accelerated", "counts", "set_compiled"]

WriteMany = Callable[..., tuple[int, int]]
Sync = Callable[..., int]

IMPLEMENTATION: Literal["c", "python"] = "python"
"""Whether ``accelerated`` installed the compiled path."""


def _module() -> Any:
    return compiled_module("stalkd.log._write")


def accelerated(log: type, write_many: WriteMany, sync: Sync) -> tuple[WriteMany, Sync]:
    """``log``'s ``write_many`` and ``sync`` (the references), or the compiled descriptors that
    stand in for them on ``log`` (instances of subclasses get the references' behaviour)."""
    global IMPLEMENTATION
    mod = _module()
    if mod is None:
        return write_many, sync
    # What the path does in one call: if a test or a bench replaces one of these (a fault, a
    # sleep), the call is the reference's.
    originals = tuple((cls, name, cls.__dict__[name]) for cls, name in (
        (SegmentWriter, "write_many"), (SegmentWriter, "_write_failed"), (ActiveSegment, "write"),
        (FileSystem, "pwrite"), (FileSystem, "pwrite_all"), (SegmentWriter, "pin_end"), (SegmentWriter, "unpin"),
        (SegmentWriter, "fdatasync"), (FileSystem, "fdatasync"), (GroupCommit, "sync_to"),
        (GroupCommit, "_sync_alone"), (GroupCommit, "_fsync_end"), (GroupCommit, "_synced_locked"),
        (GroupCommit, "_advance_locked")))  # fmt: skip
    mod.configure({"Log": log, "SegmentWriter": SegmentWriter, "ActiveSegment": ActiveSegment,
                   "FileSystem": FileSystem, "GroupCommit": GroupCommit, "REAL": REAL, "LogError": LogError,
                   "MAX_PAYLOAD": MAX_PAYLOAD, "originals": originals})  # fmt: skip
    IMPLEMENTATION = "c"
    return mod.FastMethod("write_many", write_many), mod.FastMethod("sync", sync)


def set_compiled(on: bool) -> None:
    """False: every call goes to the reference until ``set_compiled(True)`` (tests)."""
    mod = _module()
    if mod is not None:
        mod.set_enabled(on)


def counts() -> tuple[int, int, int, int]:
    """(batches the compiled path wrote, batches it handed to the reference, syncs it ran, syncs
    it handed over) in this process; zeros without it."""
    mod = _module()
    counted: tuple[int, int, int, int] = (0, 0, 0, 0) if mod is None else mod.counts()
    return counted
