# The C declarations of connection.py (Cython reads this beside it when it compiles the .py file):
# the fields and the methods other compiled modules call directly (app.py: send, wake; and
# Host.execute, which Server implements, called per command).

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid

from stalkd.server.barriers cimport Barriers, HeldReplies
from stalkd.server.turns cimport Turns

# Parser.buffered of the C parser (stalkd.protocol._speedups's capsule buffered_c), called on an
# object of that type only (_c_parser_type); NULL without the accelerator.
ctypedef Py_ssize_t (*_buffered_fn)(object) noexcept
cdef _buffered_fn _c_buffered
cdef object _c_parser_type
# Parser.next and Parser.feed likewise (capsules next_c, feed_c): a new reference, NULL on error.
ctypedef object (*_next_fn)(object)
ctypedef object (*_feed_fn)(object, object)
cdef _next_fn _c_next
cdef _feed_fn _c_feed
cdef Py_ssize_t _buffered(object parser) except? -1


cdef class Connection


cdef class Host:
    cdef public Barriers barriers

    cpdef execute(self, Connection c, object cmd)


cdef class Connection(HeldReplies):
    cdef public Host server
    cdef public Barriers barriers
    cdef public object id
    cdef public object parser
    cdef object _next
    cdef bint _c_parser
    cdef public Py_ssize_t max_output
    cdef public Py_ssize_t flush_at
    cdef public Py_ssize_t read_size
    cdef public object transport
    cdef object _bound_to, _t_write, _t_is_closing
    cdef public object peer
    cdef public list out
    cdef public Py_ssize_t out_bytes
    cdef public Py_ssize_t unsent_bound
    cdef public bint holding
    cdef Py_ssize_t _first_barrier
    cdef object _first_parts
    cdef Py_ssize_t _first_bytes
    cdef public object held
    cdef public Py_ssize_t held_bytes
    cdef public bint close_ready
    cdef public bint waiting
    cdef public bint write_paused
    cdef public bint join_writes
    cdef public bint read_paused
    cdef public bint eof
    cdef public bint closing
    cdef public bint lost
    cdef public bint _running
    cdef public bint _flush_queued
    cdef public Turns turns  # (told of each read: a C call)
    cdef public bint deferred
    cdef public object identity
    cdef public object policy
    cdef public object admit
    cdef public bint fresh
    cdef public Py_ssize_t charged
    cdef public bint mem_paused
    cdef object __weakref__

    cdef _pause_reading(self)
    cdef _resume_reading(self)
    cpdef process(self)
    cpdef send(self, object reply, Py_ssize_t barrier)
    cpdef wake(self, object reply, Py_ssize_t barrier)
    cpdef bint release_held(self, Py_ssize_t durable) except -1
    cpdef flush(self)
    cpdef release(self, Py_ssize_t durable)
    cpdef resume(self)
    cdef _flush_out(self)
    cdef _hold(self, Py_ssize_t barrier, object parts, Py_ssize_t n)
