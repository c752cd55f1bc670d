# The C types of space.py when Cython compiles it (an augmenting .pxd: space.py stays the one
# source, and runs as it is uncompiled). SpaceBudget is asked per command (admit, settle) and per
# batch (written, fits): typed attributes and C-level methods, called as C functions by the
# modules that cimport it (persist/wal.py).

# (the record type by the module: a cimported ``Record`` would hide the Python name doctests use)
cimport stalkd.engine.model as model
from stalkd.engine.model cimport OpLayout
from stalkd.log.active cimport ActiveSegment
from stalkd.log.frame cimport frame_size
from stalkd.log.writer cimport SegmentWriter

cdef Py_ssize_t _SHORT

cpdef Py_ssize_t spent(OpLayout row, Py_ssize_t frame) except -1
cpdef Py_ssize_t record_cost(r) except -1

cdef class SpaceBudget:
    cdef public object log_dir, before_grow
    cdef public Py_ssize_t segment_size, max_frame, per_spare, promised, refused, dropped, spares
    cdef public bint short
    cdef object _span, _fs
    cdef SegmentWriter _writer
    cdef Py_ssize_t _base

    cpdef Py_ssize_t room(self) except -1
    cpdef bint admit(self, Py_ssize_t cost) except -1
    cpdef bint fits(self, Py_ssize_t n) except -1
    cpdef settle(self, Py_ssize_t admitted, records)
    cpdef written(self, Py_ssize_t spent)
