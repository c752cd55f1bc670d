# The C types of ticket.py when Cython compiles it (an augmenting .pxd: ticket.py stays the one
# source): a ticket is an extension type the group commit (commit.pxd) makes and resolves with C
# calls, one per read a standby fsyncs on the committer thread.

cdef class Ticket:
    cdef public object first, last, _vis, _error
    cdef public bint _done
    cdef public list _callbacks

    cpdef bint done(self)
    cpdef object exception(self)
    cpdef list _resolve(self, object error)
