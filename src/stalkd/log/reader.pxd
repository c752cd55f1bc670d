# The C declarations of reader.py (Cython reads this beside it when it compiles the .py file): a
# read position and the mappings, which the log's frames_after (a standby's stream, per message)
# reads as C fields and calls as a C method.

cdef class ReadPos:
    cdef public Py_ssize_t base, offset, pos


cdef class SegmentViews:
    cdef dict _views

    cpdef object get(self, Py_ssize_t base, object path, bint archived)
