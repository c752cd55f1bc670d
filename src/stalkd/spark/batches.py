"""Log frames to Arrow record batches, for the ``stalkd`` source's ``read()`` (pure, no Spark).

The raw path builds the binary column straight from one joined buffer and an offsets array,
so a payload is copied once. The WAL path decodes version-1 records column by column with the
structs of :mod:`stalkd.engine.model` instead of building a ``Record`` per row; every other
version goes through :func:`stalkd.engine.model.decode`, which stays the single authority.

Ensures: batches match ``RAW_ARROW`` / ``WAL_ARROW`` exactly; a payload that does not decode
raises :class:`RecordDecodeError` naming the log offset, never a silently wrong row.

Example::

    >>> b = raw_batch([0, 1], [10, 20], [b"a", b"bc"])
    >>> b.column("payload").to_pylist()
    [b'a', b'bc']
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import pyarrow as pa

from stalkd.engine.model import (
    BURY,
    HEAD,
    HEADER_SIZE,
    PUT,
    RELEASE,
    RESULT,
    U32,
    Op,
    RecordFormatError,
    decode,
)
from stalkd.spark.schema import OP_NAMES, RAW_ARROW, WAL_ARROW


class RecordDecodeError(ValueError):
    """A frame in a WAL that is not a valid record; names the log offset."""


def binary_array(payloads: Sequence[bytes | memoryview]) -> pa.Array:
    """A non-null Arrow binary array holding ``payloads``, built from one buffer."""
    sizes = [len(p) for p in payloads]
    ends = [0] * (len(sizes) + 1)
    total = 0
    for i, n in enumerate(sizes, 1):
        total += n
        ends[i] = total
    if total >= 2**31:
        raise ValueError("a batch of more than 2 GiB of payloads; use smaller batches")
    data = b"".join(payloads)
    offsets = pa.array(ends, pa.int32())
    return pa.Array.from_buffers(pa.binary(), len(sizes), [None, offsets.buffers()[1], pa.py_buffer(data)])


def raw_batch(offsets: Sequence[int], timestamps_us: Sequence[int],
              payloads: Sequence[bytes | memoryview]) -> pa.RecordBatch:
    """A batch of raw frames in ``RAW_ARROW``."""
    return pa.RecordBatch.from_arrays(
        [pa.array(offsets, pa.int64()), pa.array(timestamps_us, pa.timestamp("us", tz="UTC")),
         binary_array(payloads)],
        schema=RAW_ARROW,
    )  # fmt: skip


_HEAD, _PUT, _RELEASE, _BURY, _U32 = HEAD, PUT, RELEASE, BURY, U32
_STATE = {1: "ready", 2: "reserved", 3: "buried", 4: "delayed"}
_PUT_OP, _RELEASE_OP, _BURY_OP, _PAUSE_OP, _JOB_OP = (
    int(Op.PUT), int(Op.RELEASE), int(Op.BURY), int(Op.PAUSE), int(Op.JOB))  # fmt: skip
_RESULT_OP = int(Op.RESULT)


def wal_batch(offsets: Sequence[int], payloads: Sequence[bytes | memoryview], *,
              with_body: bool = False) -> pa.RecordBatch:
    """Decode WAL record payloads into a batch in ``WAL_ARROW`` (``body`` null unless asked)."""
    n = len(payloads)
    seq = [0] * n
    time = [0] * n
    op = [""] * n
    job = [0] * n
    tube: list[str | None] = [None] * n
    pri: list[int | None] = [None] * n
    delay: list[int | None] = [None] * n
    ttr: list[int | None] = [None] * n
    deadline: list[int | None] = [None] * n
    state: list[str | None] = [None] * n
    created: list[int | None] = [None] * n
    size: list[int | None] = [None] * n
    body: list[bytes | None] = [None] * n
    for i, p in enumerate(payloads):
        try:
            version, code, seq[i], time[i], job[i] = _HEAD.unpack_from(p, 0)
            if version != 1:
                _slow(i, p, offsets[i], seq, time, op, job, tube, pri, delay, ttr, deadline, state, created,
                      size, body, with_body)  # fmt: skip
                continue
            op[i] = OP_NAMES.get(code, "unknown")
            pos = HEADER_SIZE
            if code == _PUT_OP:
                pri[i], delay[i], ttr[i], dl, tlen = _PUT.unpack_from(p, pos)
                deadline[i] = dl or None
                pos += _PUT.size
                tube[i] = bytes(p[pos:pos + tlen]).decode("ascii")
                pos += tlen
                (blen,) = _U32.unpack_from(p, pos)
                if pos + 4 + blen != len(p):
                    raise RecordFormatError(f"body length {blen} does not match the record size {len(p)}")
                created[i] = time[i]
                size[i] = blen
                if with_body:
                    body[i] = bytes(p[pos + 4:])
            elif code == _RELEASE_OP:
                pri[i], delay[i], dl = _RELEASE.unpack_from(p, pos)
                deadline[i] = dl or None
            elif code == _BURY_OP:
                (pri[i],) = _BURY.unpack_from(p, pos)
            elif code == _RESULT_OP:  # a stored result: when it expires, and its size
                (dl,) = RESULT.unpack_from(p, pos)
                deadline[i] = dl or None
                (blen,) = _U32.unpack_from(p, pos + RESULT.size)
                if pos + RESULT.size + 4 + blen != len(p):
                    raise RecordFormatError(f"body length {blen} does not match the record size {len(p)}")
                size[i] = blen
            elif code in (_PAUSE_OP, _JOB_OP):
                _slow(i, p, offsets[i], seq, time, op, job, tube, pri, delay, ttr, deadline, state, created,
                      size, body, with_body)  # fmt: skip
        except (struct.error, UnicodeDecodeError, RecordFormatError) as exc:
            raise RecordDecodeError(f"log offset {offsets[i]}: not a valid WAL record ({exc})") from exc
    ts = pa.timestamp("us", tz="UTC")
    return pa.RecordBatch.from_arrays(
        [pa.array(offsets, pa.int64()), pa.array(seq, pa.int64()), pa.array(time, ts),
         pa.array(op, pa.string()), pa.array(job, pa.int64()), pa.array(tube, pa.string()),
         pa.array(pri, pa.int64()), pa.array(delay, pa.int64()), pa.array(ttr, pa.int64()),
         pa.array(deadline, ts), pa.array(state, pa.string()), pa.array(created, ts),
         pa.array(size, pa.int64()), pa.array(body, pa.binary())],
        schema=WAL_ARROW,
    )  # fmt: skip


def _slow(i: int, p: bytes | memoryview, offset: int, seq: list[int], time: list[int], op: list[str],
          job: list[int], tube: list[str | None], pri: list[int | None], delay: list[int | None],
          ttr: list[int | None], deadline: list[int | None], state: list[str | None],
          created: list[int | None], size: list[int | None], body: list[bytes | None],
          with_body: bool) -> None:
    """Rare records (pause, job, other versions) through the model's own decoder."""
    try:
        r = decode(p)
    except RecordFormatError as exc:
        raise RecordDecodeError(f"log offset {offset}: not a valid WAL record ({exc})") from exc
    seq[i], time[i], job[i] = r.seq, r.time_us, r.job_id
    op[i] = OP_NAMES.get(int(r.op), "unknown")
    if r.op is Op.PAUSE:
        tube[i], delay[i], deadline[i] = r.tube, r.delay, r.deadline_us or None
    elif r.op in (Op.JOB, Op.PUT):
        tube[i], pri[i], delay[i], ttr[i] = r.tube, r.pri, r.delay, r.ttr
        deadline[i] = r.deadline_us or None
        created[i] = r.created_us
        size[i] = len(r.body)
        if r.op is Op.JOB:
            state[i] = _STATE.get(int(r.state))
        if with_body:
            body[i] = r.body
    elif r.op is Op.RELEASE:
        pri[i], delay[i], deadline[i] = r.pri, r.delay, r.deadline_us or None
    elif r.op is Op.BURY:
        pri[i] = r.pri
    elif r.op is Op.RESULT:
        deadline[i], size[i] = r.deadline_us or None, len(r.body)
