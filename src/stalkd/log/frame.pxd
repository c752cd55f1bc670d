# The C types of frame.py when Cython compiles it (an augmenting .pxd: frame.py stays the one
# source). A frame's size is asked per record by the write chain (writer.py, persist/wal.py), and
# a batch's frames are encoded per write: C functions for the modules that cimport them.

cdef Py_ssize_t _HEADER_LEN, _LARGEST, _LONG
cdef unsigned char _DATA_FLAGS
cdef Py_ssize_t _CRC_AT, _CRC_W, _MAGIC_AT, _MAGIC_W, _FLAGS_AT, _FLAGS_W, _EPOCH_AT, _EPOCH_W
cdef Py_ssize_t _LENGTH_AT, _LENGTH_W, _DELTA_AT, _DELTA_W, _TS_AT, _TS_W

cpdef Py_ssize_t frame_size(Py_ssize_t length) except -1
cpdef Py_ssize_t frames_size(payloads) except -1
cpdef bytes encode_frame(payload, delta, timestamp_us, epoch, kind=*)
cpdef bytearray encode_data_frame(payload, delta, timestamp_us, epoch)
cpdef put_data_frame(buf, pos, room, payload, delta, timestamp_us, epoch)
cpdef bytearray encode_data_frames(payloads, first_delta, timestamp_us, epoch)
cdef bytearray _encode(payloads, first_delta, timestamp_us, epoch, int flags)
