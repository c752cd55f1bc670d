/* The engine's two timer heaps kept in step with the containers, as state.py does it: a
 * connection's timer (_retime_conn: its soonest TTR, or while it waits in reserve the start of
 * that TTR's safety margin or its timeout), a tube's (_retime_tube: its soonest delay or the end
 * of its pause), and _to_delayed, which moves a tube's timer. heap.py's update is rekey. Included
 * by _engine.c after enginestep.c.h. */

/* heap.py's update: slot i gets ``key`` and sifts the way the key moved. */
static int
rekey(Heap *h, Py_ssize_t i, key_t128 key)
{
    key_t128 old = h->e[i].key;
    h->e[i].key = key;
    return key < old ? up(h, i) : down(h, i);
}

#define MARGIN_US 1000000LL /* objects.py's SAFETY_MARGIN_US */

/* state.py's _retime_conn for ``c`` (the caller, or a waiter the step serves): its timer is
 * ConnState.timer_us(), its soonest TTR, or while it waits the start of that TTR's safety
 * margin or its reserve timeout, whichever is sooner. */
static int
retime_conn_of(Step *s, PyObject *c, long long cid, Heap *reserved)
{
    long long hpos, when = 0, w;
    int has = 0;
    if (!as_ll(SLOT(c, conn_off[C_HPOS]), &hpos))
        return -1;
    if (reserved->n) {
        PyObject *top = reserved->e[0].item;
        if (!Py_IS_TYPE(top, JobType) || !as_ll(SLOT(top, job_off[J_DEADLINE]), &when)) {
            PyErr_SetString(PyExc_TypeError, "a reserved heap holds a job without an int deadline");
            return -1;
        }
        has = 1;
    }
    if (SLOT(c, conn_off[C_WAITING]) == Py_True) {
        if (has)
            when -= MARGIN_US;
        PyObject *until = SLOT(c, conn_off[C_WAIT_UNTIL]);
        if (until != Py_None) {
            if (!as_ll(until, &w)) {
                PyErr_SetString(PyExc_TypeError, "wait_until_us");
                return -1;
            }
            if (!has || w < when)
                when = w;
            has = 1;
        }
    }
    if (!has) {
        if (hpos < 0)
            return 0;
        Py_ssize_t i = slot_of(s->ct, c);
        return i < 0 ? -1 : drop_at(s->ct, i);
    }
    key_t128 key = pack2(when, cid);
    if (hpos < 0)
        return push_entry(s->ct, key, c);
    Py_ssize_t i = slot_of(s->ct, c);
    if (i < 0)
        return -1;
    return s->ct->e[i].key == key ? 0 : rekey(s->ct, i, key);
}

static inline int
retime_conn(Step *s, Heap *reserved)
{
    return retime_conn_of(s, s->c, s->cid, reserved);
}

/* What retime_tube reads of ``t``, checked before the step changes anything. */
static int
tube_timer_ok(Step *s, PyObject *t)
{
    long long hpos, serial, pause;
    Heap *delayed = heap_of(SLOT(t, tube_off[T_DELAYED]));
    return delayed != NULL && as_ll(SLOT(t, tube_off[T_HPOS]), &hpos) && as_ll(SLOT(t, tube_off[T_SERIAL]), &serial)
           && serial >= 0 && as_ll(SLOT(t, tube_off[T_PAUSE]), &pause)
           && (hpos < 0 || where(s->tt, t, tube_off[T_HPOS]) >= 0);
}

/* state.py's _retime_tube: its timer is its soonest delay deadline or its pause's end. */
static int
retime_tube(Step *s, PyObject *t)
{
    long long hpos, serial, pause, when = 0;
    int has = 0;
    Heap *delayed = heap_of(SLOT(t, tube_off[T_DELAYED]));
    if (delayed == NULL || !as_ll(SLOT(t, tube_off[T_HPOS]), &hpos)
            || !as_ll(SLOT(t, tube_off[T_SERIAL]), &serial) || !as_ll(SLOT(t, tube_off[T_PAUSE]), &pause)) {
        PyErr_SetString(PyExc_TypeError, "a tube's timer fields");
        return -1;
    }
    if (delayed->n) {
        PyObject *top = delayed->e[0].item;
        if (!Py_IS_TYPE(top, JobType) || !as_ll(SLOT(top, job_off[J_DEADLINE]), &when)) {
            PyErr_SetString(PyExc_TypeError, "a delay heap holds a job without an int deadline");
            return -1;
        }
        has = 1;
    }
    if (pause && (!has || pause < when)) {
        when = pause;
        has = 1;
    }
    if (!has) {
        if (hpos < 0)
            return 0;
        Py_ssize_t i = slot_of(s->tt, t);
        return i < 0 ? -1 : drop_at(s->tt, i);
    }
    key_t128 key = pack2(when, serial);
    if (hpos < 0)
        return push_entry(s->tt, key, t);
    Py_ssize_t i = slot_of(s->tt, t);
    return i < 0 ? -1 : rekey(s->tt, i, key); /* heap.py's update, even for the same key */
}

/* state.py's _to_delayed for a job of tube ``t`` (its delay heap ``delayed``). */
static int
to_delayed(Step *s, PyObject *j, PyObject *t, Heap *delayed, long long delay, long long jid)
{
    long long dl = s->now + delay * 1000000LL;
    Py_INCREF(st_delayed);
    set_slot(j, job_off[J_STATE], st_delayed);
    if (set_slot_ll(j, job_off[J_DEADLINE], dl) < 0 || push_entry(delayed, pack2(dl, jid), j) < 0)
        return -1;
    return retime_tube(s, t);
}
