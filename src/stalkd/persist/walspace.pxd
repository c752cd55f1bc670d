# walspace.py compiled by Cython (an augmenting .pxd: walspace.py stays the one source): the space budget
# is typed, so a command's admit and settle are C calls.

from stalkd.engine.space cimport SpaceBudget
