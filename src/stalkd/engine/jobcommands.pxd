# The extension type JobCommands is when Cython compiles jobcommands.py (stalkd.extensions);
# jobcommands.py is the source; this declares types only. The job look-ups (room.pxd) are C calls.

from stalkd.engine.heap cimport HeapItem, IndexedHeap, pack
from stalkd.engine.objects cimport ConnState, Job, Release, Tube, new_job
from stalkd.engine.room cimport find_deletable, find_held, find_kickable, find_unreserved
from stalkd.engine.timers cimport Timers
cimport stalkd.protocol.commands as C


cdef class JobCommands(Timers):
    pass
