/* stalkd.server._conn: the compiled core of a client connection, and of the server parts a
 * command's common case touches.
 *
 * server/connection.py's Connection is the reference. ConnectionCore keeps, as slots the
 * reference's Python methods read and write too, the state the hot path touches, and runs
 * data_received, process, send, flush, release_held and resume in C: a read in the common
 * state goes parse -> engine -> encode -> write without a Python frame of the connection's
 * own, nor of Server.execute (its common case is written here too, with or without a WAL; its
 * other paths are app.py's). The parser and the encoders are _speedups' (through its C API,
 * protocol/_cext/capi.h); the transport's methods and the server's are called as Python
 * methods.
 *
 * With a WAL, BarriersCore (server/barriers.py's Barriers is the rule) and AdmissionCore
 * (server/admission.py's Admission) keep their per-command state as slots too: a command's
 * records join the batch, its reply waits behind the batch's barrier, the step's end writes a
 * lone writer's batch (and under ``always`` fsyncs it) and releases what it held, all in C;
 * the storage's write and sync are called as Python methods, and the thread syncs, the
 * standbys' gate and failures are the reference's.
 *
 * Only the common case is written twice: a reply that is not queued here (a close, a reply the
 * encoders refuse) goes to the reference's send, and every other method (wake, pause/
 * resume_writing, eof, connection_lost, ...) is the reference's, inherited by the classes
 * server/fastconn.py builds (each core first, then its reference).
 * tests/server/test_conn_differential.py holds both to the same bytes, moments, WAL writes and
 * fsyncs, and engine states.
 *
 * One translation unit: _cext/core (the state, the configuration, helpers), _cext/barriers
 * (the barriers' bookkeeping), _cext/output (send, flush, release of held replies),
 * _cext/admission (WAL room), _cext/execute (Server.execute's common case), _cext/barrier_io
 * (a batch written, synced and released), _cext/conntype (the connection's type); here process
 * and the module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "../protocol/_cext/capi.h"
#include "_cext/core.c.h"
#include "_cext/barriers.c.h"
#include "_cext/output.c.h"
#include "_cext/admission.c.h"
#include "_cext/execute.c.h"

/* --- process ---------------------------------------------------------------------------- */

/* Connection.process: run buffered commands until input runs out, a reserve blocks, or output
 * backs up; the same steps in the same order as the reference. */
