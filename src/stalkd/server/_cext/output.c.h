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

static Py_ssize_t
parts_len(PyObject *parts)
{
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(parts); i++) {
        PyObject *p = PyTuple_GET_ITEM(parts, i);
        Py_ssize_t k = PyBytes_CheckExact(p) ? PyBytes_GET_SIZE(p) : PyObject_Length(p);
        if (k < 0)
            return -1;
        n += k;
    }
    return n;
}

/* The reply's buffers as the reference's send makes them (a tuple); NULL with no exception
 * when the reference must encode it (an encoder's error, which it logs and answers). */
static PyObject *
encode_parts(PyObject *reply)
{
    PyObject *parts;
    if ((PyObject *)Py_TYPE(reply) == api->reply_type) {
        PyObject *line = api->encode_line(reply);
        parts = line == NULL ? NULL : PyTuple_Pack(1, line);
        Py_XDECREF(line);
    } else {
        parts = api->encode_parts(reply);
        if (parts != NULL && !PyTuple_CheckExact(parts))
            Py_CLEAR(parts);
    }
    if (parts == NULL && PyErr_Occurred() && PyErr_ExceptionMatches(PyExc_Exception))
        PyErr_Clear();
    return parts;
}

/* Connection.send: a reply with nothing held before it whose barrier is durable (0, or no
 * later than the compiled barriers' durable batch) is encoded and queued here, and with
 * compiled barriers a reply behind a barrier is held here too; anything else is the
 * reference's. An encoder's error is left to the reference too, which meets it again and
 * answers INTERNAL_ERROR (and logs why). */
static int
core_send(Core *self, PyObject *reply, PyObject *barrier)
{
    if (reply == Py_None) {
        self->waiting = 1;
        return 0;
    }
    if ((PyObject *)Py_TYPE(reply) == close_type || !PyList_CheckExact(self->out)
            || !PyLong_CheckExact(barrier))
        return send_slow(self, reply, barrier);
    int held = PyObject_IsTrue(self->held);
    if (held < 0)
        return -1;
    Py_ssize_t b = PyLong_AsSsize_t(barrier);
    if (b == -1 && PyErr_Occurred())
        return -1;
    Bar *bar = as_bar(self->steps);
    if (b && bar == NULL)
        return send_slow(self, reply, barrier);
    if (held || (b && b > bar->durable)) {
        if (bar == NULL)
            return send_slow(self, reply, barrier);
        PyObject *parts = encode_parts(reply);
        if (parts == NULL)
            return PyErr_Occurred() ? -1 : send_slow(self, reply, barrier);
        Py_ssize_t n = parts_len(parts);
        PyObject *entry = n < 0 ? NULL : PyTuple_Pack(2, barrier, parts);
        Py_DECREF(parts);
        PyObject *r = entry == NULL ? NULL
                      : PyObject_CallMethodOneArg(self->held, S_append, entry);
        Py_XDECREF(entry);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
        self->held_bytes += n;
        return bar_hold(bar, (PyObject *)self);
    }
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

/* Connection.release_held: held replies whose barrier is durable move to the output; whether
 * some are left (-1 with an exception). */
static int
core_release_held(Core *self, Py_ssize_t durable)
{
    PyObject *held = self->held;
    for (;;) {
        Py_ssize_t k = PyObject_Length(held);
        if (k < 0)
            return -1;
        if (k == 0)
            return 0;
        PyObject *first = PySequence_GetItem(held, 0);
        if (first == NULL)
            return -1;
        Py_ssize_t b = PyTuple_Check(first) && PyTuple_GET_SIZE(first) == 2
                       ? PyLong_AsSsize_t(PyTuple_GET_ITEM(first, 0)) : -2;
        if (b == -2 && !PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "held entries are (barrier, parts)");
        if (b < 0 && PyErr_Occurred()) {
            Py_DECREF(first);
            return -1;
        }
        if (b > durable) {
            Py_DECREF(first);
            return 1;
        }
        PyObject *r = PyObject_CallMethodNoArgs(held, S_popleft);
        Py_XDECREF(r);
        PyObject *parts = PyTuple_GET_ITEM(first, 1);
        int rc = r == NULL ? -1 : 0;
        if (rc == 0 && parts == Py_None) {
            self->close_ready = 1;
        } else if (rc == 0) {
            Py_ssize_t n = PyTuple_Check(parts) ? parts_len(parts) : -1;
            if (n < 0) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "held parts must be a tuple");
                rc = -1;
            } else {
                self->held_bytes -= n;
                self->out_bytes += n;
                Py_ssize_t m = PyList_GET_SIZE(self->out);
                rc = PyList_SetSlice(self->out, m, m, parts);
            }
        }
        Py_DECREF(first);
        if (rc < 0)
            return -1;
    }
}

/* --- flush ------------------------------------------------------------------------------ */

static int
drop_out(Core *self)
{
    return PyList_SetSlice(self->out, 0, PyList_GET_SIZE(self->out), NULL);
}

/* Connection._flush_out: everything ready in one write call; a queued close after it. */
static int
flush_out(Core *self)
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

/* Connection.flush: _flush_out, then what we hold reported to the memory budget (the
 * reference's measure_memory) when it is budget.GRAIN or more, or was counted. */
static int
core_flush(Core *self)
{
    int wrote = PyList_CheckExact(self->out) && PyList_GET_SIZE(self->out) > 0;
    if (flush_out(self) < 0)
        return -1;
    if (!self->charged && api->buffered(self->parser) + self->held_bytes < grain) {
        if (!wrote || self->transport == Py_None || self->lost)
            return 0;
        PyObject *r = PyObject_CallMethodNoArgs(self->transport, S_get_write_buffer_size);
        if (r == NULL)
            return -1;
        Py_ssize_t w = PyLong_AsSsize_t(r);
        Py_DECREF(r);
        if (w == -1 && PyErr_Occurred())
            return -1;
        if (w < grain)
            return 0;
    }
    return call_method0((PyObject *)self, S_measure_memory);
}
