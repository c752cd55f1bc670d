/* The connection's state as C holds it (the slots the reference's methods share), the module's
 * configuration, and small helpers. Included once, by _conn.c. */

typedef struct {
    PyObject_HEAD
    PyObject *id, *server, *steps, *parser, *transport, *policy, *out, *held;
    PyObject *turns;  /* the loop's time shared turn by turn (turns.py), or None */
    Py_ssize_t out_bytes, held_bytes, max_output, flush_at;
    Py_ssize_t charged;  /* what the server's memory budget counts for us (budget.py) */
    char close_ready, waiting, write_paused, join_writes, read_paused, eof, closing, lost;
    char running, fresh;
    char mem_paused;  /* the budget stopped our reading (read_paused is our own) */
    char deferred;  /* past a turn's deadline: runs nothing until the turns run us again */
} Core;

static PyTypeObject CoreType;
static StalkdProtocolAPI *api = NULL;
static PyObject *py_send = NULL;     /* Connection.send, the reference */
static PyObject *close_type = NULL;  /* commands.Close */
static PyObject *job_reply = NULL;   /* commands.JobReply */
static PyObject *denied = NULL;      /* Reply("PERMISSION_DENIED") */
static PyObject *replicate = NULL;   /* replication.wire.REPLICATE */
static PyObject *ZERO, *EMPTY;
static Py_ssize_t grain = 32768;  /* budget.GRAIN, handed over by configure() */
static PyObject *S_write, *S_writelines, *S_close, *S_is_closing, *S_get_write_buffer_size,
    *S_pause_reading, *S_resume_reading, *S_begin_step, *S_end_step, *S_execute, *S_retire,
    *S_replicate, *S_admits, *S_join, *S_role, *S_standby, *S_fenced, *S_lease, *S_admission, *S_observer,
    *S_engine, *S_clock, *S_apply, *S_apply_failed, *S_handle, *S_timer_at, *S_schedule_tick,
    *S_popleft, *S_promised, *S_costless, *S_settle, *S_id, *S_measure_memory, *S_deadline,
    *S_defer;
static PyObject *perf_counter = NULL;  /* time.perf_counter: the turns' clock, read here as C */

/* --- helpers ---------------------------------------------------------------------------- */

/* The pending exception, if it is an Exception, taken as one normalized object with its
 * traceback (what the reference's ``except Exception as e`` hands on); NULL with the error
 * still set for anything else (KeyboardInterrupt, SystemExit), which the caller propagates. */
static PyObject *
take_exception(void)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyObject *et, *exc, *tb;
    PyErr_Fetch(&et, &exc, &tb);
    PyErr_NormalizeException(&et, &exc, &tb);
    if (tb != NULL)
        PyException_SetTraceback(exc, tb);
    Py_XDECREF(et);
    Py_XDECREF(tb);
    return exc;
}

static int
call_method0(PyObject *obj, PyObject *name)
{
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* obj.name() as a truth value; -1 with an exception */
static int
method_truth(PyObject *obj, PyObject *name)
{
    PyObject *r = PyObject_CallMethodNoArgs(obj, name);
    if (r == NULL)
        return -1;
    int t = PyObject_IsTrue(r);
    Py_DECREF(r);
    return t;
}

static int
ready(Core *self)
{
    if (api == NULL || py_send == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stalkd.server._conn.configure() was not called");
        return -1;
    }
    if (self->id == NULL || self->server == NULL || self->parser == NULL || self->out == NULL
            || self->held == NULL || self->steps == NULL || self->policy == NULL
            || self->transport == NULL || self->turns == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the connection is not initialised");
        return -1;
    }
    if (Py_TYPE(self->parser) != api->parser_type || !PyList_CheckExact(self->out)) {
        PyErr_SetString(PyExc_TypeError,
                        "a compiled connection needs the compiled Parser and a list");
        return -1;
    }
    return 0;
}

static int
pause_reading(Core *self)
{
    if (!self->read_paused && self->transport != Py_None && !self->lost) {
        self->read_paused = 1;
        return self->mem_paused ? 0 : call_method0(self->transport, S_pause_reading);
    }
    return 0;
}

static int
resume_reading(Core *self)
{
    if (self->read_paused && self->transport != Py_None && !self->lost && !self->eof) {
        self->read_paused = 0;
        return self->mem_paused ? 0 : call_method0(self->transport, S_resume_reading);
    }
    return 0;
}

/* Whether this turn's time is spent (turns.py states the rule; this asks it): ``*deadline`` is
 * asked of ``turns`` the first time (< 0 until then), with its clock into ``*clock``; the clock
 * is read without a call when it is time.perf_counter. 1 past it, 0 not, -1 with an error. */
static int
turn_over(PyObject *turns, double *deadline, PyObject **clock)
{
    if (*deadline < 0) {
        PyObject *d = PyObject_CallMethodNoArgs(turns, S_deadline);
        if (d == NULL)
            return -1;
        *deadline = PyFloat_AsDouble(d);
        Py_DECREF(d);
        if (*deadline == -1.0 && PyErr_Occurred())
            return -1;
        if ((*clock = PyObject_GetAttr(turns, S_clock)) == NULL)
            return -1;
    }
    double now;
    if (*clock == perf_counter) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);  /* what perf_counter reads on Linux */
        now = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    } else {
        PyObject *t = PyObject_CallNoArgs(*clock);
        if (t == NULL)
            return -1;
        now = PyFloat_AsDouble(t);
        Py_DECREF(t);
        if (now == -1.0 && PyErr_Occurred())
            return -1;
    }
    return now > *deadline;
}
