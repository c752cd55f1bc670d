/* stalkd.engine._wal: Wal.write (and Wal.sync, a step to the log's) as one C call each, and
 * the room the server asks for per command, Wal.admit and Wal.settle (_cext/walroom.c.h).
 *
 * wal.py's Wal.write is the reference (with space.py's SpaceBudget.written). ``FastMethod("write",
 * reference)`` is a method descriptor that stands in for it on the Wal class (fastwal.py
 * installs it): the records are encoded (model.encode), sized and priced as the reference
 * prices them, analytics records left out when the budget has no room for them, the payloads
 * handed to the log's write_many (stalkd.log._write's compiled one when built: no Python frame
 * from the server's batch to the pwrite), and the budget and counters moved. Anything off that
 * path is the reference's, with nothing changed: a record the encoder refuses, a subclass of
 * Wal or SpaceBudget, a replaced method. A full log (LogFullError) goes to the reference's
 * Wal._retry_full as there; any other error is raised as the reference raises it.
 * tests/engine/test_wal_chain_differential.py holds both to the same segment bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

static PyObject DECLINE_OBJ; /* a sentinel: only its address is used */
#define DECLINE (&DECLINE_OBJ)
#define FAST_TYPE_NAME "stalkd.engine._wal.FastMethod"
#include "../log/_cext/descriptor.c.h"
#include "../log/_cext/methodguard.c.h"

#define FRAME_HEADER 24 /* log/frame.py's FRAME_HEADER_SIZE, checked by configure */

static PyTypeObject *wal_type, *budget_type, *op_type;
static PyObject *encode;            /* model.encode */
static PyObject *op_put, *op_result;
static PyObject *log_full_error;    /* stalkd.log.LogFullError */
static char durable[256];           /* by op value: model.DURABLE_OPS */
static Py_ssize_t short_frame;      /* space.SHORT_FRAME */
static unsigned long long n_ran, n_declined;

static PyObject *S_op, *S_seq, *S_space, *S_fits, *S_dropped, *S_log, *S_write_many, *S_retry_full,
    *S_promised, *S_records_written, *S_bytes_since, *S_last_seq, *S_job_id, *S_id_ceiling;

static int
add_size(PyObject *o, PyObject *name, Py_ssize_t d)
{
    Py_ssize_t v;
    if (get_size(o, name, &v) < 0) {
        PyErr_Format(PyExc_TypeError, "%U is not an int", name);
        return -1;
    }
    return set_size(o, name, v + d);
}

#include "_cext/walroom.c.h"

/* payloads[i] for the i whose keep[i] is set: a new list. */
static PyObject *
kept(PyObject *payloads, const char *keep, Py_ssize_t *total)
{
    PyObject *out = PyList_New(0);
    *total = 0;
    for (Py_ssize_t i = 0; out != NULL && i < PyList_GET_SIZE(payloads); i++) {
        if (!keep[i])
            continue;
        PyObject *p = PyList_GET_ITEM(payloads, i);
        *total += (FRAME_HEADER + PyBytes_GET_SIZE(p) + 7) & ~(Py_ssize_t)7;
        if (PyList_Append(out, p) < 0)
            Py_CLEAR(out);
    }
    return out;
}

/* The records' payloads, what the budget spends on them, the analytics bytes, the frames'
 * total, and which are durable (keep); -1 (error set) or -2 (declined). */
