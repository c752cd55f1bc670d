/* Shared by the pieces of _speedups.c: limits, framing states, the command table as the
 * module holds it, and building a command value. Included once, by _speedups.c. */

#define LINE_MAX_ 224
#define MAX_ARGS 8
#define MAX_FIELDS 8

enum { ST_LINE = 0, ST_ENDLINE = 1, ST_BODY = 2, ST_SKIP = 3 };
enum { F_EXACT = 1, F_LOOSE = 2, F_BODY = 4, F_PUT = 8 }; /* F_PUT: the body row that is put */

/* A value to build: a slotted class filled field by field (what dataclass __init__ would
 * store, without its per-field object.__setattr__), or a Python callable for anything else. */
typedef struct {
    PyTypeObject *type;           /* NULL: call `call` instead */
    Py_ssize_t offsets[MAX_FIELDS];
    int nfields;
    PyObject *call;               /* called with the values positionally */
} Ctor;

typedef struct {
    char *prefix;
    Py_ssize_t prefix_len;
    char kinds[MAX_ARGS];         /* u U t c T n: u32 u64 timeout count tube name */
    int nargs;
    int flags;
    PyObject *only;               /* the value of an argument-less command */
    Ctor ctor;
} Spec;

static Spec *specs = NULL;
static Py_ssize_t nspecs = 0;
static Ctor put_ctor;             /* Put(pri, delay, ttr, body, error) */
static PyObject *NEED_DATA = NULL, *BAD_FORMAT = NULL, *UNKNOWN_COMMAND = NULL;
static PyObject *S_JOB_TOO_BIG = NULL, *S_EXPECTED_CRLF = NULL, *S_BAD_FORMAT = NULL;
static PyObject *EMPTY_BYTES = NULL;
static unsigned long long max_job_limit = 1ULL << 30;
static unsigned char name_chars[256];

static PyObject *
ctor_build(Ctor *c, PyObject **vals, int n)
{
    /* Steals nothing: vals are borrowed-then-owned by the caller, who releases them. */
    if (c->type != NULL && n == c->nfields) {
        PyObject *o = c->type->tp_alloc(c->type, 0);
        if (o == NULL)
            return NULL;
        for (int i = 0; i < n; i++) {
            Py_INCREF(vals[i]);
            *(PyObject **)((char *)o + c->offsets[i]) = vals[i];
        }
        return o;
    }
    return PyObject_Vectorcall(c->call, vals, (size_t)n, NULL);
}

static int
ctor_init(Ctor *c, PyObject *cls, PyObject *fields, PyObject *call)
{
    /* fields: tuple of slot names in value order, or None for "always call". */
    c->type = NULL;
    c->nfields = 0;
    Py_INCREF(call);
    c->call = call;
    if (fields == Py_None)
        return 0;
    if (!PyType_Check(cls) || !PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) > MAX_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "fields must be a tuple of slot names of a class");
        return -1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(fields);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyObject_GetAttr(cls, PyTuple_GET_ITEM(fields, i));
        if (d == NULL)
            return -1;
        int ok = Py_IS_TYPE(d, &PyMemberDescr_Type)
                 && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        if (ok)
            c->offsets[i] = ((PyMemberDescrObject *)d)->d_member->offset;
        Py_DECREF(d);
        if (!ok)
            return 0; /* not a plain slot: keep calling */
    }
    Py_INCREF(cls);
    c->type = (PyTypeObject *)cls;
    c->nfields = (int)n;
    return 0;
}
