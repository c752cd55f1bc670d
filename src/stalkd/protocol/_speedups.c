/* stalkd.protocol._speedups: the compiled parser and reply-line encoder.
 *
 * The pure-Python modules (parser.py, lines.py, replies.py) are the reference; this file does
 * the same work without the interpreter's per-byte and per-call costs. It holds no grammar of
 * its own: accel.py passes it the command table (grammar.COMMANDS, in beanstalkd's matching
 * order) through configure(), each row as its prefix, its argument kinds and the value to
 * build, and the parser below only knows how to read each *kind* of argument (the same rules
 * as lines.py's regex fragments, read left to right without backtracking, which is what their
 * possessive quantifiers mean) and how beanstalkd frames lines and bodies.
 * tests/protocol/test_speedups_differential.py feeds both parsers the same streams.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <string.h>

#define LINE_MAX_ 224
#define MAX_ARGS 8
#define MAX_FIELDS 8

enum { ST_LINE = 0, ST_ENDLINE = 1, ST_BODY = 2, ST_SKIP = 3 };
enum { F_EXACT = 1, F_LOOSE = 2, F_BODY = 4 };

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

/* --- argument readers (lines.py's kinds) ------------------------------------------------ */

/* u32 / u64 / timeout: spaces, then one or more ASCII digits; > top is a failure. */
static int
read_digits(const char *s, Py_ssize_t n, Py_ssize_t *p, unsigned long long top,
            unsigned long long *out)
{
    Py_ssize_t i = *p;
    while (i < n && s[i] == ' ')
        i++;
    Py_ssize_t start = i;
    unsigned long long v = 0;
    int over = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (top - d) / 10)
            over = 1;
        else
            v = v * 10 + d;
        i++;
    }
    *p = i;
    if (i == start || over)
        return -1;
    *out = v;
    return 0;
}

static int
is_cspace(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r';
}

/* count: strtoul (C spaces, a sign, digits; minus wraps mod 2**64), truncated to 32 bits. */
static int
read_count(const char *s, Py_ssize_t n, Py_ssize_t *p, unsigned long long *out)
{
    Py_ssize_t i = *p;
    while (i < n && is_cspace(s[i]))
        i++;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) {
        neg = s[i] == '-';
        i++;
    }
    unsigned long long v;
    Py_ssize_t q = i;
    if (i < n && s[i] == ' ')  /* no spaces between the sign and the digits */
        return -1;
    if (read_digits(s, n, &q, ~0ULL, &v) < 0)
        return -1;
    *p = q;
    if (neg)
        v = (~v) + 1;
    *out = v & 0xFFFFFFFFULL;
    return 0;
}

static int
valid_tube(const char *s, Py_ssize_t n)
{
    if (n < 1 || n > 200 || s[0] == '-')
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!name_chars[(unsigned char)s[i]])
            return 0;
    return 1;
}

/* One command line's arguments (the text after the prefix) to a value, or BAD_FORMAT. */
static PyObject *
parse_args(Spec *sp, const char *s, Py_ssize_t n)
{
    PyObject *vals[MAX_ARGS];
    int nv = 0;
    Py_ssize_t p = 0;
    PyObject *result = NULL;
    for (int k = 0; k < sp->nargs; k++) {
        char kind = sp->kinds[k];
        unsigned long long v;
        PyObject *o;
        if (kind == 'T') { /* the whole rest of the line */
            if (!valid_tube(s + p, n - p))
                goto bad;
            o = PyUnicode_DecodeASCII(s + p, n - p, NULL);
            p = n;
        } else if (kind == 'n') {
            while (p < n && s[p] == ' ')
                p++;
            Py_ssize_t start = p;
            while (p < n && name_chars[(unsigned char)s[p]])
                p++;
            if (p == start || !valid_tube(s + start, p - start))
                goto bad;
            o = PyUnicode_DecodeASCII(s + start, p - start, NULL);
        } else if (kind == 'c') {
            if (read_count(s, n, &p, &v) < 0)
                goto bad;
            o = PyLong_FromUnsignedLongLong(v);
        } else {
            unsigned long long top = kind == 'u' ? 0xFFFFFFFFULL
                                   : kind == 't' ? 0x7FFFFFFFULL : ~0ULL;
            if (read_digits(s, n, &p, top, &v) < 0)
                goto bad;
            o = PyLong_FromUnsignedLongLong(v);
        }
        if (o == NULL)
            goto done;
        vals[nv++] = o;
    }
    {
        char last = sp->kinds[sp->nargs - 1];
        /* timeout and count are read with an end pointer nobody checks */
        if (p != n && last != 't' && last != 'c')
            goto bad;
    }
    result = ctor_build(&sp->ctor, vals, nv);
    goto done;
bad:
    Py_INCREF(BAD_FORMAT);
    result = BAD_FORMAT;
done:
    for (int i = 0; i < nv; i++)
        Py_DECREF(vals[i]);
    return result;
}

