# compaction.py compiled by Cython (an augmenting .pxd: compaction.py stays the one source): a
# snapshot step reads the body length and id of each job it copies at their offsets
# (objects.pxd) and asks the job table in a C call (jobtable.pxd).

cimport cython

from stalkd.engine.jobtable cimport JobTable
from stalkd.engine.objects cimport Job


@cython.locals(i=Py_ssize_t, room=Py_ssize_t, j=Job)
cpdef Py_ssize_t _chunk_end(list jobs, Py_ssize_t start, Py_ssize_t end, Py_ssize_t room) except -1

@cython.locals(j=Job)
cpdef list _still_live(list chunk, JobTable table)
