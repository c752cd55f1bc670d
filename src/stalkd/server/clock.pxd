# The C declarations of clock.py (Cython reads this beside it when it compiles the .py file): the
# clock as an extension type whose reading is a C call (app.pxd cimports it: the server reads it
# per command), and the C monotonic clock it reads (what time.monotonic reads on Linux).

from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec


cdef class SteadyClock:
    cdef readonly double base
    cdef object _monotonic

    cpdef double now(self) except? -1.0


cdef inline double _monotonic_c() noexcept