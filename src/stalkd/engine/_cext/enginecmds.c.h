/* The commands the compiled path runs: put, reserve (with or without a timeout), delete and
 * release, each the common case of its Python handler (jobcommands.py, engine.py, state.py)
 * step for step. Every function first checks that its case is the common one and answers
 * DECLINE when it is not, having changed nothing; Engine.apply's Python body then runs.
 * Included by _engine.c after enginewait.c.h (a job for a waiter, a reserve that waits). */

/* --- the job table (jobtable.py) ----------------------------------------------------------- */

/* The chunk of the engine's JobTable ``jt`` that holds (or would hold) job ``id`` (borrowed),
 * or NULL with no error set: no such chunk (the Python path makes one), or not the table
 * this was built for. */
static PyObject *
job_chunk(PyObject *jt, long long id)
{
    if (jt == NULL || !Py_IS_TYPE(jt, JobTableType) || id < 0)
        return NULL;
    PyObject *chunks = SLOT(jt, jt_off[JT_CHUNKS]);
    PyObject *key = chunks != NULL && PyDict_CheckExact(chunks) ? PyLong_FromLongLong(id >> jt_shift) : NULL;
    PyObject *chunk = key == NULL ? NULL : PyDict_GetItemWithError(chunks, key);
    Py_XDECREF(key);
    if (chunk == NULL || !PyDict_CheckExact(chunk)) {
        PyErr_Clear();
        return NULL;
    }
    return chunk;
}

/* The chunk job ``id`` goes into (borrowed), made as JobTable.__setitem__ makes it if there is
 * none yet; NULL with an error set if that fails, with none if the table is not the one known. */
static PyObject *
put_chunk(PyObject *jt, long long id)
{
    PyObject *chunk = job_chunk(jt, id);
    long long top;
    if (chunk != NULL || jt == NULL || !Py_IS_TYPE(jt, JobTableType) || id < 0
            || !PyDict_CheckExact(SLOT(jt, jt_off[JT_CHUNKS])) || !as_ll(SLOT(jt, jt_off[JT_TOP]), &top))
        return chunk;
    PyObject *chunks = SLOT(jt, jt_off[JT_CHUNKS]);
    if ((id >> jt_shift) > top) { /* the newest chunk until now, if left empty, goes */
        PyObject *old = PyLong_FromLongLong(top);
        PyObject *oc = old == NULL ? NULL : PyDict_GetItemWithError(chunks, old);
        int bad = old == NULL || (oc == NULL && PyErr_Occurred())
                || (oc != NULL && PyDict_CheckExact(oc) && PyDict_GET_SIZE(oc) == 0
                    && PyDict_DelItem(chunks, old) < 0);
        Py_XDECREF(old);
        if (bad)
            return NULL;
    }
    PyObject *key = PyLong_FromLongLong(id >> jt_shift);
    chunk = key == NULL ? NULL : PyDict_New();
    if (chunk == NULL || PyDict_SetItem(chunks, key, chunk) < 0
            || ((id >> jt_shift) > top && set_slot_ll(jt, jt_off[JT_TOP], id >> jt_shift) < 0)) {
        Py_XDECREF(key);
        Py_XDECREF(chunk);
        return NULL;
    }
    Py_DECREF(key);
    Py_DECREF(chunk); /* the table holds it */
    return chunk;
}

/* JobTable._n += by */
static inline int
count_jobs(PyObject *jt, long long by)
{
    return bump(jt, jt_off[JT_N], by);
}

/* --- put ----------------------------------------------------------------------------------- */

