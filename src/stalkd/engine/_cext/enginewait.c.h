/* Reserving: a job handed to a connection (state.py's _give), a reserve that finds no job and
 * waits (engine.py's _reserve past its fast path, with what timers.py's _settle then does in
 * the same step), and a job that goes to ready in a tube with waiting connections, handed at
 * once to the first of them (timers.py's _serve for that one tube). Anything else about
 * waiting (a DEADLINE_SOON margin already due while a paused tube holds jobs, a half-closed
 * connection, a paused tube's waiters, several dirty tubes) stays with the Python path.
 * Included by _engine.c after enginestep.c.h. */

/* _give's checks: what reserving ``j`` for connection ``c`` reads. */
static int
can_give(Step *s, PyObject *c, PyObject *j, Heap **reserved, long long *ttr, long long *jid)
{
    long long hpos, n;
    if (!Py_IS_TYPE(j, JobType) || !as_ll(SLOT(j, job_off[J_TTR]), ttr) || *ttr < 0
            || *ttr > (1LL << 40) || !as_ll(SLOT(j, job_off[J_ID]), jid) || *jid < 0
            || !as_ll(SLOT(j, job_off[J_RESERVES]), &n)
            || !Py_IS_TYPE(SLOT(j, job_off[J_TUBE]), TubeType)
            || !as_ll(SLOT(SLOT(j, job_off[J_TUBE]), tube_off[T_RESERVED]), &n)
            || (*reserved = heap_of(SLOT(c, conn_off[C_RESERVED]))) == NULL
            || !as_ll(SLOT(c, conn_off[C_HPOS]), &hpos)
            || (hpos >= 0 && where(s->ct, c, conn_off[C_HPOS]) < 0))
        return 0;
    return 1;
}

/* state.py's _give to ``c`` (id ``cid``); *rec gets its RESERVE record. */
static int
give_to(Step *s, PyObject *c, long long cid, PyObject *j, Heap *reserved, long long ttr, long long jid,
        PyObject **rec)
{
    long long dl = s->now + ttr * 1000000LL;
    Py_INCREF(st_reserved);
    set_slot(j, job_off[J_STATE], st_reserved);
    Py_INCREF(c);
    set_slot(j, job_off[J_OWNER], c);
    if (bump(j, job_off[J_RESERVES], 1) < 0 || set_slot_ll(j, job_off[J_DEADLINE], dl) < 0
            || push_entry(reserved, pack2(dl, jid), j) < 0
            || bump(SLOT(j, job_off[J_TUBE]), tube_off[T_RESERVED], 1) < 0 || next_seq(s) < 0)
        return -1;
    if (s->keep && (*rec = record(s, op_reserve, SLOT(j, job_off[J_ID]), empty_str, zero, zero,
                                  zero, zero, empty_bytes, zero)) == NULL)
        return -1;
    return retime_conn_of(s, c, cid, reserved);
}

/* --- a job for a waiting connection ---------------------------------------------------------- */

/* The first connection waiting on ``t`` (_serve's ``next(iter(t.waiting.values()))``) if the
 * step can serve it: a live connection in the state _reserve left it in. NULL: decline. */
static PyObject *
first_waiter(Step *s, PyObject *t, long long *cid)
{
    PyObject *w = SLOT(t, tube_off[T_WAITING]);
    PyObject *it = PyObject_GetIter(w); /* the waiting map's own order (an OrderedDict) */
    PyObject *key = it == NULL ? NULL : PyIter_Next(it);
    Py_XDECREF(it);
    PyObject *c = key == NULL ? NULL : PyDict_GetItemWithError(w, key);
    Py_XDECREF(key);
    long long hpos, n;
    if (c == NULL || c == s->c || !Py_IS_TYPE(c, ConnType) || SLOT(c, conn_off[C_WAITING]) != Py_True
            || SLOT(c, conn_off[C_KICK]) != Py_None || SLOT(c, conn_off[C_RELEASE]) != Py_None
            || !as_ll(SLOT(c, conn_off[C_ID]), cid) || *cid < 0
            || heap_of(SLOT(c, conn_off[C_RESERVED])) == NULL || !as_ll(SLOT(c, conn_off[C_HPOS]), &hpos)
            || (hpos >= 0 && where(s->ct, c, conn_off[C_HPOS]) < 0)
            || (SLOT(c, conn_off[C_WAIT_UNTIL]) != Py_None && !as_ll(SLOT(c, conn_off[C_WAIT_UNTIL]), &n)))
        return NULL;
    PyObject *watch = SLOT(c, conn_off[C_WATCH]);
    if (watch == NULL || !PyList_CheckExact(watch))
        return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(watch); i++) {
        PyObject *wt = PyList_GET_ITEM(watch, i);
        if (!Py_IS_TYPE(wt, TubeType) || !PyDict_Check(SLOT(wt, tube_off[T_WAITING])))
            return NULL;
    }
    return c;
}

