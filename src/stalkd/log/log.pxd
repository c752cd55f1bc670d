# log.py compiled by Cython (an augmenting .pxd: log.py stays the one source): the segment writer
# and the group commit are typed, so a batch's write is C calls (write_batch, also the WAL's).

from stalkd.log.commit cimport GroupCommit
from stalkd.log.writer cimport SegmentWriter

cpdef tuple write_batch(SegmentWriter w, GroupCommit c, items, admit)
