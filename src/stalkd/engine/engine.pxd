# The extension type Engine is when Cython compiles engine.py (stalkd.extensions): one class over
# an EngineState (state.pxd), whose rules (timers.pxd, jobcommands.pxd, results.pxd) it calls as
# C functions. engine.py is the source; this declares types and signatures only. apply is cpdef:
# the compiled server (app.pxd) calls it as a C function.

cimport stalkd.engine.jobcommands as jobcommands
cimport stalkd.engine.queries as queries
cimport stalkd.engine.results as results
cimport stalkd.engine.timers as timers
cimport stalkd.protocol.commands as C
from stalkd.engine.objects cimport ConnState, Job, Tube
from stalkd.engine.room cimport put_refused
from stalkd.engine.state cimport EngineState


cdef bint _PUT_DIRECT


cdef class Engine:
    cdef object __weakref__
    cdef readonly EngineState state
    cdef public dict _dispatch
    cpdef object apply(self, object conn_id, object cmd, object now)
