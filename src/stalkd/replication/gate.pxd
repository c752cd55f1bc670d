# The C declarations of gate.py (Cython reads this beside it when it compiles the .py file): the
# gate's fields, and the methods the sender calls per batch and per acknowledgement as C calls.

cimport cython


cdef class SyncGate:
    cdef public Py_ssize_t need
    cdef public Py_ssize_t replicated
    cdef public bint _waiting
    cdef public Py_ssize_t _first, _first_end
    cdef public object _batches
    cdef public dict _acks
    cdef public Py_ssize_t _quorum
    cdef public object members

    cpdef note(self, Py_ssize_t batch, Py_ssize_t end_offset)
    @cython.locals(q=Py_ssize_t)
    cpdef ack(self, object standby, Py_ssize_t offset)
    cpdef drop(self, object standby)
    cpdef Py_ssize_t quorum(self) except? -2
    @cython.locals(q=Py_ssize_t)
    cpdef _advance(self)
    cdef _pass_first(self)
