# The C declarations of app.py (Cython reads this beside it when it compiles the .py file): the
# server's fields, and the types of the compiled objects it calls per command (a connection's
# send and wake, the barriers, the admission), so those calls are C calls and their fields
# struct reads.

cimport cython

from stalkd.engine.engine cimport Engine
from stalkd.engine.state cimport Outcome
from stalkd.server.admission cimport Admission
from stalkd.server.barriers cimport Barriers
from stalkd.server.clock cimport SteadyClock
from stalkd.server.connection cimport Connection, Host


cdef class Server(Host):
    cdef public Engine engine  # execute calls its apply as a C function
    cdef public object config, storage, clock, on_fatal, conns, memory, _memory_timer
    cdef public double started
    cdef public object _loop
    cdef public bint persistent, group_commit
    cdef public Admission admission  # None: a storage that keeps nothing
    cdef public object observer, _timer, _timer_at, _maint
    cdef public bint stopping
    cdef public object failed, host_id, addresses, replicas, standby_lag, promote
    cdef object _role  # the property role sets it, and role_quiet follows its quiet
    cdef public bint role_quiet
    cdef public object cluster, _uname, turns, totals
    cdef object _replication  # the property replication sets and reads it

    @cython.locals(out=Outcome, now=double)
    cpdef execute(self, Connection c, object cmd)

    @cython.locals(w=Connection, b=Py_ssize_t, barrier=Py_ssize_t)
    cpdef _handle(self, Connection c, Outcome out, object cmd=*)
