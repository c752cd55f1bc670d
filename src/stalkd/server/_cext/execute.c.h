/* Server.execute's common case (app.py is the rule). Included once, by _conn.c. */

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
