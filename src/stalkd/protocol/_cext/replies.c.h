/* Reply values to wire bytes, as replies.py does it for plain lines and job replies. */

static PyObject *reply_type = NULL;   /* commands.Reply */
static PyObject *word_cache = NULL;   /* word -> b"WORD\r\n" */
static PyObject *S_word = NULL, *S_args = NULL, *S_id = NULL, *S_body = NULL;  /* field names */

/* The fields' data descriptors, taken from the classes once (configure): a field of a value of
 * exactly that class is read through its descriptor (a getter call), not looked up by name
 * (PyObject_GetAttr, ~150 instructions a field: three a job reply, two a reply line). NULL: by
 * name. */
typedef struct {
    PyObject *type;    /* the class (borrowed: configure keeps it) */
    PyObject *name;
    PyObject *descr;   /* its data descriptor, or NULL */
} Field;

static Field F_reply_word, F_reply_args, F_job_word, F_job_id, F_job_body;

static int
field_init(Field *f, PyObject *type, PyObject *name)
{
    f->type = type;
    f->name = name;
    f->descr = NULL;
    if (!PyType_Check(type))
        return 0;
    PyObject *d = PyObject_GetAttr(type, name);  /* a class attribute: the descriptor itself */
    if (d == NULL) {
        PyErr_Clear();
        return 0;
    }
    /* a data descriptor: nothing an instance holds can hide it */
    if (Py_TYPE(d)->tp_descr_get != NULL && Py_TYPE(d)->tp_descr_set != NULL)
        f->descr = d;
    else
        Py_DECREF(d);
    return 0;
}

/* r's field f (a new reference), or NULL with an exception. */
static inline PyObject *
field_get(PyObject *r, const Field *f)
{
    if (f->descr != NULL && (PyObject *)Py_TYPE(r) == f->type)
        return Py_TYPE(f->descr)->tp_descr_get(f->descr, r, f->type);
    return PyObject_GetAttr(r, f->name);
}

/* The decimal digits of v at out (room for 20 digits and a sign); their count. snprintf's "%lld"
 * costs several hundred instructions (format parsing, locale), this a few per digit: a reply
 * line or job header holds one to three numbers. */
static int
format_ll(char *out, long long v)
{
    char tmp[24];
    int n = 0, k = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[k++] = '-';
    while (n)
        out[k++] = tmp[--n];
    return k;
}

/* replies.encode_line: b"WORD[ arg]*\r\n" for a plain Reply. Its fields are read as any
 * Python code reads them (compiled, through the extension type's own getters). */
static PyObject *
encode_line(PyObject *mod, PyObject *r)
{
    PyObject *word = field_get(r, &F_reply_word);
    if (word == NULL)
        return NULL;
    PyObject *args = field_get(r, &F_reply_args);
    if (args == NULL) {
        Py_DECREF(word);
        return NULL;
    }
    PyObject *result = NULL;
    if (!PyUnicode_Check(word) || !PyTuple_Check(args)) {
        PyErr_SetString(PyExc_TypeError, "Reply.word must be str and Reply.args a tuple");
        goto out;
    }
    Py_ssize_t na = PyTuple_GET_SIZE(args);
    if (na == 0) {
        result = PyDict_GetItemWithError(word_cache, word);
        if (result != NULL) {
            Py_INCREF(result);
            goto out;
        }
        if (PyErr_Occurred())
            goto out;
    }
    Py_ssize_t wlen;
    const char *w = PyUnicode_AsUTF8AndSize(word, &wlen);
    if (w == NULL)
        goto out;
    char small[512];
    char *buf = small;
    Py_ssize_t cap = sizeof small, len = 0;
    PyObject *strs = NULL;  /* str() of non-int arguments, kept alive while copied */
#define PUT(src, n)                                                          \
    do {                                                                     \
        Py_ssize_t n_ = (n);                                                 \
        if (len + n_ > cap) {                                                \
            Py_ssize_t nc = (len + n_) * 2;                                  \
            char *nb = PyMem_Malloc((size_t)nc);                             \
            if (nb == NULL) { PyErr_NoMemory(); goto fail; }                 \
            memcpy(nb, buf, (size_t)len);                                    \
            if (buf != small) PyMem_Free(buf);                               \
            buf = nb;                                                        \
            cap = nc;                                                        \
        }                                                                    \
        memcpy(buf + len, (src), (size_t)n_);                                \
        len += n_;                                                           \
    } while (0)
    PUT(w, wlen);
    for (Py_ssize_t i = 0; i < na; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        PUT(" ", 1);
        if (PyLong_CheckExact(a)) {
            int overflow;
            long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
            if (!overflow && !(v == -1 && PyErr_Occurred())) {
                char num[24];
                PUT(num, format_ll(num, v));
                continue;
            }
            PyErr_Clear();
        }
        /* as the reference: an f-string (format) for one argument, str() for several */
        PyObject *s = na == 1 ? PyObject_Format(a, NULL) : PyObject_Str(a);
        if (s == NULL)
            goto fail;
        Py_ssize_t sl;
        const char *sp = PyUnicode_AsUTF8AndSize(s, &sl);
        if (sp == NULL) {
            Py_DECREF(s);
            goto fail;
        }
        if (strs == NULL && (strs = PyList_New(0)) == NULL) {
            Py_DECREF(s);
            goto fail;
        }
        int rc = PyList_Append(strs, s);
        Py_DECREF(s);
        if (rc < 0)
            goto fail;
        PUT(sp, sl);
    }
    PUT("\r\n", 2);
#undef PUT
    result = PyBytes_FromStringAndSize(buf, len);
fail:
    if (buf != small)
        PyMem_Free(buf);
    Py_XDECREF(strs);
out:
    Py_DECREF(word);
    Py_DECREF(args);
    return result;
}

