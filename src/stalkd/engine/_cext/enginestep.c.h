/* What the compiled engine's commands share: the DECLINE answer, ints in slots, one step's
 * context, the checks a command makes before it decides (heaps, hpos), the values it hands out
 * (records and replies, as fastvalues.py builds them), _to_ready, the room's answers and the
 * start of the step Engine.apply runs around a handler. Included by _engine.c after
 * engineslots.c.h; the timer heaps' moves are enginetimers.c.h. */

/* Answer "not handled here" (never a real object: compared by address only). */
static PyObject decline_marker;
#define DECLINE (&decline_marker)

/* --- ints in slots and dicts --------------------------------------------------------------- */

/* An exact int that fits in a long long; 0 if not (no exception left set). A reserve and a
 * delete read about thirty of them, nearly all of one digit: those are read in place. */
static int
as_ll(PyObject *v, long long *out)
{
    if (v == NULL || !PyLong_CheckExact(v))
        return 0;
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)v)) {
        *out = (long long)PyUnstable_Long_CompactValue((PyLongObject *)v);
        return 1;
    }
#else
    Py_ssize_t size = Py_SIZE(v); /* the digit count, negative for a negative int */
    if (size >= -1 && size <= 1) {
        *out = size ? (long long)size * (long long)((PyLongObject *)v)->ob_digit[0] : 0;
        return 1;
    }
#endif
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = x;
    return 1;
}

static int
set_slot_ll(PyObject *o, Py_ssize_t off, long long x)
{
    PyObject *v = PyLong_FromLongLong(x);
    if (v == NULL)
        return -1;
    set_slot(o, off, v);
    return 0;
}

/* Store v (borrowed) in one of the engine's slots. */
static inline int
set_eslot(PyObject *e, int i, PyObject *v)
{
    Py_INCREF(v);
    set_slot(e, eng_off[i], v);
    return 0;
}

/* ``major << 64 | minor`` (heap.pack) for a non-negative minor below 2**63 */
static inline key_t128
pack2(long long major, long long minor)
{
    return (key_t128)major * ((key_t128)1 << 64) + minor;
}

/* --- one step's context -------------------------------------------------------------------- */

typedef struct {
    PyObject *d;        /* the engine */
    PyObject *c;        /* the calling ConnState (borrowed from conns) */
    long long cid;      /* its id */
    Heap *tt, *ct;      /* the tube and connection timer heaps */
    long long now;      /* the step's time, microseconds */
    PyObject *room;     /* Engine.room: None or the WAL room */
    int keep;           /* keep_records */
    long long seq;      /* the engine's seq, written back by finish() */
    PyObject *served;   /* the RESERVE record of a waiter the step served, or NULL */
    PyObject *wake;     /* (waiter id, its RESERVED reply) for Outcome.wakeups, or NULL */
} Step;

/* A heap slot that is not a compiled heap, or an item whose hpos does not point at itself in
 * ``h``, means a state the path does not know: decline. */
static inline Heap *
heap_of(PyObject *o)
{
    return Py_IS_TYPE(o, HeapType) ? (Heap *)o : NULL;
}

/* Where ``item`` is in ``h`` (hpos, checked), or -1. */
static Py_ssize_t
where(Heap *h, PyObject *item, Py_ssize_t hpos_off)
{
    long long i;
    if (!as_ll(SLOT(item, hpos_off), &i) || i < 0 || i >= h->n || h->e[i].item != item)
        return -1;
    return (Py_ssize_t)i;
}

/* Remove slot i; the heap's reference is dropped (the caller holds its own). */
static int
drop_at(Heap *h, Py_ssize_t i)
{
    PyObject *gone = take(h, i);
    if (gone == NULL)
        return -1;
    Py_DECREF(gone);
    return 0;
}

/* --- values the commands hand out ---------------------------------------------------------- */

/* fastvalues.make_record: a Record built slot by slot. Every argument is borrowed. */
static PyObject *
record(Step *s, PyObject *op, PyObject *job_id, PyObject *tube, PyObject *pri, PyObject *delay,
       PyObject *ttr, PyObject *deadline, PyObject *body, PyObject *created)
{
    PyObject *r = RecordType->tp_alloc(RecordType, 0);
    if (r == NULL)
        return NULL;
    PyObject *seq = PyLong_FromLongLong(s->seq);
    PyObject *now = PyLong_FromLongLong(s->now);
    if (seq == NULL || now == NULL) {
        Py_XDECREF(seq);
        Py_XDECREF(now);
        Py_DECREF(r);
        return NULL;
    }
    PyObject *v[R_N] = {op, seq, now, job_id, tube, pri, delay, ttr, deadline, body, st_ready,
                        created, zero, zero, zero, zero, zero, zero, zero};
    for (int i = 0; i < R_N; i++) {
        Py_INCREF(v[i]);
        SLOT(r, record_off[i]) = v[i];
    }
    Py_DECREF(seq);
    Py_DECREF(now);
    return r;
}

