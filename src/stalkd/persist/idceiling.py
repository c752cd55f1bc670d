"""Job ids are never handed out twice, under any durability policy: a durable ceiling on them.

Under ``always`` a put's record is durable before its reply, so after any crash recovery's
next id lies past every id a client was given. Under ``every:<ms>`` and ``never`` a put is
acknowledged from the page cache: a power cut may take its record, and recovery, which takes the
next id from the log, would give that id to another job. A client still holding the first one
(to delete it, to read its result, to match a dead letter) would then act on a stranger's job.

So under those policies the WAL keeps a ceiling in the data directory's ``IDS`` file: every id
handed out is below it. A put whose id reaches it raises it by ``ID_BLOCK`` first, written and
fsynced before the put's reply can leave (one fsync per ``ID_BLOCK`` puts, on the loop thread);
recovery starts ids at the ceiling when the log ends below it. The ids of puts a power cut took
are skipped, never reused; a restart after a crash leaves a gap of at most ``ID_BLOCK`` ids
(a clean stop, with everything durable, brings the ceiling down to the next id: no gap). The file has the high-water mark's two-slot
layout (``stalkd.log.mark``).

Ensures: after ``cover(i)`` returns, every later ``IdCeiling`` of the directory reads a value
above ``i``, whatever crash came between; a file whose two slots are both damaged is reported
and replaced, reading as no ceiling.

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> c = IdCeiling(d); c.value
    0
    >>> c.cover(41); c.close(); IdCeiling(d).value == 42 + ID_BLOCK
    True
"""

from __future__ import annotations

import logging

from stalkd.log.fs import REAL, FileSystem
from stalkd.log.mark import Mark, MarkError, read_mark

__all__ = ["ID_BLOCK", "IDS_NAME", "IdCeiling"]

IDS_NAME = "IDS"
ID_BLOCK = 1 << 20  # ids per raise: one fsync per million puts; the gap a restart may leave

log = logging.getLogger("stalkd.persist.wal")


class IdCeiling:
    """The ceiling file of data directory ``directory``, opened (created if missing)."""

    def __init__(self, directory: str, fs: FileSystem = REAL) -> None:
        try:
            read_mark(directory, fs, IDS_NAME)
        except MarkError:
            log.warning("%s/%s: the job id ceiling is unreadable (both slots damaged) and is "
                        "replaced: ids handed out before the last unclean stop may be handed out "
                        "again", directory, IDS_NAME)  # fmt: skip
        self._file = Mark(directory, fs, name=IDS_NAME)
        self.value = self._file.value

    def cover(self, job_id: int) -> None:
        """Make the ceiling durable above ``job_id`` (by a block), before ``job_id`` is shown."""
        value = job_id + 1 + ID_BLOCK
        self._file.write(value)
        self.value = value

    def settle(self, next_id: int) -> None:
        """Lower the ceiling to ``next_id``: only when every id below it is durable in the log
        or a snapshot (a clean stop), so a restart leaves no gap."""
        self._file.write(next_id)
        self.value = next_id

    def close(self) -> None:
        self._file.close()
