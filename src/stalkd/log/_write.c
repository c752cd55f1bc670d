/* stalkd.log._write: Log.write_many's and Log.sync's common cases, each one C call.
 *
 * log.py's Log.write_many (over writer.py's SegmentWriter.write_many, active.py's
 * ActiveSegment.write and fs.py's FileSystem.pwrite) is the reference. ``FastMethod("write_many", reference)``
 * is a method descriptor that stands in for it on the Log class (fastwrite.py installs it): a
 * batch that fits the active segment's zeroed room is framed (_cext/framecore.c.h, the bytes of
 * frame.py) and pwritten under the writer's lock, the offsets advanced, and the waiters told,
 * exactly as the reference does. Anything else is the reference's, with nothing changed: a
 * roll-over, a stretch to zero first, io="mmap", a log failed or closed or with lag limits,
 * payloads that are not bytes, and any file system but fs.REAL with FileSystem's own methods
 * (a test's Faults, or a patched method: faults keep going through the seam). A write that
 * fails here goes to the reference's SegmentWriter._write_failed (zero what landed, refuse).
 * ``FastMethod("sync", reference)`` does the same for Log.sync (_cext/commitsync.c.h).
 * tests/engine/test_wal_chain_differential.py holds both to the same segment bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <unistd.h>
#include <time.h>

#include "_cext/framecore.c.h"

static PyObject DECLINE_OBJ; /* a sentinel: only its address is used */
#define DECLINE (&DECLINE_OBJ)
#define FAST_TYPE_NAME "stalkd.log._write.FastMethod"
#include "_cext/descriptor.c.h"
#include "_cext/methodguard.c.h"

static PyTypeObject *log_type, *writer_type, *active_type, *fs_type;
static PyObject *real_fs;        /* fs.REAL */
static Py_ssize_t max_payload;   /* frame.MAX_PAYLOAD */
static unsigned long long n_ran, n_declined;

static PyObject *S_commit, *S_ok, *S_refusers, *S_writer, *S_fs, *S_clock, *S_lock, *S_acquire,
    *S_release, *S_active, *S_next, *S_write_failed, *S_deferred, *S_run_deferred, *S_visibility,
    *S_waiters, *S_async_waiters, *S_notify;

/* pwrite all of data at pos, the GIL released as os.pwrite does; on EINTR the signal handlers
 * run (an exception from one is raised, as os.pwrite raises it). 0, or -1 with errno set
 * (errno 0: a Python exception is set). */
static int
pwrite_all(int fd, const char *data, Py_ssize_t n, Py_ssize_t pos)
{
    while (n > 0) {
        ssize_t done;
        int err;
        Py_BEGIN_ALLOW_THREADS
        done = pwrite(fd, data, (size_t)n, (off_t)pos);
        err = errno;
        Py_END_ALLOW_THREADS
        if (done < 0) {
            if (err == EINTR) {
                if (PyErr_CheckSignals() < 0) {
                    errno = 0;
                    return -1;
                }
                continue;
            }
            errno = err;
            return -1;
        }
        data += done;
        pos += done;
        n -= done;
    }
    return 0;
}

#include "_cext/activeslots.c.h"

/* The batch in the active segment under the writer's lock (held by the caller): its first
 * offset, -1 with an exception, -2 declined (nothing changed). */
