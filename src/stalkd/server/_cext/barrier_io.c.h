/* A batch written and what it held released: Barriers._close_batch (with a lone writer's
 * inline fsync), _reached and release_held (server/barriers.py is the rule) for barriers
 * without a gate, and Connection.resume.
 * Included once, by _conn.c, after process: a connection released from its held replies runs
 * what it had read. A write failure, the syncs of ``always`` and a gate are the reference's
 * (_write_failed, _batch_written, _start_sync, _synced, Barriers._reached). */

static PyObject *py_reached = NULL;  /* Barriers._reached, the reference */
static PyObject *S_storage_write, *S_write_failed, *S_batch_written, *S_release_held, *S_flush,
    *S_resume, *S_sync, *S_synced, *S_start_sync, *S_busy;

/* Connection.resume: held replies left; run what was read if the connection had stopped */
static int
core_resume(Core *self)
{
    if (self->closing || self->waiting || self->lost)
        return 0;
    if (self->read_paused || self->eof)
        return core_process(self);
    if (ready(self) < 0)
        return -1;
    Py_ssize_t n = api->buffered(self->parser);
    if (n < 0)
        return -1;
    return n ? core_process(self) : 0;
}

/* Barriers.release_held: send every held reply whose batch is durable; let those connections
 * run again. */
static int
bar_release_held(Bar *b)
{
    if (bar_ready(b) < 0)
        return -1;
    PyObject *conns = PySequence_List(b->held_set);
    if (conns == NULL)
        return -1;
    PyObject *durable = PyLong_FromSsize_t(b->durable);
    int rc = durable == NULL ? -1 : 0;
    b->releasing = 1;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_GET_SIZE(conns); i++) {
        PyObject *c = PyList_GET_ITEM(conns, i);
        int left;
        if (PyObject_TypeCheck(c, &CoreType)) {
            Core *k = (Core *)c;
            left = ready(k) < 0 ? -1 : core_release_held(k, b->durable);
            if (left == 0 && PySet_Discard(b->held_set, c) < 0)
                left = -1;
            if (left >= 0 && (ready(k) < 0 || core_flush(k) < 0 || core_resume(k) < 0))
                left = -1;
        } else {
            PyObject *r = PyObject_CallMethodOneArg(c, S_release_held, durable);
            left = r == NULL ? -1 : PyObject_IsTrue(r);
            Py_XDECREF(r);
            if (left == 0 && PySet_Discard(b->held_set, c) < 0)
                left = -1;
            if (left >= 0 && (call_method0(c, S_flush) < 0 || call_method0(c, S_resume) < 0))
                left = -1;
        }
        if (left < 0)
            rc = -1;
    }
    b->releasing = 0;
    Py_XDECREF(durable);
    Py_DECREF(conns);
    if (rc < 0)
        return -1;
    if (b->step_records) {
        /* records of the commands those connections ran: the next iteration writes them */
        b->step_records = 0;
        if (!b->flush_scheduled)
            return bar_schedule(b);
    }
    return 0;
}

/* Barriers._reached: batches up to target are durable on this disk; without a gate they are
 * durable: drop the job barriers they held, release what waited for them. */
static int
bar_reached(Bar *b, Py_ssize_t target)
{
    if (b->gate != NULL && b->gate != Py_None) {
        PyObject *t = PyLong_FromSsize_t(target);
        PyObject *args[2] = {(PyObject *)b, t};
        PyObject *r = t == NULL ? NULL : PyObject_Vectorcall(py_reached, args, 2, NULL);
        Py_XDECREF(t);
        return call_result(r);
    }
    if (bar_ready(b) < 0)
        return -1;
    b->local_durable = target;
    b->durable = target;
    for (;;) {
        Py_ssize_t n = PyObject_Length(b->job_batches);
        if (n <= 0)
            return n < 0 ? -1 : bar_release_held(b);
        PyObject *first = PySequence_GetItem(b->job_batches, 0);
        if (first == NULL)
            return -1;
        if (!PyTuple_Check(first) || PyTuple_GET_SIZE(first) != 2) {
            Py_DECREF(first);
            PyErr_SetString(PyExc_TypeError, "job batches are (batch, job id)");
            return -1;
        }
        Py_ssize_t bb = PyLong_AsSsize_t(PyTuple_GET_ITEM(first, 0));
        if (bb == -1 && PyErr_Occurred()) {
            Py_DECREF(first);
            return -1;
        }
        if (bb > target) {
            Py_DECREF(first);
            return bar_release_held(b);
        }
        int rc = call_result(PyObject_CallMethodNoArgs(b->job_batches, S_popleft));
        PyObject *jid = PyTuple_GET_ITEM(first, 1);
        PyObject *v = rc < 0 ? NULL : PyDict_GetItemWithError(b->job_batch, jid);
        if (v != NULL) {
            int same = PyObject_RichCompareBool(v, PyTuple_GET_ITEM(first, 0), Py_EQ);
            if (same < 0 || (same && PyDict_DelItem(b->job_batch, jid) < 0))
                rc = -1;
        } else if (PyErr_Occurred()) {
            rc = -1;
        }
        Py_DECREF(first);
        if (rc < 0)
            return -1;
    }
}