static int
core_process(Core *self)
{
    if (self->running || self->lost || self->deferred)
        return 0;
    if (ready(self) < 0)
        return -1;
    self->running = 1;
    PyObject *steps = self->steps == Py_None ? NULL : Py_NewRef(self->steps);
    Bar *bar = as_bar(steps);
    if (bar != NULL) {
        bar_begin(bar);
    } else if (steps != NULL && call_method0(steps, S_begin_step) < 0) {
        Py_DECREF(steps);
        return -1;  /* before the reference's try: it stays "running" too */
    }
    PyObject *parser = Py_NewRef(self->parser);
    PyObject *server = Py_NewRef(self->server);
    PyObject *policy = Py_NewRef(self->policy);
    PyObject *turns = self->turns == Py_None ? NULL : Py_NewRef(self->turns);
    PyObject *clock = NULL;  /* the turns' clock, once the deadline is asked */
    double deadline = -1.0;  /* asked of turns once there is more than one command to run */
    Py_ssize_t limit = self->max_output, flush_at = self->flush_at;
    int rc = 0, broke = 0, ran = 0;  /* at least one command each time, past the deadline or not */
    while (!self->waiting && !self->closing) {
        if (self->out_bytes >= flush_at && core_flush(self) < 0)
            goto error;
        if (self->write_paused || self->held_bytes > limit || self->mem_paused) {
            if (pause_reading(self) < 0)
                goto error;
            broke = 1;
            break;
        }
        if (ran && turns != NULL && api->buffered(parser)) {
            int over = turn_over(turns, &deadline, &clock);
            if (over < 0)
                goto error;
            if (over) {
                /* this turn's budget is spent: the rest waits for our place in the queue */
                self->deferred = 1;
                if (pause_reading(self) < 0)
                    goto error;
                PyObject *r = PyObject_CallMethodOneArg(turns, S_defer, (PyObject *)self);
                if (r == NULL)
                    goto error;
                Py_DECREF(r);
                broke = 1;
                break;
            }
        }
        PyObject *item = api->next(parser);
        if (item == NULL)
            goto error;
        if (item == api->need_data) {
            Py_DECREF(item);
            if (self->eof) {
                /* nothing more will come: close after the replies, release jobs now */
                PyObject *c = PyObject_CallNoArgs(close_type);
                if (c == NULL)
                    goto error;
                int r = core_send(self, c, ZERO);
                Py_DECREF(c);
                if (r < 0)
                    goto error;
                PyObject *res = PyObject_CallMethodOneArg(server, S_retire, (PyObject *)self);
                if (res == NULL)
                    goto error;
                Py_DECREF(res);
            }
            broke = 1;
            break;
        }
        ran = 1;
        int r;
        if ((PyObject *)Py_TYPE(item) == api->reply_type) {  /* a protocol error */
            r = core_send(self, item, ZERO);
            Py_DECREF(item);
            if (r < 0)
                goto error;
            continue;
        }
        if (policy != Py_None) {
            PyObject *ok = PyObject_CallMethodOneArg(policy, S_admits, item);
            int admitted = ok == NULL ? -1 : PyObject_IsTrue(ok);
            Py_XDECREF(ok);
            if (admitted <= 0) {
                r = admitted < 0 ? -1 : core_send(self, denied, ZERO);
                Py_DECREF(item);
                if (r < 0)
                    goto error;
                continue;
            }
        }
        r = execute(self, server, item);
        Py_DECREF(item);
        if (r < 0)
            goto error;
    }
    if (!broke && self->waiting && api->buffered(parser) > limit && pause_reading(self) < 0)
        goto error;
    if (self->read_paused && !self->closing && !self->write_paused && !self->deferred
            && self->held_bytes <= limit
            && (!self->waiting || api->buffered(parser) <= limit) && resume_reading(self) < 0)
        goto error;
    goto finally;
error:
    rc = -1;
finally:
    self->running = 0;
    if (steps != NULL) {
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        if ((bar != NULL ? bar_end(bar) : call_method0(steps, S_end_step)) < 0) {
            /* the reference's finally raises its own error instead */
            Py_XDECREF(et);
            Py_XDECREF(ev);
            Py_XDECREF(tb);
            rc = -1;
        } else {
            PyErr_Restore(et, ev, tb);
        }
        Py_DECREF(steps);
    }
    Py_DECREF(parser);
    Py_DECREF(server);
    Py_DECREF(policy);
    Py_XDECREF(turns);
    Py_XDECREF(clock);
    if (rc == 0)
        rc = core_flush(self);
    return rc;
}

#include "_cext/barrier_io.c.h"

#include "_cext/conntype.c.h"

/* --- module ----------------------------------------------------------------------------- */

static PyObject *
configure(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"send", "close", "job_reply", "denied", "replicate", "durable_ops",
                             "inline_after", "reached", "grain", NULL};
    PyObject *send, *close, *job, *den, *rep, *dops, *reached;
    Py_ssize_t inl, gr;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOO!O!nOn", kwlist, &send, &close, &job, &den,
                                     &PyBytes_Type, &rep, &PyFrozenSet_Type, &dops, &inl,
                                     &reached, &gr))
        return NULL;
    StalkdProtocolAPI *a = PyCapsule_Import(STALKD_PROTOCOL_API_NAME, 0);
    if (a == NULL)
        return NULL;
    if (a->version != STALKD_PROTOCOL_API_VERSION || a->need_data == NULL) {
        PyErr_SetString(PyExc_ValueError, "stalkd.protocol._speedups is not configured or is "
                        "from another version");
        return NULL;
    }
    Py_XSETREF(py_send, Py_NewRef(send));
    Py_XSETREF(close_type, Py_NewRef(close));
    Py_XSETREF(job_reply, Py_NewRef(job));
    Py_XSETREF(denied, Py_NewRef(den));
    Py_XSETREF(replicate, Py_NewRef(rep));
    Py_XSETREF(durable_ops, Py_NewRef(dops));
    inline_after = inl;
    grain = gr;
    Py_XSETREF(py_reached, Py_NewRef(reached));
    api = a;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "Hand over the reference's send and the protocol values (server/fastconn.py, once)."},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_conn",
    "The compiled core of a client connection; see stalkd.server.fastconn.", -1, module_methods,
};