static PyObject *
do_put(Step *s, PyObject *cmd, PyObject **rec)
{
    PyObject *d = s->d, *c = s->c;
    PyObject *body = SLOT(cmd, put_off[P_BODY]);
    PyObject *pri_o = SLOT(cmd, put_off[P_PRI]), *ttr_o = SLOT(cmd, put_off[P_TTR]);
    long long max, pri, delay, ttr, next_id, total, bytes, tube_total;
    if (SLOT(cmd, put_off[P_ERROR]) != Py_None || body == NULL || !PyBytes_CheckExact(body)
            || !as_ll(ESLOT(d, E_MAX_JOB_SIZE), &max)
            || PyBytes_GET_SIZE(body) > max
            || ESLOT(d, E_DRAINING) != Py_False
            || !as_ll(SLOT(cmd, put_off[P_DELAY]), &delay) || delay != 0
            || !as_ll(pri_o, &pri) || pri < 0 || pri > 0xffffffffLL
            || !as_ll(ttr_o, &ttr)
            || !as_ll(ESLOT(d, E_NEXT_ID), &next_id) || next_id < 0
            || next_id == LLONG_MAX
            || !as_ll(ESLOT(d, E_TOTAL_JOBS), &total)
            || !as_ll(ESLOT(d, E_BODY_BYTES), &bytes))
        return DECLINE;
    PyObject *t = SLOT(c, conn_off[C_USE]), *waiter;
    long long wcid, reserved_n; /* a waiter served: what _give reads of the tube */
    Heap *ready = ready_target(s, t, &waiter, &wcid);
    if (ready == NULL || !as_ll(SLOT(t, tube_off[T_TOTAL]), &tube_total)
            || (waiter != NULL && (ttr > (1LL << 40) || !as_ll(SLOT(t, tube_off[T_RESERVED]), &reserved_n))))
        return DECLINE;
    PyObject *jobs = ESLOT(d, E_JOBS);
    long long n_jobs, top;
    if (jobs == NULL || !Py_IS_TYPE(jobs, JobTableType) || !as_ll(SLOT(jobs, jt_off[JT_N]), &n_jobs)
            || !as_ll(SLOT(jobs, jt_off[JT_TOP]), &top) || !PyDict_CheckExact(SLOT(jobs, jt_off[JT_CHUNKS])))
        return DECLINE;

    if (begin(s, ctr_put) < 0)
        return NULL;
    Py_ssize_t blen = PyBytes_GET_SIZE(body);
    if (s->room != Py_None) { /* room.py's guarded put */
        PyObject *n = PyLong_FromSsize_t(blen);
        PyObject *ok = n == NULL ? NULL : PyObject_CallMethodOneArg(s->room, m_put, n);
        Py_XDECREF(n);
        int yes = ok == NULL ? -1 : PyObject_IsTrue(ok);
        Py_XDECREF(ok);
        if (yes < 0)
            return room_failed(s);
        if (!yes)
            return Py_NewRef(reply_out_of_memory);
    }
    Py_INCREF(Py_True);
    set_slot(c, conn_off[C_PRODUCER], Py_True);
    PyObject *jid = PyLong_FromLongLong(next_id); /* the engine's next_id, as an int */
    PyObject *j = jid == NULL ? NULL : JobType->tp_alloc(JobType, 0);
    if (j == NULL) {
        Py_XDECREF(jid);
        return NULL;
    }
    PyObject *ttr_v = ttr > 1 ? Py_NewRef(ttr_o) : PyLong_FromLong(1);
    PyObject *now = PyLong_FromLongLong(s->now);
    if (ttr_v == NULL || now == NULL) {
        Py_XDECREF(ttr_v);
        Py_XDECREF(now);
        Py_DECREF(jid);
        Py_DECREF(j);
        return NULL;
    }
    PyObject *v[J_N] = {jid, t, pri_o, zero, ttr_v, body, st_ready, now, zero,
                        zero, zero, zero, zero, zero, minus_one, Py_None};
    v[J_DELAY] = SLOT(cmd, put_off[P_DELAY]);
    for (int i = 0; i < J_N; i++) {
        Py_INCREF(v[i]);
        SLOT(j, job_off[i]) = v[i];
    }
    Py_DECREF(ttr_v);
    Py_DECREF(now);
    PyObject *reply = NULL;
    PyObject *chunk;
    if (set_slot_ll(d, eng_off[E_NEXT_ID], next_id + 1) < 0
            || (chunk = put_chunk(jobs, next_id)) == NULL || PyDict_SetItem(chunk, jid, j) < 0
            || count_jobs(jobs, 1) < 0
            || set_slot_ll(d, eng_off[E_BODY_BYTES], bytes + blen) < 0
            || set_slot_ll(t, tube_off[T_TOTAL], tube_total + 1) < 0
            || set_slot_ll(d, eng_off[E_TOTAL_JOBS], total + 1) < 0
            || to_ready(j, t, ready, pri, next_id) < 0 || next_seq(s) < 0)
        goto done;
    if (s->keep) {
        *rec = record(s, op_put, jid, SLOT(t, tube_off[T_NAME]), pri_o, SLOT(j, job_off[J_DELAY]),
                      SLOT(j, job_off[J_TTR]), zero, body, SLOT(j, job_off[J_CREATED]));
        if (*rec == NULL)
            goto done;
    }
    if (waiter != NULL && serve_top(s, t, ready, waiter, wcid) < 0)
        goto done;
    reply = reply2(word_inserted, jid);
done:
    Py_DECREF(j);
    Py_DECREF(jid);
    return reply;
}

