# The extension type Results is when Cython compiles results.py (stalkd.extensions); results.py
# is the source; this declares types only.

from stalkd.engine.objects cimport ConnState, Job, Release, Tube
from stalkd.engine.queries cimport Queries


cdef class Results(Queries):
    pass
