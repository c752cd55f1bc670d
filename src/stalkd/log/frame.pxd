# The C types of frame.py when Cython compiles it (an augmenting .pxd: frame.py stays the one
# source). A frame's size is asked per record by the write chain (writer.py, persist/wal.py), and
# a batch's frames are encoded per write: C functions for the modules that cimport them.

cimport cython
from cpython.bytearray cimport PyByteArray_FromStringAndSize
from libc.string cimport memcpy, memset

cdef Py_ssize_t _HEADER_LEN, _LARGEST, _LONG
cdef unsigned char _DATA_FLAGS
cdef Py_ssize_t _CRC_AT, _CRC_W, _MAGIC_AT, _MAGIC_W, _FLAGS_AT, _FLAGS_W, _EPOCH_AT, _EPOCH_W
cdef Py_ssize_t _LENGTH_AT, _LENGTH_W, _DELTA_AT, _DELTA_W, _TS_AT, _TS_W
cdef unsigned char _MAGIC_B, _KIND_B
cdef long long _D_MAX
cdef bytes _CRC_TABLES  # read by a C pointer, not looked up per sum
cdef unsigned int _ONES

cpdef Py_ssize_t frame_size(Py_ssize_t length) except -1
cpdef Py_ssize_t frames_size(payloads) except -1
cpdef bytes encode_frame(payload, delta, timestamp_us, epoch, kind=*)
cpdef bytearray encode_data_frame(payload, delta, timestamp_us, epoch)
cpdef put_data_frame(buf, pos, room, payload, delta, timestamp_us, epoch)
cpdef bytearray encode_data_frames(payloads, first_delta, timestamp_us, epoch)
cdef bytearray _encode(payloads, first_delta, timestamp_us, epoch, int flags)

# scan_positions' fast path (the tail of a WAL at recovery, a standby's frames messages).
@cython.locals(view="const unsigned char[::1]", p="unsigned char *", length=Py_ssize_t, nxt=Py_ssize_t,
               epoch="long long", crc="unsigned int")
cdef tuple _good_run(mv, Py_ssize_t pos, long long d, long long limit, long long skip, long long last_epoch,
                     long long epoch_limit, Py_ssize_t stop_pos, list positions)
@cython.locals(p="unsigned char *", at=Py_ssize_t, start=Py_ssize_t)
cdef list _slices(bytes raw, list positions)
# CRC-32C by the CPU's crc32 instruction, or by slicing-by-8 tables (the encoder's short frames,
# the scan's).
@cython.locals(c="unsigned int", hi="unsigned int", t="unsigned int *", c64="unsigned long long",
               v="unsigned long long")
cdef unsigned int _crc_update(unsigned int crc, unsigned char *b, Py_ssize_t i, Py_ssize_t end)

# The crc32 instruction (SSE4.2), declared from the compiler's own header where GCC 12 or later
# builds this module for x86-64: the module is compiled for the instruction (target "crc32",
# which lets the compiler use it only where it is called: here), and ``_crc_insn`` asks the CPU
# whether it has it, once (frame.py's ``_HW_CRC``). Elsewhere ``_crc_insn`` is 0 and the two
# steps are never called. The modules that cimport this file get this block too: Cython's
# __PYX_HAVE__ macro of this module keeps the target to frame.c. This declares names; the sum
# itself is frame.py's ``_crc_update``.
cdef extern from *:
    """
    #if defined(__PYX_HAVE__stalkd__log__frame) && defined(__x86_64__) && defined(__GNUC__) \
        && !defined(__clang__) && __GNUC__ >= 12
    #pragma GCC target("crc32")
    #include <smmintrin.h>
    #define STALKD_CRC_INSN() __builtin_cpu_supports("sse4.2")
    #define STALKD_CRC_U64(c, v) _mm_crc32_u64((c), (v))
    #define STALKD_CRC_U8(c, v) _mm_crc32_u8((c), (v))
    #else
    #define STALKD_CRC_INSN() 0
    #define STALKD_CRC_U64(c, v) (c)
    #define STALKD_CRC_U8(c, v) (c)
    #endif
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    #define STALKD_HOST_LE() 1
    #else
    #define STALKD_HOST_LE() 0
    #endif
    """
    bint _crc_insn "STALKD_CRC_INSN" ()
    unsigned long long _crc_u64 "STALKD_CRC_U64" (unsigned long long crc, unsigned long long v)
    unsigned int _crc_u8 "STALKD_CRC_U8" (unsigned int crc, unsigned char v)
    # whether the CPU's byte order is the format's (little-endian; as the compiler says): the
    # scan then reads a header field by one load (_load_le)
    bint _host_le "STALKD_HOST_LE" ()

cdef bint _HW_CRC