static long long
write_locked(PyObject *writer, PyObject *items, Py_ssize_t count)
{
    long long rc = -2;
    PyObject *act = PyObject_GetAttr(writer, S_active), *data = NULL, *clock = NULL, *ts_obj = NULL;
    if (act == NULL || Py_TYPE(act) != active_type)
        goto done;
    Py_ssize_t first, pos, limit, zero_ahead, zeroed, base, epoch, fd;
    if (get_size(writer, S_next, &first) < 0 || slot_size(act, A_POS, &pos) < 0
            || slot_size(act, A_LIMIT, &limit) < 0 || slot_size(act, A_ZERO_AHEAD, &zero_ahead) < 0
            || slot_size(act, A_ZEROED, &zeroed) < 0 || slot_size(act, A_BASE, &base) < 0
            || slot_size(act, A_EPOCH, &epoch) < 0 || slot_size(act, A_FD, &fd) < 0)
        goto done;
    if (SLOT(act, A_MM_BATCHES) != Py_False)  /* io="mmap": stores into the mapping are the reference's */
        goto done;
    PyObject **it = PySequence_Fast_ITEMS(items);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t n;
        if (PyBytes_CheckExact(it[i]))
            n = PyBytes_GET_SIZE(it[i]);
        else if (PyByteArray_CheckExact(it[i]))
            n = PyByteArray_GET_SIZE(it[i]);
        else
            goto done;
        if (n > max_payload)  /* the reference's ValueError */
            goto done;
        total += (HEADER + n + 7) & ~(Py_ssize_t)7;
    }
    Py_ssize_t end = pos + total;
    if (pos < 0 || end > limit || (zero_ahead && end > zeroed) || epoch < 0 || epoch > 0xFFFF
            || first < base || (unsigned long long)(first - base) + (unsigned long long)count - 1 > 0xFFFFFFFFull
            || fd < 0 || fd > INT_MAX)
        goto done;
    /* Every check passed: from here on the batch is this path's (the clock is asked once, as
     * the reference asks it once). */
    rc = -1;
    clock = PyObject_GetAttr(writer, S_clock);
    ts_obj = clock == NULL ? NULL : PyObject_CallNoArgs(clock);
    if (ts_obj == NULL)
        goto done;
    long long ts_ns = PyLong_Check(ts_obj) ? PyLong_AsLongLong(ts_obj) : -1;
    if (ts_ns < 0) {  /* a clock before 1970 or not an int: the reference's floor division */
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "the log's clock gave no time in nanoseconds since 1970");
        goto done;
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    if (data == NULL)
        goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(data);
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *p;
        Py_ssize_t n;
        if (PyBytes_CheckExact(it[i])) {
            p = (const unsigned char *)PyBytes_AS_STRING(it[i]);
            n = PyBytes_GET_SIZE(it[i]);
        } else {
            p = (const unsigned char *)PyByteArray_AS_STRING(it[i]);
            n = PyByteArray_GET_SIZE(it[i]);
        }
        Py_ssize_t size = (HEADER + n + 7) & ~(Py_ssize_t)7;
        write_frame(w, size, p, n, (unsigned long long)(first - base + i), ts_ns / 1000,
                    (unsigned long long)epoch);
        w += size;
    }
    if (pwrite_all((int)fd, PyBytes_AS_STRING(data), total, pos) < 0) {
        if (errno == 0)
            goto done;  /* a signal handler's exception */
        /* SegmentWriter._write_failed(act, data, pos, OSError): zero what may have landed and
         * refuse, in the reference's words */
        PyErr_SetFromErrno(PyExc_OSError);
        PyObject *exc = take_exception();
        PyObject *p = exc == NULL ? NULL : PyLong_FromSsize_t(pos);
        if (p != NULL) {
            PyObject *args[5] = {writer, act, data, p, exc};
            Py_XDECREF(PyObject_VectorcallMethod(S_write_failed, args, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_RuntimeError, "SegmentWriter._write_failed returned");
        }
        Py_XDECREF(p);
        Py_XDECREF(exc);
        goto done;
    }
    if (set_slot_size(act, A_POS, end) < 0 || set_size(writer, S_next, first + count) < 0)
        goto done;
    rc = first;
done:
    if (rc == -2)
        PyErr_Clear();
    Py_XDECREF(act);
    Py_XDECREF(data);
    Py_XDECREF(clock);
    Py_XDECREF(ts_obj);
    return rc;
}

