/* The barriers' per-command bookkeeping (server/barriers.py's Barriers is the rule).
 * Included once, by _conn.c.
 *
 * BarriersCore holds, as slots the reference's Python methods read and write too, the state a
 * command touches (the batch counters, the step counters, the pending records, the job
 * barriers, the held connections), and runs begin_step, end_step, add, job_barrier and hold in
 * C; fastconn.py puts it before Barriers. A compiled connection whose steps object is one
 * calls these functions directly. Its _close_batch, _reached and release_held (barrier_io.c.h)
 * run the batch's write and release without a gate; the syncs, the gate and failures stay the
 * reference's. */

typedef struct {
    PyObject_HEAD
    PyObject *pending, *writer, *held_set, *job_batch, *job_batches, *storage, *gate,
        *after_write, *after_write_while, *syncer;
    Py_ssize_t written, durable, mixed, steps, local_durable, syncs, inline_syncs;
    char batch_open, step_records, releasing, flush_scheduled, keeps, failed, group_commit;
} Bar;

static PyTypeObject BarType;
static PyObject *durable_ops = NULL;  /* model.DURABLE_OPS */
static Py_ssize_t inline_after = 8;   /* barriers.INLINE_AFTER */
static PyObject *S_close_batch, *S_soon, *S_op, *S_job_id, *S_append;

static inline Bar *
as_bar(PyObject *o)
{
    return o != NULL && PyObject_TypeCheck(o, &BarType) ? (Bar *)o : NULL;
}

static int
bar_ready(Bar *b)
{
    if (b->pending == NULL || b->held_set == NULL || b->job_batch == NULL
            || b->job_batches == NULL || b->writer == NULL || durable_ops == NULL
            || b->storage == NULL || b->gate == NULL || b->after_write == NULL
            || b->after_write_while == NULL
            || b->syncer == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the barriers are not initialised");
        return -1;
    }
    if (!PyList_CheckExact(b->pending) || !PySet_Check(b->held_set)
            || !PyDict_CheckExact(b->job_batch)) {
        PyErr_SetString(PyExc_TypeError, "Barriers: pending, _held, _job_batch of other types");
        return -1;
    }
    return 0;
}

