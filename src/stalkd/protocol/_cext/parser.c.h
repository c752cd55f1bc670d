/* The parser object: beanstalkd's line and body framing, as parser.py does it. */

/* parser.py's BIG_BODY: a body at least this long that has not all arrived is received into
 * its own bytes object, filled read by read (see parser.py). */
#define BIG_BODY ((Py_ssize_t)1 << 20)

typedef struct {
    PyObject_HEAD
    char *buf;
    Py_ssize_t start, end, cap;
    PyObject *big;                /* a big body being received (an unshared bytes), else NULL */
    Py_ssize_t big_fill;          /* its bytes received so far */
    int state;
    unsigned long long skip;
    unsigned long long pri, delay, ttr, size;
    unsigned long long max_job_size;
    Spec *other;                  /* reading the body of this non-put body command, else NULL */
    unsigned long long head[MAX_ARGS];  /* its arguments before <bytes> */
    int nhead;
} ParserObject;

static PyObject *
make_put(unsigned long long pri, unsigned long long delay, unsigned long long ttr,
         PyObject *body, PyObject *error)
{
    PyObject *vals[5];
    vals[0] = PyLong_FromUnsignedLongLong(pri);
    vals[1] = PyLong_FromUnsignedLongLong(delay);
    vals[2] = PyLong_FromUnsignedLongLong(ttr);
    PyObject *r = NULL;
    if (vals[0] && vals[1] && vals[2] && body) {
        vals[3] = body;
        vals[4] = error;
        r = PyObject_Vectorcall(put_build, vals, 5, NULL);
    }
    Py_XDECREF(vals[0]);
    Py_XDECREF(vals[1]);
    Py_XDECREF(vals[2]);
    return r;
}

static PyObject *
put_error(ParserObject *self, unsigned long long ttr, PyObject *error)
{
    return make_put(self->pri, self->delay, ttr, EMPTY_BYTES, error);
}

/* The non-put body command being read, with its body or an error (then an empty body), as
 * parser.py's ``done``: the row's class called with (*head, body, error). */
static PyObject *
other_build(ParserObject *self, PyObject *body, PyObject *error)
{
    Spec *sp = self->other;
    self->other = NULL;
    PyObject *vals[MAX_ARGS + 2];
    int n = self->nhead;
    for (int i = 0; i < n; i++) {
        vals[i] = PyLong_FromUnsignedLongLong(self->head[i]);
        if (vals[i] == NULL) {
            for (int j = 0; j < i; j++)
                Py_DECREF(vals[j]);
            return NULL;
        }
    }
    vals[n] = body;
    vals[n + 1] = error;
    PyObject *r = PyObject_Vectorcall(sp->build, vals, (size_t)(n + 2), NULL);
    for (int i = 0; i < n; i++)
        Py_DECREF(vals[i]);
    return r;
}

/* The end of a big body: its CRLF, then the item with the filled bytes object (no copy). */
static PyObject *
big_done(ParserObject *self)
{
    if (self->big_fill < (Py_ssize_t)self->size || self->end - self->start < 2)
        return Py_NewRef(NEED_DATA);
    const char *b = self->buf + self->start;
    self->start += 2;
    self->state = ST_LINE;
    PyObject *body = self->big;
    self->big = NULL;
    self->big_fill = 0;
    PyObject *r;
    if (b[0] != '\r' || b[1] != '\n')
        r = self->other ? other_build(self, EMPTY_BYTES, S_EXPECTED_CRLF)
                        : put_error(self, self->ttr, S_EXPECTED_CRLF);
    else
        r = self->other ? other_build(self, body, Py_None)
                        : make_put(self->pri, self->delay, self->ttr, body, Py_None);
    Py_DECREF(body);
    return r;
}

