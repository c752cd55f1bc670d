# The C types of frame.py when Cython compiles it (an augmenting .pxd: frame.py stays the one
# source). A frame's size is asked per record by the write chain (writer.py, persist/wal.py),
# which cimports it: a C call.

cpdef Py_ssize_t frame_size(Py_ssize_t length) except -1
