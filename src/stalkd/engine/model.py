"""The persisted data model: WAL records and their binary encoding (stalkd's ``dat.h``).

Every durable change the engine makes is one :class:`Record`, encoded into the payload of one
log frame. The server's WAL, snapshots, compaction and the Spark pipeline all read this one
format, so it lives here and nowhere else.

Ensures: ``decode(encode(r)) == r`` for every valid record; ``decode`` of a payload written by
any earlier format version gives the record that version meant; unknown ops decode to an
``Op.UNKNOWN`` record (skippable) instead of failing, so old readers survive new writers.

How to change the format (keep this list numbered and append to it):
  1. Never change the meaning of an existing (version, op) layout. Add a new op code, or bump
     ``FORMAT_VERSION`` and add a ``_decode_vN`` beside the old one; keep every old decoder.
  2. Add a test file ``tests/engine/test_model_vN.py`` with payloads frozen as hex literals for
     the new version, next to the ones for the older versions (they must keep passing).
  3. Write new records only in the newest version; readers accept all versions.
  4. A layout is its field table below (``HEAD_FIELDS``, ``PUT_FIELDS``...); the fast readers
     (``persist/tail.py``, ``persist/snap_v1.py``, ``spark/batches.py``, ``spark/columnar.py``)
     derive their structs and numpy dtypes from those tables and take version-1 records only,
     sending any other version to ``decode``: teach ``decode`` first, then the fast paths.

Version 1 layout (little-endian), common header of 26 bytes:
  u8 version | u8 op | u64 seq | i64 time_us | u64 job_id
followed by op-specific fields:
  PUT      u32 pri | u32 delay | u32 ttr | i64 deadline_us | u16 tube_len | tube | u32 len | body
  RELEASE  u32 pri | u32 delay | i64 deadline_us          (deadline_us 0: released to ready)
  BURY     u32 pri
  DELETE, KICK, RESERVE, TIMEOUT, TOUCH      (no fields)
  PAUSE    u32 delay | i64 deadline_us | u16 tube_len | tube      (job_id 0)
  JOB      u8 state | u32 pri | u32 delay | u32 ttr | i64 created_us | i64 deadline_us |
           u32 reserves | u32 timeouts | u32 releases | u32 buries | u32 kicks |
           u16 tube_len | tube | u32 len | body
           (a job's full state: snapshot entries and compaction's migrated jobs)
  RESULT   i64 deadline_us | u32 len | body
           (a job's stored result, kept until deadline_us; a later one replaces it, and
           deadline_us 0 forgets it)
  EPOCH    u64 epoch | u64 start_offset      (job_id 0)
           (a promotion: the log's lineage is ``epoch`` from ``start_offset`` on, the record's
           own offset; snapshots carry the epochs before their start in their header)
Times are wall-clock microseconds since the Unix epoch; ``delay`` and ``ttr`` are seconds.
The layouts are written once, as the field tables below (``HEAD_FIELDS``, ``PUT_FIELDS``...):
the structs here and every fast reader elsewhere (numpy and Arrow views included) derive from them.
"""

from __future__ import annotations

import enum
import struct
from operator import attrgetter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy reads the shim's signatures; Cython reads its own ``cython``
    from stalkd import cyshim as cython
else:
    try:
        import cython
    except ModuleNotFoundError:  # uncompiled, and Cython is not installed
        from stalkd import cyshim as cython

__all__ = [
    "BODY_LEN_FIELDS",
    "BURY",
    "BURY_FIELDS",
    "HEAD",
    "HEAD_FIELDS",
    "HEAD_JOB",
    "HEADER_SIZE",
    "JOB",
    "JOB_FIELDS",
    "PAUSE",
    "PAUSE_FIELDS",
    "PUT",
    "PUT_FIELDS",
    "PUT_FIXED",
    "RELEASE",
    "RELEASE_FIELDS",
    "RESULT",
    "RESULT_FIELDS",
    "RESULT_FIXED",
    "SHORT_RECORD",
    "U32",
    "layout",
    "FORMAT_VERSION",
    "DURABLE_OPS",
    "EPOCH",
    "EPOCH_FIELDS",
    "JobState",
    "LAYOUTS",
    "Op",
    "OpLayout",
    "ROWS",
    "Record",
    "RecordFormatError",
    "decode",
    "encode",
    "new_record",
]

FORMAT_VERSION = 1


class RecordFormatError(ValueError):
    """A WAL payload that cannot be decoded (truncated, or a version this build does not know)."""


