"""stalkd.log: an append-only, segmented, CRC32C-checked log with consumer groups.

>>> import tempfile
>>> from stalkd.log import Log
>>> with Log.open(tempfile.mkdtemp(), durability="never") as log:
...     log.append(b"job")
0
"""

from .errors import LogCorruptError, LogError, LogFullError, LogLagError, LogLockedError
from .frame import Frame
from .group import ConsumerGroup, Message
from .log import Log, RepairReport
from .reader import LogReader
from .segment import SegmentInfo
from .ticket import Ticket

__all__ = [
    "Log",
    "LogReader",
    "Frame",
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
]

