"""stalkd.log: an append-only, segmented, CRC32C-checked log with consumer groups.

Directory layout: ``seg-<base offset, 20 digits>.log`` segment files (preallocated, versioned
header, 8-byte aligned frames, a footer once sealed), ``LOCK`` (one writer process),
``groups/<name>.cur`` (two-slot CRC cursor files), ``archive/`` (retired segments, same
format), ``dropped/`` (what a repair, ``stalkd log repair``, cut off), ``spares/`` (preallocated
spare segments, renamed into place). Offsets are logical record numbers.

Durability: ``always`` (an append returns after an fsync shared by concurrent appenders),
``every:<ms>`` (a background flush woken when due), ``never`` (page cache: survives kill -9).
Writes: single frames are stored through a mapping of the active segment, batches with pwrite
(the faster way for each, as ``bench/log_bench.py`` shows; ``io="pwrite"`` forces pwrite, e.g.
on copy-on-write file systems, where a store into a mapping could find no room).

>>> import tempfile
>>> from stalkd.log import Log
>>> with Log.open(tempfile.mkdtemp(), durability="never") as log:
...     log.append(b"job")
0

Consumer groups (``ConsumerGroup``, ``Message``) are imported on first use, not with the
package: a server's WAL never opens one, and they take ~1 ms of its start.
"""

from typing import TYPE_CHECKING, Any

from .columns import FrameColumns
from .errors import (
    LogCorruptError,
    LogError,
    LogFullError,
    LogLagError,
    LogLockedError,
    NotALogError,
)
from .frame import Frame
from .layout import resolve_log_dir
from .log import Log, RepairReport
from .reader import LogReader
from .segment import SegmentInfo
from .ticket import Ticket

if TYPE_CHECKING:
    from .group import ConsumerGroup
    from .groupapi import Message

__all__ = [
    "Log",
    "LogReader",
    "Frame",
    "FrameColumns",
    "Ticket",
    "SegmentInfo",
    "RepairReport",
    "ConsumerGroup",
    "Message",
    "LogError",
    "LogCorruptError",
    "LogLockedError",
    "LogFullError",
    "LogLagError",
    "NotALogError",
    "resolve_log_dir",
]



def __getattr__(name: str) -> Any:
    if name == "ConsumerGroup":
        from .group import ConsumerGroup

        return ConsumerGroup
    if name == "Message":
        from .groupapi import Message

        return Message
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
