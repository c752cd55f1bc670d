# The C layout of jobtable.py's JobTable when Cython compiles it (stalkd.extensions): an
# extension type the engine's modules cimport, so a look-up is a C call. jobtable.py is the
# source; this declares types and signatures only. Ids stay Python ints (any size).

cdef class JobTable:
    cdef readonly dict _chunks
    cdef Py_ssize_t _n
    cdef object _top
    cpdef object get(self, object jid, object default=*)
    cpdef bint add(self, object jid, object job) except -1
    cdef dict _new_chunk(self, object key)