static int
encode_all(PyObject *recs, PyObject *payloads, char *keep, Py_ssize_t *spent, Py_ssize_t *extra,
           Py_ssize_t *total, long long ceiling)
{
    Py_ssize_t count = PySequence_Fast_GET_SIZE(recs);
    PyObject **it = PySequence_Fast_ITEMS(recs);
    *spent = *extra = *total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *p = PyObject_CallOneArg(encode, it[i]);
        if (p == NULL || !PyBytes_CheckExact(p)) {  /* the reference raises it, or copes */
            Py_XDECREF(p);
            return -2;
        }
        PyList_SET_ITEM(payloads, i, p);
        Py_ssize_t n = (FRAME_HEADER + PyBytes_GET_SIZE(p) + 7) & ~(Py_ssize_t)7;
        *total += n;
        PyObject *op = PyObject_GetAttr(it[i], S_op);
        if (op == NULL || Py_TYPE(op) != op_type) {
            Py_XDECREF(op);
            return -2;
        }
        long v = PyLong_AsLong(op);
        Py_DECREF(op);
        if (v < 0 || v > 255)
            return -2;
        keep[i] = durable[v];
        if (op == op_put) {  /* an id past the durable ceiling: the reference raises it first */
            PyObject *id = PyObject_GetAttr(it[i], S_job_id);
            long long jid = id == NULL ? -1 : PyLong_AsLongLong(id);
            Py_XDECREF(id);
            if (jid < 0 || jid >= ceiling)
                return -2;
        }
        if (op == op_put || op == op_result)
            *spent += n;
        else if (durable[v])
            *spent += short_frame;
        else
            *extra += n;
    }
    return 0;
}