/* --- reserve, reserve-with-timeout (a job at hand) ----------------------------------------- */

static PyObject *
do_reserve(Step *s, PyObject *cmd, PyObject *counter, PyObject **rec)
{
    PyObject *c = s->c;
    PyObject *watch = SLOT(c, conn_off[C_WATCH]);
    if (watch == NULL || !PyList_CheckExact(watch))
        return DECLINE;
    PyObject *best = NULL;
    Heap *best_ready = NULL;
    key_t128 best_key = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(watch); i++) {
        PyObject *t = PyList_GET_ITEM(watch, i);
        Heap *ready;
        long long pause;
        if (!Py_IS_TYPE(t, TubeType) || (ready = heap_of(SLOT(t, tube_off[T_READY]))) == NULL)
            return DECLINE;
        if (!ready->n || (best != NULL && !(ready->e[0].key < best_key)))
            continue;
        if (!as_ll(SLOT(t, tube_off[T_PAUSE]), &pause))
            return DECLINE;
        if (s->now >= pause) {
            best = t;
            best_ready = ready;
            best_key = ready->e[0].key;
        }
    }
    if (best == NULL)
        return wait_reserve(s, cmd, counter);
    PyObject *j = best_ready->e[0].item;
    Heap *reserved;
    long long ttr, jid, pri, urgent;
    if (!can_give(s, c, j, &reserved, &ttr, &jid) || !as_ll(SLOT(j, job_off[J_PRI]), &pri)
            || !as_ll(SLOT(best, tube_off[T_URGENT]), &urgent))
        return DECLINE;

    if (begin(s, counter) < 0)
        return NULL;
    Py_INCREF(Py_True);
    set_slot(c, conn_off[C_WORKER], Py_True);
    j = pop_top(best_ready);
    if (j == NULL)
        return NULL;
    PyObject *reply = NULL;
    if ((pri >= 1024 || set_slot_ll(best, tube_off[T_URGENT], urgent - 1) == 0)
            && give_to(s, c, s->cid, j, reserved, ttr, jid, rec) == 0)
        reply = job_reply(word_reserved, j);
    Py_DECREF(j);
    return reply;
}

/* --- delete, release ----------------------------------------------------------------------- */

/* The caller's reserved job ``j``: its slot in the caller's reserved heap, or -1. */
static Py_ssize_t
held_slot(Step *s, PyObject *j, Heap **reserved)
{
    PyObject *c = s->c;
    long long hpos;
    if (SLOT(j, job_off[J_STATE]) != st_reserved || SLOT(j, job_off[J_OWNER]) != c
            || SLOT(c, conn_off[C_RELEASE]) != Py_None
            || (*reserved = heap_of(SLOT(c, conn_off[C_RESERVED]))) == NULL
            || !as_ll(SLOT(c, conn_off[C_HPOS]), &hpos)
            || (hpos >= 0 && where(s->ct, c, conn_off[C_HPOS]) < 0))
        return -1;
    return where(*reserved, j, job_off[J_HPOS]);
}

