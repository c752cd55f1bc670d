/* WAL admission's per-command steps (server/admission.py's Admission is the rule): put and
 * settle in C. Included once, by _conn.c.
 *
 * AdmissionCore holds the state as slots the reference's methods share; fastconn.py puts it
 * before Admission. The engine asks room.put(len) for a put (a method call from _engine.c);
 * the compiled execute settles through adm_settle. A refusal's warning (_refused) and updates
 * stay the reference's. */

typedef struct {
    PyObject_HEAD
    PyObject *storage, *costless;
    Py_ssize_t promised, refused, put_base;
} Adm;

static PyTypeObject AdmType;
static PyObject *S_admit, *S_refused, *S_put_word;

static inline Adm *
as_adm(PyObject *o)
{
    return o != NULL && PyObject_TypeCheck(o, &AdmType) ? (Adm *)o : NULL;
}

static int
adm_ready(Adm *a)
{
    if (a->storage == NULL || a->costless == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the admission is not initialised");
        return -1;
    }
    return 0;
}

/* Admission.settle: the command ran (or failed); promise exactly what records need */
static int
adm_settle(Adm *a, PyObject *records)
{
    if (adm_ready(a) < 0)
        return -1;
    Py_ssize_t n = PyObject_Length(records);
    if (n < 0)
        return -1;
    if (!a->promised && n == 1) {
        /* a delete: its room was promised with its put, nothing to settle */
        PyObject *r0 = PySequence_GetItem(records, 0);
        PyObject *op = r0 == NULL ? NULL : PyObject_GetAttr(r0, S_op);
        int free = op == NULL ? -1 : PySequence_Contains(a->costless, op);
        Py_XDECREF(r0);
        Py_XDECREF(op);
        if (free != 0)
            return free < 0 ? -1 : 0;
    }
    if (!a->promised && n == 0)
        return 0;
    PyObject *p = PyLong_FromSsize_t(a->promised);
    if (p == NULL)
        return -1;
    PyObject *args[3] = {a->storage, p, records};
    PyObject *r = PyObject_VectorcallMethod(S_settle, args, 3, NULL);
    Py_DECREF(p);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    a->promised = 0;
    return 0;
}

static PyObject *
Adm_settle(Adm *self, PyObject *records)
{
    if (adm_settle(self, records) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* Admission.put: promise a put's frame (the longest tube's) from the storage */
static PyObject *
Adm_put(Adm *self, PyObject *body_len)
{
    if (adm_ready(self) < 0)
        return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(body_len);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0 || n > PY_SSIZE_T_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "a body length out of range");
        return NULL;
    }
    Py_ssize_t cost = (self->put_base + n) & ~(Py_ssize_t)7;
    PyObject *c = PyLong_FromSsize_t(cost);
    PyObject *r = c == NULL ? NULL : PyObject_CallMethodOneArg(self->storage, S_admit, c);
    Py_XDECREF(c);
    int ok = r == NULL ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    if (ok < 0)
        return NULL;
    if (ok) {
        self->promised += cost;
        Py_RETURN_TRUE;
    }
    r = PyObject_CallMethodOneArg((PyObject *)self, S_refused, S_put_word);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static int
Adm_traverse(Adm *self, visitproc visit, void *arg)
{
    Py_VISIT(self->storage);
    Py_VISIT(self->costless);
    return 0;
}

static int
Adm_clear(Adm *self)
{
    Py_CLEAR(self->storage);
    Py_CLEAR(self->costless);
    return 0;
}

static void
Adm_dealloc(Adm *self)
{
    PyObject_GC_UnTrack(self);
    Adm_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Adm_members[] = {
    {"_storage", T_OBJECT_EX, offsetof(Adm, storage), 0, NULL},
    {"_costless", T_OBJECT_EX, offsetof(Adm, costless), 0, NULL},
    {"promised", T_PYSSIZET, offsetof(Adm, promised), 0, NULL},
    {"refused", T_PYSSIZET, offsetof(Adm, refused), 0, NULL},
    {"_put_base", T_PYSSIZET, offsetof(Adm, put_base), 0, NULL},
    {NULL},
};

static PyMethodDef Adm_methods[] = {
    {"put", (PyCFunction)Adm_put, METH_O, "Admission.put"},
    {"settle", (PyCFunction)Adm_settle, METH_O, "Admission.settle"},
    {NULL},
};

static PyTypeObject AdmType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stalkd.server._conn.AdmissionCore",
    .tp_doc = "The compiled steps of stalkd.server.admission.Admission (a base class).",
    .tp_basicsize = sizeof(Adm),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)Adm_traverse,
    .tp_clear = (inquiry)Adm_clear,
    .tp_dealloc = (destructor)Adm_dealloc,
    .tp_methods = Adm_methods,
    .tp_members = Adm_members,
};