/* Where a job going to ready in ``t`` lands: its ready heap, and in *waiter the connection it
 * goes to at once (the tube has waiters and is not paused; its ready heap then is empty, the
 * engine's invariant), or NULL when it stays ready. NULL heap: decline. */
static Heap *
ready_target(Step *s, PyObject *t, PyObject **waiter, long long *wcid)
{
    *waiter = NULL;
    if (!Py_IS_TYPE(t, TubeType))
        return NULL;
    PyObject *w = SLOT(t, tube_off[T_WAITING]);
    Heap *ready = heap_of(SLOT(t, tube_off[T_READY]));
    long long pause, n;
    if (w == NULL || !PyDict_Check(w) || ready == NULL)
        return NULL;
    if (!PyDict_GET_SIZE(w))
        return ready;
    if (!as_ll(SLOT(t, tube_off[T_PAUSE]), &pause) || !as_ll(SLOT(t, tube_off[T_URGENT]), &n))
        return NULL;
    if (s->now < pause)
        return ready; /* paused: _serve leaves the job in ready */
    if (ready->n || (*waiter = first_waiter(s, t, wcid)) == NULL) {
        PyErr_Clear();
        return NULL;
    }
    return ready;
}

/* state.py's _stop_waiting. */
static int
stop_waiting(PyObject *c)
{
    Py_INCREF(Py_False);
    set_slot(c, conn_off[C_WAITING], Py_False);
    Py_INCREF(Py_None);
    set_slot(c, conn_off[C_WAIT_UNTIL], Py_None);
    PyObject *watch = SLOT(c, conn_off[C_WATCH]), *id = SLOT(c, conn_off[C_ID]);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(watch); i++)
        if (PyObject_DelItem(SLOT(PyList_GET_ITEM(watch, i), tube_off[T_WAITING]), id) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError))
                return -1;
            PyErr_Clear(); /* t.waiting.pop(c.id, None) */
        }
    return 0;
}

/* _serve for ``t``, whose only ready job was just put there: it goes to ``waiter``. The
 * RESERVE record goes to s->served, the waiter's reply to s->wake. */
static int
serve_top(Step *s, PyObject *t, Heap *ready, PyObject *waiter, long long wcid)
{
    PyObject *j = pop_top(ready);
    if (j == NULL)
        return -1;
    Heap *reserved;
    long long ttr, jid, pri;
    int rc = -1;
    if (!can_give(s, waiter, j, &reserved, &ttr, &jid) || !as_ll(SLOT(j, job_off[J_PRI]), &pri)) {
        PyErr_SetString(PyExc_TypeError, "a job the compiled path checked changed under it");
        goto done;
    }
    if ((pri < 1024 && bump(t, tube_off[T_URGENT], -1) < 0) || stop_waiting(waiter) < 0
            || give_to(s, waiter, wcid, j, reserved, ttr, jid, &s->served) < 0)
        goto done;
    PyObject *reply = job_reply(word_reserved, j);
    s->wake = reply == NULL ? NULL : PyTuple_Pack(2, SLOT(waiter, conn_off[C_ID]), reply);
    Py_XDECREF(reply);
    rc = s->wake == NULL ? -1 : 0;
done:
    Py_DECREF(j);
    return rc;
}

/* A job's fields give_to reads, for a job about to be served to a waiter. */
static int
servable(PyObject *j)
{
    long long ttr, n;
    return as_ll(SLOT(j, job_off[J_TTR]), &ttr) && ttr >= 1 && ttr <= (1LL << 40)
           && as_ll(SLOT(j, job_off[J_RESERVES]), &n) && as_ll(SLOT(SLOT(j, job_off[J_TUBE]), tube_off[T_RESERVED]), &n);
}

