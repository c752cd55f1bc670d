# The C declarations of wire.py (Cython reads this beside it when it compiles the .py file): the
# acknowledgement decoder, which the primary's sender feeds every read from a standby as a C call,
# and the constants a frames message (one per group commit to each standby) is built with.

cdef class AckDecoder:
    cdef bytes _buf

    cpdef object feed(self, object data)

cdef Py_ssize_t _MSG_SIZE, _FRAMES_AT
cdef unsigned char _KIND_FRAMES
cdef bytes _FRAMES_PREFIX
cdef bytes _CRC32C_BYTE
