# The C types of frames.py when Cython compiles it (stalkd.extensions): a standby checks every
# record its primary sends here, so decoding is a C call and a record's fields are read at fixed
# offsets. frames.py is the source; this declares types only.

cimport cython

from stalkd.engine.model cimport Record, decode


# check_records: cpdef, so the receiver (receiver.pxd cimports it) calls it in C per message
# rather than through a Python call (~500 instructions a message, callgrind).
@cython.locals(r=Record, i=Py_ssize_t)
cpdef list check_records(Py_ssize_t first, list payloads, Py_ssize_t expected, object epoch)
