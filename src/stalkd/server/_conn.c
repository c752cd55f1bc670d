/* stalkd.server._conn: the compiled core of a client connection.
 *
 * server/connection.py's Connection is the reference. ConnectionCore keeps, as slots the
 * reference's Python methods read and write too, the state the hot path touches, and runs
 * data_received, process, send and flush in C: a read in the common state goes parse ->
 * engine -> encode -> write without a Python frame of the connection's own, nor, for a server
 * without a WAL in its common state, of Server.execute (its common case is written here too,
 * its other paths are app.py's). The parser and the encoders are _speedups' (through its C
 * API, protocol/_cext/capi.h); the transport's methods and the server's are called as Python
 * methods.
 *
 * Only the common case is written twice: a reply that is not queued at once (a barrier, replies
 * already held, a close) goes to the reference's send, and every other method (wake,
 * release_held, pause/resume_writing, eof, connection_lost, ...) is the reference's, inherited
 * by the class server/fastconn.py builds (ConnectionCore first, then Connection).
 * tests/server/test_conn_differential.py holds both to the same bytes and engine states.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "../protocol/_cext/capi.h"

typedef struct {
    PyObject_HEAD
    PyObject *id, *server, *steps, *parser, *transport, *policy, *out, *held;
    Py_ssize_t out_bytes, held_bytes, max_output, flush_at;
    char close_ready, waiting, write_paused, join_writes, read_paused, eof, closing, lost;
    char running, fresh;
} Core;

static StalkdProtocolAPI *api = NULL;
static PyObject *py_send = NULL;     /* Connection.send, the reference */
static PyObject *close_type = NULL;  /* commands.Close */
static PyObject *job_reply = NULL;   /* commands.JobReply */
static PyObject *denied = NULL;      /* Reply("PERMISSION_DENIED") */
static PyObject *replicate = NULL;   /* replication.wire.REPLICATE */
static PyObject *ZERO, *EMPTY;
static PyObject *S_write, *S_writelines, *S_close, *S_is_closing, *S_get_write_buffer_size,
    *S_pause_reading, *S_resume_reading, *S_begin_step, *S_end_step, *S_execute, *S_retire,
    *S_replicate, *S_admits, *S_join, *S_role, *S_standby, *S_fenced, *S_admission, *S_observer,
    *S_engine, *S_clock, *S_apply, *S_apply_failed, *S_handle, *S_timer_at, *S_schedule_tick;

/* --- helpers ---------------------------------------------------------------------------- */

