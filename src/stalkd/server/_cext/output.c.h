/* Replies out: Connection.send's common case and Connection.flush. Included once, by _conn.c. */

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