/* _detach of the caller's reserved job (its slot found by held_slot). */
static int
detach_held(Step *s, PyObject *j, PyObject *t, Heap *reserved, Py_ssize_t at)
{
    if (drop_at(reserved, at) < 0)
        return -1;
    Py_INCREF(Py_None);
    set_slot(j, job_off[J_OWNER], Py_None);
    if (bump(t, tube_off[T_RESERVED], -1) < 0)
        return -1;
    return retime_conn(s, reserved);
}

/* The job a command names (borrowed), or NULL with no error set when the Python path must look
 * it up: an id past a long long, an unknown id (NOT_FOUND), or not a Job. */
static PyObject *
named_job(Step *s, PyObject *id)
{
    long long v;
    PyObject *chunk = as_ll(id, &v) ? job_chunk(ESLOT(s->d, E_JOBS), v) : NULL;
    if (chunk == NULL)
        return NULL;
    PyObject *j = PyDict_GetItemWithError(chunk, id);
    if (j == NULL || !Py_IS_TYPE(j, JobType)) {
        PyErr_Clear();
        return NULL;
    }
    return j;
}

static PyObject *
do_delete(Step *s, PyObject *cmd, PyObject **rec)
{
    PyObject *d = s->d;
    PyObject *j = named_job(s, SLOT(cmd, delete_off[D_ID]));
    if (j == NULL)
        return DECLINE; /* NOT_FOUND and the rest: the Python path */
    PyObject *jobs = ESLOT(d, E_JOBS), *chunk;
    PyObject *t = SLOT(j, job_off[J_TUBE]), *body = SLOT(j, job_off[J_BODY]);
    long long using, watching, bytes, pri, n, jid, top;
    if (!as_ll(SLOT(j, job_off[J_ID]), &jid) || (chunk = job_chunk(jobs, jid)) == NULL
            || !as_ll(SLOT(jobs, jt_off[JT_N]), &n) || !as_ll(SLOT(jobs, jt_off[JT_TOP]), &top))
        return DECLINE;
    /* Below the newest chunk, one left empty is dropped and one left at a count of _SHRINK is
     * copied smaller: those deletes (every count a power of two, a superset) are
     * JobTable.__delitem__'s to do. The newest chunk is only ever deleted from, here. */
    Py_ssize_t left = PyDict_GET_SIZE(chunk) - 1;
    if ((jid >> jt_shift) < top && (left <= 0 || (left & (left - 1)) == 0))
        return DECLINE;
    if (!Py_IS_TYPE(t, TubeType) || !as_ll(SLOT(t, tube_off[T_USING]), &using)
            || !as_ll(SLOT(t, tube_off[T_WATCHING]), &watching) || (!using && !watching)
            || !PyBytes_CheckExact(body) || !as_ll(ESLOT(d, E_BODY_BYTES), &bytes)
            || !as_ll(SLOT(j, job_off[J_PRI]), &pri)
            || !as_ll(SLOT(t, tube_off[T_CMD_DELETE]), &n) || !as_ll(SLOT(t, tube_off[T_URGENT]), &n)
            || !as_ll(SLOT(t, tube_off[T_RESERVED]), &n))
        return DECLINE;
    Heap *from;
    Py_ssize_t at;
    PyObject *st = SLOT(j, job_off[J_STATE]);
    if (st == st_ready) {
        if ((from = heap_of(SLOT(t, tube_off[T_READY]))) == NULL
                || (at = where(from, j, job_off[J_HPOS])) < 0)
            return DECLINE;
    } else if ((at = held_slot(s, j, &from)) < 0) {
        return DECLINE; /* delayed, buried, another's: the Python path */
    }

    if (begin(s, ctr_delete) < 0)
        return NULL;
    Py_INCREF(j);
    PyObject *reply = NULL;
    if (st == st_ready) {
        if (drop_at(from, at) < 0 || (pri < 1024 && bump(t, tube_off[T_URGENT], -1) < 0))
            goto done;
    } else if (detach_held(s, j, t, from, at) < 0) {
        goto done;
    }
    if (PyDict_DelItem(chunk, SLOT(j, job_off[J_ID])) < 0 || count_jobs(jobs, -1) < 0
            || set_slot_ll(d, eng_off[E_BODY_BYTES], bytes - PyBytes_GET_SIZE(body)) < 0
            || bump(t, tube_off[T_CMD_DELETE], 1) < 0 || next_seq(s) < 0)
        goto done;
    if (s->keep && (*rec = record(s, op_delete, SLOT(j, job_off[J_ID]), empty_str, zero, zero, zero,
                                  zero, empty_bytes, zero)) == NULL)
        goto done;
    reply = Py_NewRef(reply_deleted);
done:
    Py_DECREF(j);
    return reply;
}

