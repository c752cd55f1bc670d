# The C declarations of turns.py (Cython reads this beside it when it compiles the .py file): the
# turns as an extension type, so that a connection's call of ``read`` after each read it served
# runs no Python frame (the compiled hot path runs a job without one).

cdef class Turns:
    cdef public double budget
    cdef public Py_ssize_t starts, yields
    cdef public object clock, yield_cpu
    cdef object _soon, _queue, _waiting
    cdef double _deadline
    cdef public bint yield_reads
    cdef bint _open, _yield_due
    cdef Py_ssize_t _started
    cdef object _last_reader

    cpdef read(self, object who, Py_ssize_t size)
    cpdef _yield(self)
