"""The record a standby's stream overlaps by: its own last one, which the primary must match.

Both machines of a pair can lose power at once. The primary streams a write before its own
fsync ends, so its standby may hold records that the primary then loses; restarted, the primary
writes new records at those offsets, in the same epoch, where ``epochs.diverged_at`` sees
nothing. A standby asking from its own end would append the new records after its old ones: two
histories in one log. So a standby asks from one record back and compares. Past the offset
where two logs part, each record was written by another process at another time (every record
carries its time), so two logs that differ anywhere differ at the standby's last record; one
record is enough.

Ensures: ``trim`` passes on only records past the local log's end, having checked the one
before; anything else raises ``Diverged`` with the offset past which the local log is not the
primary's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stalkd.log import Log

__all__ = ["Diverged", "last_record", "request_offset", "trim", "check_end"]


class Diverged(ValueError):
    """The local log holds records past ``since`` that the primary's does not."""

    def __init__(self, why: str, since: int) -> None:
        super().__init__(why)
        self.since = since


def last_record(lg: Log) -> bytes | None:
    """The payload of ``lg``'s last record; None when there is none to read (an empty log, or
    one that starts at a snapshot taken at its end). Without it, a stream starts at the end."""
    end = lg.next_offset
    bounds = lg.segment_bounds()
    if end == 0 or not bounds or bounds[0][0] > end - 1:
        return None
    for f in lg.read(end - 1, end):
        return f.bytes()
    return None


def request_offset(end: int, last: bytes | None) -> int:
    """Where to ask the primary to stream from: our last record, when we have it to compare."""
    return end - 1 if last is not None else end


def check_end(end: int, primary_end: int) -> None:
    """A primary whose log ends before ours lost records we hold (what an older primary
    answered ``DIVERGED`` to).

    >>> check_end(5, 5); check_end(5, 9)
    >>> check_end(5, 3)
    Traceback (most recent call last):
    stalkd.replication.overlap.Diverged: this log ends at 5, past the primary's end (3): ...
    """
    if primary_end < end:
        raise Diverged(f"this log ends at {end}, past the primary's end ({primary_end}): its last "
                       "records were never the primary's", primary_end)  # fmt: skip


def trim(first: int, payloads: list[bytes], end: int, last: bytes) -> tuple[int, list[bytes]]:
    """The records of a message starting at ``first`` that come after ``end`` (the local log's),
    once the primary's record at ``end - 1`` is found to be ``last``, ours.

    >>> trim(4, [b"d", b"e", b"f"], 5, b"d")
    (5, [b'e', b'f'])
    >>> trim(4, [b"d"], 5, b"d")
    (5, [])
    >>> trim(4, [b"x", b"e"], 5, b"d")
    Traceback (most recent call last):
    stalkd.replication.overlap.Diverged: the primary's record at offset 4 is not ours: ...
    """
    at = end - 1
    if not first <= at < first + len(payloads):
        raise ValueError(f"the primary streamed from offset {first}, not from our last record's ({at})")
    if bytes(payloads[at - first]) != last:
        raise Diverged(f"the primary's record at offset {at} is not ours: this log holds records from "
                       f"offset {at} on that the primary never had (written before a failover, or lost "
                       "with its unsynced tail when it lost power)", at)  # fmt: skip
    return end, payloads[end - first:]
