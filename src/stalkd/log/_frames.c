/* stalkd.log._frames: the compiled twin of log/frame.py's encode_data_frames.
 *
 * frame.py is the reference and holds the layout; this writes the same bytes (a 24-byte header,
 * the payload, zero padding to 8 bytes, one CRC32C over everything after the CRC) into one
 * buffer with one allocation, instead of a pack, a join and a CRC call per frame. Any input the
 * fast path does not take as it is (a value out of its field's range, a payload without a
 * contiguous buffer) goes to the reference, given once by ``set_reference``, so errors are the
 * reference's own. tests/log/test_frames_differential.py requires identical bytes.
 *
 * put_data_frame is the same for one frame written straight into a buffer (the mapping of the
 * active segment), against frame.put_data_frame. The frame's bytes and the CRC32C are
 * _cext/framecore.c.h's (shared with _write.c, the writer's batch).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_cext/framecore.c.h"

static PyObject *reference = NULL;     /* frame.py's encode_data_frames */
static PyObject *put_reference = NULL; /* frame.py's put_data_frame */

static PyObject *
call_reference(PyObject *const *args, Py_ssize_t nargs)
{
    if (reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stalkd.log._frames: set_reference was not called");
        return NULL;
    }
    return PyObject_Vectorcall(reference, args, nargs, NULL);
}

/* encode_data_frames(payloads, first_delta, timestamp_us, epoch) -> bytes */
static PyObject *
encode_data_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "encode_data_frames takes 4 arguments");
        return NULL;
    }
    PyObject *seq = args[0];
    if (!PyList_CheckExact(seq) && !PyTuple_CheckExact(seq))
        return call_reference(args, nargs);
    unsigned long long first, epoch;
    long long ts;
    first = PyLong_Check(args[1]) ? PyLong_AsUnsignedLongLong(args[1]) : (unsigned long long)-1;
    ts = PyLong_Check(args[2]) ? PyLong_AsLongLong(args[2]) : -1;
    epoch = PyLong_Check(args[3]) ? PyLong_AsUnsignedLongLong(args[3]) : (unsigned long long)-1;
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return call_reference(args, nargs);
    }
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    if (epoch > 0xFFFF || (count && first + (unsigned long long)(count - 1) > 0xFFFFFFFFull)
        || !PyLong_Check(args[2]))
        return call_reference(args, nargs);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *p = items[i];
        Py_ssize_t n;
        if (PyBytes_CheckExact(p))
            n = PyBytes_GET_SIZE(p);
        else if (PyByteArray_CheckExact(p))
            n = PyByteArray_GET_SIZE(p);
        else
            return call_reference(args, nargs); /* memoryview and others: the reference */
        if ((unsigned long long)n > 0xFFFFFFFFull)
            return call_reference(args, nargs);
        total += (HEADER + n + 7) & ~(Py_ssize_t)7;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *p = items[i];
        const unsigned char *data;
        Py_ssize_t n;
        if (PyBytes_CheckExact(p)) {
            data = (const unsigned char *)PyBytes_AS_STRING(p);
            n = PyBytes_GET_SIZE(p);
        } else {
            data = (const unsigned char *)PyByteArray_AS_STRING(p);
            n = PyByteArray_GET_SIZE(p);
        }
        Py_ssize_t size = (HEADER + n + 7) & ~(Py_ssize_t)7;
        write_frame(w, size, data, n, first + (unsigned long long)i, ts, epoch);
        w += size;
    }
    return out;
}

static PyObject *
call_put_reference(PyObject *const *args, Py_ssize_t nargs)
{
    if (put_reference == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stalkd.log._frames: set_reference was not called");
        return NULL;
    }
    return PyObject_Vectorcall(put_reference, args, nargs, NULL);
}

/* put_data_frame(buf, pos, room, payload, delta, timestamp_us, epoch) -> int: the frame written
 * into buf at pos if it ends by room (its end), else -1; one call and no bytes object per
 * record, where the reference encodes, joins and stores through a slice. */
