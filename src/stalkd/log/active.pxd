# The C types of active.py when Cython compiles it (an augmenting .pxd: active.py stays the one
# source). The active segment is written per batch: typed attributes and C-level methods, called
# as C functions by writer.py.

from stalkd.log.fs cimport FileSystem

cdef class ActiveSegment:
    cdef public object path, mm
    cdef public FileSystem fs
    cdef public int fd
    cdef public Py_ssize_t base, pos, limit, size, epoch, users, zero_ahead, zeroed, room
    cdef public bint retired, mm_batches

    cpdef zero_to(self, Py_ssize_t end)
    cpdef write(self, data, Py_ssize_t pos)