static PyObject *
body_done(ParserObject *self)
{
    if (self->big != NULL)
        return big_done(self);
    Py_ssize_t need = (Py_ssize_t)self->size + 2;
    Py_ssize_t avail = self->end - self->start;
    if (avail < (Py_ssize_t)self->size && (Py_ssize_t)self->size >= BIG_BODY) {
        /* Not all here: what has come moves to the body's own object, the rest is copied in
         * as it is read, so no turn of the loop copies (and faults in) the whole body. */
        self->big = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)self->size);
        if (self->big == NULL)
            return NULL;
        memcpy(PyBytes_AS_STRING(self->big), self->buf + self->start, (size_t)avail);
        self->big_fill = avail;
        self->start = self->end;
        return Py_NewRef(NEED_DATA);
    }
    if (avail < need)
        return Py_NewRef(NEED_DATA);
    const char *b = self->buf + self->start;
    Py_ssize_t size = (Py_ssize_t)self->size;
    self->start += need;
    self->state = ST_LINE;
    if (b[size] != '\r' || b[size + 1] != '\n')
        return self->other ? other_build(self, EMPTY_BYTES, S_EXPECTED_CRLF)
                           : put_error(self, self->ttr, S_EXPECTED_CRLF);
    PyObject *body = PyBytes_FromStringAndSize(b, size);
    if (body == NULL)
        return NULL;
    PyObject *r = self->other ? other_build(self, body, Py_None)
                              : make_put(self->pri, self->delay, self->ttr, body, Py_None);
    Py_DECREF(body);
    return r;
}

static PyObject *
skip_done(ParserObject *self)
{
    Py_ssize_t avail = self->end - self->start;
    if (self->skip > (unsigned long long)avail) {
        self->skip -= (unsigned long long)avail;
        self->start = self->end = 0;
        return Py_NewRef(NEED_DATA);
    }
    self->start += (Py_ssize_t)self->skip;
    self->skip = 0;
    self->state = ST_LINE;
    if (self->other)
        return other_build(self, EMPTY_BYTES, S_JOB_TOO_BIG);
    return put_error(self, self->ttr, S_JOB_TOO_BIG);
}

/* The first '\r' in [pos, lim - 1), when a '\n' follows it; -1 otherwise. *found tells
 * whether there was a '\r' at all (a bare one ends the search as in the reference). */
static Py_ssize_t
line_end(const char *buf, Py_ssize_t pos, Py_ssize_t lim, int *found)
{
    *found = 0;
    if (lim - 1 <= pos)
        return -1;
    const char *r = memchr(buf + pos, '\r', (size_t)(lim - 1 - pos));
    if (r == NULL)
        return -1;
    *found = 1;
    return r[1] == '\n' ? r - buf : -1;
}

static PyObject *
endline(ParserObject *self)
{
    Py_ssize_t pos = self->start, end = self->end;
    for (;;) {
        Py_ssize_t lim = pos + LINE_MAX_ < end ? pos + LINE_MAX_ : end;
        int found;
        Py_ssize_t i = line_end(self->buf, pos, lim, &found);
        if (i >= 0) {
            self->start = i + 2;
            self->state = ST_LINE;
            return Py_NewRef(BAD_FORMAT);
        }
        if (end - pos < LINE_MAX_)
            break;
        pos += LINE_MAX_;
    }
    self->start = pos; /* earlier bytes are thrown away */
    return Py_NewRef(NEED_DATA);
}

static PyObject *
put_values(ParserObject *self, unsigned long long pri, unsigned long long delay,
           unsigned long long ttr, unsigned long long size, int clean_end)
{
    /* beanstalkd's order: numbers, JOB_TOO_BIG, trailing text, ttr clamp */
    if (size > self->max_job_size) {
        self->pri = pri;
        self->delay = delay;
        self->ttr = ttr;
        self->size = size;
        self->skip = size + 2;
        self->state = ST_SKIP;
        return skip_done(self);
    }
    if (!clean_end)
        return make_put(pri, delay, ttr, EMPTY_BYTES, S_BAD_FORMAT);
    if (ttr < 1)
        ttr = 1;
    self->pri = pri;
    self->delay = delay;
    self->ttr = ttr;
    self->size = size;
    self->state = ST_BODY;
    return body_done(self);
}

/* A body command other than put (stalkd's result-put): "<digits>... <bytes>", each in its
 * kind's range and nothing after them, else BAD_FORMAT; the body is read as put's. */
static PyObject *
other_line(ParserObject *self, Spec *sp, const char *rest, Py_ssize_t rn)
{
    unsigned long long v[MAX_ARGS];
    Py_ssize_t p = 0;
    for (int a = 0; a < sp->nargs; a++)
        if (read_digits(rest, rn, &p, sp->kinds[a] == 'U' ? ~0ULL : 0xFFFFFFFFULL, &v[a]) < 0)
            return Py_NewRef(BAD_FORMAT);
    if (p != rn)
        return Py_NewRef(BAD_FORMAT);
    self->other = sp;
    self->nhead = sp->nargs - 1;
    for (int a = 0; a < self->nhead; a++)
        self->head[a] = v[a];
    self->size = v[sp->nargs - 1];
    if (self->size > self->max_job_size) {
        self->skip = self->size + 2;
        self->state = ST_SKIP;
        return skip_done(self);
    }
    self->state = ST_BODY;
    return body_done(self);
}