static PyObject *job_reply_type = NULL;   /* commands.JobReply */
static PyObject *parts_fallback = NULL;   /* replies.encode_reply_parts */
static PyObject *CRLF = NULL;

/* A JobReply's header, body and CRLF; NULL without an exception when the reference should
 * encode it (a field of another type, an id beyond long long). */
static PyObject *
job_parts(PyObject *r)
{
    PyObject *word = field_get(r, &F_job_word), *id = NULL, *body = NULL, *tup = NULL;
    if (word == NULL || (id = field_get(r, &F_job_id)) == NULL
            || (body = field_get(r, &F_job_body)) == NULL)
        goto out;
    if (PyUnicode_Check(word) && PyLong_CheckExact(id) && PyBytes_CheckExact(body)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(id, &overflow);
        Py_ssize_t wlen;
        const char *w = PyUnicode_AsUTF8AndSize(word, &wlen);
        if (w == NULL)
            goto out;
        if (!overflow && !(v == -1 && PyErr_Occurred()) && wlen < 64) {
            char head[128];  /* "WORD <id> <size>\r\n" */
            memcpy(head, w, (size_t)wlen);
            int k = (int)wlen;
            head[k++] = ' ';
            k += format_ll(head + k, v);
            head[k++] = ' ';
            k += format_ll(head + k, (long long)PyBytes_GET_SIZE(body));
            head[k++] = '\r';
            head[k++] = '\n';
            PyObject *h = PyBytes_FromStringAndSize(head, k);
            if (h != NULL) {
                tup = PyTuple_Pack(3, h, body, CRLF);
                Py_DECREF(h);
            }
            goto out;
        }
        PyErr_Clear();
    }
out:
    Py_XDECREF(word);
    Py_XDECREF(id);
    Py_XDECREF(body);
    return tup;
}

/* replies.encode_reply_parts: a plain line or a job's header, body and CRLF done here (the
 * replies a worker's loop gets), anything else (YAML, Close) by the reference. */
static PyObject *
encode_parts(PyObject *mod, PyObject *r)
{
    PyTypeObject *t = Py_TYPE(r);
    if ((PyObject *)t == reply_type) {
        PyObject *line = encode_line(mod, r);
        if (line == NULL)
            return NULL;
        PyObject *tup = PyTuple_Pack(1, line);
        Py_DECREF(line);
        return tup;
    }
    if ((PyObject *)t == job_reply_type) {
        PyObject *tup = job_parts(r);
        if (tup != NULL || PyErr_Occurred())
            return tup;
    }
    return PyObject_CallOneArg(parts_fallback, r);
}