/* --- the parser object -------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    char *buf;
    Py_ssize_t start, end, cap;
    int state;
    unsigned long long skip;
    unsigned long long pri, delay, ttr, size;
    unsigned long long max_job_size;
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
        r = ctor_build(&put_ctor, vals, 5);
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

static PyObject *
body_done(ParserObject *self)
{
    Py_ssize_t need = (Py_ssize_t)self->size + 2;
    if (self->end - self->start < need)
        return Py_NewRef(NEED_DATA);
    const char *b = self->buf + self->start;
    Py_ssize_t size = (Py_ssize_t)self->size;
    self->start += need;
    self->state = ST_LINE;
    if (b[size] != '\r' || b[size + 1] != '\n')
        return put_error(self, self->ttr, S_EXPECTED_CRLF);
    PyObject *body = PyBytes_FromStringAndSize(b, size);
    if (body == NULL)
        return NULL;
    PyObject *r = make_put(self->pri, self->delay, self->ttr, body, Py_None);
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

static PyObject *
Parser_feed(ParserObject *self, PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *s = view.buf;
    Py_ssize_t n = view.len;
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
    if (n) {
        if (reserve(self, n) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
        memcpy(self->buf + self->end, s, (size_t)n);
        self->end += n;
    }
    PyBuffer_Release(&view);
    /* A large body read once leaves a large buffer: give it back once it is empty. */
    if (self->start == self->end && self->cap > (1 << 20)) {
        PyMem_Free(self->buf);
        self->buf = NULL;
        self->cap = self->start = self->end = 0;
    }
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
    return 0;
}