/* Log.write_many(items) for the common case; DECLINE when the reference must run. */
static PyObject *
fast_write_many(PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return DECLINE;
    PyObject *log = args[0], *items = args[1];
    if (!enabled || Py_TYPE(log) != log_type || !(PyList_CheckExact(items) || PyTuple_CheckExact(items))
            || PySequence_Fast_GET_SIZE(items) == 0 || !unchanged())
        return DECLINE;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(items);
    PyObject *out = DECLINE, *commit = NULL, *refusers = NULL, *writer = NULL, *fs = NULL, *lock = NULL;
    commit = PyObject_GetAttr(log, S_commit);
    PyObject *ok = commit == NULL ? NULL : PyObject_GetAttr(commit, S_ok);
    Py_XDECREF(ok);
    if (ok != Py_True)  /* failed or closed: the reference says how */
        goto done;
    refusers = PyObject_GetAttr(log, S_refusers);
    if (refusers == NULL || !PyList_CheckExact(refusers) || PyList_GET_SIZE(refusers))
        goto done;
    writer = PyObject_GetAttr(log, S_writer);
    if (writer == NULL || Py_TYPE(writer) != writer_type)
        goto done;
    fs = PyObject_GetAttr(writer, S_fs);
    if (fs != real_fs || Py_TYPE(fs) != fs_type)
        goto done;
    lock = PyObject_GetAttr(writer, S_lock);
    if (lock == NULL)
        goto done;
    PyErr_Clear();
    if (call0(lock, S_acquire) < 0) {
        out = NULL;
        goto done;
    }
    long long first = write_locked(writer, items, count);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);  /* the write's error, if any, across the release */
    if (call0(lock, S_release) < 0) {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        out = NULL;
        goto done;
    }
    PyErr_Restore(et, ev, tb);
    if (first == -1) {
        out = NULL;
        goto done;
    }
    if (first == -2)
        goto done;
    /* after the lock, as the reference: ticket callbacks a seal held back, then the waiters */
    PyObject *deferred = PyObject_GetAttr(commit, S_deferred);
    int todo = deferred == NULL ? -1 : PyObject_IsTrue(deferred);
    Py_XDECREF(deferred);
    PyObject *vis = todo < 0 || (todo && call0(commit, S_run_deferred) < 0) ? NULL
                    : PyObject_GetAttr(commit, S_visibility);
    if (vis == NULL) {
        out = NULL;
        goto done;
    }
    int wake = 0;
    for (int k = 0; k < 2 && !wake; k++) {
        PyObject *w = PyObject_GetAttr(vis, k ? S_async_waiters : S_waiters);
        wake = w == NULL ? -1 : PyObject_IsTrue(w);
        Py_XDECREF(w);
    }
    if (wake < 0 || (wake && call0(vis, S_notify) < 0)) {
        Py_DECREF(vis);
        out = NULL;
        goto done;
    }
    Py_DECREF(vis);
    out = Py_BuildValue("(LL)", first, first + (long long)count - 1);
done:
    if (out == DECLINE) {
        PyErr_Clear();
        n_declined++;
    } else if (out != NULL) {
        n_ran++;
    }
    Py_XDECREF(commit);
    Py_XDECREF(refusers);
    Py_XDECREF(writer);
    Py_XDECREF(fs);
    Py_XDECREF(lock);
    return out;
}

#include "_cext/commitsync.c.h"

static fastfunc
find_fast(const char *name)
{
    return strcmp(name, "write_many") == 0 ? fast_write_many : strcmp(name, "sync") == 0 ? fast_sync : NULL;
}

/* configure(dict): the classes the path serves, fs.REAL, frame.MAX_PAYLOAD and the methods
 * it stands in for (``originals``: (class, name, function) triples). */
