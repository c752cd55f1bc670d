# The C types of fs.py when Cython compiles it (an augmenting .pxd: fs.py stays the one source).
# The write chain's system calls (pwrite, fdatasync) are C-level methods, reached as C calls from
# the modules that cimport FileSystem (active.py); a Python subclass (Faults, tests' own) still
# overrides them.

# The two system calls of the write path made from C, as the os module makes them: the GIL
# released around the call, retried on EINTR after the signal handlers ran (PEP 475), an error
# raised as the OSError os would raise (errno, strerror); the data read through the buffer
# protocol, so a bytearray cannot be resized meanwhile. (os.pwrite and os.fdatasync are Python
# calls from a compiled caller: ~800 and ~600 instructions under callgrind.)
cdef extern from *:
    """
    #include <errno.h>
    #include <unistd.h>
    static inline Py_ssize_t stalkd_pwrite(int fd, PyObject *data, Py_ssize_t pos) {
        Py_buffer view;
        Py_ssize_t n;
        int err = 0;
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return -1;
        for (;;) {
            Py_BEGIN_ALLOW_THREADS
            n = pwrite(fd, view.buf, (size_t)view.len, (off_t)pos);
            err = errno;
            Py_END_ALLOW_THREADS
            if (n >= 0 || err != EINTR) break;
            if (PyErr_CheckSignals() < 0) {
                PyBuffer_Release(&view);
                return -1;
            }
        }
        PyBuffer_Release(&view);
        if (n < 0) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        return n;
    }
    static inline int stalkd_fdatasync(int fd) {
        int r, err = 0;
        for (;;) {
            Py_BEGIN_ALLOW_THREADS
            r = fdatasync(fd);
            err = errno;
            Py_END_ALLOW_THREADS
            if (r == 0 || err != EINTR) break;
            if (PyErr_CheckSignals() < 0) return -1;
        }
        if (r != 0) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        return 0;
    }
    """
    Py_ssize_t _c_pwrite "stalkd_pwrite" (int fd, object data, Py_ssize_t pos) except -1
    int _c_fdatasync "stalkd_fdatasync" (int fd) except -1

cdef class FileSystem:
    cpdef Py_ssize_t pwrite(self, int fd, data, Py_ssize_t pos) except -1
    cpdef pwrite_all(self, int fd, data, Py_ssize_t pos)
    cpdef fdatasync(self, int fd)
