# The C layout of objects.py's classes when Cython compiles it (stalkd.extensions): extension
# types whose fields the compiled engine reads at fixed offsets. objects.py is the source (its
# __slots__ name the same fields); this declares their types only. Values that go into heap
# keys, records or ids stay Python ints (any size, as uncompiled); the counters are C integers
# (a count of commands or jobs fits in 63 bits), so a command's += is C arithmetic.

cimport cython

from stalkd.engine.heap cimport HeapItem, IndexedHeap

cdef class Tube
cdef class ConnState


cdef class Job(HeapItem):
    cdef public object id, pri, delay, ttr, state, created_us, deadline_us
    # the body, or the buffer it is a slice of while bat >= 0 (objects.job_body); read-only
    # from Python, which reads the body as Job.body
    cdef readonly object bdata
    cdef readonly Py_ssize_t bat, blen
    cdef public long long reserves, timeouts, releases, buries, kicks
    cdef public Tube tube
    cdef public ConnState owner

cpdef object to_us(object now)
cpdef object job_body(Job j)
cpdef Job new_job(object id, Tube tube, object pri, object delay, object ttr, object body, object state,
                  object created_us)
cpdef Job new_lazy_job(object id, Tube tube, object pri, object delay, object ttr, bytes data, Py_ssize_t at,
                       Py_ssize_t n, object state, object created_us)


cdef class Tube(HeapItem):
    cdef public object name, serial, buried, waiting, pause_until_us, pause_secs, timer_at
    cdef public IndexedHeap ready, delayed
    cdef public long long using, watching, total_jobs, cmd_delete, cmd_pause, urgent, reserved
    cdef public Py_ssize_t slot
    cpdef bint is_paused(self, object now_us)
    cpdef object job_count(self)
    cpdef bint unreferenced(self)
    @cython.locals(top=Job)
    cpdef object timer_us(self)


cdef class ConnState(HeapItem):
    cdef public object id, watch, wait_until_us, wait_seq, kick, release, timer_at
    cdef public IndexedHeap reserved
    cdef public Tube use
    cdef public bint waiting, producer, worker, half_closed
    @cython.locals(top=Job)
    cpdef object soonest_deadline(self)
    cpdef bint deadline_soon(self, object now_us)
    cpdef object timer_us(self)


cdef class Release:
    cdef public object held, at, keys
