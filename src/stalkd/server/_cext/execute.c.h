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

/* Admission.settle's no-op (nothing promised, no records, or a lone costless record: a
 * delete, whose room its put promised) found here; otherwise adm.settle(records). */
static int
settle(PyObject *adm, PyObject *records)
{
    Adm *a = as_adm(adm);
    if (a != NULL)
        return adm_settle(a, records);
    PyObject *promised = PyObject_GetAttr(adm, S_promised);
    int p = promised == NULL ? -1 : PyObject_IsTrue(promised);
    Py_XDECREF(promised);
    Py_ssize_t n = p < 0 ? -1 : PyObject_Length(records);
    if (n < 0)
        return -1;
    if (!p && n == 0)
        return 0;
    if (!p && n == 1) {
        PyObject *r0 = PySequence_GetItem(records, 0);
        PyObject *op = r0 == NULL ? NULL : PyObject_GetAttr(r0, S_op);
        PyObject *costless = op == NULL ? NULL : PyObject_GetAttr(adm, S_costless);
        int free = costless == NULL ? -1 : PySequence_Contains(costless, op);
        Py_XDECREF(r0);
        Py_XDECREF(op);
        Py_XDECREF(costless);
        if (free != 0)
            return free < 0 ? -1 : 0;
    }
    return call_result(PyObject_CallMethodOneArg(adm, S_settle, records));
}

/* Server.execute (app.py) for a server in its common state: a primary never fenced, without a
 * lease (automatic failover), no
 * observer, and either no WAL or compiled barriers (fastconn.py's). It runs the command
 * through the engine, settles the admission and, for the common outcome (a plain or job
 * reply, no wakeups; records only with barriers), queues the reply behind the barrier of its
 * records (Server._handle's) and moves the timer itself; any other outcome goes to
 * Server._handle, an engine error to Server._apply_failed, and a server in any other state to
 * Server.execute, so app.py stays the rule. */
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
    if (r == 0)
        r = attr_set(role, S_lease, 0);  /* a lease to ask per command: app.py's execute */
    Py_DECREF(role);
    other = r;
    if (other == 0)
        other = attr_set(server, S_observer, 0);
    if (other < 0)
        return -1;
    Bar *bar = as_bar(self->steps);
    PyObject *adm = NULL;
    if (!other) {
        if ((adm = PyObject_GetAttr(server, S_admission)) == NULL)
            return -1;
        if (adm == Py_None)
            Py_CLEAR(adm);
        else if (bar == NULL)
            other = 1;
    }
    if (other) {
        Py_XDECREF(adm);
        PyObject *args[3] = {server, (PyObject *)self, cmd};
        return call_result(PyObject_VectorcallMethod(S_execute, args, 3, NULL));
    }
    PyObject *engine = PyObject_GetAttr(server, S_engine);
    PyObject *clock = engine == NULL ? NULL : PyObject_GetAttr(server, S_clock);
    PyObject *now = clock == NULL ? NULL : PyObject_CallNoArgs(clock);
    Py_XDECREF(clock);
    if (now == NULL) {
        Py_XDECREF(engine);
        Py_XDECREF(adm);
        return -1;
    }
    PyObject *args[4] = {engine, self->id, cmd, now};
    PyObject *out = PyObject_VectorcallMethod(S_apply, args, 4, NULL);
    Py_DECREF(engine);
    Py_DECREF(now);
    if (out == NULL) {
        Py_XDECREF(adm);
        PyObject *exc = take_exception();
        if (exc == NULL)
            return -1;
        PyObject *fargs[4] = {server, (PyObject *)self, cmd, exc};
        r = call_result(PyObject_VectorcallMethod(S_apply_failed, fargs, 4, NULL));
        Py_DECREF(exc);
        return r;
    }
    int tuple4 = PyTuple_Check(out) && PyTuple_GET_SIZE(out) == 4;
    if (adm != NULL) {
        r = tuple4 ? settle(adm, PyTuple_GET_ITEM(out, 1)) : 0;
        Py_DECREF(adm);
        if (r < 0) {
            Py_DECREF(out);
            return -1;
        }
    }
    int common = 0;
    PyObject *rt = tuple4 ? (PyObject *)Py_TYPE(PyTuple_GET_ITEM(out, 0)) : NULL;
    if (rt != NULL && (rt == api->reply_type || rt == job_reply)) {
        common = PyObject_Not(PyTuple_GET_ITEM(out, 2));
        if (common > 0 && bar == NULL)  /* records without barriers: _handle drops them */
            common = PyObject_Not(PyTuple_GET_ITEM(out, 1));
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
    PyObject *reply = PyTuple_GET_ITEM(out, 0);
    Py_ssize_t barrier = 0;
    r = 0;
    if (bar != NULL) {
        r = PyObject_IsTrue(PyTuple_GET_ITEM(out, 1));
        if (r > 0)
            r = bar_add(bar, (PyObject *)self, PyTuple_GET_ITEM(out, 1), &barrier);
        if (r >= 0 && rt == job_reply && bar->keeps) {
            /* never show a job before its own records (put, release, bury, kick) are durable */
            PyObject *jid = PyObject_GetAttr(reply, S_id);
            Py_ssize_t jb = jid == NULL ? -1 : bar_job_barrier(bar, jid);
            Py_XDECREF(jid);
            if (jb < 0)
                r = -1;
            else if (jb > barrier)
                barrier = jb;
        }
    }
    PyObject *bobj = r < 0 ? NULL : barrier ? PyLong_FromSsize_t(barrier) : Py_NewRef(ZERO);
    r = bobj == NULL ? -1 : core_send(self, reply, bobj);
    Py_XDECREF(bobj);
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
