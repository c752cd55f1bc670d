# The C types handover.py's Reservations.follow reads when Cython compiles it (stalkd.extensions):
# a standby applies every record its primary sends there, so a record's fields are read at fixed
# offsets and ``replay`` is a C call. handover.py is the source; this declares types only.

from stalkd.engine.model cimport Record
from stalkd.engine.objects cimport ConnState, Tube
from stalkd.engine.replay cimport replay
from stalkd.engine.state cimport EngineState

cdef object _RESULT  # (a C global: read for every record follow applies)
cdef object _soonest(EngineState s)