static void
Parser_dealloc(ParserObject *self)
{
    PyMem_Free(self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Parser_get_buffered(ParserObject *self, void *closure)
{
    return PyLong_FromSsize_t(self->end - self->start);
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

/* --- reply lines ------------------------------------------------------------------------ */

static PyObject *reply_type = NULL;   /* commands.Reply */
static PyObject *word_cache = NULL;   /* word -> b"WORD\r\n" */
static Py_ssize_t reply_word_off = -1, reply_args_off = -1;

/* replies.encode_line: b"WORD[ arg]*\r\n" for a plain Reply. */
static PyObject *
encode_line(PyObject *mod, PyObject *r)
{
    PyObject *word, *args;
    if (reply_word_off >= 0 && (PyObject *)Py_TYPE(r) == reply_type) {
        word = *(PyObject **)((char *)r + reply_word_off);
        args = *(PyObject **)((char *)r + reply_args_off);
        if (word == NULL || args == NULL) {
            PyErr_SetString(PyExc_AttributeError, "Reply without word or args");
            return NULL;
        }
        Py_INCREF(word);
        Py_INCREF(args);
    } else {
        word = PyObject_GetAttrString(r, "word");
        if (word == NULL)
            return NULL;
        args = PyObject_GetAttrString(r, "args");
        if (args == NULL) {
            Py_DECREF(word);
            return NULL;
        }
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
                char num[32];
                int k = snprintf(num, sizeof num, "%lld", v);
                PUT(num, k);
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
static Py_ssize_t job_word_off = -1, job_id_off = -1, job_body_off = -1;

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
    if ((PyObject *)t == job_reply_type && job_word_off >= 0) {
        PyObject *word = *(PyObject **)((char *)r + job_word_off);
        PyObject *id = *(PyObject **)((char *)r + job_id_off);
        PyObject *body = *(PyObject **)((char *)r + job_body_off);
        if (word != NULL && id != NULL && body != NULL && PyUnicode_Check(word)
                && PyLong_CheckExact(id) && PyBytes_CheckExact(body)) {
            int overflow;
            long long v = PyLong_AsLongLongAndOverflow(id, &overflow);
            Py_ssize_t wlen;
            const char *w = PyUnicode_AsUTF8AndSize(word, &wlen);
            if (w == NULL)
                return NULL;
            if (!overflow && !(v == -1 && PyErr_Occurred()) && wlen < 64) {
                char head[128];
                int k = snprintf(head, sizeof head, "%.*s %lld %zd\r\n", (int)wlen, w, v,
                                 PyBytes_GET_SIZE(body));
                PyObject *h = PyBytes_FromStringAndSize(head, k);
                if (h == NULL)
                    return NULL;
                PyObject *tup = PyTuple_Pack(3, h, body, CRLF);
                Py_DECREF(h);
                return tup;
            }
            PyErr_Clear();
        }
    }
    return PyObject_CallOneArg(parts_fallback, r);
}

/* --- configuration -------------------------------------------------------------------- */

static int
slot_offset(PyObject *cls, const char *name, Py_ssize_t *off)
{
    PyObject *d = PyObject_GetAttrString(cls, name);
    if (d == NULL)
        return -1;
    if (Py_IS_TYPE(d, &PyMemberDescr_Type)
            && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX)
        *off = ((PyMemberDescrObject *)d)->d_member->offset;
    else
        *off = -1;
    Py_DECREF(d);
    return 0;
}

static PyObject *
configure(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"table", "put", "need_data", "bad_format", "unknown_command",
                             "name_chars", "max_job_limit", "reply", "words", "job_reply",
                             "parts_fallback", NULL};
    PyObject *table, *put, *need, *bad, *unknown, *reply, *words, *job_reply, *fallback;
    const char *chars;
    Py_ssize_t nchars;
    unsigned long long limit;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!OOOy#KOO!OO", kwlist, &PyTuple_Type, &table,
                                     &PyTuple_Type, &put, &need, &bad, &unknown, &chars, &nchars,
                                     &limit, &reply, &PyDict_Type, &words, &job_reply, &fallback))
        return NULL;
    if (specs != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups is configured once");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(table);
    Spec *t = PyMem_Calloc((size_t)n, sizeof(Spec));
    if (t == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t k = 0; k < n; k++) {
        /* (prefix, kinds, flags, only, cls, fields, call) */
        PyObject *row = PyTuple_GET_ITEM(table, k);
        const char *prefix, *kinds;
        Py_ssize_t plen, nk;
        int flags;
        PyObject *only, *cls, *fields, *call;
        if (!PyArg_ParseTuple(row, "y#y#iOOOO", &prefix, &plen, &kinds, &nk, &flags, &only,
                              &cls, &fields, &call))
            goto fail;
        if (nk > MAX_ARGS || (!(flags & (F_EXACT | F_LOOSE | F_BODY)) && nk == 0)) {
            PyErr_SetString(PyExc_ValueError, "bad argument kinds");
            goto fail;
        }
        /* the body command's line is read as four u32s, the last its size (lines.py asserts
         * the same of the table) */
        if ((flags & F_BODY) && (nk != 4 || memcmp(kinds, "uuuu", 4) != 0)) {
            PyErr_SetString(PyExc_ValueError, "the body command must take four u32 arguments");
            goto fail;
        }
        t[k].prefix = PyMem_Malloc((size_t)plen + 1);
        if (t[k].prefix == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        memcpy(t[k].prefix, prefix, (size_t)plen);
        t[k].prefix_len = plen;
        memcpy(t[k].kinds, kinds, (size_t)nk);
        t[k].nargs = (int)nk;
        t[k].flags = flags;
        Py_INCREF(only);
        t[k].only = only;
        if (ctor_init(&t[k].ctor, cls, fields, call) < 0)
            goto fail;
    }
    /* put: (cls, fields, call) */
    {
        PyObject *cls, *fields, *call;
        if (!PyArg_ParseTuple(put, "OOO", &cls, &fields, &call) ||
                ctor_init(&put_ctor, cls, fields, call) < 0)
            goto fail;
    }
    memset(name_chars, 0, sizeof name_chars);
    for (Py_ssize_t i = 0; i < nchars; i++)
        name_chars[(unsigned char)chars[i]] = 1;
    NEED_DATA = Py_NewRef(need);
    BAD_FORMAT = Py_NewRef(bad);
    UNKNOWN_COMMAND = Py_NewRef(unknown);
    max_job_limit = limit;
    reply_type = Py_NewRef(reply);
    word_cache = Py_NewRef(words);
    if (slot_offset(reply, "word", &reply_word_off) < 0 ||
            slot_offset(reply, "args", &reply_args_off) < 0)
        goto fail;
    if (reply_word_off < 0 || reply_args_off < 0)
        reply_word_off = reply_args_off = -1;
    job_reply_type = Py_NewRef(job_reply);
    parts_fallback = Py_NewRef(fallback);
    if (slot_offset(job_reply, "word", &job_word_off) < 0 ||
            slot_offset(job_reply, "id", &job_id_off) < 0 ||
            slot_offset(job_reply, "body", &job_body_off) < 0)
        goto fail;
    if (job_word_off < 0 || job_id_off < 0 || job_body_off < 0)
        job_word_off = -1;
    specs = t;
    nspecs = n;
    Py_RETURN_NONE;
fail:
    /* configure() runs once at import; a failure leaves the module unusable (accel.py then
     * falls back to the pure-Python parser), so the partial table is not worth unpicking. */
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "Install the command table (accel.py calls this once, from grammar.COMMANDS)."},
    {"encode_line", (PyCFunction)encode_line, METH_O,
     "A plain Reply as its wire line (replies.encode_line)."},
    {"encode_reply_parts", (PyCFunction)encode_parts, METH_O,
     "A reply as byte strings to send in order (replies.encode_reply_parts)."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "Compiled parser and reply-line encoder; see stalkd.protocol.accel.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (PyType_Ready(&ParserType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    S_JOB_TOO_BIG = PyUnicode_InternFromString("JOB_TOO_BIG");
    S_EXPECTED_CRLF = PyUnicode_InternFromString("EXPECTED_CRLF");
    S_BAD_FORMAT = PyUnicode_InternFromString("BAD_FORMAT");
    EMPTY_BYTES = PyBytes_FromStringAndSize(NULL, 0);
    CRLF = PyBytes_FromStringAndSize("\r\n", 2);
    if (!S_JOB_TOO_BIG || !S_EXPECTED_CRLF || !S_BAD_FORMAT || !EMPTY_BYTES || !CRLF) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ParserType);
    if (PyModule_AddObject(m, "Parser", (PyObject *)&ParserType) < 0) {
        Py_DECREF(&ParserType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
