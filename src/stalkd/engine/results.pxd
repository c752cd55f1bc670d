# The C signatures of results.py's functions when Cython compiles it (stalkd.extensions): the
# command handlers are cpdef (a C function, and a Python one for Engine.apply's dispatch table),
# as is the expiry Engine.tick runs; queries.pxd's ``stats`` is a C call. results.py is the
# source; this declares types and signatures only.

from stalkd.engine.objects cimport ConnState
from stalkd.engine.queries cimport stats as _engine_stats
from stalkd.engine.state cimport EngineState


cpdef object expire_results(EngineState s, object now_us)
cpdef object result_put(EngineState s, ConnState c, object cmd)
cpdef object stats(EngineState s, ConnState c, object cmd)
cpdef object result_get(EngineState s, ConnState c, object cmd)