static PyObject *
configure(PyObject *mod, PyObject *cfg)
{
    if (!PyDict_Check(cfg)) {
        PyErr_SetString(PyExc_TypeError, "configure(dict)");
        return NULL;
    }
    if (take_type(cfg, "Log", &log_type) < 0 || take_type(cfg, "SegmentWriter", &writer_type) < 0
            || take_type(cfg, "ActiveSegment", &active_type) < 0 || take_type(cfg, "FileSystem", &fs_type) < 0
            || take_type(cfg, "GroupCommit", &commit_type) < 0)
        return NULL;
    PyObject *real = PyDict_GetItemString(cfg, "REAL"), *le = PyDict_GetItemString(cfg, "LogError");
    if (le == NULL || !PyExceptionClass_Check(le)) {
        PyErr_SetString(PyExc_TypeError, "configure: LogError must be an exception class");
        return NULL;
    }
    Py_INCREF(le);
    Py_XSETREF(log_error, le);
    PyObject *orig = PyDict_GetItemString(cfg, "originals");
    PyObject *mp = PyDict_GetItemString(cfg, "MAX_PAYLOAD");
    if (real == NULL || mp == NULL || !PyLong_Check(mp)) {
        PyErr_SetString(PyExc_TypeError, "configure: REAL, MAX_PAYLOAD (an int)");
        return NULL;
    }
    max_payload = PyLong_AsSsize_t(mp);
    if ((max_payload == -1 && PyErr_Occurred()) || set_originals(orig) < 0)
        return NULL;
    if (find_slots(active_type) < 0)
        return NULL;
    Py_INCREF(real);
    Py_XSETREF(real_fs, real);
    Py_RETURN_NONE;
}

static PyObject *
counts(PyObject *mod, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("(KKKK)", n_ran, n_declined, n_synced, n_sync_declined);
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)configure, METH_O,
     "configure(dict): the classes, fs.REAL, MAX_PAYLOAD and the methods the path stands in for."},
    {"set_enabled", (PyCFunction)set_enabled, METH_O,
     "set_enabled(flag): False sends every call to the reference (tests compare both)."},
    {"counts", (PyCFunction)counts, METH_NOARGS,
     "(batches written here, batches handed to the reference, syncs here, syncs handed over) since start."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "stalkd.log._write",
    "Log.write_many's common case in C (stalkd.log.log is the reference).", -1, module_methods,
};

#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC
PyInit__write(void)
{
    crc_init();
    INTERN(S_commit, "_commit"); INTERN(S_ok, "ok"); INTERN(S_refusers, "_refusers");
    INTERN(S_writer, "_writer"); INTERN(S_fs, "fs"); INTERN(S_clock, "clock");
    INTERN(S_lock, "lock"); INTERN(S_acquire, "acquire"); INTERN(S_release, "release");
    INTERN(S_active, "active"); INTERN(S_next, "next");
    INTERN(S_write_failed, "_write_failed"); INTERN(S_deferred, "_deferred");
    INTERN(S_run_deferred, "run_deferred"); INTERN(S_visibility, "visibility");
    INTERN(S_waiters, "waiters"); INTERN(S_async_waiters, "async_waiters"); INTERN(S_notify, "notify");
    INTERN(S_lock_, "_lock"); INTERN(S_pinner, "_pinner"); INTERN(S_durable, "durable");
    INTERN(S_failed, "failed"); INTERN(S_mine, "_mine"); INTERN(S_sync, "sync");
    INTERN(S_released, "_released"); INTERN(S_syncing, "_syncing"); INTERN(S_arrived, "_arrived");
    INTERN(S_expect, "_expect"); INTERN(S_fdlock, "_fdlock"); INTERN(S_close, "close"); INTERN(S_path, "path");
    INTERN(S_last_sync, "_last_sync"); INTERN(S_fsync_avg, "_fsync_avg"); INTERN(S_syncs, "syncs");
    INTERN(S_fail, "fail"); INTERN(S_tickets, "_tickets"); INTERN(S_advance_locked, "_advance_locked");
    INTERN(S_cond, "cond"); INTERN(S_notify_all, "notify_all"); INTERN(S_wake_async, "wake_async_locked");
    INTERN(S_open, "_open"); INTERN(S_members, "members"); INTERN(S_gate, "gate"); INTERN(S_hand, "hand");
    return descriptor_module(&module);
}
