# The C types of tail.py when Cython compiles it (stalkd.extensions): a kill leaves up to half the
# live jobs as WAL records after the snapshot, and replay_tail applies each in one loop; the jobs
# and tubes it touches are read at fixed offsets. tail.py is the source; this declares types only.

cimport cython

from stalkd.engine.jobtable cimport JobTable
from stalkd.engine.objects cimport Job, Tube

@cython.locals(jobs=JobTable, added=dict, loose=set, tubes=dict, j=Job, new=Job, t=Tube, code=int,
               body_bytes=Py_ssize_t, applied=Py_ssize_t, positions=list, i=Py_ssize_t, at=Py_ssize_t,
               n=Py_ssize_t, end=Py_ssize_t, t0=Py_ssize_t, b0=Py_ssize_t, tlen=Py_ssize_t, blen=Py_ssize_t)
cpdef Py_ssize_t replay_tail(e, chunks, start_seq, dict fresh) except -1

@cython.locals(jobs=JobTable, lists=dict, j=Job, t=Tube, tl=tuple)
cdef _place(e, set loose, dict added)