/* Barriers._start_sync's first case under ``always`` without a gate: one connection alone has
 * written the last INLINE_AFTER batches, so its batch is fsynced here on the loop thread, and
 * Barriers._synced after it. 1: done; 0: not that case (the caller runs the reference's). */
static int
bar_lone_sync(Bar *b)
{
    if ((b->gate != NULL && b->gate != Py_None) || !b->group_commit || b->failed
            || b->written - b->mixed < inline_after || b->local_durable >= b->written)
        return 0;
    if (b->syncer != Py_None) {
        PyObject *busy = PyObject_GetAttr(b->syncer, S_busy);
        int t = busy == NULL ? -1 : PyObject_IsTrue(busy);
        Py_XDECREF(busy);
        if (t != 0)
            return t < 0 ? -1 : 0;
    }
    Py_ssize_t target = b->written;
    PyObject *r = PyObject_CallMethodNoArgs(b->storage, S_sync);
    if (r == NULL) {
        PyObject *exc = take_exception();
        if (exc == NULL)
            return -1;
        PyObject *t = PyLong_FromSsize_t(target);
        PyObject *args[3] = {(PyObject *)b, t, exc};
        int rc = t == NULL ? -1
                 : call_result(PyObject_VectorcallMethod(S_synced, args, 3, NULL));
        Py_XDECREF(t);
        Py_DECREF(exc);
        return rc < 0 ? -1 : 1;
    }
    Py_DECREF(r);
    b->inline_syncs++;
    /* Barriers._synced(target, None) */
    b->syncs++;
    if (bar_reached(b, target) < 0)
        return -1;
    if (b->written > b->local_durable && !b->batch_open
            && call_method0((PyObject *)b, S_start_sync) < 0)
        return -1;
    return 1;
}

/* Barriers._close_batch: one WAL write for every record of the last loop iteration, then
 * (no fsync, no gate) release what waited for it; otherwise the reference's _batch_written. */
static int
bar_close_batch(Bar *b)
{
    if (bar_ready(b) < 0)
        return -1;
    b->flush_scheduled = 0;
    PyObject *fresh = PyList_New(0);
    if (fresh == NULL)
        return -1;
    PyObject *records = b->pending;  /* our reference moves here */
    b->pending = fresh;
    int rc = 0;
    if (PyList_GET_SIZE(records) && !b->failed) {
        PyObject *r = PyObject_CallMethodOneArg(b->storage, S_storage_write, records);
        if (r == NULL) {
            PyObject *exc = take_exception();
            if (exc == NULL) {
                rc = -1;
                goto done;
            }
            rc = call_result(PyObject_CallMethodOneArg((PyObject *)b, S_write_failed, exc));
            Py_DECREF(exc);
            goto done;
        }
        Py_DECREF(r);
        if (b->after_write != Py_None) {
            /* only while someone listens (Barriers.after_write_while: the standbys connected) */
            int go = b->after_write_while == Py_None ? 1 : PyObject_IsTrue(b->after_write_while);
            if (go < 0 || (go && (rc = call_result(PyObject_CallNoArgs(b->after_write))) < 0)) {
                rc = -1;
                goto done;
            }
        }
    }
    if (!b->batch_open)
        goto done;
    b->batch_open = 0;
    if ((b->gate != NULL && b->gate != Py_None) || b->group_commit) {
        rc = bar_lone_sync(b);
        if (rc == 0)
            rc = call_method0((PyObject *)b, S_batch_written);
        else if (rc > 0)
            rc = 0;
    } else {
        rc = bar_reached(b, b->written);
    }
done:
    Py_DECREF(records);
    return rc;
}

static PyObject *
Bar_close_batch(Bar *self, PyObject *Py_UNUSED(ignored))
{
    if (bar_close_batch(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Bar_reached(Bar *self, PyObject *target)
{
    Py_ssize_t t = PyLong_AsSsize_t(target);
    if ((t == -1 && PyErr_Occurred()) || bar_reached(self, t) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Bar_release_held(Bar *self, PyObject *Py_UNUSED(ignored))
{
    if (bar_release_held(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}