/* The rest of Wal.write once the payloads are made: nothing declines from here. */
static int
write_payloads(PyObject *self, PyObject *recs, PyObject *payloads, const char *keep, Py_ssize_t spent,
               Py_ssize_t extra, Py_ssize_t total, PyObject *sp)
{
    Py_ssize_t count = PyList_GET_SIZE(payloads);
    Py_INCREF(payloads);
    if (sp != Py_None && extra) {
        int fit = fits(sp, extra);
        if (fit < 0)
            goto fail;
        if (!fit) {  /* analytics records would eat room promised to others: left out */
            PyObject *k = kept(payloads, keep, &total);
            if (k == NULL || add_size(sp, S_dropped, count - PyList_GET_SIZE(k)) < 0) {
                Py_XDECREF(k);
                goto fail;
            }
            Py_SETREF(payloads, k);
        }
    }
    Py_ssize_t written = PyList_GET_SIZE(payloads);
    if (written) {
        PyObject *log = PyObject_GetAttr(self, S_log);
        PyObject *r = NULL;
        if (log != NULL) {
            PyObject *args[2] = {log, payloads};
            r = PyObject_VectorcallMethod(S_write_many, args, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        }
        Py_XDECREF(log);
        if (r == NULL) {
            if (log == NULL || !PyErr_ExceptionMatches(log_full_error))
                goto fail;
            PyObject *e = take_exception();  /* a full log: the reference frees a spare and retries */
            r = e == NULL ? NULL : PyObject_CallMethodObjArgs(self, S_retry_full, payloads, e, NULL);
            Py_XDECREF(e);
            if (r == NULL)
                goto fail;
        }
        Py_DECREF(r);
        if (sp != Py_None) {
            /* SpaceBudget.written(spent): the bytes promised for these records are used */
            Py_ssize_t promised;
            if (get_size(sp, S_promised, &promised) < 0) {
                PyErr_SetString(PyExc_TypeError, "SpaceBudget.promised is not an int");
                goto fail;
            }
            if (set_size(sp, S_promised, promised - spent > 0 ? promised - spent : 0) < 0)
                goto fail;
        }
    }
    PyObject *last = PySequence_Fast_ITEMS(recs)[PySequence_Fast_GET_SIZE(recs) - 1];
    PyObject *seq = PyObject_GetAttr(last, S_seq);
    int rc = seq == NULL || add_size(self, S_records_written, written) < 0
             || add_size(self, S_bytes_since, total) < 0 || PyObject_SetAttr(self, S_last_seq, seq) < 0 ? -1 : 0;
    Py_XDECREF(seq);
    Py_DECREF(payloads);
    return rc;
fail:
    Py_DECREF(payloads);
    return -1;
}

/* Wal.write(records); DECLINE when the reference must run. */
static PyObject *
fast_write(PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !enabled || Py_TYPE(args[0]) != wal_type)
        return DECLINE;
    PyObject *self = args[0], *recs = args[1];
    if (!(PyList_CheckExact(recs) || PyTuple_CheckExact(recs)) || PySequence_Fast_GET_SIZE(recs) == 0
            || !unchanged()) {
        n_declined++;
        return DECLINE;
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(recs);
    char small[64];
    char *keep = count <= 64 ? small : PyMem_Malloc((size_t)count);
    PyObject *payloads = PyList_New(count), *sp = PyObject_GetAttr(self, S_space), *out = DECLINE;
    if (keep == NULL || payloads == NULL || sp == NULL
            || (sp != Py_None && Py_TYPE(sp) != budget_type))
        goto done;
    Py_ssize_t spent, extra, total;
    PyObject *c = PyObject_GetAttr(self, S_id_ceiling);  /* Wal.id_ceiling (idceiling.py) */
    long long ceiling = c == NULL ? -1 : PyLong_AsLongLong(c);
    Py_XDECREF(c);
    if (ceiling < 0)
        goto done;
    int rc = encode_all(recs, payloads, keep, &spent, &extra, &total, ceiling);
    if (rc == 0)
        rc = write_payloads(self, recs, payloads, keep, spent, extra, total, sp);
    out = rc == -2 ? DECLINE : rc < 0 ? NULL : Py_NewRef(Py_None);
done:
    if (out == DECLINE) {
        PyErr_Clear();
        n_declined++;
    } else if (out != NULL) {
        n_ran++;
    }
    if (keep != small)
        PyMem_Free(keep);
    Py_XDECREF(payloads);  /* unset items are NULL: list_dealloc skips them */
    Py_XDECREF(sp);
    return out;
}

static PyObject *S_durability, *S_always, *S_sync;

/* Wal.sync(): under ``always`` the log's sync (stalkd.log._write's, when built), else nothing. */
static PyObject *
fast_sync(PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1 || !enabled || Py_TYPE(args[0]) != wal_type)
        return DECLINE;
    PyObject *d = PyObject_GetAttr(args[0], S_durability);
    if (d == NULL || !PyUnicode_CheckExact(d)) {
        Py_XDECREF(d);
        PyErr_Clear();
        return DECLINE;
    }
    int always = PyUnicode_Compare(d, S_always) == 0;
    Py_DECREF(d);
    if (!always)
        Py_RETURN_NONE;
    PyObject *log = PyObject_GetAttr(args[0], S_log);
    if (log == NULL)
        return NULL;
    PyObject *r = PyObject_CallMethodNoArgs(log, S_sync);
    Py_DECREF(log);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static fastfunc
find_fast(const char *name)
{
    static const struct {
        const char *name;
        fastfunc fn;
    } table[] = {{"write", fast_write}, {"sync", fast_sync}, {"admit", fast_admit}, {"settle", fast_settle}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(name, table[i].name) == 0)
            return table[i].fn;
    return NULL;
}

static int
take_obj(PyObject *cfg, const char *key, PyObject **slot)
{
    PyObject *v = PyDict_GetItemString(cfg, key);
    if (v == NULL) {
        PyErr_Format(PyExc_TypeError, "configure: %s is missing", key);
        return -1;
    }
    Py_INCREF(v);
    Py_XSETREF(*slot, v);
    return 0;
}

/* configure(dict): Wal, SpaceBudget, Op and its PUT and RESULT, DURABLE_OPS, encode,
 * SHORT_FRAME, FRAME_HEADER_SIZE, LogFullError and the methods the path stands in for. */
static PyObject *
configure(PyObject *mod, PyObject *cfg)
{
    if (!PyDict_Check(cfg)) {
        PyErr_SetString(PyExc_TypeError, "configure(dict)");
        return NULL;
    }
    PyObject *ops, *sf, *fh;
    PyObject *pf = PyDict_GetItemString(cfg, "PUT_FRAME"), *rf = PyDict_GetItemString(cfg, "RESULT_FIXED");
    if (pf == NULL || rf == NULL || (put_frame_base = PyLong_AsSsize_t(pf)) < 0
            || (result_fixed = PyLong_AsSsize_t(rf)) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "configure: PUT_FRAME and RESULT_FIXED (ints)");
        return NULL;
    }
    if (take_type(cfg, "Log", &log_type) < 0 || take_obj(cfg, "active_span", &active_span) < 0
            || take_obj(cfg, "DELETE", &op_delete) < 0
            || take_type(cfg, "Wal", &wal_type) < 0 || take_type(cfg, "SpaceBudget", &budget_type) < 0
            || take_type(cfg, "Op", &op_type) < 0 || take_obj(cfg, "PUT", &op_put) < 0
            || take_obj(cfg, "RESULT", &op_result) < 0 || take_obj(cfg, "encode", &encode) < 0
            || take_obj(cfg, "LogFullError", &log_full_error) < 0
            || set_originals(PyDict_GetItemString(cfg, "originals")) < 0)
        return NULL;
    ops = PyDict_GetItemString(cfg, "DURABLE_OPS");
    sf = PyDict_GetItemString(cfg, "SHORT_FRAME");
    fh = PyDict_GetItemString(cfg, "FRAME_HEADER_SIZE");
    if (ops == NULL || !PyAnySet_Check(ops) || sf == NULL || fh == NULL || PyLong_AsLong(fh) != FRAME_HEADER) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "configure: DURABLE_OPS (a set), SHORT_FRAME, FRAME_HEADER_SIZE 24");
        return NULL;
    }
    short_frame = PyLong_AsSsize_t(sf);
    if (short_frame == -1 && PyErr_Occurred())
        return NULL;
    memset(durable, 0, sizeof durable);
    PyObject *iter = PyObject_GetIter(ops), *op;
    if (iter == NULL)
        return NULL;
    while ((op = PyIter_Next(iter)) != NULL) {
        long v = PyLong_AsLong(op);
        Py_DECREF(op);
        if (v < 0 || v > 255) {
            Py_DECREF(iter);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "configure: an op out of 0..255");
            return NULL;
        }
        durable[v] = 1;
    }
    Py_DECREF(iter);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
