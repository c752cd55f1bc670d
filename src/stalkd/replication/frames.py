"""What a standby accepts from its primary's stream, checked before anything touches its disk.

``wire.RecordDecoder`` has already checked each message's length and CRC; ``check_records``
checks what the records say: the message starts where the local log ends (no gap, no
overlap), every payload decodes as a record this build knows, and an EPOCH record starts an
epoch newer than the one before it, at its own offset. A stream that fails is dropped and
resumed from the last good position (the receiver's backoff); nothing of it is written.

>>> from stalkd.engine import Engine
>>> from stalkd.engine.handover import epoch_record
>>> from stalkd.engine.model import encode
>>> p = encode(epoch_record(Engine(), 1, 7, 0.0))
>>> [r.epoch for r in check_records(7, [p], 7, 0)]
[1]
>>> check_records(8, [p], 7, 0)
Traceback (most recent call last):
...
stalkd.replication.wire.WireError: the primary sent offset 8, the local log ends at 7
>>> check_records(7, [p], 7, 1)
Traceback (most recent call last):
...
stalkd.replication.wire.WireError: an EPOCH record at offset 7 starts epoch 1, not newer than 1
>>> check_records(7, [b"\\x01garbage-garbage-garbage-garbage"], 7, 0)
Traceback (most recent call last):
...
stalkd.replication.wire.WireError: record at offset 7: an operation this stalkd does not know (code 103)
"""

from __future__ import annotations

from stalkd.engine.model import Op, Record, RecordFormatError, decode
from stalkd.replication.wire import WireError

__all__ = ["check_records"]


_UNKNOWN, _EPOCH = Op.UNKNOWN, Op.EPOCH


def check_records(first: int, payloads: list[bytes], expected: int, epoch: int) -> list[Record]:
    """The records of one message (at offset ``first``), checked against a log that ends at
    ``expected`` and follows ``epoch``; WireError says what is wrong."""
    if first != expected:
        raise WireError(f"the primary sent offset {first}, the local log ends at {expected}")
    # Every record a standby applies passes here, decoded once (compiled: one C loop, the
    # record's fields read in C); the first bad one, in offset order, refuses the message.
    out: list[Record] = []
    add = out.append
    i = 0
    try:
        for p in payloads:
            r = decode(p)
            op = r.op
            if op is _UNKNOWN:
                raise WireError(f"record at offset {first + i}: an operation this stalkd does not know "
                                f"(code {p[1] if len(p) > 1 else -1})")  # fmt: skip
            if op is _EPOCH:
                if r.epoch <= epoch:
                    raise WireError(f"an EPOCH record at offset {first + i} starts epoch {r.epoch}, not newer than "
                                    f"{epoch}")  # fmt: skip
                if r.start_offset != first + i:
                    raise WireError(f"an EPOCH record at offset {first + i} says it starts at {r.start_offset}")
                epoch = r.epoch
            add(r)
            i += 1
    except RecordFormatError as e:
        raise WireError(f"record at offset {first + i}: {e}") from None
    return out
