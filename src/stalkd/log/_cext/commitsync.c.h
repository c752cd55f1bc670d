/* Log.sync's common case: GroupCommit.sync_to(None) for a caller alone (nobody syncing, waiting
 * or expected back), which is every sync of a lone writer, the server's inline fsync among them.
 * commit.py is the rule; this follows sync_to, _sync_alone, _fsync_end (with SegmentWriter's
 * pin_end, fdatasync and unpin) and _synced_locked step by step, under the same locks. A
 * caller not alone, a failed log, tickets to resolve, a file system other than fs.REAL: the
 * reference's (declined before anything changed, or, once this caller leads, the reference's
 * own methods for the rare parts: fail, _advance_locked with tickets, a gate to hand over).
 * Included once, by _write.c, after write_locked. */

static PyTypeObject *commit_type;
static PyObject *log_error; /* errors.LogError */
static PyObject *S_lock_, *S_pinner, *S_durable, *S_failed, *S_mine, *S_sync, *S_released, *S_syncing,
    *S_arrived, *S_expect, *S_fdlock, *S_close, *S_path, *S_last_sync, *S_fsync_avg,
    *S_syncs, *S_fail, *S_tickets, *S_advance_locked, *S_cond, *S_notify_all, *S_wake_async, *S_open,
    *S_members, *S_gate, *S_hand;

static double
monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* time.monotonic's clock */
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int
add_float(PyObject *o, PyObject *name, double v, int replace)
{
    double old = 0;
    if (!replace) {
        PyObject *x = PyObject_GetAttr(o, name);
        old = x == NULL ? -1 : PyFloat_AsDouble(x);
        Py_XDECREF(x);
        if (old == -1 && PyErr_Occurred())
            return -1;
    }
    PyObject *x = PyFloat_FromDouble(old + v);
    int rc = x == NULL ? -1 : PyObject_SetAttr(o, name, x);
    Py_XDECREF(x);
    return rc;
}

static int
flag(PyObject *o, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(o, name);
    int t = v == NULL ? -1 : PyObject_IsTrue(v);
    Py_XDECREF(v);
    return t;
}

/* SegmentWriter.unpin(seg) */
static int
unpin(PyObject *writer, PyObject *seg)
{
    PyObject *fdlock = PyObject_GetAttr(writer, S_fdlock);
    if (fdlock == NULL || call0(fdlock, S_acquire) < 0) {
        Py_XDECREF(fdlock);
        return -1;
    }
    Py_ssize_t users = 0;
    int rc = slot_size(seg, A_USERS, &users) < 0 || set_slot_size(seg, A_USERS, users - 1) < 0 ? -1 : 0;
    if (rc < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "ActiveSegment.users is not an int");
    int retired = rc < 0 || SLOT(seg, A_RETIRED) == NULL ? 0 : PyObject_IsTrue(SLOT(seg, A_RETIRED));
    if (retired < 0 || (retired && users - 1 == 0 && call0(seg, S_close) < 0))
        rc = -1;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (call0(fdlock, S_release) < 0)
        rc = -1;
    else
        PyErr_Restore(et, ev, tb);
    Py_DECREF(fdlock);
    return rc;
}

/* GroupCommit._fsync_end: pin the end written so far (SegmentWriter.pin_end), fdatasync it;
 * the end, or -1 with LogError (the log failed, as the reference words it). */
