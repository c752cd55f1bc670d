# The extension type Timers is when Cython compiles timers.py (stalkd.extensions): the step
# frame as C functions (cpdef: a subclass or a test may still replace one). timers.py is the
# source; this declares types and signatures only.

cimport cython

from stalkd.engine.heap cimport HeapItem, IndexedHeap
from stalkd.engine.objects cimport ConnState, Job, Release, Tube, to_us
from stalkd.engine.state cimport EngineState, Outcome


cdef class Timers(EngineState):
    cpdef object next_deadline(self)
    cpdef _begin(self, object now, object caller)
    cpdef object _finish(self, object reply)
    cpdef _settle(self)
    cpdef _serve(self)


@cython.locals(t=Tube)
cdef bint _tube_due(IndexedHeap h, object now)
@cython.locals(c=ConnState)
cdef bint _conn_due(IndexedHeap h, object now)
@cython.locals(j=Job)
cdef bint _job_due(IndexedHeap h, object now)
