/* What the compiled write chain (log/_write.c, engine/_wal.c) shares besides its descriptor
 * (descriptor.c.h): the switch and the guard that send a call to the reference (set_enabled,
 * for the tests that compare both; a method a test or a bench replaced), configure's reader of
 * a class, and the int attribute reader. */

static int enabled = 1; /* set_enabled(False): every call goes to the reference */

static PyObject *
set_enabled(PyObject *mod, PyObject *flag)
{
    int on = PyObject_IsTrue(flag);
    if (on < 0)
        return NULL;
    enabled = on;
    Py_RETURN_NONE;
}

static int
take_type(PyObject *cfg, const char *key, PyTypeObject **slot)
{
    PyObject *t = PyDict_GetItemString(cfg, key);
    if (t == NULL || !PyType_Check(t)) {
        PyErr_Format(PyExc_TypeError, "configure: %s must be a class", key);
        return -1;
    }
    Py_INCREF(t);
    Py_XSETREF(*slot, (PyTypeObject *)t);
    return 0;
}

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

