/* stalkd.engine._records: the compiled twin of engine/model.py's ``encode``.
 *
 * model.py is the reference and holds the format (its field tables): this writes the same
 * version-1 payload bytes for a Record in one allocation, where the reference packs three to
 * five structs and joins them. Any record the fast path does not take as it is (a value out of
 * its field's range, a tube that is not ASCII, a body that is not bytes, Op.UNKNOWN) goes to the
 * reference, given once by ``set_reference`` with the ``Op`` enum, so errors are the reference's own.
 * tests/engine/test_records_differential.py requires identical bytes for random records.
 *
 * Layouts (little-endian, packed), after the 26-byte head u8 version | u8 op | u64 seq |
 * i64 time_us | u64 job_id:
 *   PUT      u32 pri | u32 delay | u32 ttr | i64 deadline_us | u16 tube_len | tube | u32 len | body
 *   RELEASE  u32 pri | u32 delay | i64 deadline_us
 *   BURY     u32 pri
 *   PAUSE    u32 delay | i64 deadline_us | u16 tube_len | tube
 *   JOB      u8 state | u32 pri | u32 delay | u32 ttr | i64 created_us | i64 deadline_us |
 *            u32 reserves | u32 timeouts | u32 releases | u32 buries | u32 kicks |
 *            u16 tube_len | tube | u32 len | body
 *   RESULT   i64 deadline_us | u32 len | body
 *   EPOCH    u64 epoch | u64 start_offset
 *   others   nothing
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define VERSION 1
#define HEAD 26
enum { PUT = 1, RELEASE = 3, BURY = 4, PAUSE = 9, JOB = 10, RESULT = 11, EPOCH = 12, UNKNOWN = 255 };

static PyObject *reference = NULL; /* model.py's encode */
static PyObject *op_type = NULL;   /* model.Op: the reference tells ops apart by identity */

enum {
    F_OP, F_SEQ, F_TIME, F_JOB, F_TUBE, F_PRI, F_DELAY, F_TTR, F_DEADLINE, F_BODY, F_STATE,
    F_CREATED, F_RESERVES, F_TIMEOUTS, F_RELEASES, F_BURIES, F_KICKS, F_EPOCH, F_START, F_COUNT
};
static const char *field_names[F_COUNT] = {
    "op", "seq", "time_us", "job_id", "tube", "pri", "delay", "ttr", "deadline_us", "body", "state",
    "created_us", "reserves", "timeouts", "releases", "buries", "kicks", "epoch", "start_offset",
};
static PyObject *names[F_COUNT];

/* A field read from the record; 0 on success, -1 when the record is off the fast path (any
 * error is cleared: the reference then decides). */
typedef struct {
    PyObject *rec;
    int off; /* set once anything is off the fast path */
} Reader;

