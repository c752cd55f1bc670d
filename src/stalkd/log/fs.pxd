# The C types of fs.py when Cython compiles it (an augmenting .pxd: fs.py stays the one source).
# The write chain's system calls (pwrite, fdatasync) are C-level methods, reached as C calls from
# the modules that cimport FileSystem (active.py); a Python subclass (Faults, tests' own) still
# overrides them.

cdef class FileSystem:
    cpdef Py_ssize_t pwrite(self, int fd, data, Py_ssize_t pos) except -1
    cpdef pwrite_all(self, int fd, data, Py_ssize_t pos)
    cpdef fdatasync(self, int fd)