class Op(enum.IntEnum):
    PUT = 1  # a new job (full job: tube, priority, delay, ttr, body)
    DELETE = 2  # a job is gone
    RELEASE = 3  # reserved -> ready (deadline 0) or delayed (deadline > 0), new priority
    BURY = 4  # reserved -> buried, new priority
    KICK = 5  # buried/delayed -> ready
    TOUCH = 6  # a reserved job's TTR restarted (analytics only: reserves are not durable)
    RESERVE = 7  # a job was reserved (analytics only, written lazily)
    TIMEOUT = 8  # a reserved job's TTR expired, back to ready (analytics only)
    PAUSE = 9  # a tube was paused until deadline_us
    JOB = 10  # a job's full state (snapshots, compaction)
    RESULT = 11  # a job's result stored until deadline_us (stalkd's result-put; not beanstalkd's)
    EPOCH = 12  # a promotion began a new epoch at start_offset (replication's fencing)
    UNKNOWN = 255  # decoded from an op code this build does not know; skip it


class JobState(enum.IntEnum):
    READY = 1  # waiting in its tube's ready heap
    RESERVED = 2  # held by a connection until deleted, released, buried or its TTR ends
    BURIED = 3  # parked in its tube's buried FIFO until kicked
    DELAYED = 4  # waiting for its deadline in the tube's delay heap


_set = object.__setattr__


class _DataclassFields:
    """``Record.__dataclass_fields__``, which ``dataclasses.fields``, ``replace`` and ``asdict``
    read: a frozen dataclass's fields of the same names, types and defaults, made when first
    asked for."""

    def __init__(self) -> None:
        self.made: dict[str, Any] | None = None

    def __get__(self, obj: object, owner: object = None) -> dict[str, Any]:
        if self.made is None:
            import dataclasses

            # the defaults are a record's whose three first fields alone were given; the types,
            # Record's annotations (which the compiled class does not keep)
            blank = Record(Op.UNKNOWN, 0, 0)
            kinds = ("Op", "int", "int", "int", "str", "int", "int", "int", "int", "bytes", "JobState", *("int",) * 8)
            shadow = dataclasses.make_dataclass("Record", [
                (name, kind) if at < 3 else (name, kind, dataclasses.field(default=getattr(blank, name)))
                for at, (name, kind) in enumerate(zip(_FIELD_NAMES, kinds, strict=True))
            ], frozen=True)  # fmt: skip
            self.made = {f.name: f for f in dataclasses.fields(shadow)}
        return self.made


