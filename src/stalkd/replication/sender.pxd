# The C declarations of sender.py (Cython reads this beside it when it compiles the .py file): a
# standby's stream, whose fields a message out and an acknowledgement in read and write, and the
# gate and decoder it calls as C functions.

cimport cython

from stalkd.log.reader cimport ReadPos
from stalkd.replication.gate cimport SyncGate
from stalkd.replication.wire cimport AckDecoder


cdef class Sender:
    cdef public object replicas
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
    cdef public object _challenge
    cdef public double heard
    cdef public double caught_up_at
    cdef public object _clock
    cdef public SyncGate _gate
    cdef public object _on_replicated

    cpdef _acked(self, Py_ssize_t offset)
    @cython.locals(end=Py_ssize_t, stop=Py_ssize_t)
    cpdef pump(self)
