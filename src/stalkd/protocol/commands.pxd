# The C layout of commands.py's classes when Cython compiles it (stalkd.extensions): extension
# types whose fields a compiled caller (the engine's jobcommands) reads as struct members, and
# whose constructor is one C call. commands.py is the source (each class's __slots__ and
# __match_args__ name the same fields); this declares them only. They stay Python objects, as
# uncompiled, and read-only from Python. no_gc: their fields are numbers, strings, bytes and
# tuples of those, which make no reference cycle (YamlDict's mapping is left to the collector).

cimport cython


cdef class _Value:
    pass

@cython.no_gc
cdef class Put(_Value):
    cdef readonly object pri, delay, ttr, body, error

@cython.no_gc
cdef class Use(_Value):
    cdef readonly object tube

@cython.no_gc
cdef class Reserve(_Value):
    pass

@cython.no_gc
cdef class ReserveWithTimeout(_Value):
    cdef readonly object timeout

@cython.no_gc
cdef class ReserveJob(_Value):
    cdef readonly object id

@cython.no_gc
cdef class Delete(_Value):
    cdef readonly object id

@cython.no_gc
cdef class Release(_Value):
    cdef readonly object id, pri, delay

@cython.no_gc
cdef class Bury(_Value):
    cdef readonly object id, pri

@cython.no_gc
cdef class Touch(_Value):
    cdef readonly object id

@cython.no_gc
cdef class Watch(_Value):
    cdef readonly object tube

@cython.no_gc
cdef class Ignore(_Value):
    cdef readonly object tube

@cython.no_gc
cdef class Peek(_Value):
    cdef readonly object id

@cython.no_gc
cdef class PeekReady(_Value):
    pass

@cython.no_gc
cdef class PeekDelayed(_Value):
    pass

@cython.no_gc
cdef class PeekBuried(_Value):
    pass

@cython.no_gc
cdef class Kick(_Value):
    cdef readonly object bound

@cython.no_gc
cdef class KickJob(_Value):
    cdef readonly object id

@cython.no_gc
cdef class StatsJob(_Value):
    cdef readonly object id

@cython.no_gc
cdef class StatsTube(_Value):
    cdef readonly object tube

@cython.no_gc
cdef class Stats(_Value):
    pass

@cython.no_gc
cdef class ListTubes(_Value):
    pass

@cython.no_gc
cdef class ListTubeUsed(_Value):
    pass

@cython.no_gc
cdef class ListTubesWatched(_Value):
    pass

@cython.no_gc
cdef class Quit(_Value):
    pass

@cython.no_gc
cdef class PauseTube(_Value):
    cdef readonly object tube, delay

@cython.no_gc
cdef class ResultPut(_Value):
    cdef readonly object id, ttl, body, error

@cython.no_gc
cdef class ResultGet(_Value):
    cdef readonly object id

@cython.no_gc
cdef class Reply(_Value):
    cdef readonly object word, args

cpdef Reply new_reply(object word, object args=*)

@cython.no_gc
cdef class JobReply(_Value):
    cdef readonly object word, id, body

cdef class YamlDict(_Value):
    cdef readonly object kind, values

@cython.no_gc
cdef class YamlList(_Value):
    cdef readonly object items

@cython.no_gc
cdef class Close(_Value):
    pass
