# The C layout of heap.py's classes when Cython compiles it (stalkd.extensions): ``hpos`` is a C
# field, and the engine's modules (which cimport this) call a heap's methods as C functions.
# heap.py is the source; this declares types and signatures only.

cimport cython

# ``a[i] = v`` for an index known in range of a list (the sifts' stores): the old entry let go,
# nothing checked (heap.py's _seat says why).
cdef extern from *:
    """
    static inline void stalkd_heap_put(PyObject *a, Py_ssize_t i, PyObject *v) {
        PyObject *old = PyList_GET_ITEM(a, i);
        Py_INCREF(v);
        PyList_SET_ITEM(a, i, v);
        Py_DECREF(old);
    }
    """
    void _put "stalkd_heap_put" (list a, Py_ssize_t i, object v)

# ``a < b`` for two keys (ints, non-negative: packed priorities and ids): CPython 3.11's int
# digits compared in place, most significant first, where a comparison through the type's
# rich compare is a call chain per sift step; anything else (another int layout, a negative or
# non-int key) goes through PyObject_RichCompareBool (-1: an error, raised).
cdef extern from *:
    """
    static inline int stalkd_heap_lt(PyObject *a, PyObject *b) {
    #if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && !defined(PYPY_VERSION)
        if (PyLong_CheckExact(a) && PyLong_CheckExact(b)) {
            Py_ssize_t na = Py_SIZE(a), nb = Py_SIZE(b);
            if (na >= 0 && nb >= 0) {
                const digit *da = ((PyLongObject *)a)->ob_digit, *db = ((PyLongObject *)b)->ob_digit;
                if (na != nb) return na < nb;
                while (--na >= 0) {
                    if (da[na] != db[na]) return da[na] < db[na];
                }
                return 0;
            }
        }
    #endif
        return PyObject_RichCompareBool(a, b, Py_LT);
    }
    """
    bint _lt "stalkd_heap_lt" (object a, object b) except -1


cdef class HeapItem:
    cdef public Py_ssize_t hpos


cpdef object pack(object major, object minor)


# final: the engine's calls of its methods (a few dozen a job: peek by every timer check) are
# direct C calls, without the check for a Python-level override a cpdef method makes.
@cython.final
cdef class IndexedHeap:
    cdef list _keys
    cdef list _items
    cdef Py_ssize_t _n
    cpdef object peek(self)
    cpdef object peek_key(self)
    cpdef push(self, object key, object item)
    cpdef object pop(self)
    cpdef remove(self, object item)
    cpdef update(self, object item, object key)
