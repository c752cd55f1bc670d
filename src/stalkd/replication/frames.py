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

from typing import TYPE_CHECKING

from stalkd.engine.model import (
    FORMAT_VERSION,
    HEADER_SIZE,
    PUT_FIXED,
    Op,
    Record,
    RecordFormatError,
    decode,
    new_record,
)
from stalkd.persist.tail import _Fields  # (compiled: a PUT's fields by C loads, tail.pxd)
from stalkd.replication.wire import WireError

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

if not cython.compiled:  # compiled, frames.pxd cimports them: C calls (_put runs compiled only)
    if TYPE_CHECKING:  # (not at run time: a compiled model or tail has no such Python names)
        from stalkd.engine.model import _text
        from stalkd.persist.tail import _TLEN_AT, _u32

    def PyBytes_FromStringAndSize(s: object, n: int) -> bytes:  # noqa: N802 - the C API's name
        raise NotImplementedError("compiled only")

__all__ = ["check_payloads", "check_records", "epoch_after"]


_UNKNOWN, _EPOCH, _PUT = Op.UNKNOWN, Op.EPOCH, Op.PUT
# Compiled, C constants: a version-1 PUT payload is read here by C loads of its fields
# (``_put``), its header at 0 and its PUT fields after it (tail.py's _Fields checks at import
# that it reads model.py's layouts), with no struct call, tuple or dispatch per record.
_V1, _C_PUT, _HEAD_LEN, _PUT_MIN = FORMAT_VERSION, int(Op.PUT), HEADER_SIZE, PUT_FIXED


def check_records(first: int, payloads: list[bytes], expected: int, epoch: int) -> list[Record]:
    """The records of one message (at offset ``first``), checked against a log that ends at
    ``expected`` and follows ``epoch``; WireError says what is wrong."""
    return _check(first, payloads, expected, epoch, False)  # type: ignore[return-value]


def check_payloads(first: int, payloads: list[bytes], expected: int, epoch: int) -> list[Record | bytes]:
    """``check_records``, but (compiled) a version-1 PUT comes as its payload itself, checked as
    its record would be: ``Reservations.follow`` applies it from its bytes (``replay_put``), so
    a standby builds no Record per job."""
    return _check(first, payloads, expected, epoch, True)


def epoch_after(records: list[Record | bytes], epoch: int) -> int:
    """The epoch a log follows after ``records`` (checked: ``check_payloads``), from ``epoch``
    before them: the last EPOCH record's, if any. What the check of the next message needs
    while these are appended but not yet applied (the engine's epochs change only then)."""
    for r in records:
        if not isinstance(r, bytes) and r.op is _EPOCH:  # (compiled: a raw PUT is bytes)
            epoch = r.epoch
    return epoch


def _check(first: int, payloads: list[bytes], expected: int, epoch: int, raw_puts: bool) -> list[Record | bytes]:
    if first != expected:
        raise WireError(f"the primary sent offset {first}, the local log ends at {expected}")
    # Every record a standby applies passes here, decoded once (compiled: one C loop, the
    # record's fields read in C); the first bad one, in offset order, refuses the message.
    out: list[Record | bytes] = []
    i = 0
    f = None if raw_puts else _Fields()  # (compiled: the C fields _put reads a PUT into)
    try:
        for p in payloads:
            r = None
            if cython.compiled and type(p) is bytes:
                if raw_puts:
                    if _put_tube(p) is not None:
                        out.append(p)
                        i += 1
                        continue
                elif f is not None:
                    r = _put(p, f)  # None: not a version-1 PUT of a plausible size
            if r is None:
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
            out.append(r)
            i += 1
    except RecordFormatError as e:
        raise WireError(f"record at offset {first + i}: {e}") from None
    return out


def _put_tube(p: bytes) -> str | None:
    """The tube name of ``p`` if it is a version-1 PUT that decodes, else None (compiled only:
    ``model.decode``'s checks of a PUT by C loads, nothing built but the name's str, which model
    keeps for the apply's look-up of it)."""
    n = len(p)
    if n < _PUT_MIN:
        return None
    c = cython.cast(cython.p_uchar, cython.cast(cython.p_char, p))
    if c[0] != _V1 or c[1] != _C_PUT:
        return None
    tlen = c[_HEAD_LEN + _TLEN_AT] | (c[_HEAD_LEN + _TLEN_AT + 1] << 8)
    at = _PUT_MIN - 4 + tlen  # (the body's length field, after the tube name)
    if at + 4 > n or at + 4 + _u32(p, at) != n:
        return None
    try:
        return _text(p, _PUT_MIN - 4, tlen)
    except (RecordFormatError, UnicodeDecodeError):
        return None


def _put(p: bytes, f: _Fields) -> Record | None:
    """The record of ``p`` if it is a version-1 PUT (compiled only: its fields by C loads,
    the record built as ``model.decode`` builds it), else None (``decode`` then reads it, and
    says what is wrong with it). The commonest record: a standby decodes every job's."""
    tube = _put_tube(p)
    if tube is None:
        return None
    c = cython.cast(cython.p_uchar, cython.cast(cython.p_char, p))
    f.head(p, 0)
    f.put(p, _HEAD_LEN)
    at = _PUT_MIN + f.tlen  # (the body, after its length field)
    size = len(p) - at
    # (the body copied out of the payload by C: no slice object, no second length check)
    body = PyBytes_FromStringAndSize(cython.cast(cython.p_char, cython.address(c[at])), size)
    t = f.time_us  # (one int object for time_us and created_us)
    return new_record(_PUT, f.seq, t, f.jid, tube, f.pri, f.delay, f.ttr, f.deadline, body, t)
