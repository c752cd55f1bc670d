# The extension type Queries is when Cython compiles queries.py (stalkd.extensions); queries.py
# is the source; this declares types only.

from stalkd.engine.heap cimport HeapItem, IndexedHeap, pack
from stalkd.engine.objects cimport ConnState, Job, Release, Tube
from stalkd.engine.jobcommands cimport JobCommands


cdef class Queries(JobCommands):
    pass
