# log.py compiled by Cython (an augmenting .pxd: log.py stays the one source): the segment writer
# is typed, so a batch's write is a C call.

from stalkd.log.writer cimport SegmentWriter