@cython.no_gc  # (see the docstring's last sentence)
@cython.cclass
class Record:
    """One durable change. Fields an op does not use keep their defaults.

    A frozen dataclass's contract (equality and hash by the fields in order, its ``repr``, no
    assignment, ``dataclasses.fields`` and ``replace``) with methods written once here:
    ``@dataclass`` would import ``dataclasses`` and make its fields, or uncompiled compile its
    methods from source, when the module is imported (a server's start); ``__dataclass_fields__``
    is made when first asked for. Compiled, an extension type (its fields in model.pxd): the
    engine builds one per durable change. Its fields are numbers, enum members, str and bytes,
    so it can be in no reference cycle; compiled, the cycle collector does not track it (a
    standby holds a message's records, hundreds when pipelined, while it checks and applies
    them, and each young collection meanwhile walked every one).

    >>> r = Record(Op.BURY, 1, 2, 3, pri=9)
    >>> r == Record(Op.BURY, 1, 2, 3, pri=9), r.pri, repr(r).startswith("Record(op=<Op.BURY: 4>, seq=1,")
    (True, 9, True)
    """

    __slots__ = __match_args__ = ("op", "seq", "time_us", "job_id", "tube", "pri", "delay", "ttr", "deadline_us", "body",
                                  "state", "created_us", "reserves", "timeouts", "releases", "buries", "kicks", "epoch",
                                  "start_offset")  # fmt: skip
    op: Op
    seq: int
    time_us: int
    job_id: int
    tube: str
    pri: int
    delay: int
    ttr: int
    deadline_us: int
    body: bytes
    state: JobState
    created_us: int
    reserves: int
    timeouts: int
    releases: int
    buries: int
    kicks: int
    epoch: int
    start_offset: int

    def __init__(self, op: Op, seq: int, time_us: int, job_id: int = 0, tube: str = "", pri: int = 0,
                 delay: int = 0, ttr: int = 0, deadline_us: int = 0, body: bytes = b"",
                 state: JobState = JobState.READY, created_us: int = 0, reserves: int = 0, timeouts: int = 0,
                 releases: int = 0, buries: int = 0, kicks: int = 0, epoch: int = 0,
                 start_offset: int = 0) -> None:  # fmt: skip
        if cython.compiled:  # the C fields stored (model.pxd); __setattr__ is for Python's
            self.op, self.seq, self.time_us, self.job_id, self.tube = op, seq, time_us, job_id, tube
            self.pri, self.delay, self.ttr, self.deadline_us, self.body = pri, delay, ttr, deadline_us, body
            self.state, self.created_us, self.reserves, self.timeouts = state, created_us, reserves, timeouts
            self.releases, self.buries, self.kicks, self.epoch = releases, buries, kicks, epoch
            self.start_offset = start_offset
        else:  # past __setattr__, which refuses (a frozen dataclass's __init__ does the same)
            _set(self, "op", op)
            _set(self, "seq", seq)
            _set(self, "time_us", time_us)
            _set(self, "job_id", job_id)
            _set(self, "tube", tube)
            _set(self, "pri", pri)
            _set(self, "delay", delay)
            _set(self, "ttr", ttr)
            _set(self, "deadline_us", deadline_us)
            _set(self, "body", body)
            _set(self, "state", state)
            _set(self, "created_us", created_us)
            _set(self, "reserves", reserves)
            _set(self, "timeouts", timeouts)
            _set(self, "releases", releases)
            _set(self, "buries", buries)
            _set(self, "kicks", kicks)
            _set(self, "epoch", epoch)
            _set(self, "start_offset", start_offset)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return _values(self) == _values(cython.cast(Record, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(_values(self))

    def __repr__(self) -> str:
        shown = ", ".join([f"{name}={value!r}" for name, value in zip(_FIELD_NAMES, _values(self), strict=True)])
        return f"{self.__class__.__qualname__}({shown})"

    def __setattr__(self, name: str, value: object) -> None:
        raise _frozen(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise _frozen(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:  # copy and pickle: the class called with the fields
        return (self.__class__, _values(self))

    __dataclass_fields__ = _DataclassFields()


_FIELD_NAMES = Record.__match_args__


def _values(r: Record) -> tuple[Any, ...]:
    """A record's fields in order (compiled, a C function reading the C fields: model.pxd): what
    equality, the hash and ``repr`` show."""
    p = cython.declare(Record, r)
    return (p.op, p.seq, p.time_us, p.job_id, p.tube, p.pri, p.delay, p.ttr, p.deadline_us, p.body, p.state,
            p.created_us, p.reserves, p.timeouts, p.releases, p.buries, p.kicks, p.epoch, p.start_offset)  # fmt: skip


def _frozen(message: str) -> AttributeError:
    """The error a frozen dataclass raises (``dataclasses`` imported only here and below)."""
    from dataclasses import FrozenInstanceError

    return FrozenInstanceError(message)


# The version-1 layouts, field by field: (name, struct code), little-endian and packed. Every
# reader of the format (the decoder below, the WAL tail's fast replay, snapshot v1, the Spark
# batches and their numpy views) derives its structs and dtypes from these tables.
HEAD_FIELDS = (("version", "B"), ("op", "B"), ("seq", "Q"), ("time_us", "q"), ("job_id", "Q"))
PUT_FIELDS = (("pri", "I"), ("delay", "I"), ("ttr", "I"), ("deadline_us", "q"), ("tube_len", "H"))
RELEASE_FIELDS = (("pri", "I"), ("delay", "I"), ("deadline_us", "q"))
BURY_FIELDS = (("pri", "I"),)
PAUSE_FIELDS = (("delay", "I"), ("deadline_us", "q"), ("tube_len", "H"))
JOB_FIELDS = (
    ("state", "B"), ("pri", "I"), ("delay", "I"), ("ttr", "I"), ("created_us", "q"), ("deadline_us", "q"),
    ("reserves", "I"), ("timeouts", "I"), ("releases", "I"), ("buries", "I"), ("kicks", "I"), ("tube_len", "H"),
)  # fmt: skip
RESULT_FIELDS = (("deadline_us", "q"),)
EPOCH_FIELDS = (("epoch", "Q"), ("start_offset", "Q"))
BODY_LEN_FIELDS = (("body_len", "I"),)  # before the body of PUT and JOB records


def layout(*tables: tuple[tuple[str, str], ...]) -> struct.Struct:
    """The struct of field tables laid end to end (little-endian, packed).

    >>> layout(HEAD_FIELDS).size, layout(HEAD_FIELDS, JOB_FIELDS).size
    (26, 77)
    """
    return struct.Struct("<" + "".join(code for table in tables for _, code in table))


HEAD = layout(HEAD_FIELDS)
PUT = layout(PUT_FIELDS)
RELEASE = layout(RELEASE_FIELDS)
BURY = layout(BURY_FIELDS)
PAUSE = layout(PAUSE_FIELDS)
JOB = layout(JOB_FIELDS)
RESULT = layout(RESULT_FIELDS)
EPOCH = layout(EPOCH_FIELDS)
HEAD_JOB = layout(HEAD_FIELDS, JOB_FIELDS)  # a JOB record up to its tube name (snapshot v1 rows)
U32 = layout(BODY_LEN_FIELDS)
HEADER_SIZE = HEAD.size
PUT_FIXED = HEADER_SIZE + PUT.size + U32.size  # a PUT record's bytes besides its tube and body
RESULT_FIXED = HEADER_SIZE + RESULT.size + U32.size  # a RESULT record's bytes besides its body
SHORT_RECORD = HEADER_SIZE + max(RELEASE.size, BURY.size, EPOCH.size)  # the largest record without tube or body
_pack_u32 = U32.pack
_U32_SIZE = U32.size  # compiled: a C constant (model.pxd), read by ``OpLayout.size`` per record


class OpLayout:
    """One op's row of the registry: its fields after the header (a field table above, whose
    ``tube_len`` is the length of the ``tube`` that follows them), whether a body follows, and
    what the WAL does with it: ``durable`` (the server waits for it to be durable before it
    replies), ``creates`` (it makes a live job, whose delete's room is promised with it),
    ``ends`` (it ends a live job, using the room its put promised). Encoding, decoding, the
    record's size and its cost in WAL room (``engine/space.py``) are derived from these.
    Compiled, an extension type whose attributes and ``size`` are C-level (model.pxd): they are
    read for every record written.

    >>> LAYOUTS[Op.RELEASE].names, LAYOUTS[Op.PAUSE].tube, LAYOUTS[Op.PAUSE].body
    (('pri', 'delay', 'deadline_us'), True, False)
    >>> LAYOUTS[Op.PUT].size(Record(Op.PUT, 1, 2, 3, "tube", body=b"body")) == len(encode(
    ...     Record(Op.PUT, 1, 2, 3, "tube", body=b"body")))
    True
    """

    def __init__(self, fields: tuple[tuple[str, str], ...], *, body: bool = False, durable: bool = True,
                 creates: bool = False, ends: bool = False) -> None:  # fmt: skip
        self.fields = fields
        self.tube = bool(fields) and fields[-1][0] == "tube_len"
        self.body = body
        self.sized = self.tube or body  # its size depends on the record (a tube name, a body)
        self.durable = durable
        self.creates = creates
        self.ends = ends
        self.names = tuple(name for name, _ in fields[: len(fields) - self.tube])
        self.whole = layout(HEAD_FIELDS, fields)  # header and fields in one struct
        self.get = attrgetter("op", "seq", "time_us", "job_id", *self.names)
        self.fixed_size = self.whole.size

    def size(self, r: Record) -> int:
        """The length of ``r``'s payload (``len(encode(r))``), without encoding it."""
        # compiled: the record's C fields, not two attribute look-ups and a module global's
        # (callgrind, a put's room settled: 800 instructions a call)
        p = cython.declare(Record, r)
        n = self.fixed_size
        if self.tube:
            n += len(p.tube)
        if self.body:
            n += _U32_SIZE + len(p.body)
        return n


# The registry of WAL ops, version 1: every op the encoder writes has its row here, and the
# encoder, the decoder, the fixed sizes below, DURABLE_OPS, the WAL's room (engine/space.py) and
# replay's dispatch (engine/replay.py) are derived from it (an op without a row is refused by
# encode, never written as a bare header). Adding a record type is a row here and its rule in
# replay.py. Analytics records (reserve, touch, timeout, pause) are not durable: the server does
# not wait for them, and the WAL leaves them out rather than use room promised to others.
LAYOUTS: dict[Op, OpLayout] = {
    Op.PUT: OpLayout(PUT_FIELDS, body=True, creates=True),
    Op.DELETE: OpLayout((), ends=True),
    Op.RELEASE: OpLayout(RELEASE_FIELDS),
    Op.BURY: OpLayout(BURY_FIELDS),
    Op.KICK: OpLayout(()),
    Op.TOUCH: OpLayout((), durable=False),
    Op.RESERVE: OpLayout((), durable=False),
    Op.TIMEOUT: OpLayout((), durable=False),
    Op.PAUSE: OpLayout(PAUSE_FIELDS, durable=False),
    Op.JOB: OpLayout(JOB_FIELDS, body=True),
    Op.RESULT: OpLayout(RESULT_FIELDS, body=True),
    Op.EPOCH: OpLayout(EPOCH_FIELDS),
}

ROWS: tuple[OpLayout | None, ...] = tuple(LAYOUTS.get(code) for code in range(256))  # type: ignore[call-overload]
"""``LAYOUTS`` indexed by op code (None: no row), for the per-record paths: an ``Op`` indexes a
tuple without hashing (an IntEnum's hash is a Python-level call)."""

# Ops whose loss would change the acknowledged state: the server waits for them to be durable.
DURABLE_OPS = frozenset(op for op, row in LAYOUTS.items() if row.durable)


_OPS = {int(op): op for op in LAYOUTS}  # code -> Op: no enum call per record
_C_PUT = int(Op.PUT)
_PUT_OP, _READY = Op.PUT, JobState.READY
_PUT_ROW = cython.declare(OpLayout, LAYOUTS[Op.PUT])
_pack_put = _PUT_ROW.whole.pack
_unpack_put = _PUT_ROW.whole.unpack_from  # (bound once: no method look-up by name per record)
# _encode_put stores a PUT's fields at these offsets (a changed layout must change it too); C
# constants compiled, so the encoder reads no module global
assert _PUT_ROW.whole.format == "<BBQqQIIIqH" and PUT_FIXED == 52
_PUT_LEN, _VERSION, _PUT_CODE = PUT_FIXED, FORMAT_VERSION, int(Op.PUT)
# _encode_head stores a header at these offsets (a changed header must change it too)
assert HEAD.format == "<BBQqQ" and HEADER_SIZE == 26
_HEAD_LEN = HEADER_SIZE
# encode and _decode_put take a PUT's fields in this order (a changed PUT_FIELDS must change
# them too):
assert _PUT_ROW.names == ("pri", "delay", "ttr", "deadline_us") and _PUT_ROW.tube and _PUT_ROW.body


def encode(r: Record) -> bytes:
    """Encode a record in the newest format version, by its op's row of ``LAYOUTS``.

    >>> encode(Record(Op.BURY, 1, 2, 3, pri=9)) == HEAD.pack(1, Op.BURY, 1, 2, 3) + BURY.pack(9)
    True
    """
    lay = cython.declare(OpLayout, ROWS[r.op])  # compiled: its row's C attributes
    if lay is _PUT_ROW:
        # The record of every put: its fields passed by name, not gathered by the row's getter
        # into a tuple and spread again (callgrind, a put at depth 1: 7,400 -> 3,300 instructions).
        p = cython.declare(Record, r)
        name = cython.declare(str, p.tube)  # compiled: str's encoder called directly
        tube = name.encode("ascii")
        body = p.body
        if cython.compiled and type(body) is bytes:
            # compiled: the fields stored into the payload by C, not packed by a struct call
            # and joined (callgrind, a put at depth 1 under ``never``: 3,300 -> 1,400 instructions)
            out = _encode_put(p, tube, body)
            if out is not None:
                return out
        fixed = _pack_put(FORMAT_VERSION, p.op, p.seq, p.time_us, p.job_id, p.pri, p.delay, p.ttr, p.deadline_us,
                          len(tube))  # fmt: skip
        return b"".join((fixed, tube, _pack_u32(len(body)), body))
    if cython.compiled and lay is not None and lay.fixed_size == _HEAD_LEN and not lay.sized:
        # a header alone (a delete, a reserve...): stored by C as a put's fields are, not
        # gathered by the row's getter and packed by a struct call
        out = _encode_head(r)
        if out is not None:
            return out
    if lay is None:
        if r.op is Op.UNKNOWN:
            raise ValueError("Op.UNKNOWN is a decoding result and cannot be encoded")
        raise ValueError(f"op {r.op!r} has no layout in model.LAYOUTS and cannot be encoded")
    if lay.tube:
        tube = r.tube.encode("ascii")
        fixed = lay.whole.pack(FORMAT_VERSION, *lay.get(r), len(tube))
        if not lay.body:
            return fixed + tube  # type: ignore[no-any-return]
        body = r.body
        return b"".join((fixed, tube, _pack_u32(len(body)), body))
    fixed = lay.whole.pack(FORMAT_VERSION, *lay.get(r))
    if not lay.body:
        return fixed  # type: ignore[no-any-return]
    body = r.body
    return b"".join((fixed, _pack_u32(len(body)), body))


@cython.cfunc
@cython.locals(p=Record, seq=cython.ulonglong, ts=cython.longlong, jid=cython.ulonglong, pri=cython.ulonglong,
               delay=cython.ulonglong, ttr=cython.ulonglong, dl=cython.longlong, nt=cython.Py_ssize_t,
               nb=cython.Py_ssize_t, at=cython.Py_ssize_t, b=cython.p_uchar)  # fmt: skip
def _encode_put(r: Record, tube: bytes, body: bytes) -> bytes | None:
    """``encode``'s PUT payload, each field stored little-endian by C (compiled only): the bytes
    ``_pack_put`` and the join give, or None where a field is not one the format holds (the
    struct path then refuses it, with its own error)."""
    p = r
    try:
        seq = p.seq
        ts = p.time_us
        jid = p.job_id
        pri = p.pri
        delay = p.delay
        ttr = p.ttr
        dl = p.deadline_us
    except (OverflowError, TypeError):
        return None
    nt = len(tube)
    nb = len(body)
    if pri > 0xFFFFFFFF or delay > 0xFFFFFFFF or ttr > 0xFFFFFFFF or nt > 0xFFFF or nb > 0xFFFFFFFF:
        return None
    # a new bytes object, so ours to fill (52 bytes or more: never one Python shares)
    out = PyBytes_FromStringAndSize(cython.NULL, _PUT_LEN + nt + nb)
    b = cython.cast(cython.p_uchar, cython.cast(cython.p_char, out))
    _store_head(b, _PUT_CODE, seq, ts, jid)
    _put_le(b, 26, pri, 4)
    _put_le(b, 30, delay, 4)
    _put_le(b, 34, ttr, 4)
    _put_le(b, 38, cython.cast(cython.ulonglong, dl), 8)
    _put_le(b, 46, nt, 2)
    at = 48
    memcpy(cython.address(b[at]), cython.cast(cython.p_char, tube), nt)
    at += nt
    _put_le(b, at, nb, 4)
    at += 4
    memcpy(cython.address(b[at]), cython.cast(cython.p_char, body), nb)
    return out


@cython.cfunc
@cython.locals(p=Record, op=cython.uchar, seq=cython.ulonglong, ts=cython.longlong, jid=cython.ulonglong,
               b=cython.p_uchar)  # fmt: skip
def _encode_head(r: Record) -> bytes | None:
    """``encode``'s payload of a record that is its header alone, stored by C (compiled only):
    the bytes ``HEAD.pack`` gives, or None where a field is not one the format holds."""
    p = r
    try:
        op = p.op
        seq = p.seq
        ts = p.time_us
        jid = p.job_id
    except (OverflowError, TypeError):
        return None
    out = PyBytes_FromStringAndSize(cython.NULL, _HEAD_LEN)
    b = cython.cast(cython.p_uchar, cython.cast(cython.p_char, out))
    _store_head(b, op, seq, ts, jid)
    return out


@cython.cfunc
@cython.inline
@cython.locals(b=cython.p_uchar, op=cython.uchar, seq=cython.ulonglong, ts=cython.longlong, jid=cython.ulonglong)
def _store_head(b: bytes, op: int, seq: int, ts: int, jid: int) -> None:
    """The header every record starts with (``HEAD``: version, op, seq, time_us, job_id), stored
    little-endian by C at ``b``: the one C writer of it, for a PUT's payload and a header alone."""
    _put_le(b, 0, _VERSION, 1)
    _put_le(b, 1, op, 1)
    _put_le(b, 2, seq, 8)
    _put_le(b, 10, cython.cast(cython.ulonglong, ts), 8)
    _put_le(b, 18, jid, 8)


@cython.cfunc
@cython.inline
@cython.locals(b=cython.p_uchar, at=cython.Py_ssize_t, v=cython.ulonglong, width=cython.Py_ssize_t,
               k=cython.Py_ssize_t)  # fmt: skip
def _put_le(b: bytes, at: int, v: int, width: int) -> None:
    """``v``'s ``width`` low bytes, little-endian, at ``b[at]`` (``b`` a C pointer; compiled only)."""
    for k in range(width):
        b[at + k] = cython.cast(cython.uchar, v >> (8 * k))  # type: ignore[index]  # (a C pointer)


if not cython.compiled:  # compiled, model.pxd takes these from C

    def memcpy(to: object, source: object, n: int) -> None:
        raise NotImplementedError("compiled only")

    def memcmp(a: object, b: object, n: int) -> int:
        raise NotImplementedError("compiled only")

    def PyBytes_FromStringAndSize(s: object, n: int) -> bytes:  # noqa: N802 - the C API's name
        raise NotImplementedError("compiled only")


def decode(payload: bytes | memoryview) -> Record:
    """Decode one record payload of any known format version.

    Raises RecordFormatError for a truncated payload or an unknown version.
    """
    # bytes as they are (a slice of them is one copy; of a view, a view and then its copy)
    buf = payload if type(payload) is bytes else memoryview(payload)
    if len(buf) < HEADER_SIZE:
        raise RecordFormatError(f"record of {len(buf)} bytes is shorter than its {HEADER_SIZE}-byte header")
    version = buf[0]
    if version == 1:
        return _decode_v1(buf)
    raise RecordFormatError(f"record format version {version} is newer than this stalkd (knows 1..{FORMAT_VERSION})")




def _decode_v1(buf: bytes | memoryview) -> Record:
    try:
        code = buf[1]
        if code == _C_PUT:
            return _decode_put(buf)
        lay = ROWS[code]
        if lay is None:
            _, _, seq, time_us, job_id = HEAD.unpack_from(buf, 0)
            return Record(Op.UNKNOWN, seq, time_us, job_id)
        values = lay.whole.unpack_from(buf, 0)
        op = _OPS[code]
        kw = dict(zip(lay.names, values[5:], strict=False))
        pos = lay.fixed_size
        if lay.tube:
            tlen = values[-1]
            kw["tube"] = _text(buf, pos, tlen)
            pos += tlen
        if lay.body:
            kw["body"] = _blob(buf, pos)
        if "state" in kw:
            kw["state"] = JobState(kw["state"])
        return Record(op, values[2], values[3], values[4], **kw)
    except (struct.error, ValueError, UnicodeDecodeError) as exc:
        raise RecordFormatError(f"corrupt version-1 record: {exc}") from exc


def _decode_put(buf: bytes | memoryview) -> Record:
    """A PUT, the commonest record (a standby decodes every job's), built from its fields in
    order: what the generic path gives, without its dict of fields per record."""
    _, _, seq, time_us, job_id, pri, delay, ttr, deadline_us, tlen = _unpack_put(buf, 0)
    pos = _PUT_ROW.fixed_size
    tube = _text(buf, pos, tlen)
    return _put_record(seq, time_us, job_id, tube, pri, delay, ttr, deadline_us, _blob(buf, pos + tlen))


def _put_record(seq: int, time_us: int, job_id: int, tube: str, pri: int, delay: int, ttr: int, deadline_us: int,
                body: bytes) -> Record:  # fmt: skip
    """The PUT record of these fields, created when it was put (``created_us`` is its time)."""
    return new_record(_PUT_OP, seq, time_us, job_id, tube, pri, delay, ttr, deadline_us, body, time_us)


def new_record(op: Op, seq: int, time_us: int, job_id: int, tube: str = "", pri: int = 0, delay: int = 0,
               ttr: int = 0, deadline_us: int = 0, body: bytes = b"", created_us: int = 0) -> Record:  # fmt: skip
    """``Record(op, seq, time_us, job_id, tube, pri, delay, ttr, deadline_us, body,
    created_us=created_us)``: the records the engine makes per change and a standby decodes per
    job. Compiled, its fields are stored in C: the dataclass's ``__init__`` would parse up to 19
    arguments each time.

    >>> new_record(Op.DELETE, 7, 8, 9) == Record(Op.DELETE, 7, 8, 9)
    True
    """
    if not cython.compiled:
        return Record(op, seq, time_us, job_id, tube, pri, delay, ttr, deadline_us, body, created_us=created_us)
    r = cython.declare(Record, Record.__new__(Record))
    r.op, r.seq, r.time_us, r.job_id, r.tube, r.pri, r.delay, r.ttr = op, seq, time_us, job_id, tube, pri, delay, ttr
    r.deadline_us, r.body, r.state, r.created_us = deadline_us, body, _READY, created_us
    r.reserves = r.timeouts = r.releases = r.buries = r.kicks = r.epoch = r.start_offset = 0
    out: Record = r
    return out


_TUBE_NAMES: dict[bytes, str] = {}  # a name's bytes -> the str decoded before (see _text)
_TUBE_NAMES_KEPT = 4096
_LAST_TUBE = b""  # the bytes and str of the name _text gave last (compiled)
_LAST_NAME = ""
# Compiled, in front of the dict: the names met lately, each in the slot its bytes' hash picks
# (a fixed 64: one per tube of a standby's busy tubes, mostly). A hit compares the bytes where
# they lie, with no slice to make, hash and free: at 16:1 (16 tubes, a message's records
# from many connections) the last-name check misses and the dict path cost ~1.1k instructions a
# record (callgrind). A miss goes to the dict and takes the slot.
_SLOTS = 64  # a power of two
_SLOT_RAW: list[bytes] = [b""] * _SLOTS
_SLOT_NAME: list[str] = [""] * _SLOTS


def _text(buf: bytes | memoryview, pos: int, n: int) -> str:
    """A tube name: the one str made for these bytes before, while at most ``_TUBE_NAMES_KEPT``
    are kept (a standby decodes every record's; the same str, its hash already computed, is
    also what the engine's tube lookup hashes)."""
    global _LAST_TUBE, _LAST_NAME
    if pos + n > len(buf):
        raise RecordFormatError("tube name runs past the end of the record")
    if cython.compiled and type(buf) is bytes:
        # The last name's bytes compared in C first: a message's records come a connection's
        # commands at a time, mostly in one tube, and a hit makes no slice and hashes nothing.
        p = cython.declare(cython.p_uchar, cython.cast(cython.p_uchar, cython.cast(cython.p_char,
                                                                                   cython.cast(bytes, buf))))
        if n == len(_LAST_TUBE) and memcmp(cython.address(p[pos]), cython.cast(cython.p_char, _LAST_TUBE), n) == 0:
            return _LAST_NAME
        h = cython.declare(cython.ulonglong, 0)  # (small literals only: C arithmetic, wrapping)
        k = cython.declare(cython.Py_ssize_t)
        for k in range(pos, pos + n):
            h = h * 31 + p[k]
        slot = cython.declare(cython.Py_ssize_t, (h ^ (h >> 6)) & (_SLOTS - 1))
        seen = cython.declare(bytes, _SLOT_RAW[slot])
        if n == len(seen) and memcmp(cython.address(p[pos]), cython.cast(cython.p_char, seen), n) == 0:
            hit: str = cython.cast(str, _SLOT_NAME[slot])
            _LAST_TUBE, _LAST_NAME = seen, hit
            return hit
        raw = cython.cast(bytes, buf)[pos : pos + n]  # (a C copy of the bytes)
        name = _TUBE_NAMES.get(raw)
        if name is None:
            name = raw.decode("ascii")
            if len(_TUBE_NAMES) < _TUBE_NAMES_KEPT:
                _TUBE_NAMES[raw] = name
        _SLOT_RAW[slot], _SLOT_NAME[slot] = raw, name
        _LAST_TUBE, _LAST_NAME = raw, name
        return name
    raw = bytes(buf[pos : pos + n])
    name = _TUBE_NAMES.get(raw)
    if name is None:
        name = raw.decode("ascii")
        if len(_TUBE_NAMES) < _TUBE_NAMES_KEPT:
            _TUBE_NAMES[raw] = name
    _LAST_TUBE, _LAST_NAME = raw, name
    return name


def _blob(buf: bytes | memoryview, pos: int) -> bytes:
    if cython.compiled and type(buf) is bytes and pos + 4 <= len(buf):
        # the body of every record a standby decodes: its length read by C, the bytes copied
        # by C (the struct call and the slice object cost more than the copy of a small body)
        p = cython.declare(cython.p_uchar, cython.cast(cython.p_uchar, cython.cast(cython.p_char,
                                                                                   cython.cast(bytes, buf))))
        size = cython.declare(cython.Py_ssize_t, p[pos] | (p[pos + 1] << 8) | (p[pos + 2] << 16)
                              | (cython.cast(cython.Py_ssize_t, p[pos + 3]) << 24))  # fmt: skip
        pos += 4
        if pos + size != len(buf):
            raise RecordFormatError(f"body length {size} does not match the {len(buf) - pos} bytes left")
        return cython.cast(bytes, buf)[pos : pos + size]
    (n,) = U32.unpack_from(buf, pos)
    pos += 4
    if pos + n != len(buf):
        raise RecordFormatError(f"body length {n} does not match the {len(buf) - pos} bytes left")
    return bytes(buf[pos : pos + n])
