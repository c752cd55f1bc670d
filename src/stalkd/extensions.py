"""The one switch every compiled module obeys, and the list of modules Cython compiles.

The hot path is written once, in Python. At install time setup.py compiles the modules of
``CYTHON_MODULES`` with Cython (pure-Python mode: the same ``.py`` file, its ``cython`` names
typed where that pays), and the compiled module sits beside its source under the same name.
Without a compiler or Cython the build warns and the ``.py`` files run as they are.
``STALKD_NO_EXTENSIONS=1`` in the environment runs the ``.py`` files even where a build exists
(read here, below every layer, when ``stalkd`` is imported: ``install_switch``), and ignores the
C leaf accelerators (``compiled_module``).

Example:
    >>> extensions_disabled() in (True, False)
    True
    >>> compiled_module("stalkd.no_such_module") is None
    True
    >>> "stalkd.log.gate" in CYTHON_MODULES, source_path("stalkd.log.gate")
    (True, 'src/stalkd/log/gate.py')
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

__all__ = ["CYTHON_MODULES", "compiled_module", "compiled_modules", "extensions_disabled",
           "install_switch", "source_path"]  # fmt: skip

CYTHON_MODULES = (
    # the protocol's command and reply values (extension types, commands.pxd): built and read
    # by the parser, the engine and the connection once per command
    "stalkd.protocol.commands",
    # the engine: its objects and heaps (extension types, heap.pxd/objects.pxd), then the
    # modules of Engine's commands and step
    "stalkd.engine.heap",
    "stalkd.engine.objects",
    "stalkd.engine.jobtable",
    "stalkd.engine.room",
    "stalkd.engine.state",
    "stalkd.engine.timers",
    "stalkd.engine.jobcommands",
    "stalkd.engine.queries",
    "stalkd.engine.results",
    "stalkd.engine.engine",
    "stalkd.engine.model",
    # the standby's apply path: every record its primary sends
    "stalkd.engine.replay",
    "stalkd.engine.handover",
    "stalkd.replication.frames",
    "stalkd.replication.receiver",  # the standby's read, append, fsync and acknowledgement per message
    # the primary's side of a stream: a message out and an acknowledgement in per group commit
    "stalkd.replication.gate",
    "stalkd.replication.wire",
    "stalkd.replication.sender",
    "stalkd.log.reader",  # SegmentViews.get, per message sent (Log.frames_after)
    "stalkd.persist.wal",
    "stalkd.persist.snapjobs",  # recovery: a snapshot block's jobs in one C loop
    "stalkd.persist.tail",  # recovery: the WAL records after the snapshot, in one loop
    # a snapshot's copy of the live jobs, a chunk at a time on the loop (Compaction.maintain,
    # SnapshotWriter.add_jobs): in a queue that grows, each put is copied into a snapshot again
    "stalkd.persist.compaction",
    "stalkd.persist.snapshot",
    "stalkd.log.active",
    "stalkd.log.commit",
    "stalkd.log.ticket",  # made and resolved per read a standby fsyncs on the committer thread
    "stalkd.log.frame",
    "stalkd.log.fs",
    "stalkd.log.gate",
    "stalkd.log.log",
    "stalkd.log.mutex",  # the writer's and the group commit's locks, taken by C calls
    "stalkd.log.visibility",  # its waiter counts, read per sync and per batch written
    "stalkd.log.writer",
    "stalkd.server.clock",  # read per command: compiled, a reading is no Python call
    "stalkd.server.turns",  # told of every read (Turns.read): a C call, no Python frame per job
    "stalkd.engine.space",  # the space budget, asked per durable command (persist/wal.py)
    "stalkd.server.connection",
    "stalkd.server.readbuf",
    "stalkd.server.admission",
    "stalkd.server.waladmission",  # a put's WAL promise and settlement as C calls (WalBatches)
    "stalkd.server.barriers",
    "stalkd.server.app",
)
"""The modules setup.py compiles from their own ``.py`` files (and Makefile rebuilds when one of
those files changes)."""


def extensions_disabled() -> bool:
    """``STALKD_NO_EXTENSIONS=1``: run the pure-Python source of every compiled module."""
    return os.environ.get("STALKD_NO_EXTENSIONS", "") not in ("", "0")


def source_path(module: str) -> str:
    """The source file of ``module`` in the repository (what setup.py hands Cython)."""
    return "src/" + module.replace(".", "/") + ".py"


def compiled_module(name: str) -> ModuleType | None:
    """The compiled leaf module ``name``, or None: switched off (``STALKD_NO_EXTENSIONS=1``) or
    not built (no compiler at install time), when its pure-Python counterpart runs instead."""
    if extensions_disabled():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def compiled_modules() -> dict[str, bool]:
    """Each of ``CYTHON_MODULES`` and whether it runs compiled in this process (imports them)."""
    return {name: _is_compiled(importlib.import_module(name)) for name in CYTHON_MODULES}


def _is_compiled(module: ModuleType) -> bool:
    return not (getattr(module, "__file__", None) or "").endswith(".py")


def install_switch() -> None:
    """Under ``STALKD_NO_EXTENSIONS=1``, make every module of ``CYTHON_MODULES`` import from its
    ``.py`` file (``import stalkd`` calls this, before any of them can be imported)."""
    if not extensions_disabled():
        return
    from stalkd.sourcefirst import SourceFirst  # importlib.abc: only where the switch is set

    if not any(isinstance(f, SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, SourceFirst(CYTHON_MODULES))