static long long
fsync_end(PyObject *c, PyObject *writer)
{
    PyObject *lock = PyObject_GetAttr(writer, S_lock), *seg = NULL, *fdlock = NULL;
    if (lock == NULL || call0(lock, S_acquire) < 0) {
        Py_XDECREF(lock);
        return -1;
    }
    Py_ssize_t target = -1, users = 0, fd = -1;
    seg = PyObject_GetAttr(writer, S_active);
    if (seg == Py_None) {
        PyObject *p = PyObject_GetAttr(writer, S_path);
        if (p != NULL)
            PyErr_Format(log_error, "%U: log is closed", p);
        Py_XDECREF(p);
        Py_CLEAR(seg);
    }
    fdlock = seg == NULL ? NULL : PyObject_GetAttr(writer, S_fdlock);
    int ok = fdlock != NULL && call0(fdlock, S_acquire) == 0;
    if (ok) {
        ok = Py_TYPE(seg) == active_type && slot_size(seg, A_USERS, &users) == 0
             && set_slot_size(seg, A_USERS, users + 1) == 0;
        if (call0(fdlock, S_release) < 0)
            ok = 0;
    }
    ok = ok && get_size(writer, S_next, &target) == 0 && slot_size(seg, A_FD, &fd) == 0;
    if (ok && (fd < 0 || fd > INT_MAX)) {
        PyErr_SetString(PyExc_ValueError, "a segment's descriptor out of range");
        ok = 0;
    }
    Py_XDECREF(fdlock);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    if (call0(lock, S_release) < 0)
        ok = 0;
    else
        PyErr_Restore(et, ev, tb);
    Py_DECREF(lock);
    if (!ok) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "the segment's users, fd or the writer's next is not an int");
        Py_XDECREF(seg);  /* pinned or not: the reference would not have got this far either */
        return -1;
    }
    double t0 = monotonic();
    int rc, err = 0;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        rc = fdatasync((int)fd);
        err = errno;
        Py_END_ALLOW_THREADS
        if (rc == 0 || err != EINTR)
            break;
        if (PyErr_CheckSignals() < 0)
            break;
    }
    long long out = target;
    if (rc == 0) {
        double now = monotonic();
        PyObject *avg = PyObject_GetAttr(c, S_fsync_avg);
        double a = avg == NULL ? -1 : PyFloat_AsDouble(avg);
        Py_XDECREF(avg);
        if ((a == -1 && PyErr_Occurred()) || add_float(c, S_last_sync, now, 1) < 0
                || add_float(c, S_fsync_avg, 0.25 * (now - t0 - a), 0) < 0 || get_size(c, S_syncs, &users) < 0
                || set_size(c, S_syncs, users + 1) < 0)
            out = -1;
    } else if (err != EINTR) {
        /* self.fail(e); raise LogError(...) from e */
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        PyObject *e = take_exception();
        PyObject *r = e == NULL ? NULL : PyObject_CallMethodOneArg(c, S_fail, e);
        PyObject *path = r == NULL ? NULL : PyObject_GetAttr(c, S_path);
        PyObject *spath = path == NULL ? NULL : PyObject_GetAttr(seg, S_path);
        PyObject *durable = spath == NULL ? NULL : PyObject_GetAttr(c, S_durable);
        if (durable != NULL) {
            PyErr_Format(log_error, "%U: fsync of %U failed (%S); the log is now failed: records from offset %S "
                         "on may be lost; reopen it to recover what is on disk", path, spath, e, durable);
            PyObject *le = take_exception();
            if (le != NULL) {
                PyException_SetCause(le, Py_NewRef(e));
                PyException_SetContext(le, Py_NewRef(e));
                PyErr_SetObject((PyObject *)Py_TYPE(le), le);
                Py_DECREF(le);
            }
        }
        Py_XDECREF(e);
        Py_XDECREF(r);
        Py_XDECREF(path);
        Py_XDECREF(spath);
        Py_XDECREF(durable);
        out = -1;
    } else {
        out = -1;  /* a signal handler's exception */
    }
    /* finally: pinner.unpin(seg), keeping the error */
    PyErr_Fetch(&et, &ev, &tb);
    if (unpin(writer, seg) < 0) {
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(tb);
        out = -1;
    } else {
        PyErr_Restore(et, ev, tb);
    }
    Py_DECREF(seg);
    return out;
}

/* GroupCommit._synced_locked(1, target, token) and what _sync_alone does with its result:
 * the ticket callbacks to run, and the next batch handed its lead (*nxt, or NULL). */