counts(PyObject *mod, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("(KK)", n_ran, n_declined);
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)configure, METH_O,
     "configure(dict): the classes, ops, encoder and constants the compiled Wal.write uses."},
    {"set_enabled", (PyCFunction)set_enabled, METH_O,
     "set_enabled(flag): False sends every call to the reference (tests compare both)."},
    {"counts", (PyCFunction)counts, METH_NOARGS,
     "(batches written here, batches handed to the reference) since the process started."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "stalkd.engine._wal",
    "Wal.write in C (stalkd.persist.wal is the reference).", -1, module_methods,
};

#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC
PyInit__wal(void)
{
    INTERN(S_op, "op"); INTERN(S_seq, "seq"); INTERN(S_space, "space"); INTERN(S_fits, "fits");
    INTERN(S_dropped, "dropped"); INTERN(S_log, "log"); INTERN(S_write_many, "write_many");
    INTERN(S_retry_full, "_retry_full"); INTERN(S_promised, "promised");
    INTERN(S_records_written, "records_written"); INTERN(S_bytes_since, "_bytes_since_snapshot");
    INTERN(S_last_seq, "last_seq"); INTERN(S_job_id, "job_id"); INTERN(S_id_ceiling, "id_ceiling"); INTERN(S_durability, "durability"); INTERN(S_always, "always");
    INTERN(S_sync, "sync"); INTERN(S_span, "_span"); INTERN(S_base_, "_base");
    INTERN(S_max_frame, "max_frame"); INTERN(S_spares, "spares"); INTERN(S_per_spare, "per_spare");
    INTERN(S_writer, "_writer"); INTERN(S_active, "active"); INTERN(S_base, "base"); INTERN(S_pos, "pos");
    INTERN(S_limit, "limit"); INTERN(S_tube, "tube"); INTERN(S_body, "body");
    return descriptor_module(&module);
}
