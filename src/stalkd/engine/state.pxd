# The C layout of state.py's EngineState when Cython compiles it (stalkd.extensions): an
# extension type whose every attribute is a C field and whose container moves the rule modules
# (timers, jobcommands, queries, results, engine) call as C functions. state.py is the source;
# this declares types and signatures only.

cimport cython

from stalkd.engine.heap cimport HeapItem, IndexedHeap, pack
from stalkd.engine.jobtable cimport JobTable
from stalkd.engine.model cimport Record, new_record
from stalkd.engine.objects cimport ConnState, Job, Release, Tube


# Outcome: one is built per step (timers.py's finish_step sets its fields at C level).
@cython.final
cdef class Outcome:
    cdef readonly object reply, records, wakeups, next_deadline


@cython.final  # nothing subclasses it: its cpdef methods are direct C calls, with no override check
cdef class EngineState:
    cdef object __weakref__
    cdef public object max_job_size, next_id, draining
    cdef public bint keep_records
    # counters and the step's budget: C integers (objects.pxd)
    cdef public long long seq, total_jobs, body_bytes, job_timeouts, total_connections, internal_conns
    cdef public Py_ssize_t step_jobs, _budget
    cdef public object _pending, _now, _clock, _caller, _own, _room, _wait_serial, _tube_serial, epochs
    cdef public dict conns, tubes
    cdef public list tube_order
    cdef long long[::1] _counts  # the cmd-* counters (state.py)
    cdef public JobTable jobs
    cdef public list _records, _wakeups
    cdef public set _dirty
    cdef public IndexedHeap _tube_timers, _conn_timers
    # stored results (results.py)
    cdef public dict results, result_meta, result_usage, _owners
    cdef public list _result_heap
    cdef public object result_bytes, result_limits

    cpdef _rec(self, object op, object job_id)
    cpdef _rec_fields(self, object op, object job_id, object tube=*, object pri=*, object delay=*,
                      object ttr=*, object deadline_us=*, object body=*, object created_us=*)
    cpdef _wake(self, ConnState c, object reply)
    cpdef _retime_tube(self, Tube t)
    cpdef _retime_conn(self, ConnState c)
    cpdef Tube _tube(self, object name)
    cpdef _maybe_drop_tube(self, Tube t)
    cpdef _to_ready(self, Job j)
    cpdef _to_delayed(self, Job j, object delay)
    cpdef _to_buried(self, Job j, object order)
    cpdef _detach(self, Job j)
    cpdef _give(self, ConnState c, Job j)
    cpdef _stop_waiting(self, ConnState c)
