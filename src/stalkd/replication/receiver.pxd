# The C declarations of receiver.py (Cython reads this beside it when it compiles the .py file):
# the receiver and its fsync placement are extension types, so the per-message steps (_take, the
# fsync and its acknowledgement) are C calls reading C fields; the WAL's per-batch object, its
# log's writer and group commit (what Log.next_offset and Log.durable_offset read) and the
# engine's state are typed, their fields C reads instead of properties.

cimport cython

from stalkd.engine.engine cimport Engine
from stalkd.engine.handover cimport Reservations
from stalkd.engine.state cimport EngineState
from stalkd.log.commit cimport GroupCommit
from stalkd.log.mutex cimport Mutex
from stalkd.log.ticket cimport Ticket
from stalkd.log.writer cimport SegmentWriter
from stalkd.persist.wal cimport WalBatches
from stalkd.replication.frames cimport check_payloads, epoch_after
from stalkd.replication.wire cimport RecordDecoder, encode_ack

# The committer thread's acknowledgement (receiver.py _thread_ack): one non-blocking send of its
# 8 bytes on the receiver's own descriptor of the stream's socket, with the GIL held (a send
# that cannot wait takes a few microseconds; os.write would hand the GIL to the busy loop and
# wait for it back). Returns the bytes sent, -1 if none (EAGAIN, or the stream is gone; no
# SIGPIPE).
cdef extern from *:
    """
    #include <errno.h>
    #include <sys/socket.h>
    static inline Py_ssize_t stalkd_send_ack(int fd, const char *buf, Py_ssize_t n) {
        ssize_t r;
        do {
            r = send(fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
        } while (r < 0 && errno == EINTR);
        return r < 0 ? -1 : (Py_ssize_t)r;
    }
    """
    Py_ssize_t _send_fd "stalkd_send_ack" (int fd, const char *buf, Py_ssize_t n)


cdef class Receiver


cdef class _Feed:
    cdef public object _transport, _waiter, _exc, _held, _error
    cdef public list _chunks
    cdef public Py_ssize_t _size, _limit
    cdef public bint _eof, _paused
    cdef public Receiver _sink

    cpdef _got(self, Py_ssize_t n)
    cdef _wake(self)


cdef class FsyncPlace:
    cdef public double limit, alpha, avg
    cdef public Py_ssize_t retry, big, _thread_left

    cpdef bint inline(self, Py_ssize_t records) except -1
    cpdef inline_done(self, double seconds)


cdef class _Durable:
    cdef object _loop, _synced, _writer
    cdef Receiver _rc


cdef class Receiver:
    cdef public object address, secret, name, clock, problem, wal, role, applied, on_resync, resync
    # the engine and its apply step: C fields and a C call per read (follow is cpdef)
    cdef public Engine engine
    cdef public Reservations reservations
    cdef public object _writer, _ack_soon, _inline, _epochs
    cdef public bint frames, paced, fsync, connected, _stopped
    cdef public double caught_up_at, ack_delay, _acked_at
    cdef public Py_ssize_t durable_end, acks, thread_acks, primary_end, records, _syncing, _asked, _acked, _epoch
    cdef public Py_ssize_t _sent
    cdef public int _ack_fd
    cdef public bytes _rest
    cdef Mutex _ack_lock
    cdef public FsyncPlace fsync_place
    cdef WalBatches _batches
    cdef _Durable _durable
    cdef RecordDecoder _dec
    cdef object _last, _out
    cdef list _heard
    cdef Py_ssize_t _beats, _pending_n
    cdef list _pending
    cpdef settle(self, Py_ssize_t slices=*)

    cdef list _read(self, object data)
    cdef _read_done(self, object writer)
    cdef _take(self, Py_ssize_t first, list payloads, object writer, bint last)
    cdef _in_sync(self)
    cdef _sync(self, object writer)
    cdef _sync_inline(self, object writer, Py_ssize_t end)
    cpdef _synced(self, object writer, Py_ssize_t end, object exc, bint ticket=*)
    cdef _acknowledge(self, object writer)
    @cython.locals(end=Py_ssize_t, sent=Py_ssize_t)  # (C compares: per acknowledgement)
    cdef _send_ack(self, object writer, bint answer)
    cdef _thread_ack(self, object writer, Py_ssize_t end)
    cdef _end_thread_acks(self)
    cdef _apply(self, Py_ssize_t first, list records)
