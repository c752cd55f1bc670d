# The extension type Engine is when Cython compiles engine.py (stalkd.extensions), the last of
# the layers; engine.py is the source; this declares types and signatures only. apply is cpdef:
# the compiled server (app.pxd) calls it as a C function.

from stalkd.engine.objects cimport ConnState, Job, Release, Tube
from stalkd.engine.results cimport Results


cdef class Engine(Results):
    cdef public dict _plain, _dispatch
    cpdef object apply(self, object conn_id, object cmd, object now)
