# The C signatures of queries.py's functions when Cython compiles it (stalkd.extensions): each
# command's handler is cpdef (a C function, and a Python one for Engine.apply's dispatch table);
# results.pxd cimports ``stats``. queries.py is the source; this declares types and signatures only.

from stalkd.engine.objects cimport ConnState, Job, job_body
from stalkd.engine.state cimport EngineState


cdef object _found(Job j)
cpdef object peek(EngineState s, ConnState c, object cmd)
cpdef object peek_ready(EngineState s, ConnState c, object cmd)
cpdef object peek_delayed(EngineState s, ConnState c, object cmd)
cpdef object peek_buried(EngineState s, ConnState c, object cmd)
cpdef object stats_job(EngineState s, ConnState c, object cmd)
cpdef object stats_tube(EngineState s, ConnState c, object cmd)
cpdef object stats(EngineState s, ConnState c, object cmd)
cpdef object list_tubes(EngineState s, ConnState c, object cmd)
cpdef object list_tube_used(EngineState s, ConnState c, object cmd)
cpdef object list_tubes_watched(EngineState s, ConnState c, object cmd)
