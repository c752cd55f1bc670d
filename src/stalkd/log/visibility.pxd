# The C types of visibility.py when Cython compiles it (an augmenting .pxd: visibility.py stays
# the one source). The group commit (commit.pxd) and the write path (log.write_batch) read the
# waiter counts per sync and per batch as C fields.

cdef class Visibility:
    cdef public object cond, lock, _stopped
    cdef public Py_ssize_t waiters
    cdef public list async_waiters
