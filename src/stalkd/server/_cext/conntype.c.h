/* The ConnectionCore type: its Python methods (over process, send, flush, release_held and
 * resume), its slots and its GC hooks. Included once, by _conn.c, after process. */

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
Core_release_held(Core *self, PyObject *durable)
{
    Py_ssize_t d = PyLong_AsSsize_t(durable);
    if (d == -1 && PyErr_Occurred())
        return NULL;
    int left = ready(self) < 0 ? -1 : core_release_held(self, d);
    if (left < 0)
        return NULL;
    return PyBool_FromLong(left);
}

static PyObject *
Core_resume(Core *self, PyObject *Py_UNUSED(ignored))
{
    if (core_resume(self) < 0)
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
    Py_VISIT(self->turns);
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
    Py_CLEAR(self->turns);
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
    SIZE(charged), FLAG("mem_paused", mem_paused), FLAG("deferred", deferred),
    OBJ(turns, "The loop's time per turn (turns.Turns), or None: no deadline."),
    {NULL},
};

static PyMethodDef Core_methods[] = {
    {"data_received", (PyCFunction)Core_data_received, METH_O,
     "Feed a read to the parser and run what it completes (Connection.data_received)."},
    {"process", (PyCFunction)Core_process, METH_NOARGS,
     "Run buffered commands until input runs out, a reserve blocks, or output backs up."},
    {"send", (PyCFunction)(void (*)(void))Core_send, METH_FASTCALL,
     "Queue the reply to this connection's latest command (None: it now blocks)."},
    {"release_held", (PyCFunction)Core_release_held, METH_O,
     "Move held replies whose barrier is durable to the output; True if some are left."},
    {"resume", (PyCFunction)Core_resume, METH_NOARGS,
     "Held replies left: run what was read if the connection had stopped for them."},
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