static PyObject *
put_data_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7)
        return call_put_reference(args, nargs);
    PyObject *p = args[3];
    const unsigned char *data;
    Py_ssize_t n;
    if (PyBytes_CheckExact(p)) {
        data = (const unsigned char *)PyBytes_AS_STRING(p);
        n = PyBytes_GET_SIZE(p);
    } else if (PyByteArray_CheckExact(p)) {
        data = (const unsigned char *)PyByteArray_AS_STRING(p);
        n = PyByteArray_GET_SIZE(p);
    } else
        return call_put_reference(args, nargs);
    if (!PyLong_CheckExact(args[1]) || !PyLong_CheckExact(args[2]) || !PyLong_CheckExact(args[4])
        || !PyLong_CheckExact(args[5]) || !PyLong_CheckExact(args[6]))
        return call_put_reference(args, nargs);
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    Py_ssize_t room = PyLong_AsSsize_t(args[2]);
    unsigned long long delta = PyLong_AsUnsignedLongLong(args[4]);
    long long ts = PyLong_AsLongLong(args[5]);
    unsigned long long epoch = PyLong_AsUnsignedLongLong(args[6]);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return call_put_reference(args, nargs);
    }
    Py_ssize_t size = (HEADER + n + 7) & ~(Py_ssize_t)7;
    if (pos < 0 || (unsigned long long)n > 0xFFFFFFFFull || pos > PY_SSIZE_T_MAX - size)
        return call_put_reference(args, nargs);
    if (pos + size > room)
        return PyLong_FromLong(-1);
    if (delta > 0xFFFFFFFFull || epoch > 0xFFFF)
        return call_put_reference(args, nargs);
    Py_buffer b;
    if (PyObject_GetBuffer(args[0], &b, PyBUF_WRITABLE) != 0) {
        PyErr_Clear();
        return call_put_reference(args, nargs);
    }
    if (pos + size > b.len) {
        PyBuffer_Release(&b);
        return call_put_reference(args, nargs);
    }
    write_frame((unsigned char *)b.buf + pos, size, data, n, delta, ts, epoch);
    PyBuffer_Release(&b);
    return PyLong_FromSsize_t(pos + size);
}

/* crc32c(data, value=0, table=False) -> int: the checksum the frames carry, by the instruction
 * when there is one or by the table (for the differential test, which checks both). */
static PyObject *
crc32c(PyObject *self, PyObject *args)
{
    Py_buffer b;
    unsigned int value = 0;
    int table = 0;
    if (!PyArg_ParseTuple(args, "y*|Ip", &b, &value, &table))
        return NULL;
    const unsigned char *p = (const unsigned char *)b.buf;
    uint32_t c = ~(table ? crc_soft(~(uint32_t)value, p, (size_t)b.len)
                         : crc_update(~(uint32_t)value, p, (size_t)b.len));
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

/* set_reference(encode_data_frames, put_data_frame=None) */
static PyObject *
set_reference(PyObject *self, PyObject *args)
{
    PyObject *fn, *put = NULL;
    if (!PyArg_ParseTuple(args, "O|O", &fn, &put))
        return NULL;
    Py_INCREF(fn);
    Py_XSETREF(reference, fn);
    if (put != NULL) {
        Py_INCREF(put);
        Py_XSETREF(put_reference, put);
    }
    Py_RETURN_NONE;
}

static PyObject *
hardware_crc(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(have_sse42);
}

static PyMethodDef methods[] = {
    {"encode_data_frames", (PyCFunction)(void (*)(void))encode_data_frames, METH_FASTCALL,
     "Consecutive data frames in one buffer (frame.encode_data_frames)."},
    {"crc32c", crc32c, METH_VARARGS, "CRC32C of data, continuing from value (table: without the instruction)."},
    {"put_data_frame", (PyCFunction)(void (*)(void))put_data_frame, METH_FASTCALL,
     "One data frame written into a buffer if it fits (frame.put_data_frame)."},
    {"set_reference", set_reference, METH_VARARGS, "The reference encoders, for inputs off the fast path."},
    {"hardware_crc", hardware_crc, METH_NOARGS, "Whether the CRC uses the SSE 4.2 instruction."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef framesmodule = {
    PyModuleDef_HEAD_INIT, "stalkd.log._frames",
    "The compiled data-frame encoder (stalkd.log.frame is the reference).", -1, methods,
};

PyMODINIT_FUNC
PyInit__frames(void)
{
    crc_init();
    return PyModule_Create(&framesmodule);
}
