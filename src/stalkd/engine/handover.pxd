# The C types handover.py's Reservations.follow reads when Cython compiles it (stalkd.extensions):
# a standby applies every record its primary sends there, so a record's fields are read at fixed
# offsets and ``replay`` is a C call. handover.py is the source; this declares types only.

cimport cython

from stalkd.engine.engine cimport Engine
from stalkd.engine.model cimport Record
from stalkd.engine.objects cimport ConnState, Tube
from stalkd.engine.replay cimport replay, replay_put
from stalkd.engine.state cimport EngineState

cdef object _RESULT  # (a C global: read for every record follow applies)
cdef object _soonest(EngineState s)


# Reservations: an extension type, so follow's flags (tick_due, read by the receiver per read)
# are C fields, not an instance dict's entries (three of those per read cost ~400 instructions).
cdef class Reservations:
    cdef public dict until
    cdef public bint tick_due
    cdef bint _followed

    @cython.locals(r=Record, x=object, s=EngineState, result=bint)
    cpdef bint follow(self, Engine e, object records) except -1
