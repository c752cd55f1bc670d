# The C types of frames.py when Cython compiles it (stalkd.extensions): a standby checks every
# record its primary sends here, so decoding is a C call and a record's fields are read at fixed
# offsets. frames.py is the source; this declares types only.

cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize

from stalkd.engine.model cimport Record, _text, decode, new_record
from stalkd.persist.tail cimport _TLEN_AT, _Fields, _u32

cdef unsigned char _V1, _C_PUT
cdef Py_ssize_t _HEAD_LEN, _PUT_MIN


# check_records, check_payloads: cpdef, so the receiver (receiver.pxd cimports it) calls it in C per message
# rather than through a Python call (~500 instructions a message, callgrind).
cpdef list check_records(Py_ssize_t first, list payloads, Py_ssize_t expected, object epoch)
cpdef list check_payloads(Py_ssize_t first, list payloads, Py_ssize_t expected, object epoch)
cpdef object epoch_after(list records, object epoch)
@cython.locals(r=Record, i=Py_ssize_t, f=_Fields)
cdef list _check(Py_ssize_t first, list payloads, Py_ssize_t expected, object epoch, bint raw_puts)

@cython.locals(n=Py_ssize_t, at=Py_ssize_t, tlen=Py_ssize_t, c="const unsigned char *")
cdef object _put_tube(bytes p)

@cython.locals(at=Py_ssize_t, size=Py_ssize_t, c="const unsigned char *", t=object)
cdef Record _put(bytes p, _Fields f)
