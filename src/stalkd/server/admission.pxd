# The C declarations of admission.py (Cython reads this beside it when it compiles the .py file):
# the fields and the methods other compiled modules call directly.

from stalkd.engine.model cimport Record
from stalkd.engine.room cimport RoomBase


cdef class Admission(RoomBase):
    cdef public object _storage
    cdef public tuple _costless
    cdef public Py_ssize_t _short
    cdef public Py_ssize_t _put_base
    cdef public object _data_dir
    cdef public double _warn_every
    cdef public object _clock
    cdef public double _warned
    cdef public Py_ssize_t promised
    cdef public Py_ssize_t refused

    cpdef bint put(self, Py_ssize_t body_len) except -1
    cpdef updates(self, object n)
    cpdef settle(self, object records)
    cdef bint _admit(self, Py_ssize_t cost) except -1
    cdef _settle(self, Py_ssize_t promised, object records)