static int
call_method0(PyObject *obj, PyObject *name)
{
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* obj.name() as a truth value; -1 with an exception */
static int
method_truth(PyObject *obj, PyObject *name)
{
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);
    if (r == NULL)
        return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

static int
ready(Core *self)
{
    if (api == NULL || py_send == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stalkd.server._conn.configure() was not called");
        return -1;
    }
    if (self->id == NULL || self->server == NULL || self->parser == NULL || self->out == NULL
            || self->held == NULL || self->steps == NULL || self->policy == NULL
            || self->transport == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the connection is not initialised");
        return -1;
    }
    if (Py_TYPE(self->parser) != api->parser_type || !PyList_CheckExact(self->out)) {
        PyErr_SetString(PyExc_TypeError,
                        "a compiled connection needs the compiled Parser and a list");
        return -1;
    }
    return 0;
}

static int
pause_reading(Core *self)
{
    if (!self->read_paused && self->transport != Py_None && !self->lost) {
        self->read_paused = 1;
        return call_method0(self->transport, S_pause_reading);
    }
    return 0;
}

static int
resume_reading(Core *self)
{
    if (self->read_paused && self->transport != Py_None && !self->lost && !self->eof) {
        self->read_paused = 0;
        return call_method0(self->transport, S_resume_reading);
    }
    return 0;
}

/* --- send ------------------------------------------------------------------------------- */

static int
send_slow(Core *self, PyObject *reply, PyObject *barrier)
{
    PyObject *args[3] = {(PyObject *)self, reply, barrier};
    PyObject *r = PyObject_Vectorcall(py_send, args, 3, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int
out_add(Core *self, PyObject *b)
{
    Py_ssize_t n = PyBytes_CheckExact(b) ? PyBytes_GET_SIZE(b) : PyObject_Length(b);
    if (n < 0 || PyList_Append(self->out, b) < 0)
        return -1;
    self->out_bytes += n;
    return 0;
}

/* Connection.send: a reply with nothing held before it and no barrier is encoded and queued
 * here; anything else is the reference's. An encoder's error is left to the reference too,
 * which meets it again and answers INTERNAL_ERROR (and logs why). */
static int
core_send(Core *self, PyObject *reply, PyObject *barrier)
{
    if (reply == Py_None) {
        self->waiting = 1;
        return 0;
    }
    if ((PyObject *)Py_TYPE(reply) == close_type)
        return send_slow(self, reply, barrier);
    int held = PyObject_IsTrue(self->held);
    if (held < 0)
        return -1;
    int b = PyObject_IsTrue(barrier);
    if (b < 0)
        return -1;
    if (held || b || !PyList_CheckExact(self->out))
        return send_slow(self, reply, barrier);
    if ((PyObject *)Py_TYPE(reply) == api->reply_type) {
        PyObject *line = api->encode_line(reply);
        if (line == NULL)
            goto encode_failed;
        int rc = out_add(self, line);
        Py_DECREF(line);
        return rc;
    }
    PyObject *parts = api->encode_parts(reply);
    if (parts == NULL)
        goto encode_failed;
    if (!PyTuple_CheckExact(parts)) {
        Py_DECREF(parts);
        return send_slow(self, reply, barrier);
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(parts); i++)
        if (out_add(self, PyTuple_GET_ITEM(parts, i)) < 0) {
            Py_DECREF(parts);
            return -1;
        }
    Py_DECREF(parts);
    return 0;
encode_failed:
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return -1;
    PyErr_Clear();
    return send_slow(self, reply, barrier);
}

/* --- flush ------------------------------------------------------------------------------ */

static int
drop_out(Core *self)
{
    return PyList_SetSlice(self->out, 0, PyList_GET_SIZE(self->out), NULL);
}

/* Connection.flush: everything ready in one write call; a queued close after it. */
static int
core_flush(Core *self)
{
    self->out_bytes = 0;
    PyObject *out = self->out;
    if (!PyList_CheckExact(out)) {
        PyErr_SetString(PyExc_TypeError, "Connection.out must be a list");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(out);
    if (n == 0 && !self->close_ready)
        return 0;
    PyObject *t = self->transport;
    if (t == Py_None || self->lost)
        return drop_out(self);
    Py_INCREF(t);
    int rc = -1;
    int closing = method_truth(t, S_is_closing);
    if (closing < 0)
        goto done;
    if (closing) {
        rc = drop_out(self);
        goto done;
    }
    if (n == 1) {
        /* the list is emptied before the write, as the reference does, and kept for reuse */
        PyObject *item = PyList_GET_ITEM(out, 0);
        PyList_SET_ITEM(out, 0, NULL);
        Py_SET_SIZE(out, 0);
        PyObject *r = PyObject_CallMethodOneArg(t, S_write, item);
        Py_DECREF(item);
        if (r == NULL)
            goto done;
        Py_DECREF(r);
    } else if (n > 1) {
        PyObject *fresh = PyList_New(0);
        if (fresh == NULL)
            goto done;
        self->out = fresh;  /* our reference to the old list moves to `out` */
        int join = self->join_writes;
        if (!join)
            join = method_truth(t, S_get_write_buffer_size);
        PyObject *r = NULL;
        if (join > 0) {
            PyObject *joined = PyObject_CallMethodOneArg(EMPTY, S_join, out);
            if (joined != NULL) {
                r = PyObject_CallMethodOneArg(t, S_write, joined);
                Py_DECREF(joined);
            }
        } else if (join == 0) {
            r = PyObject_CallMethodOneArg(t, S_writelines, out);
        }
        Py_DECREF(out);
        if (r == NULL)
            goto done;
        Py_DECREF(r);
    }
    if (self->close_ready && call_method0(t, S_close) < 0)
        goto done;
    rc = 0;
done:
    Py_DECREF(t);
    return rc;
}

/* --- the server's execute ---------------------------------------------------------------- */

static int
call_result(PyObject *r)
{
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* server.<name> is truthy (attr) or not None (!attr); -1 with an exception */
static int
attr_set(PyObject *obj, PyObject *name, int truth)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    int r = truth ? PyObject_IsTrue(v) : v != Py_None;
    Py_DECREF(v);
    return r;
}

/* Server.execute (app.py) for a server in its common state: a primary never fenced, nothing
 * to admit (no WAL) and no observer. It runs the command through the engine and, for the
 * common outcome (a plain or job reply, no records, no wakeups), queues the reply and moves
 * the timer itself; any other outcome goes to Server._handle, an engine error to
 * Server._apply_failed, and a server in any other state to Server.execute, so app.py stays
 * the rule. */
static int
execute(Core *self, PyObject *server, PyObject *cmd)
{
    int other = 0, r;
    PyObject *role = PyObject_GetAttr(server, S_role);
    if (role == NULL)
        return -1;
    r = attr_set(role, S_standby, 1);
    if (r == 0)
        r = attr_set(role, S_fenced, 1);
    Py_DECREF(role);
    other = r;
    if (other == 0)
        other = attr_set(server, S_admission, 0);
    if (other == 0)
        other = attr_set(server, S_observer, 0);
    if (other < 0)
        return -1;
    if (other) {
        PyObject *args[3] = {server, (PyObject *)self, cmd};
        return call_result(PyObject_VectorcallMethod(S_execute, args, 3, NULL));
    }
    PyObject *engine = PyObject_GetAttr(server, S_engine);
    if (engine == NULL)
        return -1;
    PyObject *clock = PyObject_GetAttr(server, S_clock);
    PyObject *now = clock == NULL ? NULL : PyObject_CallNoArgs(clock);
    Py_XDECREF(clock);
    if (now == NULL) {
        Py_DECREF(engine);
        return -1;
    }
    PyObject *args[4] = {engine, self->id, cmd, now};
    PyObject *out = PyObject_VectorcallMethod(S_apply, args, 4, NULL);
    Py_DECREF(engine);
    Py_DECREF(now);
    if (out == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        PyObject *et, *exc, *tb;
        PyErr_Fetch(&et, &exc, &tb);
        PyErr_NormalizeException(&et, &exc, &tb);
        if (tb != NULL)
            PyException_SetTraceback(exc, tb);
        Py_XDECREF(et);
        Py_XDECREF(tb);
        PyObject *fargs[4] = {server, (PyObject *)self, cmd, exc};
        r = call_result(PyObject_VectorcallMethod(S_apply_failed, fargs, 4, NULL));
        Py_DECREF(exc);
        return r;
    }
    /* A job shown to a reserver waits for no barrier either: without a WAL nothing is written. */
    int common = 0;
    PyObject *rt = PyTuple_Check(out) && PyTuple_GET_SIZE(out) == 4
                   ? (PyObject *)Py_TYPE(PyTuple_GET_ITEM(out, 0)) : NULL;
    if (rt != NULL && (rt == api->reply_type || rt == job_reply)) {
        common = PyObject_Not(PyTuple_GET_ITEM(out, 1));
        if (common > 0)
            common = PyObject_Not(PyTuple_GET_ITEM(out, 2));
        if (common < 0) {
            Py_DECREF(out);
            return -1;
        }
    }
    if (!common) {
        PyObject *hargs[4] = {server, (PyObject *)self, out, cmd};
        r = call_result(PyObject_VectorcallMethod(S_handle, hargs, 4, NULL));
        Py_DECREF(out);
        return r;
    }
    r = core_send(self, PyTuple_GET_ITEM(out, 0), ZERO);
    PyObject *deadline = PyTuple_GET_ITEM(out, 3);
    if (r == 0 && deadline != Py_None) {
        PyObject *at = PyObject_GetAttr(server, S_timer_at);
        int earlier = at == NULL ? -1
                      : at == Py_None ? 1 : PyObject_RichCompareBool(deadline, at, Py_LT);
        Py_XDECREF(at);
        if (earlier > 0)
            r = call_result(PyObject_CallMethodOneArg(server, S_schedule_tick, deadline));
        else if (earlier < 0)
            r = -1;
    }
    Py_DECREF(out);
    return r;
}

/* --- process ---------------------------------------------------------------------------- */

/* Connection.process: run buffered commands until input runs out, a reserve blocks, or output
 * backs up; the same steps in the same order as the reference. */
static int
core_process(Core *self)
{
    if (self->running || self->lost)
        return 0;
    if (ready(self) < 0)
        return -1;
    self->running = 1;
    PyObject *steps = self->steps == Py_None ? NULL : Py_NewRef(self->steps);
    if (steps != NULL && call_method0(steps, S_begin_step) < 0) {
        Py_DECREF(steps);
        return -1;  /* before the reference's try: it stays "running" too */
    }
    PyObject *parser = Py_NewRef(self->parser);
    PyObject *server = Py_NewRef(self->server);
    PyObject *policy = Py_NewRef(self->policy);
    Py_ssize_t limit = self->max_output, flush_at = self->flush_at;
    int rc = 0, broke = 0;
    while (!self->waiting && !self->closing) {
        if (self->out_bytes >= flush_at && core_flush(self) < 0)
            goto error;
        if (self->write_paused || self->held_bytes > limit) {
            if (pause_reading(self) < 0)
                goto error;
            broke = 1;
            break;
        }
        PyObject *item = api->next(parser);
        if (item == NULL)
            goto error;
        if (item == api->need_data) {
            Py_DECREF(item);
            if (self->eof) {
                /* nothing more will come: close after the replies, release jobs now */
                PyObject *c = PyObject_CallNoArgs(close_type);
                if (c == NULL)
                    goto error;
                int r = core_send(self, c, ZERO);
                Py_DECREF(c);
                if (r < 0)
                    goto error;
                PyObject *res = PyObject_CallMethodOneArg(server, S_retire, (PyObject *)self);
                if (res == NULL)
                    goto error;
                Py_DECREF(res);
            }
            broke = 1;
            break;
        }
        int r;
        if ((PyObject *)Py_TYPE(item) == api->reply_type) {  /* a protocol error */
            r = core_send(self, item, ZERO);
            Py_DECREF(item);
            if (r < 0)
                goto error;
            continue;
        }
        if (policy != Py_None) {
            PyObject *ok = PyObject_CallMethodOneArg(policy, S_admits, item);
            int admitted = ok == NULL ? -1 : PyObject_IsTrue(ok);
            Py_XDECREF(ok);
            if (admitted <= 0) {
                r = admitted < 0 ? -1 : core_send(self, denied, ZERO);
                Py_DECREF(item);
                if (r < 0)
                    goto error;
                continue;
            }
        }
        r = execute(self, server, item);
        Py_DECREF(item);
        if (r < 0)
            goto error;
    }
    if (!broke && self->waiting && api->buffered(parser) > limit && pause_reading(self) < 0)
        goto error;
    if (self->read_paused && !self->closing && !self->write_paused && self->held_bytes <= limit
            && (!self->waiting || api->buffered(parser) <= limit) && resume_reading(self) < 0)
        goto error;
    goto finally;
error:
    rc = -1;
finally:
    self->running = 0;
    if (steps != NULL) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if (call_method0(steps, S_end_step) < 0) {
            /* the reference's finally raises its own error instead */
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
            rc = -1;
        } else {
            PyErr_Restore(et, ev, tb);
        }
        Py_DECREF(steps);
    }
    Py_DECREF(parser);
    Py_DECREF(server);
    Py_DECREF(policy);
    if (rc == 0)
        rc = core_flush(self);
    return rc;
}

/* --- methods ---------------------------------------------------------------------------- */

static PyObject *
Core_data_received(Core *self, PyObject *data)
{
    if (ready(self) < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    if (self->fresh) {
        self->fresh = 0;
        /* a standby's stream (stalkd.replication.wire) leaves the beanstalkd protocol here */
        Py_ssize_t k = PyBytes_GET_SIZE(replicate);
        if (view.len >= k && memcmp(view.buf, PyBytes_AS_STRING(replicate), (size_t)k) == 0) {
            PyObject *server = Py_NewRef(self->server);
            PyObject *r = PyObject_CallMethodObjArgs(server, S_replicate, (PyObject *)self, data,
                                                     NULL);
            Py_DECREF(server);
            int taken = r == NULL ? -1 : PyObject_IsTrue(r);
            Py_XDECREF(r);
            if (taken != 0) {
                PyBuffer_Release(&view);
                if (taken < 0)
                    return NULL;
                Py_RETURN_NONE;
            }
        }
    }
    int rc = api->feed(self->parser, view.buf, view.len);
    PyBuffer_Release(&view);
    if (rc < 0 || core_process(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Core_process(Core *self, PyObject *Py_UNUSED(ignored))
{
    if (core_process(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Core_send(Core *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "send(reply, barrier)");
        return NULL;
    }
    if (ready(self) < 0 || core_send(self, args[0], args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Core_flush(Core *self, PyObject *Py_UNUSED(ignored))
{
    if (ready(self) < 0 || core_flush(self) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static int
Core_traverse(Core *self, visitproc visit, void *arg)
{
    Py_VISIT(self->id);
    Py_VISIT(self->server);
    Py_VISIT(self->steps);
    Py_VISIT(self->parser);
    Py_VISIT(self->transport);
    Py_VISIT(self->policy);
    Py_VISIT(self->out);
    Py_VISIT(self->held);
    return 0;
}

static int
Core_clear(Core *self)
{
    Py_CLEAR(self->id);
    Py_CLEAR(self->server);
    Py_CLEAR(self->steps);
    Py_CLEAR(self->parser);
    Py_CLEAR(self->transport);
    Py_CLEAR(self->policy);
    Py_CLEAR(self->out);
    Py_CLEAR(self->held);
    return 0;
}

static void
Core_dealloc(Core *self)
{
    PyObject_GC_UnTrack(self);
    Core_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define OBJ(name, doc) {#name, T_OBJECT_EX, offsetof(Core, name), 0, doc}
#define SIZE(name) {#name, T_PYSSIZET, offsetof(Core, name), 0, NULL}
#define FLAG(name, field) {name, T_BOOL, offsetof(Core, field), 0, NULL}

static PyMemberDef Core_members[] = {
    OBJ(id, "The connection's number (the engine's name for it)."),
    OBJ(server, "The Host (Server) this connection belongs to."),
    OBJ(steps, "Told when a step starts and ends (None: nothing to batch)."),
    OBJ(parser, "The connection's (compiled) Parser."),
    OBJ(transport, "The asyncio transport, None before connection_made."),
    OBJ(policy, "A CommandPolicy, or None: every command runs."),
    OBJ(out, "Reply buffers ready to write at the end of this step (a list)."),
    OBJ(held, "Replies waiting for their barrier (a deque)."),
    SIZE(out_bytes), SIZE(held_bytes), SIZE(max_output), SIZE(flush_at),
    FLAG("close_ready", close_ready), FLAG("waiting", waiting),
    FLAG("write_paused", write_paused), FLAG("join_writes", join_writes),
    FLAG("read_paused", read_paused), FLAG("eof", eof), FLAG("closing", closing),
    FLAG("lost", lost), FLAG("_running", running), FLAG("fresh", fresh),
    {NULL},
};

static PyMethodDef Core_methods[] = {
    {"data_received", (PyCFunction)Core_data_received, METH_O,
     "Feed a read to the parser and run what it completes (Connection.data_received)."},
    {"process", (PyCFunction)Core_process, METH_NOARGS,
     "Run buffered commands until input runs out, a reserve blocks, or output backs up."},
    {"send", (PyCFunction)(void (*)(void))Core_send, METH_FASTCALL,
     "Queue the reply to this connection's latest command (None: it now blocks)."},
    {"flush", (PyCFunction)Core_flush, METH_NOARGS,
     "Write everything ready in one call; honour a queued close."},
    {NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stalkd.server._conn.ConnectionCore",
    .tp_doc = "The compiled hot path of stalkd.server.connection.Connection (a base class).",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)Core_traverse,
    .tp_clear = (inquiry)Core_clear,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
    .tp_members = Core_members,
};

/* --- module ----------------------------------------------------------------------------- */

static PyObject *
configure(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"send", "close", "job_reply", "denied", "replicate", NULL};
    PyObject *send, *close, *job, *den, *rep;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO!", kwlist, &send, &close, &job, &den,
                                     &PyBytes_Type, &rep))
        return NULL;
    StalkdProtocolAPI *a = PyCapsule_Import(STALKD_PROTOCOL_API_NAME, 0);
    if (a == NULL)
        return NULL;
    if (a->version != STALKD_PROTOCOL_API_VERSION || a->need_data == NULL) {
        PyErr_SetString(PyExc_ValueError, "stalkd.protocol._speedups is not configured or is "
                        "from another version");
        return NULL;
    }
    Py_XSETREF(py_send, Py_NewRef(send));
    Py_XSETREF(close_type, Py_NewRef(close));
    Py_XSETREF(job_reply, Py_NewRef(job));
    Py_XSETREF(denied, Py_NewRef(den));
    Py_XSETREF(replicate, Py_NewRef(rep));
    api = a;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "Hand over the reference's send and the protocol values (server/fastconn.py, once)."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_conn",
    "The compiled core of a client connection; see stalkd.server.fastconn.", -1, module_methods,
};

#define INTERN(var, s) if ((var = PyUnicode_InternFromString(s)) == NULL) return NULL

PyMODINIT_FUNC
PyInit__conn(void)
{
    INTERN(S_write, "write");
    INTERN(S_writelines, "writelines");
    INTERN(S_close, "close");
    INTERN(S_is_closing, "is_closing");
    INTERN(S_get_write_buffer_size, "get_write_buffer_size");
    INTERN(S_pause_reading, "pause_reading");
    INTERN(S_resume_reading, "resume_reading");
    INTERN(S_begin_step, "begin_step");
    INTERN(S_end_step, "end_step");
    INTERN(S_execute, "execute");
    INTERN(S_retire, "retire");
    INTERN(S_replicate, "replicate");
    INTERN(S_admits, "admits");
    INTERN(S_join, "join");
    INTERN(S_role, "role");
    INTERN(S_standby, "standby");
    INTERN(S_fenced, "fenced");
    INTERN(S_admission, "admission");
    INTERN(S_observer, "observer");
    INTERN(S_engine, "engine");
    INTERN(S_clock, "clock");
    INTERN(S_apply, "apply");
    INTERN(S_apply_failed, "_apply_failed");
    INTERN(S_handle, "_handle");
    INTERN(S_timer_at, "_timer_at");
    INTERN(S_schedule_tick, "_schedule_tick");
    if ((ZERO = PyLong_FromLong(0)) == NULL || (EMPTY = PyBytes_FromStringAndSize(NULL, 0)) == NULL)
        return NULL;
    if (PyType_Ready(&CoreType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "ConnectionCore", (PyObject *)&CoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
