# The C signatures of jobcommands.py's functions when Cython compiles it (stalkd.extensions):
# each command's handler is cpdef (a C function, and a Python one for Engine.apply's dispatch
# table), the rest C functions. The job look-ups (room.pxd) and the state's container moves
# (state.pxd) are C calls. jobcommands.py is the source; this declares types and signatures only.

from stalkd.engine.heap cimport HeapItem, IndexedHeap, pack
from stalkd.engine.objects cimport ConnState, Job, Release, Tube, job_body, new_job
from stalkd.engine.room cimport find_deletable, find_held, find_kickable, find_unreserved
from stalkd.engine.state cimport EngineState
cimport stalkd.protocol.commands as C


cpdef object put(EngineState s, ConnState c, C.Put cmd)
cpdef object reserve(EngineState s, ConnState c, object cmd)
cdef bint _any_ready(list watch)
cpdef object reserve_job(EngineState s, ConnState c, C.ReserveJob cmd)
cpdef object delete(EngineState s, ConnState c, C.Delete cmd)
cpdef object release(EngineState s, ConnState c, C.Release cmd)
cpdef object bury(EngineState s, ConnState c, C.Bury cmd)
cpdef object touch(EngineState s, ConnState c, C.Touch cmd)
cdef _kick_one(EngineState s, Job j)
cpdef object kick(EngineState s, ConnState c, C.Kick cmd)
cdef object _kicked(ConnState c)
cdef bint _kick_step(EngineState s, ConnState c)
cpdef more(EngineState s)
cpdef object kick_job(EngineState s, ConnState c, C.KickJob cmd)
