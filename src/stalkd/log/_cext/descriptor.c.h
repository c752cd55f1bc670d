/* FastMethod(name, reference): a method descriptor that stands in for a Python method (the
 * reference) on its class, as engine/_engine.c's FastApply does for Engine.apply. A call goes
 * to the C function the including module lists under ``name`` in ``fast_methods`` (args[0] is
 * the instance); DECLINE from it sends the call to the reference unchanged. Being a method
 * descriptor (Py_TPFLAGS_METHOD_DESCRIPTOR), a call through the instance binds nothing.
 * Included once by log/_write.c and engine/_wal.c; the includer defines DECLINE and
 * FAST_TYPE_NAME first, and ``find_fast`` (the function of a name, NULL if none) after.
 * Also the helpers both fast paths read their Python objects with.
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

/* --- helpers ----------------------------------------------------------------------------- */

/* Whether every method the path stands in for is still the class's own (a test or a bench
 * that replaces one, e.g. to inject a fault or a sleep, gets the reference). Checked by the
 * classes' version tags, which CPython changes whenever a class (or a base) is assigned to, as
 * its own attribute caches do: the methods are looked up again only after such a change (a
 * look-up per method per call cost more than the rest of a write). */
static PyObject *originals; /* ((class, name, function), ...) set by configure */
#define MAX_CLASSES 8
static struct {
    PyTypeObject *cls;
    unsigned int tag; /* 0: look the methods up at the next call */
} seen[MAX_CLASSES];
static int n_seen;

static int
unchanged_slow(void)
{
    Py_ssize_t n = PyTuple_GET_SIZE(originals);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(originals, i);
        PyTypeObject *cls = (PyTypeObject *)PyTuple_GET_ITEM(t, 0);
        PyObject *now = PyDict_GetItemWithError(cls->tp_dict, PyTuple_GET_ITEM(t, 1));
        if (now != PyTuple_GET_ITEM(t, 2)) {
            PyErr_Clear();
            return 0;
        }
    }
    for (int i = 0; i < n_seen; i++) {
        PyTypeObject *cls = seen[i].cls;
        seen[i].tag = cls->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG ? cls->tp_version_tag : 0;
    }
    return 1;
}

static inline int
unchanged(void)
{
    for (int i = 0; i < n_seen; i++) {
        PyTypeObject *cls = seen[i].cls;
        if (seen[i].tag == 0 || !(cls->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)
                || cls->tp_version_tag != seen[i].tag)
            return unchanged_slow();
    }
    return 1;
}

/* configure's ``originals``: (class, name, function) triples; 0, or -1 with TypeError. */
static int
set_originals(PyObject *orig)
{
    if (orig == NULL || !PyTuple_CheckExact(orig)) {
        PyErr_SetString(PyExc_TypeError, "configure: originals must be a tuple");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(orig); i++) {
        PyObject *t = PyTuple_GET_ITEM(orig, i);
        if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 3 || !PyType_Check(PyTuple_GET_ITEM(t, 0))
                || !PyUnicode_CheckExact(PyTuple_GET_ITEM(t, 1))) {
            PyErr_SetString(PyExc_TypeError, "configure: originals are (class, name, function)");
            return -1;
        }
    }
    n_seen = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(orig); i++) {
        PyTypeObject *cls = (PyTypeObject *)PyTuple_GET_ITEM(PyTuple_GET_ITEM(orig, i), 0);
        int known = 0;
        for (int k = 0; k < n_seen; k++)
            known |= seen[k].cls == cls;
        if (known)
            continue;
        if (n_seen == MAX_CLASSES) {
            PyErr_SetString(PyExc_TypeError, "configure: originals of too many classes");
            return -1;
        }
        seen[n_seen].cls = cls;  /* kept alive by ``originals`` */
        seen[n_seen++].tag = 0;
    }
    Py_INCREF(orig);
    Py_XSETREF(originals, orig);
    return 0;
}

/* An attribute as a Py_ssize_t; 0, or -1 when it is not an int in range (error cleared). */
static int
get_size(PyObject *o, PyObject *name, Py_ssize_t *out)
{
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL || !PyLong_CheckExact(v)) {
        Py_XDECREF(v);
        PyErr_Clear();
        return -1;
    }
    *out = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

static int
set_size(PyObject *o, PyObject *name, Py_ssize_t v)
{
    PyObject *x = PyLong_FromSsize_t(v);
    int rc = x == NULL ? -1 : PyObject_SetAttr(o, name, x);
    Py_XDECREF(x);
    return rc;
}

/* The pending exception as one (normalised) object, cleared; NULL if none could be made. */
static PyObject *
take_exception(void)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (tb != NULL && v != NULL)
        PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
}

static inline int
call0(PyObject *o, PyObject *name)
{
    PyObject *r = PyObject_CallMethodNoArgs(o, name);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

