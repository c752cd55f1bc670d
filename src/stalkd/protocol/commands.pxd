# The C layout of commands.py's classes when Cython compiles it (stalkd.extensions): extension
# types whose fields a compiled caller (the engine's jobcommands) reads as struct members, and
# whose constructor is one C call. commands.py is the source (each class's __slots__ and
# __match_args__ name the same fields); this declares them only. They stay Python objects, as
# uncompiled, and read-only from Python. Which of them the cycle collector skips (no_gc) is said
# in commands.py: Cython takes that directive there, not here.

cimport cython


cdef class _Value:
    pass

cdef class Put(_Value):
    cdef readonly object pri, delay, ttr, body, error

cdef class Use(_Value):
    cdef readonly object tube

cdef class Reserve(_Value):
    pass

cdef class ReserveWithTimeout(_Value):
    cdef readonly object timeout

cdef class ReserveJob(_Value):
    cdef readonly object id

cdef class Delete(_Value):
    cdef readonly object id

cdef class Release(_Value):
    cdef readonly object id, pri, delay

cdef class Bury(_Value):
    cdef readonly object id, pri

cdef class Touch(_Value):
    cdef readonly object id

cdef class Watch(_Value):
    cdef readonly object tube

cdef class Ignore(_Value):
    cdef readonly object tube

cdef class Peek(_Value):
    cdef readonly object id

cdef class PeekReady(_Value):
    pass

cdef class PeekDelayed(_Value):
    pass

cdef class PeekBuried(_Value):
    pass

cdef class Kick(_Value):
    cdef readonly object bound

cdef class KickJob(_Value):
    cdef readonly object id

cdef class StatsJob(_Value):
    cdef readonly object id

cdef class StatsTube(_Value):
    cdef readonly object tube

cdef class Stats(_Value):
    pass

cdef class ListTubes(_Value):
    pass

cdef class ListTubeUsed(_Value):
    pass

cdef class ListTubesWatched(_Value):
    pass

cdef class Quit(_Value):
    pass

cdef class PauseTube(_Value):
    cdef readonly object tube, delay

cdef class ResultPut(_Value):
    cdef readonly object id, ttl, body, error

cdef class ResultGet(_Value):
    cdef readonly object id

cdef class Reply(_Value):
    cdef readonly object word, args

cpdef Reply new_reply(object word, object args=*)

cdef class JobReply(_Value):
    cdef readonly object word, id, body

cdef class YamlDict(_Value):
    cdef readonly object kind, values

cdef class YamlList(_Value):
    cdef readonly object items

cdef class Close(_Value):
    pass
