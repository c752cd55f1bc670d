/* stalkd.engine._engine: Engine.apply's common commands as one C call.
 *
 * engine.py's Engine.apply is the reference. ``FastMethod("apply", reference)`` is a method descriptor
 * that stands in for it on the Engine class (fastengine.py installs it): for put, reserve,
 * reserve-with-timeout, delete, release, bury and touch, in the common case, it changes the
 * engine's objects exactly as the Python handlers do and returns the same Outcome; for
 * anything else it calls the reference, having changed nothing. Common means: no timer due,
 * no tube left to serve, no kick or hang-up in progress, the objects of the classes it was
 * configured with, and per command: a put to ready of a well-formed job while not draining;
 * a reserve that finds a ready job, or finds none and waits (or with a timeout of 0 times
 * out, or answers DEADLINE_SOON); a delete of a ready job or one the caller holds; a release
 * to ready or delayed, a bury or a touch of one the caller holds. A put or a release to ready
 * in an unpaused tube with waiting connections hands the job to the first of them in the same
 * step, as timers.py's _serve does. With a WAL room (Engine.room) it asks the room as room.py's
 * guarded handlers do. tests/engine/test_engine_differential.py holds both paths to the same
 * outcomes and states.
 *
 * Translation unit: _cext/heapcore.c.h (the compiled heap's layout and moves, shared with
 * _heap.c), _cext/engineslots.c.h (the slot offsets and objects configure() finds),
 * _cext/enginestep.c.h (the moves and values the commands share, the step's begin),
 * _cext/enginetimers.c.h (the timer heaps kept in step), _cext/enginewait.c.h (reserving: a
 * job given, a reserve that waits, a waiter served), _cext/enginecmds.c.h (put, reserve,
 * delete, release), _cext/engineheld.c.h (bury, touch), and here the step's checks and
 * Outcome, the descriptor (../log/_cext/descriptor.c.h, shared with the write chain) and the module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>

#ifndef __SIZEOF_INT128__
#error "stalkd.engine._engine needs a compiler with __int128 (engine.py is used instead)"
#endif

#include "_cext/heapcore.c.h"
#include "_cext/engineslots.c.h"
#include "_cext/enginestep.c.h"
#include "_cext/enginetimers.c.h"
#include "_cext/enginewait.c.h"
#include "_cext/enginecmds.c.h"
#include "_cext/engineheld.c.h"

static unsigned long long n_ran, n_declined;

/* round(now * US) as engine.py computes it (a float or an int ``now``); 0 if out of range. */
static int
now_us(PyObject *now, long long *out)
{
    if (PyFloat_CheckExact(now)) {
        double x = PyFloat_AS_DOUBLE(now) * 1000000.0;
        if (!isfinite(x) || fabs(x) > 4e18)
            return 0;
        double r = round(x); /* float.__round__: half to even */
        if (fabs(x - r) == 0.5)
            r = 2.0 * round(x / 2.0);
        *out = (long long)r;
        return 1;
    }
    long long v;
    if (!as_ll(now, &v) || v > 4000000000000LL || v < -4000000000000LL)
        return 0;
    *out = v * 1000000LL;
    return 1;
}

/* next_deadline(): the sooner timer heap top in seconds, or None */
static PyObject *
deadline_of(Step *s)
{
    Heap *a = s->tt, *b = s->ct;
    key_t128 k;
    if (a->n && (!b->n || a->e[0].key < b->e[0].key))
        k = a->e[0].key;
    else if (b->n)
        k = b->e[0].key;
    else
        Py_RETURN_NONE;
    key_t128 us = k >> 64;
    if (us > -(1LL << 53) && us < (1LL << 53)) /* int / int is then one correctly rounded division */
        return PyFloat_FromDouble((double)(long long)us / 1000000.0);
    PyObject *n = PyLong_FromLongLong((long long)us), *m = PyLong_FromLong(1000000);
    PyObject *r = n && m ? PyNumber_TrueDivide(n, m) : NULL;
    Py_XDECREF(n);
    Py_XDECREF(m);
    return r;
}