static PyObject *
command(ParserObject *self, const char *line, Py_ssize_t n)
{
    if (memchr(line, '\0', (size_t)n) != NULL)
        return Py_NewRef(BAD_FORMAT);
    for (Py_ssize_t k = 0; k < nspecs; k++) {
        Spec *sp = &specs[k];
        if (n < sp->prefix_len || memcmp(line, sp->prefix, (size_t)sp->prefix_len) != 0)
            continue;
        const char *rest = line + sp->prefix_len;
        Py_ssize_t rn = n - sp->prefix_len;
        if (sp->flags & F_EXACT)
            return Py_NewRef(rn ? BAD_FORMAT : sp->only);
        if (sp->flags & F_LOOSE)
            return Py_NewRef(sp->only);
        if ((sp->flags & F_BODY) && !(sp->flags & F_PUT))
            return other_line(self, sp, rest, rn);
        if (sp->flags & F_BODY) {
            unsigned long long v[4];
            Py_ssize_t p = 0;
            for (int a = 0; a < 4; a++)
                if (read_digits(rest, rn, &p, 0xFFFFFFFFULL, &v[a]) < 0)
                    return Py_NewRef(BAD_FORMAT);
            return put_values(self, v[0], v[1], v[2], v[3], p == rn);
        }
        return parse_args(sp, rest, rn);
    }
    return Py_NewRef(UNKNOWN_COMMAND);
}

static PyObject *
Parser_next(ParserObject *self, PyObject *Py_UNUSED(ignored))
{
    if (specs == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups.configure() was not called");
        return NULL;
    }
    switch (self->state) {
    case ST_LINE: {
        Py_ssize_t pos = self->start, end = self->end;
        Py_ssize_t lim = pos + LINE_MAX_ < end ? pos + LINE_MAX_ : end;
        int found;
        Py_ssize_t i = line_end(self->buf, pos, lim, &found);
        if (i >= 0) {
            self->start = i + 2;
            return command(self, self->buf + pos, i - pos);
        }
        if (end - pos >= LINE_MAX_) {
            self->start = pos + LINE_MAX_;
            self->state = ST_ENDLINE;
            return endline(self);
        }
        return Py_NewRef(NEED_DATA);
    }
    case ST_BODY:
        return body_done(self);
    case ST_ENDLINE:
        return endline(self);
    default:
        return skip_done(self);
    }
}

static int
reserve(ParserObject *self, Py_ssize_t n)
{
    if (self->start == self->end)
        self->start = self->end = 0;
    if (self->cap - self->end >= n)
        return 0;
    Py_ssize_t live = self->end - self->start;
    if (self->start > 0 && self->cap - live >= n && self->start >= live) {
        memmove(self->buf, self->buf + self->start, (size_t)live);
        self->start = 0;
        self->end = live;
        return 0;
    }
    Py_ssize_t want = live + n;
    Py_ssize_t cap = self->cap ? self->cap : 4096;
    while (cap < want)
        cap *= 2;
    char *nb = PyMem_Malloc((size_t)cap + 1);
    if (nb == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (live)
        memcpy(nb, self->buf + self->start, (size_t)live);
    PyMem_Free(self->buf);
    self->buf = nb;
    self->cap = cap;
    self->start = 0;
    self->end = live;
    return 0;
}

/* Add n bytes at s (Parser.feed without the buffer protocol); -1 with an exception. */
static int
parser_feed_bytes(ParserObject *self, const char *s, Py_ssize_t n)
{
    if (n && self->skip) {
        if ((unsigned long long)n <= self->skip) {
            self->skip -= (unsigned long long)n;
            n = 0;
        } else {
            s += self->skip;
            n -= (Py_ssize_t)self->skip;
            self->skip = 0;
        }
    }
    if (n && self->big != NULL && self->big_fill < (Py_ssize_t)self->size) {
        Py_ssize_t k = (Py_ssize_t)self->size - self->big_fill;
        if (k > n)
            k = n;
        memcpy(PyBytes_AS_STRING(self->big) + self->big_fill, s, (size_t)k);
        self->big_fill += k;
        s += k;
        n -= k;
    }
    if (n) {
        if (reserve(self, n) < 0)
            return -1;
        memcpy(self->buf + self->end, s, (size_t)n);
        self->end += n;
    }
    /* A large body read once leaves a large buffer: give it back once it is empty. */
    if (self->start == self->end && self->cap > (1 << 20)) {
        PyMem_Free(self->buf);
        self->buf = NULL;
        self->cap = self->start = self->end = 0;
    }
    return 0;
}

static PyObject *
Parser_feed(ParserObject *self, PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    int rc = parser_feed_bytes(self, view.buf, view.len);
    PyBuffer_Release(&view);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int Parser_set_mjs(ParserObject *self, PyObject *value, void *closure);

static int
Parser_init(ParserObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"max_job_size", NULL};
    PyObject *mjs = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &mjs))
        return -1;
    self->max_job_size = 65535;
    if (mjs != NULL && Parser_set_mjs(self, mjs, NULL) < 0)
        return -1;
    self->start = self->end = 0;
    self->state = ST_LINE;
    self->skip = 0;
    Py_CLEAR(self->big);
    self->big_fill = 0;
    return 0;
}

