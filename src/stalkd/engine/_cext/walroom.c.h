/* The WAL's room as the server asks for it per command: Wal.admit and Wal.settle (walspace.py
 * over space.py's SpaceBudget.admit and settle, the rule), and SpaceBudget.fits for Wal.write,
 * in the common case: the budget's span is its log's active_span, the active segment is the
 * one the spares were counted for, and the room is there. Anything else (a new segment to
 * count spares for, a spare to make, a subclass, a replaced method) is the reference's,
 * declined before anything changed. Included once, by _wal.c. */

static PyTypeObject *log_type;
static PyObject *active_span;              /* Log.active_span, the budget's span */
static Py_ssize_t put_frame_base, result_fixed; /* space._PUT_FRAME, model.RESULT_FIXED */
static PyObject *op_delete;
static PyObject *S_span, *S_base_, *S_max_frame, *S_spares, *S_per_spare, *S_writer, *S_active, *S_base,
    *S_pos, *S_limit, *S_tube, *S_body;

/* What the budget can still promise (room - promised, as SpaceBudget.room computes room); 0, or
 * -2 when the reference must count (error cleared). */
static int
room_left(PyObject *sp, Py_ssize_t *left)
{
    PyObject *span = PyObject_GetAttr(sp, S_span), *writer = NULL, *act = NULL;
    int rc = -2;
    if (span == NULL || !PyMethod_Check(span) || PyMethod_GET_FUNCTION(span) != active_span
            || Py_TYPE(PyMethod_GET_SELF(span)) != log_type)
        goto done;
    writer = PyObject_GetAttr(PyMethod_GET_SELF(span), S_writer);
    act = writer == NULL ? NULL : PyObject_GetAttr(writer, S_active);
    Py_ssize_t base, pos, limit, counted, max_frame, spares, per_spare, promised;
    if (act == NULL || act == Py_None || get_size(act, S_base, &base) < 0 || get_size(act, S_pos, &pos) < 0
            || get_size(act, S_limit, &limit) < 0 || get_size(sp, S_base_, &counted) < 0 || base != counted
            || get_size(sp, S_max_frame, &max_frame) < 0 || get_size(sp, S_spares, &spares) < 0
            || get_size(sp, S_per_spare, &per_spare) < 0 || get_size(sp, S_promised, &promised) < 0)
        goto done;
    Py_ssize_t active = limit - pos - max_frame;
    *left = (active > 0 ? active : 0) + spares * per_spare - promised;
    rc = 0;
done:
    PyErr_Clear();
    Py_XDECREF(span);
    Py_XDECREF(writer);
    Py_XDECREF(act);
    return rc;
}

/* The budget of a Wal: 1 (*sp set, a SpaceBudget), 0 (no budget yet), -2 (declined). */
static int
budget_of(PyObject *self, PyObject **sp)
{
    *sp = PyObject_GetAttr(self, S_space);
    if (*sp == NULL) {
        PyErr_Clear();
        return -2;
    }
    if (*sp == Py_None) {
        Py_CLEAR(*sp);
        return 0;
    }
    if (Py_TYPE(*sp) != budget_type) {
        Py_CLEAR(*sp);
        return -2;
    }
    return 1;
}

/* Wal.admit(cost) when the room is there: promised += cost, True. */
static PyObject *
fast_admit(PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !enabled || Py_TYPE(args[0]) != wal_type || !PyLong_CheckExact(args[1]) || !unchanged())
        return DECLINE;
    Py_ssize_t cost = PyLong_AsSsize_t(args[1]), left = 0;
    if (cost == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return DECLINE;
    }
    PyObject *sp;
    int has = budget_of(args[0], &sp);
    if (has <= 0)
        return has == 0 ? Py_NewRef(Py_True) : DECLINE;
    PyObject *out = DECLINE;
    if (room_left(sp, &left) == 0 && left >= cost)
        out = add_size(sp, S_promised, cost) < 0 ? NULL : Py_NewRef(Py_True);
    Py_DECREF(sp);
    return out;
}

/* What settle promises for one record (space.py's settle and record_cost); -2: declined. */
static Py_ssize_t
settle_cost(PyObject *r)
{
    PyObject *op = PyObject_GetAttr(r, S_op);
    Py_ssize_t need = -2;
    if (op == NULL || Py_TYPE(op) != op_type)
        goto done;
    long v = PyLong_AsLong(op);
    if (v < 0 || v > 255 || op == op_delete || !durable[v]) {
        need = v < 0 || v > 255 ? -2 : 0;
        goto done;
    }
    if (op != op_put && op != op_result) {
        need = short_frame;
        goto done;
    }
    PyObject *body = PyObject_GetAttr(r, S_body);
    if (body != NULL && PyBytes_CheckExact(body)) {
        Py_ssize_t n = PyBytes_GET_SIZE(body);
        if (op == op_result) {
            need = (FRAME_HEADER + result_fixed + n + 7) & ~(Py_ssize_t)7;
        } else {
            PyObject *tube = PyObject_GetAttr(r, S_tube);
            if (tube != NULL && PyUnicode_CheckExact(tube))  /* len(str): code points, as settle counts */
                need = ((put_frame_base + PyUnicode_GET_LENGTH(tube) + n) & ~(Py_ssize_t)7) + short_frame;
            Py_XDECREF(tube);
        }
    }
    Py_XDECREF(body);
done:
    PyErr_Clear();
    Py_XDECREF(op);
    return need;
}

/* Wal.settle(admitted, records): promised += what the records need - admitted. */
static PyObject *
fast_settle(PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !enabled || Py_TYPE(args[0]) != wal_type || !PyLong_CheckExact(args[1])
            || !(PyList_CheckExact(args[2]) || PyTuple_CheckExact(args[2])) || !unchanged())
        return DECLINE;
    Py_ssize_t admitted = PyLong_AsSsize_t(args[1]), need = 0;
    if (admitted == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return DECLINE;
    }
    PyObject *sp;
    int has = budget_of(args[0], &sp);
    if (has <= 0)
        return has == 0 ? Py_NewRef(Py_None) : DECLINE;
    PyObject **it = PySequence_Fast_ITEMS(args[2]);
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(args[2]); i++) {
        Py_ssize_t c = settle_cost(it[i]);
        if (c < 0) {
            Py_DECREF(sp);
            return DECLINE;
        }
        need += c;
    }
    PyObject *out = add_size(sp, S_promised, need - admitted) < 0 ? NULL : Py_NewRef(Py_None);
    Py_DECREF(sp);
    return out;
}

/* SpaceBudget.fits(n): 1 or 0, -1 with an error; the reference's when the room is short. */
static int
fits(PyObject *sp, Py_ssize_t n)
{
    Py_ssize_t left;
    if (room_left(sp, &left) == 0 && left >= n)
        return 1;
    PyObject *x = PyLong_FromSsize_t(n);
    PyObject *f = x == NULL ? NULL : PyObject_CallMethodOneArg(sp, S_fits, x);
    int t = f == NULL ? -1 : PyObject_IsTrue(f);
    Py_XDECREF(x);
    Py_XDECREF(f);
    return t;
}
