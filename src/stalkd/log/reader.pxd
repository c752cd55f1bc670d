# The C declarations of reader.py (Cython reads this beside it when it compiles the .py file): a
# read position, where the frames after one lie, and the mappings, which the log's frames_span (a
# standby's stream, per message) reads and fills as C fields and calls as a C method.

cdef class ReadPos:
    cdef public Py_ssize_t base, offset, pos


cdef class FrameSpan:
    cdef public Py_ssize_t base, start, end, stop
    cdef public object mv


cdef class SegmentViews:
    cdef dict _views

    cpdef object get(self, Py_ssize_t base, object path, bint archived)
