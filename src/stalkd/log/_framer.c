/* stalkd.log._framer: a leaf behind stalkd.log.frame.encode_data_frames (frame.py states the
 * format and is the fallback; tests/log/test_framer_differential.py holds the two to the same
 * bytes). It frames a batch of payloads into one bytes object: per frame the header stores, a
 * memcpy of the payload, the zero padding and a CRC-32C by the CPU's instruction. It reads its
 * arguments through the public API only (sequences, the buffer protocol, ints) and replaces
 * nothing: without SSE4.2 (or off x86-64) the module refuses to import and frame.py's Python
 * runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_CRC32C_INSN 1

__attribute__((target("sse4.2"))) static uint32_t
crc32c(const unsigned char *p, size_t n)
{
    uint64_t c = 0xFFFFFFFFu;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n > 0; p++, n--)
        c32 = _mm_crc32_u8(c32, *p);
    return c32 ^ 0xFFFFFFFFu;
}

#define HEADER 24 /* frame.py's FRAME_HEADER_SIZE: u32 crc, u8 magic, u8 flags, u16 epoch, u32 length, u32 delta, i64 ts */
#define MAGIC 0xA7
#define FLAGS_DATA 0x80 /* committed, kind 0 */

static void
put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* The length of one payload, through the buffer protocol (what b"".join accepts). */
static Py_ssize_t
payload_len(PyObject *item)
{
    Py_buffer view;
    if (PyObject_GetBuffer(item, &view, PyBUF_SIMPLE) < 0)
        return -1;
    Py_ssize_t n = view.len;
    PyBuffer_Release(&view);
    return n;
}

static PyObject *
encode_data_frames(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "encode_data_frames(payloads, first_delta, timestamp_us, epoch)");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "payloads must be iterable");
    if (seq == NULL)
        return NULL;
    PyObject *out = NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    if (count == 0) {
        out = PyBytes_FromStringAndSize(NULL, 0);
        goto done;
    }
    long long first = PyLong_AsLongLong(args[1]);
    long long ts = PyLong_AsLongLong(args[2]);
    long epoch = PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        goto done;
    if (first < 0 || (unsigned long long)first + (unsigned long long)(count - 1) > 0xFFFFFFFFull ||
        epoch < 0 || epoch > 0xFFFF) {
        PyErr_SetString(PyExc_OverflowError, "frame delta or epoch out of range");
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t n = payload_len(PySequence_Fast_GET_ITEM(seq, i));
        if (n < 0)
            goto done;
        if ((unsigned long long)n > 0xFFFFFFFFull || total > PY_SSIZE_T_MAX - HEADER - 8 - n) {
            PyErr_SetString(PyExc_OverflowError, "a payload is larger than the frame limit");
            goto done;
        }
        total += (HEADER + n + 7) & ~(Py_ssize_t)7;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        goto done;
    unsigned char *base = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &view, PyBUF_SIMPLE) < 0)
            goto fail;
        Py_ssize_t n = view.len, size = (HEADER + n + 7) & ~(Py_ssize_t)7;
        if (pos + size > total) { /* a payload grew between the two passes */
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_RuntimeError, "a payload changed while it was framed");
            goto fail;
        }
        unsigned char *f = base + pos;
        f[4] = MAGIC;
        f[5] = FLAGS_DATA;
        put_le(f + 6, (uint64_t)epoch, 2);
        put_le(f + 8, (uint64_t)n, 4);
        put_le(f + 12, (uint64_t)(first + i), 4);
        put_le(f + 16, (uint64_t)ts, 8);
        memcpy(f + HEADER, view.buf, (size_t)n);
        PyBuffer_Release(&view);
        memset(f + HEADER + n, 0, (size_t)(size - HEADER - n));
        put_le(f, crc32c(f + 4, (size_t)(size - 4)), 4);
        pos += size;
    }
    if (pos != total) {
        PyErr_SetString(PyExc_RuntimeError, "a payload changed while it was framed");
        goto fail;
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    Py_DECREF(seq);
    return out;
}

static PyMethodDef methods[] = {
    {"encode_data_frames", (PyCFunction)(void (*)(void))encode_data_frames, METH_FASTCALL,
     "encode_data_frames(payloads, first_delta, timestamp_us, epoch) -> bytes: frame.py's function, in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "stalkd.log._framer", "A batch of data frames framed in C (see frame.py).", -1, methods,
};
#endif /* HAVE_CRC32C_INSN */

PyMODINIT_FUNC
PyInit__framer(void)
{
#ifdef HAVE_CRC32C_INSN
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        return PyModule_Create(&module_def);
#endif
    PyErr_SetString(PyExc_ImportError, "stalkd.log._framer needs the CPU's CRC-32C instruction (SSE4.2)");
    return NULL;
}
