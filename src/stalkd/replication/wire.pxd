# The C declarations of wire.py (Cython reads this beside it when it compiles the .py file): the
# acknowledgement decoder, which the primary's sender feeds every read from a standby as a C call,
# and the frames message's encoder (one per group commit to each standby, a C call from the
# sender) with the constants it is built with.

cdef class AckDecoder:
    cdef bytes _buf

    cpdef object feed(self, object data)

cpdef bytes encode_frames(Py_ssize_t first, Py_ssize_t base, frames)

cdef Py_ssize_t _MSG_SIZE, _FRAMES_AT
cdef unsigned char _KIND_FRAMES
cdef bytes _FRAMES_PREFIX
cdef bytes _CRC32C_BYTE
