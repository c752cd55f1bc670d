/* stalkd.log._gate: the compiled twin of log/gate.py's Gate, the wake-up of one group-commit batch.
 *
 * gate.py is the reference and says what a gate promises. What this changes is where the
 * wake-ups happen: a member woken from ``wait`` passes the gate on to the next member before it
 * takes the GIL back, so the futex wake that chains the members costs no GIL-holding time (the
 * reference's Lock.release runs it with the GIL held), and neither does the wait itself.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <semaphore.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    sem_t sem;
    int done; /* written before the post that wakes a reader: sem_post/sem_wait order it */
} Gate;

static PyObject *
gate_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "Gate() takes no arguments");
        return NULL;
    }
    Gate *g = (Gate *)type->tp_alloc(type, 0);
    if (g == NULL)
        return NULL;
    if (sem_init(&g->sem, 0, 0) != 0) {
        Py_DECREF(g);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    g->done = 0;
    return (PyObject *)g;
}

static void
gate_dealloc(Gate *g)
{
    sem_destroy(&g->sem);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

/* wait(timeout=None) -> bool | None: block (GIL released) until opened or handed over, or for
 * at most ``timeout`` seconds; True if opened (the gate is passed on to the next waiter first),
 * False if handed the lead, None if the time ran out. */
static PyObject *
gate_wait(Gate *g, PyObject *const *args, Py_ssize_t nargs)
{
    double timeout = -1.0;
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "wait takes at most 1 argument");
        return NULL;
    }
    if (nargs == 1 && args[0] != Py_None) {
        timeout = PyFloat_AsDouble(args[0]);
        if (timeout == -1.0 && PyErr_Occurred())
            return NULL;
        if (!(timeout >= 0)) /* negative or NaN: no time at all */
            timeout = 0;
        else if (timeout > 1e9) /* past any deadline a timespec takes: as good as none */
            timeout = -1.0;
    }
    int done, got;
    Py_BEGIN_ALLOW_THREADS
    if (timeout < 0) {
        while ((got = sem_wait(&g->sem)) != 0 && errno == EINTR)
            ;
    } else {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double whole = (double)(long long)timeout;
        t.tv_sec += (time_t)whole;
        t.tv_nsec += (long)((timeout - whole) * 1e9);
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec += 1;
            t.tv_nsec -= 1000000000L;
        }
        while ((got = sem_clockwait(&g->sem, CLOCK_MONOTONIC, &t)) != 0 && errno == EINTR)
            ;
    }
    done = g->done;
    if (got == 0 && done)
        sem_post(&g->sem);
    Py_END_ALLOW_THREADS
    if (got != 0)
        Py_RETURN_NONE;
    return PyBool_FromLong(done);
}

/* open(): resolved; wakes one waiter, who passes it on. */
static PyObject *
gate_open(Gate *g, PyObject *unused)
{
    g->done = 1;
    sem_post(&g->sem);
    Py_RETURN_NONE;
}

/* hand(): wake one waiter to lead (the gate stays closed). */
static PyObject *
gate_hand(Gate *g, PyObject *unused)
{
    sem_post(&g->sem);
    Py_RETURN_NONE;
}

static PyObject *
gate_get_done(Gate *g, void *closure)
{
    return PyBool_FromLong(g->done);
}

static PyMethodDef gate_methods[] = {
    {"wait", (PyCFunction)(void (*)(void))gate_wait, METH_FASTCALL,
     "Block until opened (True; passed on to the next waiter), handed the lead (False) or timeout (None)."},
    {"open", (PyCFunction)gate_open, METH_NOARGS, "Resolved: wake the waiters, one passing it to the next."},
    {"hand", (PyCFunction)gate_hand, METH_NOARGS, "Wake one waiter to lead; the gate stays closed."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef gate_getset[] = {
    {"done", (getter)gate_get_done, NULL, "Whether open() was called.", NULL},
    {NULL},
};

static PyTypeObject GateType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stalkd.log._gate.Gate",
    .tp_basicsize = sizeof(Gate),
    .tp_dealloc = (destructor)gate_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One batch's wake-up: wait() until open() (passed on waiter to waiter) or hand().",
    .tp_methods = gate_methods,
    .tp_getset = gate_getset,
    .tp_new = gate_new,
};

static struct PyModuleDef gatemodule = {
    PyModuleDef_HEAD_INIT, "stalkd.log._gate",
    "The compiled batch gate (stalkd.log.gate is the reference).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__gate(void)
{
    if (PyType_Ready(&GateType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&gatemodule);
    if (m == NULL)
        return NULL;
    Py_INCREF(&GateType);
    if (PyModule_AddObject(m, "Gate", (PyObject *)&GateType) < 0) {
        Py_DECREF(&GateType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
