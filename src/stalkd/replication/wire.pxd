# The C declarations of wire.py (Cython reads this beside it when it compiles the .py file): the
# acknowledgement decoder, which the primary's sender feeds every read from a standby as a C call,
# and the frames message's encoder (one per group commit to each standby, a C call from the
# sender) with the constants it is built with.

from cpython.buffer cimport PyBuffer_IsContiguous
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.memoryview cimport PyMemoryView_GET_BUFFER
from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid
from libc.string cimport memcpy

cdef class RecordDecoder:
    cdef public bytearray _buf
    cdef public object primary_end  # (a u64 off the wire, as any heartbeat says)
    cdef public Py_ssize_t heartbeats

    cpdef list feed(self, object data)

cdef class AckDecoder:
    cdef bytes _buf

    cpdef object feed(self, object data)
    cpdef long long take(self, object data) except? -2

cpdef bytes encode_ack(object durable_end)
cpdef bytes encode_frames(Py_ssize_t first, Py_ssize_t base, frames)
# the sender's per message: the frames straight out of the log's mapping, summed by the log's C
# CRC-32C (stalkd.log.frame's _crc_update, of this signature: _load_crc32c takes it, else NULL)
cpdef bytes encode_span(Py_ssize_t first, Py_ssize_t base, object mv, Py_ssize_t start, Py_ssize_t end)
ctypedef unsigned int (*_crc_fn)(unsigned int, unsigned char *, Py_ssize_t, Py_ssize_t) noexcept
cdef _crc_fn _crc_c

cdef Py_ssize_t _MSG_SIZE, _FRAMES_AT, _ACK_SIZE
cdef unsigned long long _OFFSET_LIMIT
cdef unsigned char _KIND_FRAMES
cdef bytes _FRAMES_PREFIX
cdef bytes _CRC32C_BYTE
# RecordDecoder.feed's scan of whole frames messages (_whole_frames), and the frame layout it reads
cdef bint _SCAN_FRAMES
cdef Py_ssize_t _F_HEADER, _F_MAGIC_AT, _F_FLAGS_AT, _F_EPOCH_AT, _F_LENGTH_AT, _F_DELTA_AT, _MAX_MESSAGE_C
cdef unsigned char _F_MAGIC, _F_KIND
