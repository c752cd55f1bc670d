# The C signatures of timers.py's functions when Cython compiles it (stalkd.extensions): the
# step frame and the timers as C functions over the engine's state (cpdef: engine.pxd cimports
# them; cdef: this module's own).
# timers.py is the source; this declares types and signatures only.

cimport cython

from stalkd.engine.heap cimport HeapItem, IndexedHeap, _lt
from stalkd.engine.objects cimport ConnState, Job, Release, Tube, job_body, to_us
from stalkd.engine.state cimport EngineState, Outcome


cpdef bint behind(EngineState s)
cpdef object next_deadline(EngineState s)
cpdef begin_step(EngineState s, object now, object caller)
cpdef Outcome finish_step(EngineState s, object reply)
cdef _settle(EngineState s)
cdef _serve(EngineState s)


@cython.locals(t=Tube)
cdef bint _tube_due(IndexedHeap h, object now)
@cython.locals(c=ConnState)
cdef bint _conn_due(IndexedHeap h, object now)
@cython.locals(j=Job)
cdef bint _job_due(IndexedHeap h, object now)