/* --- a reserve that finds no job ------------------------------------------------------------ */

/* _reserve when no watched tube has a ready job it may take: DEADLINE_SOON, or the caller
 * waits (reply None); with a timeout of 0 it times out in the same step, as _settle does it:
 * its timer is due at once, popped, and it stops waiting with TIMED_OUT as its own reply. */
static PyObject *
wait_reserve(Step *s, PyObject *cmd, PyObject *counter)
{
    PyObject *c = s->c, *d = s->d;
    PyObject *watch = SLOT(c, conn_off[C_WATCH]);
    long long timeout = -1, serial, dl, n;
    Heap *reserved = heap_of(SLOT(c, conn_off[C_RESERVED]));
    if (Py_TYPE(cmd) == ReserveTimeoutType
            && (!as_ll(SLOT(cmd, rwt_off[RT_TIMEOUT]), &timeout) || timeout < 0 || timeout > (1LL << 40)))
        return DECLINE;
    if (SLOT(c, conn_off[C_HALF_CLOSED]) != Py_False || reserved == NULL
            || !as_ll(SLOT(c, conn_off[C_HPOS]), &n) || (n >= 0 && where(s->ct, c, conn_off[C_HPOS]) < 0)
            || !as_ll(ESLOT(d, E_WAIT_SERIAL), &serial) || serial == LLONG_MAX)
        return DECLINE;
    int soon = 0, any_ready = 0;
    if (reserved->n) {
        PyObject *top = reserved->e[0].item;
        if (!Py_IS_TYPE(top, JobType) || !as_ll(SLOT(top, job_off[J_DEADLINE]), &dl))
            return DECLINE;
        soon = s->now >= dl - MARGIN_US;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(watch); i++) { /* do_reserve checked each tube */
        PyObject *t = PyList_GET_ITEM(watch, i);
        any_ready |= heap_of(SLOT(t, tube_off[T_READY]))->n > 0; /* in a paused tube */
        if (!PyDict_Check(SLOT(t, tube_off[T_WAITING])))
            return DECLINE;
    }
    if (soon && any_ready)
        return DECLINE; /* it waits with its margin due: _settle answers DEADLINE_SOON */
    if (begin(s, counter) < 0)
        return NULL;
    Py_INCREF(Py_True);
    set_slot(c, conn_off[C_WORKER], Py_True);
    if (soon)
        return Py_NewRef(reply_deadline_soon);
    Py_INCREF(Py_True);
    set_slot(c, conn_off[C_WAITING], Py_True);
    if (timeout < 0) {
        Py_INCREF(Py_None);
        set_slot(c, conn_off[C_WAIT_UNTIL], Py_None);
    } else if (set_slot_ll(c, conn_off[C_WAIT_UNTIL], s->now + timeout * 1000000LL) < 0) {
        return NULL;
    }
    if (set_slot_ll(d, eng_off[E_WAIT_SERIAL], serial + 1) < 0
            || set_slot_ll(c, conn_off[C_WAIT_SEQ], serial + 1) < 0)
        return NULL;
    PyObject *id = SLOT(c, conn_off[C_ID]);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(watch); i++)
        if (PyObject_SetItem(SLOT(PyList_GET_ITEM(watch, i), tube_off[T_WAITING]), id, c) < 0)
            return NULL;
    if (retime_conn(s, reserved) < 0)
        return NULL;
    if (timeout != 0)
        return Py_NewRef(Py_None); /* it waits: no reply yet */
    /* Due now, and the soonest timer of all (none was due when the step began). */
    if (!s->ct->n || s->ct->e[0].item != c) {
        PyErr_SetString(PyExc_RuntimeError, "a reserve timing out is not the first timer");
        return NULL;
    }
    PyObject *gone = pop_top(s->ct);
    if (gone == NULL)
        return NULL;
    Py_DECREF(gone);
    if (stop_waiting(c) < 0 || retime_conn(s, reserved) < 0)
        return NULL;
    set_eslot(d, E_OWN, reply_timed_out); /* _wake(caller) leaves it in _own */
    return Py_NewRef(reply_timed_out);
}
