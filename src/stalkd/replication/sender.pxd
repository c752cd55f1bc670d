# The C declarations of sender.py (Cython reads this beside it when it compiles the .py file): the
# standbys (the log's end, the gate and the streams every batch reads) and a standby's stream,
# whose fields a message out and an acknowledgement in read and write, and the log's frames_span,
# the encoder, the gate and the decoder it calls as C functions.

cimport cython
from posix.unistd cimport read

from stalkd.log.log cimport frames_span
from stalkd.log.reader cimport FrameSpan, ReadPos, SegmentViews
from stalkd.log.writer cimport SegmentWriter
from stalkd.replication.gate cimport SyncGate
from stalkd.replication.wire cimport AckDecoder, encode_span


cdef class Replicas:
    cdef object _log
    cdef public SegmentWriter _writer
    cdef public SegmentViews _views
    cdef public object snap_dir, role
    cdef public SyncGate gate
    cdef public object on_replicated, secret, on_follower, clock
    cdef public set senders
    cdef public tuple _streams
    cdef public Py_ssize_t refused, _refused_logged
    cdef public double _refusal_logged, _wait_logged
    cdef public object waiting_since, _wait_batch
    cdef public object _tick, _send_soon, _loop

    cpdef written(self)
    cpdef poll_acks(self)
    cpdef _send(self)
    cpdef Py_ssize_t end_offset(self) except -1


cdef class Sender:
    cdef public Replicas replicas
    cdef public bint granted
    cdef public object identity
    cdef public object transport
    cdef public object peer
    cdef public bytes _line
    cdef public AckDecoder _acks
    cdef public bint streaming
    cdef public bint paused
    cdef public Py_ssize_t next
    cdef public Py_ssize_t acked
    cdef public object name
    cdef public bint frames
    cdef public Py_ssize_t _sent_frames
    cdef public Py_ssize_t _sent_records
    cdef public int _snap_fd
    cdef public ReadPos _pos
    cdef public FrameSpan _span
    cdef public object _challenge
    cdef public double heard
    cdef public double caught_up_at
    cdef public object _clock
    cdef public SyncGate _gate
    cdef public object _on_replicated
    cdef public object _write, _is_closing
    cdef public int _fd

    cpdef poll(self)

    cpdef _acked(self, Py_ssize_t offset)
    @cython.locals(end=Py_ssize_t, stop=Py_ssize_t)
    cpdef pump(self)