static int
synced_locked(PyObject *c, long long target, PyObject *token, PyObject **callbacks, PyObject **nxt)
{
    *callbacks = NULL;
    *nxt = NULL;
    if (set_size(c, S_expect, 1) < 0 || set_size(c, S_arrived, 0) < 0 || PyObject_SetAttr(c, S_released, token) < 0)
        return -1;
    if (target >= 0) {
        PyObject *tickets = PyObject_GetAttr(c, S_tickets);
        int some = tickets == NULL ? -1 : PyObject_IsTrue(tickets);
        Py_XDECREF(tickets);
        if (some < 0)
            return -1;
        Py_ssize_t durable;
        if (some) {  /* tickets to resolve: the reference's _advance_locked */
            PyObject *t = PyLong_FromLongLong(target);
            *callbacks = t == NULL ? NULL : PyObject_CallMethodOneArg(c, S_advance_locked, t);
            Py_XDECREF(t);
            if (*callbacks == NULL)
                return -1;
        } else if (get_size(c, S_durable, &durable) < 0) {
            PyErr_SetString(PyExc_TypeError, "GroupCommit.durable is not an int");
            return -1;
        } else if (target > durable) {
            if (set_size(c, S_durable, (Py_ssize_t)target) < 0)
                return -1;
            PyObject *v = PyObject_GetAttr(c, S_visibility);
            int waiters = v == NULL ? -1 : flag(v, S_waiters);
            int awaiters = waiters < 0 ? -1 : flag(v, S_async_waiters);
            PyObject *cond = awaiters < 0 || !waiters ? NULL : PyObject_GetAttr(c, S_cond);
            int rc = awaiters < 0 || (waiters && (cond == NULL || call0(cond, S_notify_all) < 0))
                     || (awaiters && call0(v, S_wake_async) < 0) ? -1 : 0;
            Py_XDECREF(cond);
            Py_XDECREF(v);
            if (rc < 0)
                return -1;
        }
    }
    PyObject *b = PyObject_GetAttr(c, S_open);
    if (b == NULL)
        return -1;
    Py_ssize_t members = 0;
    int handoff = b != Py_None && get_size(b, S_members, &members) == 0 && members > 0;
    if (PyObject_SetAttr(c, S_syncing, handoff ? Py_True : Py_False) < 0) {
        Py_DECREF(b);
        return -1;
    }
    if (handoff)
        *nxt = b;
    else
        Py_DECREF(b);
    return 0;
}

static unsigned long long n_synced, n_sync_declined;

static PyObject *fast_sync_counted(PyObject *const *args, Py_ssize_t nargs);

/* Log.sync() for a caller alone; DECLINE when the reference must run. */
static PyObject *
fast_sync(PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *r = fast_sync_counted(args, nargs);
    if (r == DECLINE)
        n_sync_declined++;
    else if (r != NULL)
        n_synced++;
    return r;
}