static PyObject *
do_release(Step *s, PyObject *cmd, PyObject **rec)
{
    PyObject *j = named_job(s, SLOT(cmd, release_off[RL_ID]));
    if (j == NULL)
        return DECLINE;
    PyObject *t = SLOT(j, job_off[J_TUBE]), *waiter = NULL;
    PyObject *pri_o = SLOT(cmd, release_off[RL_PRI]), *delay_o = SLOT(cmd, release_off[RL_DELAY]);
    long long pri, delay, jid, n, wcid;
    Heap *reserved, *ready = NULL, *delayed = NULL;
    Py_ssize_t at;
    if (!as_ll(pri_o, &pri) || pri < 0 || pri > 0xffffffffLL || !as_ll(delay_o, &delay) || delay < 0
            || delay > 0xffffffffLL || !as_ll(SLOT(j, job_off[J_ID]), &jid) || jid < 0
            || !as_ll(SLOT(j, job_off[J_RELEASES]), &n) || !Py_IS_TYPE(t, TubeType)
            || !as_ll(SLOT(t, tube_off[T_URGENT]), &n) || !as_ll(SLOT(t, tube_off[T_RESERVED]), &n)
            || (at = held_slot(s, j, &reserved)) < 0)
        return DECLINE;
    if (delay ? !tube_timer_ok(s, t) || (delayed = heap_of(SLOT(t, tube_off[T_DELAYED]))) == NULL
              : (ready = ready_target(s, t, &waiter, &wcid)) == NULL || (waiter != NULL && !servable(j)))
        return DECLINE;

    if (begin(s, ctr_release) < 0)
        return NULL;
    int logged = room_update(s); /* without room: released to ready unlogged */
    if (logged < 0)
        return room_failed(s);
    if (!logged && delay)
        return Py_NewRef(reply_out_of_memory); /* a delayed release is refused unchanged */
    Py_INCREF(j);
    PyObject *reply = NULL;
    if (detach_held(s, j, t, reserved, at) < 0)
        goto done;
    Py_INCREF(pri_o);
    set_slot(j, job_off[J_PRI], pri_o);
    Py_INCREF(delay_o);
    set_slot(j, job_off[J_DELAY], delay_o);
    if (bump(j, job_off[J_RELEASES], 1) < 0
            || (delay ? to_delayed(s, j, t, delayed, delay, jid) : to_ready(j, t, ready, pri, jid)) < 0
            || next_seq(s) < 0)
        goto done;
    if (s->keep && logged && (*rec = record(s, op_release, SLOT(j, job_off[J_ID]), empty_str, pri_o,
                                            delay_o, zero, SLOT(j, job_off[J_DEADLINE]), empty_bytes,
                                            zero)) == NULL)
        goto done;
    if (waiter != NULL && serve_top(s, t, ready, waiter, wcid) < 0)
        goto done;
    reply = Py_NewRef(reply_released);
done:
    Py_DECREF(j);
    return reply;
}
