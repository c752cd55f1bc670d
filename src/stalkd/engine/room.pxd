# The C signatures of room.py's job look-ups when Cython compiles it (stalkd.extensions): the
# commands (jobcommands.pxd cimports them) call them as C functions, with the table and the
# connection typed. room.py is the source; this declares types and signatures only.

cimport cython

cimport stalkd.protocol.commands as C
from stalkd.engine.jobtable cimport JobTable
from stalkd.engine.objects cimport ConnState, Job

@cython.locals(j=Job)
cpdef Job find_held(JobTable jobs, ConnState c, object job_id)
cdef bint _held_live(Job j)
@cython.locals(j=Job)
cpdef Job find_deletable(JobTable jobs, ConnState c, object job_id)
@cython.locals(j=Job)
cpdef Job find_unreserved(JobTable jobs, ConnState c, object job_id)
@cython.locals(j=Job)
cpdef Job find_kickable(JobTable jobs, ConnState c, object job_id)


cdef class RoomBase:
    cpdef bint put(self, Py_ssize_t body_len) except -1
    cpdef updates(self, object n)

@cython.locals(n=Py_ssize_t)
cpdef bint put_refused(object room, C.Put p, Py_ssize_t max_job_size, bint draining) except -1
