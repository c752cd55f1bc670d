# The C types of replay.py when Cython compiles it (stalkd.extensions): a standby applies every
# record its primary sends through ``replay``, so a record's fields and the containers of the
# engine's state (state.pxd) are read at fixed offsets and the rules of the commonest ops are C
# calls. replay.py is the source; this declares types and signatures only.

cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize

from stalkd.engine.engine cimport Engine
from stalkd.engine.model cimport Record, _text, decode
from stalkd.engine.objects cimport Job, Tube, job_body, new_job
from stalkd.engine.state cimport EngineState

cpdef replay(Engine e, Record r)

# replay_put: a version-1 PUT applied from its payload's bytes (little-endian loads: one copy of
# the bytes on a little-endian CPU, else written out)
cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static inline uint64_t stalkd_replay_le(const unsigned char *p, int n) {
        uint64_t v = 0;
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(&v, p, (size_t)n);  /* one load for the constant sizes below */
    #else
        for (int k = n - 1; k >= 0; k--) v = (v << 8) | p[k];
    #endif
        return v;
    }
    #define stalkd_replay_le16(p) ((unsigned int)stalkd_replay_le((p), 2))
    #define stalkd_replay_le32(p) ((unsigned int)stalkd_replay_le((p), 4))
    #define stalkd_replay_le64(p) ((unsigned long long)stalkd_replay_le((p), 8))
    """
    unsigned int _le16 "stalkd_replay_le16" (const unsigned char *p)
    unsigned int _le32 "stalkd_replay_le32" (const unsigned char *p)
    unsigned long long _le64 "stalkd_replay_le64" (const unsigned char *p)

cdef unsigned char _V1, _C_PUT
cdef Py_ssize_t _PUT_MIN, _TUBE_AT, _SEQ_AT, _TIME_AT, _JID_AT, _PRI_AT, _DELAY_AT, _TTR_AT, _DEADLINE_AT, _TLEN_AT
cdef unsigned long long _SEQ_MAX

@cython.locals(n=Py_ssize_t, c="const unsigned char *", tlen=Py_ssize_t, at=Py_ssize_t, size=Py_ssize_t,
               seq="unsigned long long", created="long long", deadline="long long", s=EngineState, j=Job, t=Tube)
cpdef replay_put(Engine e, object p)
cpdef _new_job(EngineState s, Record r)
@cython.locals(body=bytes)
cdef _create(EngineState s, Record r)
cdef _place(EngineState s, Job j, object state, object deadline_us)
