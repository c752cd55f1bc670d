/* The commands on a job the caller holds besides delete and release: bury and touch, each the
 * common case of its handler in jobcommands.py, behind room.py's guard for bury (touch has no
 * WAL cost in the command table). As in enginecmds.c.h, a case that is not the common one
 * answers DECLINE having changed nothing. Included by _engine.c after enginecmds.c.h. */

static PyObject *
do_bury(Step *s, PyObject *cmd, PyObject **rec)
{
    PyObject *j = named_job(s, SLOT(cmd, bury_off[B_ID]));
    if (j == NULL)
        return DECLINE;
    PyObject *t = SLOT(j, job_off[J_TUBE]), *pri_o = SLOT(cmd, bury_off[B_PRI]);
    long long pri, n;
    Heap *reserved;
    Py_ssize_t at;
    if (!as_ll(pri_o, &pri) || pri < 0 || pri > 0xffffffffLL || !Py_IS_TYPE(t, TubeType)
            || !PyDict_Check(SLOT(t, tube_off[T_BURIED])) || !as_ll(SLOT(j, job_off[J_BURIES]), &n)
            || !as_ll(SLOT(t, tube_off[T_RESERVED]), &n) || (at = held_slot(s, j, &reserved)) < 0)
        return DECLINE;

    if (begin(s, ctr_bury) < 0)
        return NULL;
    int yes = room_update(s);
    if (yes < 0)
        return room_failed(s);
    if (!yes)
        return Py_NewRef(reply_out_of_memory);
    Py_INCREF(j);
    PyObject *reply = NULL;
    if (detach_held(s, j, t, reserved, at) < 0)
        goto done;
    Py_INCREF(pri_o);
    set_slot(j, job_off[J_PRI], pri_o);
    if (bump(j, job_off[J_BURIES], 1) < 0 || next_seq(s) < 0)
        goto done;
    if (s->keep && (*rec = record(s, op_bury, SLOT(j, job_off[J_ID]), empty_str, pri_o, zero, zero,
                                  zero, empty_bytes, zero)) == NULL)
        goto done;
    /* _to_buried: the bury's seq orders the buried FIFO across restarts */
    Py_INCREF(st_buried);
    set_slot(j, job_off[J_STATE], st_buried);
    if (set_slot_ll(j, job_off[J_DEADLINE], s->seq) < 0
            || PyObject_SetItem(SLOT(t, tube_off[T_BURIED]), SLOT(j, job_off[J_ID]), j) < 0)
        goto done;
    reply = Py_NewRef(reply_buried);
done:
    Py_DECREF(j);
    return reply;
}

static PyObject *
do_touch(Step *s, PyObject *cmd, PyObject **rec)
{
    PyObject *j = named_job(s, SLOT(cmd, touch_off[TO_ID]));
    if (j == NULL)
        return DECLINE;
    long long ttr, jid;
    Heap *reserved;
    Py_ssize_t at;
    /* a TTR of at least 1 s: the new deadline is later than now, so no timer falls due */
    if (!as_ll(SLOT(j, job_off[J_TTR]), &ttr) || ttr < 1 || ttr > (1LL << 40)
            || !as_ll(SLOT(j, job_off[J_ID]), &jid) || jid < 0 || (at = held_slot(s, j, &reserved)) < 0)
        return DECLINE;

    if (begin(s, ctr_touch) < 0)
        return NULL;
    long long dl = s->now + ttr * 1000000LL;
    if (set_slot_ll(j, job_off[J_DEADLINE], dl) < 0 || rekey(reserved, at, pack2(dl, jid)) < 0
            || retime_conn(s, reserved) < 0 || next_seq(s) < 0)
        return NULL;
    if (s->keep && (*rec = record(s, op_touch, SLOT(j, job_off[J_ID]), empty_str, zero, zero, zero,
                                  zero, empty_bytes, zero)) == NULL)
        return NULL;
    return Py_NewRef(reply_touched);
}
