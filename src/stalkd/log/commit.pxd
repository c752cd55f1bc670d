# The C types of commit.py when Cython compiles it (an augmenting .pxd: commit.py stays the one
# source). A durable writer's every sync runs sync_to's alone path: the group commit's state in
# C fields and its steps C calls, the pinner (a Pinner: the writer, or a test's) left a Python
# object, and typed as well (``_writer``) when it is the log's segment writer.

from stalkd.log.active cimport ActiveSegment
from stalkd.log.mutex cimport Mutex
from stalkd.log.ticket cimport Ticket
from stalkd.log.visibility cimport Visibility
from stalkd.log.writer cimport SegmentWriter

# The group commit's clock (CLOCK_MONOTONIC: time.monotonic's on Linux; commit.py reads no
# other) and the calling thread's id (threading.get_ident's), read by C: a lone durable writer
# reads both per sync.
cdef extern from *:
    """
    #include <time.h>
    #include "pythread.h"
    static inline double stalkd_monotonic(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    }
    """
    double _monotonic "stalkd_monotonic" ()
    unsigned long _thread_id "PyThread_get_thread_ident" ()

cdef class GroupCommit:
    cdef public object path, policy, failed, cond
    cdef public Py_ssize_t durable  # (compared with the writer's end per sync: no int object)
    cdef public Visibility visibility
    cdef public double interval, gather_share
    cdef public bint closed, ok
    cdef public Py_ssize_t syncs
    cdef Mutex _lock, _wake  # (mutex.py: taken by C calls)
    cdef object _bg_cond, _open, _released, _lone_token, _mine, _gathering, _tickets, _deferred, _threads, _pinner
    cdef SegmentWriter _writer
    cdef bint _syncing, _flush_due, _idle
    cdef Py_ssize_t _expect, _arrived
    cdef unsigned long _lone_thread
    cdef double _fsync_avg, _last_sync

    cpdef object sync_to(self, upto)
    cpdef object call_when_durable(self, Py_ssize_t end, object fn)  # a standby's thread-path fsync, per read
    cpdef run_deferred(self)  # per batch written (log.write_batch): a C call
    cdef bint _sync_lone(self) except -1
    cdef tuple _join_locked(self, bint back)
    cdef object _lead(self, b)
    cdef object _sync_alone(self, token)
    cdef Py_ssize_t _fsync_end(self) except -1
    cdef tuple _synced_locked(self, Py_ssize_t members, object target, object token)
    cdef list _advance_locked(self, target)
    cdef object _gather(self, b)
    cdef object _stop_gathering_locked(self)
    cdef object _end(self)
    cdef _wake_committer_locked(self)
