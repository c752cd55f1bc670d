# The C types of model.py when Cython compiles it (an augmenting .pxd: model.py stays the one
# source, and runs as it is uncompiled).
#
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.string cimport memcmp, memcpy

# Record: an extension type whose fields a compiled caller fills and reads at fixed offsets, so
# building one is a C call rather than a frozen dataclass's __setattr__ per field. model.py holds
# the class, its field list and its methods; this declares the fields' types only. They stay
# Python objects (ids and times of any size, the enums), read-only from Python as a frozen
# dataclass's are.
#
# OpLayout: a registry row is read for every record written, by this module's encode and by the
# WAL's room (space.py, persist/wal.py), which cimport it.

cdef class Record:
    cdef readonly object op, seq, time_us, job_id, tube, pri, delay, ttr, deadline_us, body
    cdef readonly object state, created_us, reserves, timeouts, releases, buries, kicks, epoch
    cdef readonly object start_offset

cdef tuple _values(r)

cdef class OpLayout:
    cdef readonly tuple fields, names
    cdef readonly bint tube, body, sized, durable, creates, ends
    cdef readonly object whole, get
    cdef readonly Py_ssize_t fixed_size

    cpdef Py_ssize_t size(self, r) except -1

cdef Py_ssize_t _U32_SIZE
cdef Py_ssize_t _PUT_LEN, _HEAD_LEN
cdef unsigned char _VERSION, _PUT_CODE

cpdef bytes encode(r)

# Decoding: every record a standby applies is decoded here, each step a C call.
cpdef Record decode(payload)
cdef Record _decode_v1(buf)
cdef Record _decode_put(buf)
cdef Record _put_record(seq, time_us, job_id, tube, pri, delay, ttr, deadline_us, body)
# The engine's records, one per durable change (state.pxd cimports it).
cpdef Record new_record(op, seq, time_us, job_id, tube=*, pri=*, delay=*, ttr=*, deadline_us=*, body=*,
                        created_us=*)
cdef dict _TUBE_NAMES  # (a C-level dict: its look-up per record is no attribute and bound method)
cdef Py_ssize_t _TUBE_NAMES_KEPT
cdef bytes _LAST_TUBE
cdef str _LAST_NAME
cdef Py_ssize_t _SLOTS
cdef list _SLOT_RAW, _SLOT_NAME
cdef str _text(buf, Py_ssize_t pos, Py_ssize_t n)
cdef bytes _blob(buf, Py_ssize_t pos)
