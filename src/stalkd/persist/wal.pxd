# wal.py compiled by Cython (an augmenting .pxd: wal.py stays the one source): the registry row,
# the encoder, the frame size and the space budget are typed, so a batch's steps are C calls.

from stalkd.engine.model cimport OpLayout, encode
from stalkd.engine.space cimport SpaceBudget, spent
from stalkd.log.frame cimport frame_size
