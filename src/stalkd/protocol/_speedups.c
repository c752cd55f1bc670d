/* stalkd.protocol._speedups: the compiled parser and reply encoder.
 *
 * The pure-Python modules (parser.py, lines.py, replies.py) are the reference; this file does
 * the same work without the interpreter's per-byte and per-call costs. It holds no grammar of
 * its own: accel.py passes it the command table (grammar.COMMANDS, in beanstalkd's matching
 * order) through configure(), each row as its prefix, its argument kinds and the value to
 * build, and the parser (_cext/) only knows how to read each *kind* of argument (the same rules
 * as lines.py's regex fragments, read left to right without backtracking, which is what their
 * possessive quantifiers mean) and how beanstalkd frames lines and bodies.
 * tests/protocol/test_speedups_differential.py feeds both parsers the same streams.
 *
 * One translation unit, one concept per included piece (_cext/): common (the table; a command
 * value is built by calling its class, a reply's fields are read by name), lines (argument
 * readers), parser (framing), replies (encoding); this file holds configure() and the module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_cext/common.c.h"
#include "_cext/lines.c.h"
#include "_cext/parser.c.h"
#include "_cext/replies.c.h"

/* --- configuration -------------------------------------------------------------------- */

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
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!OOOOy#KOO!OO", kwlist, &PyTuple_Type, &table,
                                     &put, &need, &bad, &unknown, &chars, &nchars,
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
        /* (prefix, kinds, flags, only, build) */
        PyObject *row = PyTuple_GET_ITEM(table, k);
        const char *prefix, *kinds;
        Py_ssize_t plen, nk;
        int flags;
        PyObject *only, *build;
        if (!PyArg_ParseTuple(row, "y#y#iOO", &prefix, &plen, &kinds, &nk, &flags, &only, &build))
            goto fail;
        if (nk > MAX_ARGS || (!(flags & (F_EXACT | F_LOOSE | F_BODY)) && nk == 0)) {
            PyErr_SetString(PyExc_ValueError, "bad argument kinds");
            goto fail;
        }
        /* the body command's line is read as four u32s, the last its size (lines.py asserts
         * the same of the table) */
        if ((flags & F_PUT) && (!(flags & F_BODY) || nk != 4 || memcmp(kinds, "uuuu", 4) != 0)) {
            PyErr_SetString(PyExc_ValueError, "put must take four u32 arguments and a body");
            goto fail;
        }
        /* another body command: digits only (u32 or u64), the last its size, a u32 */
        if ((flags & F_BODY) && !(flags & F_PUT)) {
            int ok = nk >= 1 && kinds[nk - 1] == 'u';
            for (Py_ssize_t a = 0; ok && a < nk; a++)
                ok = kinds[a] == 'u' || kinds[a] == 'U';
            if (!ok) {
                PyErr_SetString(PyExc_ValueError, "a body command takes u32/u64 arguments, a u32 size last");
                goto fail;
            }
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
        t[k].only = Py_NewRef(only);
        t[k].build = Py_NewRef(build);
    }
    put_build = Py_NewRef(put);
    memset(name_chars, 0, sizeof name_chars);
    for (Py_ssize_t i = 0; i < nchars; i++)
        name_chars[(unsigned char)chars[i]] = 1;
    NEED_DATA = Py_NewRef(need);
    BAD_FORMAT = Py_NewRef(bad);
    UNKNOWN_COMMAND = Py_NewRef(unknown);
    max_job_limit = limit;
    reply_type = Py_NewRef(reply);
    word_cache = Py_NewRef(words);
    job_reply_type = Py_NewRef(job_reply);
    parts_fallback = Py_NewRef(fallback);
    field_init(&F_reply_word, reply_type, S_word);
    field_init(&F_reply_args, reply_type, S_args);
    field_init(&F_job_word, job_reply_type, S_word);
    field_init(&F_job_id, job_reply_type, S_id);
    field_init(&F_job_body, job_reply_type, S_body);
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
    S_word = PyUnicode_InternFromString("word");
    S_args = PyUnicode_InternFromString("args");
    S_id = PyUnicode_InternFromString("id");
    S_body = PyUnicode_InternFromString("body");
    if (!S_JOB_TOO_BIG || !S_EXPECTED_CRLF || !S_BAD_FORMAT || !EMPTY_BYTES || !CRLF || !S_word
            || !S_args || !S_id || !S_body) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ParserType);
    if (PyModule_AddObject(m, "Parser", (PyObject *)&ParserType) < 0) {
        Py_DECREF(&ParserType);
        Py_DECREF(m);
        return NULL;
    }
    /* Parser.buffered for compiled callers: Py_ssize_t (PyObject *) on a Parser (parser.c.h) */
    PyObject *cap = PyCapsule_New((void *)parser_buffered_c, BUFFERED_C_NAME, NULL);
    if (cap == NULL || PyModule_AddObject(m, "buffered_c", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return NULL;
    }
    /* Parser.next and Parser.feed likewise: PyObject *(PyObject *) and PyObject *(PyObject *,
     * PyObject *), new references (parser.c.h) */
    cap = PyCapsule_New((void *)parser_next_c, NEXT_C_NAME, NULL);
    if (cap == NULL || PyModule_AddObject(m, "next_c", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return NULL;
    }
    cap = PyCapsule_New((void *)parser_feed_c, FEED_C_NAME, NULL);
    if (cap == NULL || PyModule_AddObject(m, "feed_c", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
