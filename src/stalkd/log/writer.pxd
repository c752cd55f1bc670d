# The C types of writer.py when Cython compiles it (an augmenting .pxd: writer.py stays the one
# source). The writer is asked per batch (write_many) and per record (append): an extension
# type whose active segment, frame encoder and offsets are C-level, called as C functions by
# log.py, which cimports it.

from stalkd.log.active cimport ActiveSegment
from stalkd.log.frame cimport encode_data_frame, encode_data_frames, frame_size, frames_size, put_data_frame
from stalkd.log.fs cimport FileSystem
from stalkd.log.mutex cimport Mutex

cdef class SegmentWriter:
    cdef public object path, clock, io, sealed, bounds
    cdef public Mutex lock  # (mutex.py: taken by C calls)
    cdef public FileSystem fs
    cdef public ActiveSegment active
    cdef public Py_ssize_t next, segment_size, zero_ahead, pinned
    cdef public bint fsync_new, refusing
    cdef Mutex _fdlock
    cdef object _on_fatal, _on_sealed

    cpdef append(self, payload)
    cpdef tuple write_many(self, items, admit)
    # a sync's three steps, C calls from the group commit (commit.pxd)
    cpdef tuple pin_end(self)
    cpdef ActiveSegment pin(self)
    cpdef unpin(self, ActiveSegment seg)
    cpdef fdatasync(self, int fd)
