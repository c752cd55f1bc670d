# The C layout of model.py's Record when Cython compiles it (stalkd.extensions): an extension type
# whose fields a compiled caller fills and reads at fixed offsets, so building one is a C call
# rather than a frozen dataclass's __setattr__ per field. model.py is the source (the dataclass
# and its field list); this declares the fields' types only. They stay Python objects (ids and
# times of any size, the enums), read-only from Python as the frozen dataclass's are.

cdef class Record:
    cdef readonly object op, seq, time_us, job_id, tube, pri, delay, ttr, deadline_us, body
    cdef readonly object state, created_us, reserves, timeouts, releases, buries, kicks, epoch
    cdef readonly object start_offset