static PyObject *
reply2(PyObject *word, PyObject *arg)
{
    PyObject *args = PyTuple_Pack(1, arg);
    if (args == NULL)
        return NULL;
    PyObject *r = ReplyType->tp_alloc(ReplyType, 0);
    if (r == NULL) {
        Py_DECREF(args);
        return NULL;
    }
    Py_INCREF(word);
    SLOT(r, reply_off[RP_WORD]) = word;
    SLOT(r, reply_off[RP_ARGS]) = args;
    return r;
}

static PyObject *
job_reply(PyObject *word, PyObject *j)
{
    PyObject *r = JobReplyType->tp_alloc(JobReplyType, 0);
    if (r == NULL)
        return NULL;
    PyObject *id = SLOT(j, job_off[J_ID]), *body = SLOT(j, job_off[J_BODY]);
    Py_INCREF(word);
    Py_INCREF(id);
    Py_INCREF(body);
    SLOT(r, jobreply_off[JR_WORD]) = word;
    SLOT(r, jobreply_off[JR_ID]) = id;
    SLOT(r, jobreply_off[JR_BODY]) = body;
    return r;
}

/* state.py's _to_ready for a job whose pri is ``pri``: a tube with waiters is served after it
 * (enginewait.c.h's serve_top), so its _dirty is never left with the tube. */
static int
to_ready(PyObject *j, PyObject *t, Heap *ready, long long pri, long long jid)
{
    Py_INCREF(st_ready);
    set_slot(j, job_off[J_STATE], st_ready);
    Py_INCREF(zero);
    set_slot(j, job_off[J_DEADLINE], zero);
    if (push_entry(ready, pack2(pri, jid), j) < 0)
        return -1;
    if (pri < 1024) {
        long long u;
        if (!as_ll(SLOT(t, tube_off[T_URGENT]), &u) || set_slot_ll(t, tube_off[T_URGENT], u + 1) < 0)
            return -1;
    }
    return 0;
}

/* Add ``by`` to an int slot known to hold an exact int that fits. */
static int
bump(PyObject *o, Py_ssize_t off, long long by)
{
    long long v;
    if (!as_ll(SLOT(o, off), &v)) {
        PyErr_SetString(PyExc_OverflowError, "counter");
        return -1;
    }
    return set_slot_ll(o, off, v + by);
}

/* --- the step frame ------------------------------------------------------------------------ */

/* What Engine.apply does before the handler, once the path has decided to run: count the
 * command, set the step's time and budget, leave the scratch lists empty. */
static int
begin(Step *s, PyObject *counter)
{
    PyObject *d = s->d;
    PyObject *cmd = ESLOT(d, E_CMD);
    PyObject *n = cmd == NULL ? NULL : PyDict_GetItemWithError(cmd, counter);
    long long v;
    if (n == NULL || !as_ll(n, &v)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "engine counters");
        return -1;
    }
    PyObject *nv = PyLong_FromLongLong(v + 1);
    if (nv == NULL || PyDict_SetItem(cmd, counter, nv) < 0) {
        Py_XDECREF(nv);
        return -1;
    }
    Py_DECREF(nv);
    PyObject *budget = ESLOT(d, E_STEP_JOBS);
    if (budget == NULL || set_slot_ll(d, eng_off[E_NOW], s->now) < 0)
        return -1;
    if (ESLOT(d, E_BUDGET) != budget && set_eslot(d, E_BUDGET, budget) < 0)
        return -1; /* most steps leave it untouched: no store */
    PyObject *lists[2] = {ESLOT(d, E_RECORDS), ESLOT(d, E_WAKEUPS)};
    for (int i = 0; i < 2; i++)
        if (lists[i] != NULL && PyList_Check(lists[i]) && PyList_GET_SIZE(lists[i])
                && PyList_SetSlice(lists[i], 0, PyList_GET_SIZE(lists[i]), NULL) < 0)
            return -1;
    PyObject *own = ESLOT(d, E_OWN);
    if (own != Py_None && set_eslot(d, E_OWN, Py_None) < 0)
        return -1;
    PyObject *caller = ESLOT(d, E_CALLER);
    if (caller != Py_None && set_eslot(d, E_CALLER, Py_None) < 0)
        return -1;
    return 0;
}

static int
next_seq(Step *s)
{
    s->seq++;
    return set_slot_ll(s->d, eng_off[E_SEQ], s->seq);
}

/* A call into the room raised: Engine.apply leaves its caller set, as the Python path would. */
static PyObject *
room_failed(Step *s)
{
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    set_eslot(s->d, E_CALLER, s->c);
    PyErr_Restore(t, v, tb);
    return NULL;
}

/* The room's answer to one update record (room.py's guarded update): 1 yes, 0 no, -1 raised. */
static int
room_update(Step *s)
{
    if (s->room == Py_None)
        return 1;
    PyObject *one = PyLong_FromLong(1);
    PyObject *ok = one == NULL ? NULL : PyObject_CallMethodOneArg(s->room, m_updates, one);
    Py_XDECREF(one);
    int yes = ok == NULL ? -1 : PyObject_IsTrue(ok);
    Py_XDECREF(ok);
    return yes;
}
