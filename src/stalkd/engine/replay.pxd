# The C types of replay.py when Cython compiles it (stalkd.extensions): a standby applies every
# record its primary sends through ``replay``, so a record's fields and the containers of the
# engine's state (state.pxd) are read at fixed offsets and the rules of the commonest ops are C
# calls. replay.py is the source; this declares types and signatures only.

cimport cython

from stalkd.engine.engine cimport Engine
from stalkd.engine.model cimport Record
from stalkd.engine.objects cimport Job, Tube, job_body, new_job
from stalkd.engine.state cimport EngineState

cpdef replay(Engine e, Record r)
cpdef _new_job(EngineState s, Record r)
@cython.locals(body=bytes)
cdef _create(EngineState s, Record r)
cdef _place(EngineState s, Job j, object state, object deadline_us)
