# The C layout of heap.py's classes when Cython compiles it (stalkd.extensions): ``hpos`` is a C
# field, and the engine's modules (which cimport this) call a heap's methods as C functions.
# heap.py is the source; this declares types and signatures only.

cdef class HeapItem:
    cdef public Py_ssize_t hpos


cpdef object pack(object major, object minor)


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
