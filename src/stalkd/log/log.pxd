# log.py compiled by Cython (an augmenting .pxd: log.py stays the one source): the segment writer
# is typed, so a batch's write is a C call; and a standby stream's frames_after reads its position
# and the mappings as C fields and calls.

from stalkd.log.reader cimport ReadPos, SegmentViews
from stalkd.log.writer cimport SegmentWriter
