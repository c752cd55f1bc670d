/* FastMethod(name, reference): a method descriptor that stands in for a Python method (the
 * reference) on its class. A call goes to the C function ``find_fast`` gives for ``name``
 * (args[0] is the instance); DECLINE from it sends the call to the reference unchanged. Being
 * a method descriptor (Py_TPFLAGS_METHOD_DESCRIPTOR), a call through the instance binds nothing.
 * Included once by engine/_engine.c (Engine.apply), log/_write.c and engine/_wal.c; the
 * includer defines DECLINE and FAST_TYPE_NAME first, and ``find_fast`` (the function of a
 * name, NULL if none) after.
 */

typedef PyObject *(*fastfunc)(PyObject *const *args, Py_ssize_t nargs);

static fastfunc find_fast(const char *name);

typedef struct {
    PyObject_HEAD
    PyObject *reference;
    fastfunc fast;
    vectorcallfunc vectorcall;
} FastMethod;

static PyObject *
FastMethod_vectorcall(FastMethod *fm, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames == NULL && n >= 1) {
        PyObject *r = fm->fast(args, n);
        if (r != DECLINE)
            return r;
    }
    return PyObject_Vectorcall(fm->reference, args, nargsf, kwnames);
}

static PyObject *
FastMethod_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    const char *name;
    PyObject *ref;
    if ((kwds != NULL && PyDict_GET_SIZE(kwds)) || !PyArg_ParseTuple(args, "sO", &name, &ref)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "FastMethod(name, reference)");
        return NULL;
    }
    fastfunc fn = find_fast(name);
    if (fn == NULL) {
        PyErr_Format(PyExc_ValueError, "no compiled method %s", name);
        return NULL;
    }
    FastMethod *fm = (FastMethod *)type->tp_alloc(type, 0);
    if (fm == NULL)
        return NULL;
    fm->reference = Py_NewRef(ref);
    fm->fast = fn;
    fm->vectorcall = (vectorcallfunc)FastMethod_vectorcall;
    return (PyObject *)fm;
}

static int
FastMethod_traverse(FastMethod *fm, visitproc visit, void *arg)
{
    Py_VISIT(fm->reference);
    return 0;
}

static int
FastMethod_clear(FastMethod *fm)
{
    Py_CLEAR(fm->reference);
    return 0;
}

static void
FastMethod_dealloc(FastMethod *fm)
{
    PyObject_GC_UnTrack(fm);
    FastMethod_clear(fm);
    Py_TYPE(fm)->tp_free((PyObject *)fm);
}

static PyObject *
FastMethod_get(PyObject *fm, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(fm);
    return PyMethod_New(fm, obj);
}

static PyObject *
FastMethod_getattro(FastMethod *fm, PyObject *name)
{
    /* __doc__, __name__, __wrapped__ ...: the reference's, so help() reads the Python source */
    PyObject *r = PyObject_GenericGetAttr((PyObject *)fm, name);
    if (r != NULL || !PyErr_ExceptionMatches(PyExc_AttributeError))
        return r;
    PyErr_Clear();
    return PyObject_GetAttr(fm->reference, name);
}

static PyMemberDef FastMethod_members[] = {
    {"reference", T_OBJECT, offsetof(FastMethod, reference), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject FastMethodType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = FAST_TYPE_NAME,
    .tp_basicsize = sizeof(FastMethod),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
                | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(FastMethod, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = FastMethod_new,
    .tp_dealloc = (destructor)FastMethod_dealloc,
    .tp_traverse = (traverseproc)FastMethod_traverse,
    .tp_clear = (inquiry)FastMethod_clear,
    .tp_descr_get = FastMethod_get,
    .tp_getattro = (getattrofunc)FastMethod_getattro,
    .tp_members = FastMethod_members,
};

/* The module, with FastMethod added to it. */
static PyObject *
descriptor_module(struct PyModuleDef *def)
{
    if (PyType_Ready(&FastMethodType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(def);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FastMethodType);
    if (PyModule_AddObject(m, "FastMethod", (PyObject *)&FastMethodType) < 0) {
        Py_DECREF(&FastMethodType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