static void
Parser_dealloc(ParserObject *self)
{
    PyMem_Free(self->buf);
    Py_XDECREF(self->big);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Parser.buffered as a C function: a compiled caller (the server's connection, which reads it
 * a few times per command) takes it from the module's capsule ``buffered_c`` and calls it on an
 * object of this exact type, with no attribute look-up and no int object. */
static Py_ssize_t
parser_buffered_c(PyObject *p)
{
    ParserObject *self = (ParserObject *)p;
    return self->end - self->start + self->big_fill;
}

#define BUFFERED_C_NAME "stalkd.protocol._speedups.buffered_c"

/* Parser.next and Parser.feed as C functions, for the same caller and on the same type (capsules
 * ``next_c`` and ``feed_c``): one per command each, a bound method's call by name costs more than
 * the call itself. Each returns a new reference, NULL with an exception set on error. */
static PyObject *
parser_next_c(PyObject *p)
{
    return Parser_next((ParserObject *)p, NULL);
}

static PyObject *
parser_feed_c(PyObject *p, PyObject *data)
{
    return Parser_feed((ParserObject *)p, data);
}

#define NEXT_C_NAME "stalkd.protocol._speedups.next_c"
#define FEED_C_NAME "stalkd.protocol._speedups.feed_c"

static PyObject *
Parser_get_buffered(ParserObject *self, void *closure)
{
    return PyLong_FromSsize_t(parser_buffered_c((PyObject *)self));
}

static PyObject *
Parser_get_state(ParserObject *self, void *closure)
{
    return PyLong_FromLong(self->state);
}

static PyObject *
Parser_get_mjs(ParserObject *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(self->max_job_size);
}

static int
Parser_set_mjs(ParserObject *self, PyObject *value, void *closure)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete max_job_size");
        return -1;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || (unsigned long long)v > max_job_limit) {
        PyErr_Format(PyExc_ValueError, "max_job_size must be 0..%llu, got %lld",
                     max_job_limit, v);
        return -1;
    }
    self->max_job_size = (unsigned long long)v;
    return 0;
}

static PyGetSetDef Parser_getset[] = {
    {"buffered", (getter)Parser_get_buffered, NULL,
     "Bytes held and not yet turned into items (a server's per-connection limit).", NULL},
    {"max_job_size", (getter)Parser_get_mjs, (setter)Parser_set_mjs,
     "Largest accepted put body in bytes.", NULL},
    {"_state", (getter)Parser_get_state, NULL, "The framing state (parser.py's _STATE_*).", NULL},
    {NULL},
};

static PyMethodDef Parser_methods[] = {
    {"feed", (PyCFunction)Parser_feed, METH_O,
     "Add bytes received from the peer. Bytes of a too-big body are dropped here."},
    {"next", (PyCFunction)Parser_next, METH_NOARGS,
     "The next item, or NEED_DATA when the bytes fed so far do not complete one."},
    {NULL},
};

static PyTypeObject ParserType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stalkd.protocol._speedups.Parser",
    .tp_doc = "The compiled twin of stalkd.protocol.parser.Parser (same items, same bounds).",
    .tp_basicsize = sizeof(ParserObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Parser_init,
    .tp_dealloc = (destructor)Parser_dealloc,
    .tp_methods = Parser_methods,
    .tp_getset = Parser_getset,
};
