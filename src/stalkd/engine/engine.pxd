# The extension type Engine is when Cython compiles engine.py (stalkd.extensions), the last of
# the layers; engine.py is the source; this declares types only.

from stalkd.engine.objects cimport ConnState, Job, Release, Tube
from stalkd.engine.results cimport Results


cdef class Engine(Results):
    cdef public dict _plain, _dispatch
