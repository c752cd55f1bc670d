# The C declarations of waladmission.py (Cython reads this beside it when it compiles the .py
# file): the admission of a server with a WAL, whose promises and settlements are C calls into
# the WAL's compiled per-batch object.

from stalkd.persist.wal cimport WalBatches
from stalkd.server.admission cimport Admission


cdef class WalAdmission(Admission):
    cdef WalBatches _wal

    cdef bint _admit(self, Py_ssize_t cost) except -1
    cdef _settle(self, Py_ssize_t promised, object records)