static inline int
due(Heap *h, long long now)
{
    return h->n && (h->e[0].key >> 64) <= now;
}

/* Engine.apply's common case, or DECLINE. */
static PyObject *
fast_apply(PyObject *self, PyObject *conn_id, PyObject *cmd, PyObject *now)
{
    if (!configured || !Py_IS_TYPE(self, EngineType))
        return DECLINE;
    PyTypeObject *kind = Py_TYPE(cmd);
    if (kind != PutType && kind != ReserveType && kind != ReserveTimeoutType && kind != DeleteType
            && kind != ReleaseType && kind != BuryType && kind != TouchType)
        return DECLINE;
    Step s;
    PyObject *d = self;
    PyObject *out = DECLINE;
    PyObject *conns = ESLOT(d, E_CONNS);
    PyObject *c = conns != NULL && PyDict_CheckExact(conns) ? PyDict_GetItemWithError(conns, conn_id) : NULL;
    PyObject *dirty = ESLOT(d, E_DIRTY);
    PyObject *pending = ESLOT(d, E_PENDING);
    PyObject *keep = ESLOT(d, E_KEEP_RECORDS);
    PyObject *tt = ESLOT(d, E_TUBE_TIMERS), *ct = ESLOT(d, E_CONN_TIMERS);
    s.room = ESLOT(d, E_ROOM);
    if (c == NULL || !Py_IS_TYPE(c, ConnType) || SLOT(c, conn_off[C_WAITING]) != Py_False
            || SLOT(c, conn_off[C_KICK]) != Py_None || !as_ll(SLOT(c, conn_off[C_ID]), &s.cid)
            || s.cid < 0 || dirty == NULL || !PySet_CheckExact(dirty) || PySet_GET_SIZE(dirty)
            || pending == NULL || PyObject_Length(pending) != 0 || (keep != Py_True && keep != Py_False)
            || tt == NULL || ct == NULL || (s.tt = heap_of(tt)) == NULL || (s.ct = heap_of(ct)) == NULL
            || s.room == NULL || !now_us(now, &s.now) || due(s.tt, s.now) || due(s.ct, s.now)
            || !as_ll(ESLOT(d, E_SEQ), &s.seq) || s.seq == LLONG_MAX) {
        PyErr_Clear();
        goto done;
    }
    s.d = d;
    s.c = c;
    s.keep = keep == Py_True;
    s.served = s.wake = NULL;
    PyObject *rec = NULL;
    PyObject *reply;
    if (kind == PutType)
        reply = do_put(&s, cmd, &rec);
    else if (kind == DeleteType)
        reply = do_delete(&s, cmd, &rec);
    else if (kind == ReleaseType)
        reply = do_release(&s, cmd, &rec);
    else if (kind == BuryType)
        reply = do_bury(&s, cmd, &rec);
    else if (kind == TouchType)
        reply = do_touch(&s, cmd, &rec);
    else
        reply = do_reserve(&s, cmd, kind == ReserveType ? ctr_reserve : ctr_reserve_timeout, &rec);
    if (reply == DECLINE || reply == NULL) {
        Py_XDECREF(rec);
        Py_XDECREF(s.served);
        Py_XDECREF(s.wake);
        out = reply;
        goto done;
    }
    /* the command's record, then the RESERVE of a waiter it served (the order _settle makes) */
    PyObject *recs = rec == NULL ? (s.served == NULL ? PyTuple_New(0) : PyTuple_Pack(1, s.served))
                     : s.served == NULL ? PyTuple_Pack(1, rec) : PyTuple_Pack(2, rec, s.served);
    PyObject *wakes = s.wake == NULL ? PyTuple_New(0) : PyTuple_Pack(1, s.wake);
    PyObject *nd = deadline_of(&s);
    out = recs && wakes && nd ? OutcomeType->tp_alloc(OutcomeType, 4) : NULL;
    if (out != NULL) {
        PyObject *items[4] = {reply, recs, wakes, nd};
        for (int i = 0; i < 4; i++)
            PyTuple_SET_ITEM(out, i, items[i]);
    } else {
        Py_DECREF(reply);
        Py_XDECREF(recs);
        Py_XDECREF(wakes);
        Py_XDECREF(nd);
    }
    Py_XDECREF(rec);
    Py_XDECREF(s.served);
    Py_XDECREF(s.wake);
done:
    if (out == DECLINE) {
        PyErr_Clear();
        n_declined++;
    }
    else if (out != NULL)
        n_ran++;
    return out;
}

