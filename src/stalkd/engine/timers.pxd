# The extension type Timers is when Cython compiles timers.py (stalkd.extensions): the step
# frame as C functions (cpdef: a subclass or a test may still replace one). timers.py is the
# source; this declares types and signatures only.

from stalkd.engine.heap cimport HeapItem, IndexedHeap, pack
from stalkd.engine.objects cimport ConnState, Job, Release, Tube
from stalkd.engine.state cimport EngineState, Outcome


cdef class Timers(EngineState):
    cpdef object next_deadline(self)
    cpdef _begin(self, object now, object caller)
    cpdef object _finish(self, object reply)
    cpdef _settle(self)
    cpdef _serve(self)
