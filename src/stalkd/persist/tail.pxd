# The C types of tail.py when Cython compiles it (stalkd.extensions): a kill leaves up to half the
# live jobs as WAL records after the snapshot, and replay_tail applies each in one loop, reading a
# record's fields with C loads from its chunk's bytes (_Fields) and the jobs and tubes it touches
# at fixed offsets. tail.py is the source; this declares types only.

cimport cython
from libc.string cimport memcpy

from stalkd.engine.heap cimport pack
from stalkd.engine.jobtable cimport JobTable
from stalkd.engine.objects cimport Job, Tube, new_lazy_job

cdef Py_ssize_t _OP_AT, _SEQ_AT, _TIME_AT, _JID_AT, _PRI_AT, _DELAY_AT, _TTR_AT, _DEADLINE_AT, _TLEN_AT
cdef Py_ssize_t _R_DELAY_AT, _R_DEADLINE_AT
cdef Py_ssize_t _FRAME_HEAD, _LEN_AT, _REC_HEAD, _PUT_SIZE, _RELEASE_SIZE, _BURY_SIZE, _WINDOW
cdef int _C_PUT, _C_DELETE, _C_RELEASE, _C_BURY, _C_KICK, _C_TOUCH, _C_RESERVE, _C_TIMEOUT, _C_RESULT
cdef Py_ssize_t _LOOSE
cdef unsigned long long _U64_MAX


# Whether the CPU's byte order is the records' (little-endian; as the compiler says): _le then
# reads a field by one copy of its bytes. Declares a name; _le is tail.py's.
cdef extern from *:
    """
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    #define STALKD_TAIL_HOST_LE() 1
    #else
    #define STALKD_TAIL_HOST_LE() 0
    #endif
    """
    bint _host_le "STALKD_TAIL_HOST_LE" ()

@cython.locals(v="unsigned long long", k=int)
cdef inline unsigned long long _le(const unsigned char *s, Py_ssize_t at, int size)

cdef Py_ssize_t _u32(bytes raw, Py_ssize_t at) except -1


cdef class _Fields:
    cdef int version, code
    cdef unsigned long long seq, jid
    cdef long long time_us, deadline
    cdef unsigned int pri, delay, ttr
    cdef Py_ssize_t tlen
    @cython.locals(s="const unsigned char *")
    cdef head(self, bytes raw, Py_ssize_t at)
    @cython.locals(s="const unsigned char *")
    cdef put(self, bytes raw, Py_ssize_t at)
    @cython.locals(s="const unsigned char *")
    cdef release(self, bytes raw, Py_ssize_t at)
    cdef bury(self, bytes raw, Py_ssize_t at)


@cython.locals(jobs=JobTable, born=list, moved=list, tubes=dict, j=Job, new=Job, t=Tube, last_t=Tube, last_tb=bytes,
               f=_Fields, code=int, general=bint,
               seq="unsigned long long", first_seq="unsigned long long", seq_max="unsigned long long",
               body_bytes=Py_ssize_t, applied=Py_ssize_t, positions=list, raw=bytes, i=Py_ssize_t,
               lo=Py_ssize_t, pos=Py_ssize_t, at=Py_ssize_t, n=Py_ssize_t, end=Py_ssize_t, t0=Py_ssize_t,
               b0=Py_ssize_t, blen=Py_ssize_t, key=object, floor="unsigned long long", top="unsigned long long")
cpdef Py_ssize_t replay_tail(e, chunks, start_seq, dict fresh) except -1

cdef bytes _window(buf, Py_ssize_t pos, Py_ssize_t n)
cdef bytes _cut(bytes raw, Py_ssize_t start, Py_ssize_t end)

@cython.locals(jobs=JobTable, j=Job, js=list, lists=dict, t=Tube, last=Tube, tl=tuple, rk=list, rj=list, dk=list,
               dj=list)
cdef _place(e, list born, list moved, bint general)
@cython.locals(n=Py_ssize_t, k=Py_ssize_t, s="const unsigned char *", p="const unsigned char *")
cdef bint _same(bytes raw, Py_ssize_t start, Py_ssize_t end, bytes name)
