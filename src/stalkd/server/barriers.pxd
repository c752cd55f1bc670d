# The C declarations of barriers.py (Cython reads this beside it when it compiles the .py file):
# the fields and the methods other compiled modules call directly.

from stalkd.engine.model cimport Record
from stalkd.replication.gate cimport SyncGate


cdef class HeldReplies:
    cpdef release(self, Py_ssize_t durable)


cdef class Barriers:
    cdef public object storage
    cdef object _write, _sync
    cdef public bint keeps
    cdef public bint group_commit
    cdef public object _loop
    cdef public object _on_fatal
    cdef public bint failed
    cdef public Py_ssize_t written
    cdef public Py_ssize_t durable
    cdef public Py_ssize_t local_durable
    cdef public object gate
    cdef public object end_offset
    cdef public object after_write
    cdef public object after_write_while
    cdef public object after_batch
    cdef public bint _batch_open
    cdef public list pending
    cdef public bint _flush_scheduled
    cdef public object _lazy_timer
    cdef public Py_ssize_t _steps
    cdef public bint _step_records
    cdef public bint _releasing
    cdef public object _writer
    cdef public Py_ssize_t _mixed
    cdef public object _syncer
    cdef public object sync_policy
    cdef public object _holder
    cdef public set _held
    cdef public dict _job_batch
    cdef public Py_ssize_t _job_last
    cdef public Py_ssize_t _job_prune_at
    cdef public Py_ssize_t syncs
    cdef public Py_ssize_t inline_syncs

    cpdef hold(self, object c)
    cpdef unhold(self, object c)
    cpdef begin_step(self)
    cpdef end_step(self)
    cpdef Py_ssize_t add(self, object c, object records) except -1
    cpdef _lazy_write(self)
    cpdef write_pending(self)
    cpdef Py_ssize_t job_barrier(self, object job_id) except -1
    cpdef _close_batch(self)
    cpdef _batch_written(self)
    cpdef _start_sync(self)
    cpdef _synced(self, Py_ssize_t target, object exc)
    cpdef _reached(self, Py_ssize_t target)
    cpdef _prune_jobs(self, Py_ssize_t target)
    cpdef release_held(self)