static PyObject *
fast_sync_counted(PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1 || !enabled || Py_TYPE(args[0]) != log_type || !unchanged())
        return DECLINE;
    PyObject *log = args[0], *out = DECLINE, *c = PyObject_GetAttr(log, S_commit), *lock = NULL, *writer = NULL,
             *mine = NULL, *token = NULL, *fs = NULL;
    if (c == NULL || Py_TYPE(c) != commit_type)
        goto done;
    PyObject *failed = PyObject_GetAttr(c, S_failed);
    Py_XDECREF(failed);
    writer = failed != Py_None ? NULL : PyObject_GetAttr(c, S_pinner);
    if (writer == NULL || Py_TYPE(writer) != writer_type)  /* failed, closed, or another pinner */
        goto done;
    fs = PyObject_GetAttr(writer, S_fs);
    if (fs != real_fs || Py_TYPE(fs) != fs_type)
        goto done;
    lock = PyObject_GetAttr(c, S_lock_);
    if (lock == NULL)
        goto done;
    if (call0(lock, S_acquire) < 0) {
        out = NULL;
        goto done;
    }
    /* under the lock: sync_to's first steps */
    Py_ssize_t upto, durable, arrived, expect;
    int decided = -1;  /* 1: alone, this caller syncs; 0: the reference decides; -1: error */
    if (get_size(writer, S_next, &upto) == 0 && get_size(c, S_durable, &durable) == 0
            && get_size(c, S_arrived, &arrived) == 0 && get_size(c, S_expect, &expect) == 0) {
        PyObject *f = PyObject_GetAttr(c, S_failed);
        mine = f == Py_None ? PyObject_GetAttr(c, S_mine) : NULL;
        Py_XDECREF(f);
        PyObject *s = mine == NULL ? NULL : PyObject_GetAttr(mine, S_sync);
        if (s == NULL && mine != NULL && PyErr_ExceptionMatches(PyExc_AttributeError)) {
            PyErr_Clear();
            s = Py_NewRef(Py_None);
        }
        PyObject *rel = s == NULL ? NULL : PyObject_GetAttr(c, S_released);
        int syncing = rel == NULL ? -1 : flag(c, S_syncing);
        if (syncing >= 0 && durable < upto) {
            int back = s == rel;
            decided = !syncing && arrived + back >= expect;
        } else if (syncing >= 0) {
            decided = 0;  /* nothing to sync: the reference returns the durable end */
        }
        Py_XDECREF(s);
        Py_XDECREF(rel);
    }
    if (decided == 1) {
        token = PyObject_CallNoArgs((PyObject *)&PyBaseObject_Type);
        if (token == NULL || PyObject_SetAttr(c, S_syncing, Py_True) < 0 || PyObject_SetAttr(mine, S_sync, token) < 0)
            decided = -1;  /* only a memory error: the log's state is then beyond saving anyway */
    }
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    int released = call0(lock, S_release);
    PyErr_Restore(et, ev, tb);
    if (released < 0 || decided < 0) {
        out = decided < 0 && !PyErr_Occurred() ? DECLINE : NULL;
        goto done;
    }
    if (decided == 0)
        goto done;
    /* _sync_alone(token) */
    long long target = fsync_end(c, writer);
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *callbacks = NULL, *nxt = NULL;
    int rc = call0(lock, S_acquire);
    if (rc == 0) {
        rc = synced_locked(c, target, token, &callbacks, &nxt);
        PyObject *e2, *v2, *t2;
        PyErr_Fetch(&e2, &v2, &t2);
        if (call0(lock, S_release) < 0)
            rc = -1;
        else
            PyErr_Restore(e2, v2, t2);
    }
    if (rc == 0 && nxt != NULL) {
        PyObject *g = PyObject_GetAttr(nxt, S_gate);
        rc = g == NULL || call0(g, S_hand) < 0 ? -1 : 0;
        Py_XDECREF(g);
    }
    if (rc == 0 && callbacks != NULL && !PyList_CheckExact(callbacks)) {
        PyErr_SetString(PyExc_TypeError, "GroupCommit._advance_locked gave no list");
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && callbacks != NULL && i < PyList_GET_SIZE(callbacks); i++) {
        PyObject *pair = PyList_GET_ITEM(callbacks, i);  /* (ticket, fn): fn(ticket) */
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "a ticket callback is not (ticket, fn)");
            rc = -1;
            break;
        }
        PyObject *r = PyObject_CallOneArg(PyTuple_GET_ITEM(pair, 1), PyTuple_GET_ITEM(pair, 0));
        rc = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    Py_XDECREF(callbacks);
    Py_XDECREF(nxt);
    if (et != NULL) {  /* the fsync's error wins, as the reference's finally lets it */
        if (rc < 0)
            PyErr_Clear();
        PyErr_Restore(et, ev, tb);
        out = NULL;
    } else if (rc < 0 || target < 0) {
        out = NULL;
    } else {
        /* sync_to's loop end: covered (the end was pinned at or past upto) */
        PyObject *d = PyObject_GetAttr(c, S_durable);
        out = d;
    }
done:
    if (out == DECLINE)
        PyErr_Clear();
    Py_XDECREF(c);
    Py_XDECREF(lock);
    Py_XDECREF(writer);
    Py_XDECREF(mine);
    Py_XDECREF(token);
    Py_XDECREF(fs);
    return out;
}