/* self._soon(self._close_batch): the next loop iteration writes the batch */
static int
bar_schedule(Bar *b)
{
    b->flush_scheduled = 1;
    PyObject *cb = PyObject_GetAttr((PyObject *)b, S_close_batch);
    if (cb == NULL)
        return -1;
    PyObject *r = PyObject_CallMethodOneArg((PyObject *)b, S_soon, cb);
    Py_DECREF(cb);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static void
bar_begin(Bar *b)
{
    b->steps++;
}

/* Barriers.end_step */
static int
bar_end(Bar *b)
{
    b->steps--;
    if (b->steps || !b->step_records)
        return 0;
    b->step_records = 0;
    if (b->written - b->mixed >= inline_after) {
        PyObject *r = PyObject_CallMethodNoArgs((PyObject *)b, S_close_batch);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        return 0;
    }
    return b->flush_scheduled ? 0 : bar_schedule(b);
}

/* Barriers.hold */
static int
bar_hold(Bar *b, PyObject *c)
{
    if (bar_ready(b) < 0)
        return -1;
    return PySet_Add(b->held_set, c);
}

/* Barriers.add: queue one command's records (c's, None for a timer); the barrier its replies
 * wait for in *out (0: nothing durable among them). */
static int
bar_add(Bar *b, PyObject *c, PyObject *records, Py_ssize_t *out)
{
    *out = 0;
    if (!b->keeps)
        return 0;
    if (bar_ready(b) < 0)
        return -1;
    PyObject *seq = PySequence_Fast(records, "records must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), np = PyList_GET_SIZE(b->pending);
    if (PyList_SetSlice(b->pending, np, np, seq) < 0)
        goto error;
    if (b->steps && !b->releasing)
        b->step_records = 1;  /* end_step decides: write now, or next iteration */
    else if (!b->flush_scheduled && bar_schedule(b) < 0)
        goto error;
    Py_ssize_t barrier = 0;
    PyObject *bobj = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PyObject_GetAttr(PySequence_Fast_GET_ITEM(seq, i), S_op);
        int durable = op == NULL ? -1 : PySet_Contains(durable_ops, op);
        Py_XDECREF(op);
        if (durable < 0)
            goto error_b;
        if (!durable)
            continue;
        if (!barrier) {
            if (!b->batch_open) {
                b->batch_open = 1;
                b->written++;
            }
            if (c != b->writer) {
                Py_SETREF(b->writer, Py_NewRef(c));
                b->mixed = b->written;
            }
            barrier = b->written;
            if ((bobj = PyLong_FromSsize_t(barrier)) == NULL)
                goto error;
        }
        PyObject *jid = PyObject_GetAttr(PySequence_Fast_GET_ITEM(seq, i), S_job_id);
        int t = jid == NULL ? -1 : PyObject_IsTrue(jid);
        if (t > 0) {
            PyObject *pair = PyTuple_Pack(2, bobj, jid);
            PyObject *r = pair == NULL ? NULL
                          : PyObject_CallMethodOneArg(b->job_batches, S_append, pair);
            Py_XDECREF(pair);
            if (r == NULL || PyDict_SetItem(b->job_batch, jid, bobj) < 0)
                t = -1;
            Py_XDECREF(r);
        }
        Py_XDECREF(jid);
        if (t < 0)
            goto error_b;
    }
    Py_XDECREF(bobj);
    Py_DECREF(seq);
    *out = barrier;
    return 0;
error_b:
    Py_XDECREF(bobj);
error:
    Py_DECREF(seq);
    return -1;
}

/* Barriers.job_barrier: the batch holding job_id's latest durable record while not yet
 * durable, else 0 (-1 with an exception) */
static Py_ssize_t
bar_job_barrier(Bar *b, PyObject *job_id)
{
    if (bar_ready(b) < 0)
        return -1;
    PyObject *v = PyDict_GetItemWithError(b->job_batch, job_id);
    if (v == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return PyLong_AsSsize_t(v);
}

/* --- the Python methods (the reference's names) ------------------------------------------ */

static PyObject *
Bar_begin_step(Bar *self, PyObject *Py_UNUSED(ignored))
{
    bar_begin(self);
    Py_RETURN_NONE;
}

static PyObject *
Bar_end_step(Bar *self, PyObject *Py_UNUSED(ignored))
{
    if (bar_end(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Bar_hold(Bar *self, PyObject *c)
{
    if (bar_hold(self, c) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Bar_add(Bar *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "add(c, records)");
        return NULL;
    }
    Py_ssize_t barrier;
    if (bar_add(self, args[0], args[1], &barrier) < 0)
        return NULL;
    return PyLong_FromSsize_t(barrier);
}

static PyObject *
Bar_job_barrier(Bar *self, PyObject *job_id)
{
    Py_ssize_t b = bar_job_barrier(self, job_id);
    return b < 0 ? NULL : PyLong_FromSsize_t(b);
}

static int
Bar_traverse(Bar *self, visitproc visit, void *arg)
{
    Py_VISIT(self->pending);
    Py_VISIT(self->writer);
    Py_VISIT(self->held_set);
    Py_VISIT(self->job_batch);
    Py_VISIT(self->job_batches);
    Py_VISIT(self->storage);
    Py_VISIT(self->gate);
    Py_VISIT(self->after_write);
    Py_VISIT(self->after_write_while);
    Py_VISIT(self->syncer);
    return 0;
}

static int
Bar_clear(Bar *self)
{
    Py_CLEAR(self->pending);
    Py_CLEAR(self->writer);
    Py_CLEAR(self->held_set);
    Py_CLEAR(self->job_batch);
    Py_CLEAR(self->job_batches);
    Py_CLEAR(self->storage);
    Py_CLEAR(self->gate);
    Py_CLEAR(self->after_write);
    Py_CLEAR(self->after_write_while);
    Py_CLEAR(self->syncer);
    return 0;
}

static void
Bar_dealloc(Bar *self)
{
    PyObject_GC_UnTrack(self);
    Bar_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define BOBJ(name, field) {name, T_OBJECT_EX, offsetof(Bar, field), 0, NULL}
#define BSIZE(name, field) {name, T_PYSSIZET, offsetof(Bar, field), 0, NULL}
#define BFLAG(name, field) {name, T_BOOL, offsetof(Bar, field), 0, NULL}

static PyMemberDef Bar_members[] = {
    BOBJ("pending", pending), BOBJ("_writer", writer), BOBJ("_held", held_set),
    BOBJ("_job_batch", job_batch), BOBJ("_job_batches", job_batches),
    BOBJ("storage", storage), BOBJ("gate", gate), BOBJ("after_write", after_write),
    BOBJ("after_write_while", after_write_while),
    BOBJ("_syncer", syncer), BSIZE("syncs", syncs), BSIZE("inline_syncs", inline_syncs),
    BSIZE("local_durable", local_durable),
    BFLAG("failed", failed), BFLAG("group_commit", group_commit),
    BSIZE("written", written), BSIZE("durable", durable), BSIZE("_mixed", mixed),
    BSIZE("_steps", steps),
    BFLAG("_batch_open", batch_open), BFLAG("_step_records", step_records),
    BFLAG("_releasing", releasing), BFLAG("_flush_scheduled", flush_scheduled),
    BFLAG("keeps", keeps),
    {NULL},
};

static PyObject *Bar_close_batch(Bar *self, PyObject *Py_UNUSED(ignored));
static PyObject *Bar_reached(Bar *self, PyObject *target);
static PyObject *Bar_release_held(Bar *self, PyObject *Py_UNUSED(ignored));

static PyMethodDef Bar_methods[] = {
    {"_close_batch", (PyCFunction)Bar_close_batch, METH_NOARGS, "Barriers._close_batch"},
    {"_reached", (PyCFunction)Bar_reached, METH_O, "Barriers._reached"},
    {"release_held", (PyCFunction)Bar_release_held, METH_NOARGS, "Barriers.release_held"},
    {"begin_step", (PyCFunction)Bar_begin_step, METH_NOARGS, "Barriers.begin_step"},
    {"end_step", (PyCFunction)Bar_end_step, METH_NOARGS, "Barriers.end_step"},
    {"hold", (PyCFunction)Bar_hold, METH_O, "Barriers.hold"},
    {"add", (PyCFunction)(void (*)(void))Bar_add, METH_FASTCALL, "Barriers.add"},
    {"job_barrier", (PyCFunction)Bar_job_barrier, METH_O, "Barriers.job_barrier"},
    {NULL},
};

static PyTypeObject BarType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stalkd.server._conn.BarriersCore",
    .tp_doc = "The compiled bookkeeping of stalkd.server.barriers.Barriers (a base class).",
    .tp_basicsize = sizeof(Bar),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)Bar_traverse,
    .tp_clear = (inquiry)Bar_clear,
    .tp_dealloc = (destructor)Bar_dealloc,
    .tp_methods = Bar_methods,
    .tp_members = Bar_members,
};