#define INTERN(var, s) if ((var = PyUnicode_InternFromString(s)) == NULL) return NULL

PyMODINIT_FUNC
PyInit__conn(void)
{
    INTERN(S_write, "write");
    INTERN(S_writelines, "writelines");
    INTERN(S_close, "close");
    INTERN(S_is_closing, "is_closing");
    INTERN(S_get_write_buffer_size, "get_write_buffer_size");
    INTERN(S_pause_reading, "pause_reading");
    INTERN(S_resume_reading, "resume_reading");
    INTERN(S_begin_step, "begin_step");
    INTERN(S_end_step, "end_step");
    INTERN(S_execute, "execute");
    INTERN(S_retire, "retire");
    INTERN(S_replicate, "replicate");
    INTERN(S_admits, "admits");
    INTERN(S_join, "join");
    INTERN(S_role, "role");
    INTERN(S_standby, "standby");
    INTERN(S_fenced, "fenced");
    INTERN(S_lease, "lease");
    INTERN(S_admission, "admission");
    INTERN(S_observer, "observer");
    INTERN(S_engine, "engine");
    INTERN(S_clock, "clock");
    INTERN(S_apply, "apply");
    INTERN(S_apply_failed, "_apply_failed");
    INTERN(S_handle, "_handle");
    INTERN(S_timer_at, "_timer_at");
    INTERN(S_schedule_tick, "_schedule_tick");
    INTERN(S_close_batch, "_close_batch");
    INTERN(S_soon, "_soon");
    INTERN(S_op, "op");
    INTERN(S_job_id, "job_id");
    INTERN(S_append, "append");
    INTERN(S_popleft, "popleft");
    INTERN(S_promised, "promised");
    INTERN(S_costless, "_costless");
    INTERN(S_settle, "settle");
    INTERN(S_id, "id");
    INTERN(S_storage_write, "write");
    INTERN(S_write_failed, "_write_failed");
    INTERN(S_batch_written, "_batch_written");
    INTERN(S_release_held, "release_held");
    INTERN(S_flush, "flush");
    INTERN(S_resume, "resume");
    INTERN(S_sync, "sync");
    INTERN(S_synced, "_synced");
    INTERN(S_start_sync, "_start_sync");
    INTERN(S_busy, "busy");
    INTERN(S_admit, "admit");
    INTERN(S_refused, "_refused");
    INTERN(S_put_word, "put");
    INTERN(S_measure_memory, "measure_memory");
    INTERN(S_deadline, "deadline");
    INTERN(S_defer, "defer");
    PyObject *time_mod = PyImport_ImportModule("time");
    if (time_mod == NULL)
        return NULL;
    perf_counter = PyObject_GetAttrString(time_mod, "perf_counter");
    Py_DECREF(time_mod);
    if (perf_counter == NULL)
        return NULL;
    if ((ZERO = PyLong_FromLong(0)) == NULL || (EMPTY = PyBytes_FromStringAndSize(NULL, 0)) == NULL)
        return NULL;
    if (PyType_Ready(&CoreType) < 0 || PyType_Ready(&BarType) < 0 || PyType_Ready(&AdmType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "ConnectionCore", (PyObject *)&CoreType) < 0
            || PyModule_AddObjectRef(m, "BarriersCore", (PyObject *)&BarType) < 0
            || PyModule_AddObjectRef(m, "AdmissionCore", (PyObject *)&AdmType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