static int
get_int(Reader *r, int f, int is_signed, uint64_t max, uint64_t *out)
{
    if (r->off)
        return -1;
    PyObject *v = PyObject_GetAttr(r->rec, names[f]);
    if (v == NULL || !PyLong_Check(v)) {
        Py_XDECREF(v);
        PyErr_Clear();
        r->off = 1;
        return -1;
    }
    /* AndOverflow: it reads the digits itself, where PyLong_AsLongLong goes through a byte array. */
    int overflow = 0;
    long long s = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (is_signed) {
        Py_DECREF(v);
        if (overflow || (s == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            r->off = 1;
            return -1;
        }
        *out = (uint64_t)s;
        return 0;
    }
    unsigned long long x;
    if (!overflow && s >= 0)
        x = (unsigned long long)s;
    else {
        PyErr_Clear();
        x = PyLong_AsUnsignedLongLong(v); /* from 2**63 on, or negative (an error) */
    }
    Py_DECREF(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        r->off = 1;
        return -1;
    }
    if (x > max) {
        r->off = 1;
        return -1;
    }
    *out = x;
    return 0;
}

/* A new reference to the tube (an ASCII str of at most 65535 characters) or to the body (exact
 * bytes of at most 2**32 - 1), else NULL with ``off`` set. */
static PyObject *
get_tube(Reader *r)
{
    if (r->off)
        return NULL;
    PyObject *v = PyObject_GetAttr(r->rec, names[F_TUBE]);
    if (v != NULL && PyUnicode_CheckExact(v) && PyUnicode_IS_ASCII(v) && PyUnicode_GET_LENGTH(v) <= 0xFFFF)
        return v;
    Py_XDECREF(v);
    PyErr_Clear();
    r->off = 1;
    return NULL;
}

static PyObject *
get_body(Reader *r)
{
    if (r->off)
        return NULL;
    PyObject *v = PyObject_GetAttr(r->rec, names[F_BODY]);
    if (v != NULL && PyBytes_CheckExact(v) && (uint64_t)PyBytes_GET_SIZE(v) <= 0xFFFFFFFFull)
        return v;
    Py_XDECREF(v);
    PyErr_Clear();
    r->off = 1;
    return NULL;
}

static unsigned char *
put(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
    return p + n;
}

static unsigned char *
put_bytes(unsigned char *p, const char *data, Py_ssize_t n)
{
    memcpy(p, data, (size_t)n);
    return p + n;
}

#define U32 0xFFFFFFFFull
#define U64 0xFFFFFFFFFFFFFFFFull
#define I64 0 /* unused bound for signed fields */

static PyObject *
encode(PyObject *self, PyObject *rec)
{
    Reader r = {rec, 0};
    uint64_t op = 0, seq = 0, time_us = 0, job_id = 0;
    PyObject *opv = PyObject_GetAttr(rec, names[F_OP]);
    if (opv == NULL || op_type == NULL || Py_TYPE(opv) != (PyTypeObject *)op_type)
        r.off = 1; /* a plain int is not an Op member to the reference: it decides */
    Py_XDECREF(opv);
    PyErr_Clear();
    get_int(&r, F_OP, 0, 0xFF, &op);
    get_int(&r, F_SEQ, 0, U64, &seq);
    get_int(&r, F_TIME, 1, I64, &time_us);
    get_int(&r, F_JOB, 0, U64, &job_id);
    uint64_t a[11] = {0};
    PyObject *tube = NULL, *body = NULL;
    Py_ssize_t size = HEAD, tlen = 0, blen = 0;
    if (!r.off) {
        switch (op) {
        case PUT:
            get_int(&r, F_PRI, 0, U32, &a[0]);
            get_int(&r, F_DELAY, 0, U32, &a[1]);
            get_int(&r, F_TTR, 0, U32, &a[2]);
            get_int(&r, F_DEADLINE, 1, I64, &a[3]);
            tube = get_tube(&r);
            body = get_body(&r);
            if (!r.off) {
                tlen = PyUnicode_GET_LENGTH(tube);
                blen = PyBytes_GET_SIZE(body);
                size += 22 + tlen + 4 + blen;
            }
            break;
        case RELEASE:
            get_int(&r, F_PRI, 0, U32, &a[0]);
            get_int(&r, F_DELAY, 0, U32, &a[1]);
            get_int(&r, F_DEADLINE, 1, I64, &a[2]);
            size += 16;
            break;
        case BURY:
            get_int(&r, F_PRI, 0, U32, &a[0]);
            size += 4;
            break;
        case PAUSE:
            get_int(&r, F_DELAY, 0, U32, &a[0]);
            get_int(&r, F_DEADLINE, 1, I64, &a[1]);
            tube = get_tube(&r);
            if (!r.off) {
                tlen = PyUnicode_GET_LENGTH(tube);
                size += 14 + tlen;
            }
            break;
        case JOB:
            get_int(&r, F_STATE, 0, 0xFF, &a[0]);
            get_int(&r, F_PRI, 0, U32, &a[1]);
            get_int(&r, F_DELAY, 0, U32, &a[2]);
            get_int(&r, F_TTR, 0, U32, &a[3]);
            get_int(&r, F_CREATED, 1, I64, &a[4]);
            get_int(&r, F_DEADLINE, 1, I64, &a[5]);
            get_int(&r, F_RESERVES, 0, U32, &a[6]);
            get_int(&r, F_TIMEOUTS, 0, U32, &a[7]);
            get_int(&r, F_RELEASES, 0, U32, &a[8]);
            get_int(&r, F_BURIES, 0, U32, &a[9]);
            get_int(&r, F_KICKS, 0, U32, &a[10]);
            tube = get_tube(&r);
            body = get_body(&r);
            if (!r.off) {
                tlen = PyUnicode_GET_LENGTH(tube);
                blen = PyBytes_GET_SIZE(body);
                size += 51 + tlen + 4 + blen;
            }
            break;
        case RESULT:
            get_int(&r, F_DEADLINE, 1, I64, &a[0]);
            body = get_body(&r);
            if (!r.off) {
                blen = PyBytes_GET_SIZE(body);
                size += 8 + 4 + blen;
            }
            break;
        case EPOCH:
            get_int(&r, F_EPOCH, 0, U64, &a[0]);
            get_int(&r, F_START, 0, U64, &a[1]);
            size += 16;
            break;
        case UNKNOWN:
            r.off = 1; /* the reference raises */
            break;
        default:
            break;
        }
    }
    if (r.off) {
        Py_XDECREF(tube);
        Py_XDECREF(body);
        if (reference == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "stalkd.engine._records: set_reference was not called");
            return NULL;
        }
        return PyObject_CallOneArg(reference, rec);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) {
        Py_XDECREF(tube);
        Py_XDECREF(body);
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    p = put(p, VERSION, 1);
    p = put(p, op, 1);
    p = put(p, seq, 8);
    p = put(p, time_us, 8);
    p = put(p, job_id, 8);
    switch (op) {
    case PUT:
        p = put(p, a[0], 4);
        p = put(p, a[1], 4);
        p = put(p, a[2], 4);
        p = put(p, a[3], 8);
        p = put(p, (uint64_t)tlen, 2);
        p = put_bytes(p, (const char *)PyUnicode_1BYTE_DATA(tube), tlen);
        p = put(p, (uint64_t)blen, 4);
        p = put_bytes(p, PyBytes_AS_STRING(body), blen);
        break;
    case RELEASE:
        p = put(p, a[0], 4);
        p = put(p, a[1], 4);
        p = put(p, a[2], 8);
        break;
    case BURY:
        p = put(p, a[0], 4);
        break;
    case PAUSE:
        p = put(p, a[0], 4);
        p = put(p, a[1], 8);
        p = put(p, (uint64_t)tlen, 2);
        p = put_bytes(p, (const char *)PyUnicode_1BYTE_DATA(tube), tlen);
        break;
    case JOB:
        p = put(p, a[0], 1);
        p = put(p, a[1], 4);
        p = put(p, a[2], 4);
        p = put(p, a[3], 4);
        p = put(p, a[4], 8);
        p = put(p, a[5], 8);
        for (int i = 6; i < 11; i++)
            p = put(p, a[i], 4);
        p = put(p, (uint64_t)tlen, 2);
        p = put_bytes(p, (const char *)PyUnicode_1BYTE_DATA(tube), tlen);
        p = put(p, (uint64_t)blen, 4);
        p = put_bytes(p, PyBytes_AS_STRING(body), blen);
        break;
    case RESULT:
        p = put(p, a[0], 8);
        p = put(p, (uint64_t)blen, 4);
        p = put_bytes(p, PyBytes_AS_STRING(body), blen);
        break;
    case EPOCH:
        p = put(p, a[0], 8);
        p = put(p, a[1], 8);
        break;
    default:
        break;
    }
    Py_XDECREF(tube);
    Py_XDECREF(body);
    return out;
}

static PyObject *
set_reference(PyObject *self, PyObject *args)
{
    PyObject *fn, *ops;
    if (!PyArg_ParseTuple(args, "OO!", &fn, &PyType_Type, &ops))
        return NULL;
    Py_INCREF(fn);
    Py_XSETREF(reference, fn);
    Py_INCREF(ops);
    Py_XSETREF(op_type, ops);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"encode", encode, METH_O, "A record's version-1 payload (model.encode)."},
    {"set_reference", set_reference, METH_VARARGS,
     "set_reference(encode, Op): the reference encoder, for records off the fast path, and the op enum."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef recordsmodule = {
    PyModuleDef_HEAD_INIT, "stalkd.engine._records",
    "The compiled record encoder (stalkd.engine.model is the reference).", -1, methods,
};

PyMODINIT_FUNC
PyInit__records(void)
{
    for (int i = 0; i < F_COUNT; i++) {
        names[i] = PyUnicode_InternFromString(field_names[i]);
        if (names[i] == NULL)
            return NULL;
    }
    return PyModule_Create(&recordsmodule);
}