/* --- the descriptor ---------------------------------------------------------------------- */

#define FAST_TYPE_NAME "stalkd.engine._engine.FastMethod"
#include "../log/_cext/descriptor.c.h"

static PyObject *
apply_args(PyObject *const *args, Py_ssize_t nargs)
{
    return nargs == 4 ? fast_apply(args[0], args[1], args[2], args[3]) : DECLINE;
}

static fastfunc
find_fast(const char *name)
{
    return strcmp(name, "apply") == 0 ? apply_args : NULL;
}

/* --- the module -------------------------------------------------------------------------- */

static PyObject *
counts(PyObject *mod, PyObject *Py_UNUSED(ignored))
{
    return Py_BuildValue("(KK)", n_ran, n_declined);
}

/* objects.new_jobs: the Jobs of a snapshot block's columns, each slot set as Job.__init__ sets
 * it, without a Python frame per job (restart at a million jobs, issue 34). */
static PyObject *
new_jobs(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "new_jobs() before configure()");
        return NULL;
    }
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "new_jobs(ids, tube, pris, delays, ttrs, bodies, state, created_us)");
        return NULL;
    }
    /* the columns, in the order of the arguments that are columns */
    static const int at[] = {0, 2, 3, 4, 5, 7};
    static const int slot_of[] = {J_ID, J_PRI, J_DELAY, J_TTR, J_BODY, J_CREATED};
    enum { NCOL = sizeof(at) / sizeof(at[0]) };
    PyObject *col[NCOL] = {NULL}, *out = NULL;
    Py_ssize_t n = 0;
    for (int i = 0; i < NCOL; i++) {
        if ((col[i] = PySequence_Fast(args[at[i]], "new_jobs() takes sequences")) == NULL)
            goto done;
        if (i == 0)
            n = PySequence_Fast_GET_SIZE(col[0]);
        else if (PySequence_Fast_GET_SIZE(col[i]) != n) {
            PyErr_SetString(PyExc_ValueError, "new_jobs(): columns of different lengths");
            goto done;
        }
    }
    if ((out = PyList_New(n)) == NULL)
        goto done;
    PyObject *v[J_N] = {NULL, args[1], NULL, NULL, NULL, NULL, args[6], NULL, zero,
                        zero, zero, zero, zero, zero, minus_one, Py_None};
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *j = JobType->tp_alloc(JobType, 0);
        if (j == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        for (int i = 0; i < NCOL; i++)
            v[slot_of[i]] = PySequence_Fast_GET_ITEM(col[i], k);
        for (int i = 0; i < J_N; i++)
            SLOT(j, job_off[i]) = Py_NewRef(v[i]);
        PyList_SET_ITEM(out, k, j);
    }
done:
    for (int i = 0; i < NCOL; i++)
        Py_XDECREF(col[i]);
    return out;
}

static PyMethodDef module_methods[] = {
    {"new_jobs", (PyCFunction)(void (*)(void))new_jobs, METH_FASTCALL,
     "new_jobs(ids, tube, pris, delays, ttrs, bodies, state, created_us): objects.new_jobs."},
    {"configure", (PyCFunction)configure, METH_O,
     "configure(dict): the classes, enum members and constants the compiled path uses."},
    {"counts", (PyCFunction)counts, METH_NOARGS,
     "(commands run here, commands handed to the reference) since the process started."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef enginemodule = {
    PyModuleDef_HEAD_INIT, "stalkd.engine._engine",
    "Engine.apply's common commands in C (stalkd.engine.engine is the reference).", -1,
    module_methods,
};

PyMODINIT_FUNC
PyInit__engine(void)
{
    if (intern_all() < 0)
        return NULL;
    return descriptor_module(&enginemodule);
}
