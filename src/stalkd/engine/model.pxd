# The C types of model.py when Cython compiles it (an augmenting .pxd: model.py stays the one
# source, and runs as it is uncompiled). A registry row is read for every record written, by
# this module's encode and by the WAL's room (space.py, persist/wal.py), which cimport it.

cdef class OpLayout:
    cdef readonly tuple fields, names
    cdef readonly bint tube, body, sized, durable, creates, ends
    cdef readonly object whole, get
    cdef readonly Py_ssize_t fixed_size

    cpdef Py_ssize_t size(self, r) except -1

cpdef bytes encode(r)
