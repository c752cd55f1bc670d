# log.py compiled by Cython (an augmenting .pxd: log.py stays the one source): the segment writer
# and the group commit are typed, so a batch's write is C calls (write_batch, also the WAL's); and
# a standby stream's frames_span (frames_after's steps) reads its position and the mappings and
# fills its span as C fields and calls.

from stalkd.log.active cimport ActiveSegment
from stalkd.log.commit cimport GroupCommit
from stalkd.log.reader cimport FrameSpan, ReadPos, SegmentViews
from stalkd.log.writer cimport SegmentWriter

cdef Py_ssize_t _SEGMENT_HEADER

cpdef tuple write_batch(SegmentWriter w, GroupCommit c, items, admit)
cpdef bint frames_span(SegmentWriter w, SegmentViews views, ReadPos at, Py_ssize_t max_bytes,
                       FrameSpan span) except -1
