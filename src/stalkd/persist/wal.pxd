# wal.py compiled by Cython (an augmenting .pxd: wal.py stays the one source): the registry row,
# the encoder, the frame size and the space budget are typed, so a batch's steps are C calls;
# WalBatches, the per-command and per-batch state and steps of Wal, is an extension type.

from stalkd.engine.model cimport OpLayout, Record, encode
from stalkd.engine.space cimport SpaceBudget, spent
from stalkd.log.commit cimport GroupCommit
from stalkd.log.frame cimport frame_size, frames_size
from stalkd.log.log cimport write_batch
from stalkd.log.writer cimport SegmentWriter

cdef class WalBatches:
    cdef public object log
    cdef public SegmentWriter writer
    cdef public GroupCommit commit
    cdef public bint always
    cdef public SpaceBudget space
    cdef public Py_ssize_t id_ceiling, records_written, bytes_since_snapshot
    cdef public object last_seq
    cdef public object cover_id, retry_full

    cpdef use_log(self, log)
    cpdef bint admit(self, Py_ssize_t cost) except -1
    cpdef Py_ssize_t admit_upto(self, Py_ssize_t n, Py_ssize_t unit) except -1
    cpdef settle(self, Py_ssize_t admitted, records)
    cpdef write(self, records)
    cpdef sync(self)
    cpdef write_payloads(self, list payloads)
    cpdef append_replicated(self, Py_ssize_t first, list payloads)
