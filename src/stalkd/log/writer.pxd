# writer.py compiled by Cython (an augmenting .pxd: writer.py stays the one source): the active
# segment is typed, so its write is a C call, and so is a frame's size.

from stalkd.log.active cimport ActiveSegment
from stalkd.log.frame cimport frame_size
