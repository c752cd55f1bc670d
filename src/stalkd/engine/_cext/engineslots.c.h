/* The Python objects the compiled engine path reads and writes, found once by configure():
 * each class's slot offsets (objects.py's Job, Tube and ConnState, the command and reply
 * values, model.Record, and the engine's own hot attributes, state.py's EngineState), the
 * enum members and reply constants it hands out. Included by _engine.c.
 *
 * A slot is read or written through its offset, as a member descriptor does; configure()
 * refuses a class whose slot is not a plain object member, and a class the path creates
 * instances of (Job, Record, the replies) unless its slots are exactly the ones listed here,
 * so a field added in Python turns the compiled path off rather than leaving it unset. */

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

#define ESLOT(e, i) SLOT(e, eng_off[i])

/* Store v (a new reference) in a slot, dropping what was there. */
static inline void
set_slot(PyObject *o, Py_ssize_t off, PyObject *v)
{
    PyObject *old = SLOT(o, off);
    SLOT(o, off) = v;
    Py_XDECREF(old);
}

/* --- slot tables: the names, in the order of their enum ---------------------------------- */

/* state.py's EngineState.__slots__: what every command reads or writes */
enum { E_MAX_JOB_SIZE, E_STEP_JOBS, E_KEEP_RECORDS, E_JOBS, E_CONNS, E_NEXT_ID, E_SEQ, E_DRAINING,
       E_CMD, E_TOTAL_JOBS, E_BODY_BYTES, E_PENDING, E_TUBE_TIMERS, E_CONN_TIMERS, E_BUDGET, E_NOW,
       E_RECORDS, E_WAKEUPS, E_DIRTY, E_CALLER, E_OWN, E_ROOM, E_WAIT_SERIAL, E_N };
static const char *const engine_names[] = {
    "max_job_size", "step_jobs", "keep_records", "jobs", "conns", "next_id", "seq", "draining",
    "cmd", "total_jobs", "body_bytes", "_pending", "_tube_timers", "_conn_timers", "_budget", "_now",
    "_records", "_wakeups", "_dirty", "_caller", "_own", "_room", "_wait_serial"};

enum { J_ID, J_TUBE, J_PRI, J_DELAY, J_TTR, J_BODY, J_STATE, J_CREATED, J_DEADLINE, J_RESERVES,
       J_TIMEOUTS, J_RELEASES, J_BURIES, J_KICKS, J_HPOS, J_OWNER, J_N };
static const char *const job_names[] = {
    "id", "tube", "pri", "delay", "ttr", "body", "state", "created_us", "deadline_us", "reserves",
    "timeouts", "releases", "buries", "kicks", "hpos", "owner"};

enum { T_NAME, T_READY, T_WAITING, T_PAUSE, T_USING, T_WATCHING, T_TOTAL, T_CMD_DELETE, T_URGENT,
       T_RESERVED, T_DELAYED, T_BURIED, T_SERIAL, T_HPOS, T_N };
static const char *const tube_names[] = {
    "name", "ready", "waiting", "pause_until_us", "using", "watching", "total_jobs", "cmd_delete",
    "urgent", "reserved", "delayed", "buried", "serial", "hpos"};

enum { C_ID, C_USE, C_WATCH, C_RESERVED, C_WAITING, C_PRODUCER, C_WORKER, C_HPOS, C_KICK,
       C_RELEASE, C_WAIT_UNTIL, C_WAIT_SEQ, C_HALF_CLOSED, C_N };
static const char *const conn_names[] = {
    "id", "use", "watch", "reserved", "waiting", "producer", "worker", "hpos", "kick", "release",
    "wait_until_us", "wait_seq", "half_closed"};

enum { R_OP, R_SEQ, R_TIME, R_JOB, R_TUBE, R_PRI, R_DELAY, R_TTR, R_DEADLINE, R_BODY, R_STATE,
       R_CREATED, R_RESERVES, R_TIMEOUTS, R_RELEASES, R_BURIES, R_KICKS, R_EPOCH, R_START, R_N };
static const char *const record_names[] = {
    "op", "seq", "time_us", "job_id", "tube", "pri", "delay", "ttr", "deadline_us", "body", "state",
    "created_us", "reserves", "timeouts", "releases", "buries", "kicks", "epoch", "start_offset"};

/* jobtable.py's JobTable: {id >> shift: {id: Job}} and the count of jobs in it */
enum { JT_CHUNKS, JT_N, JT_TOP, JT_NN };
static const char *const jobtable_names[] = {"_chunks", "_n", "_top"};

enum { RP_WORD, RP_ARGS, RP_N };
static const char *const reply_names[] = {"word", "args"};
enum { JR_WORD, JR_ID, JR_BODY, JR_N };
static const char *const jobreply_names[] = {"word", "id", "body"};

enum { P_PRI, P_DELAY, P_TTR, P_BODY, P_ERROR, P_N };
static const char *const put_names[] = {"pri", "delay", "ttr", "body", "error"};
enum { D_ID, D_N };
static const char *const delete_names[] = {"id"};
enum { RL_ID, RL_PRI, RL_DELAY, RL_N };
static const char *const release_names[] = {"id", "pri", "delay"};
enum { B_ID, B_PRI, B_N };
static const char *const bury_names[] = {"id", "pri"};
enum { TO_ID, TO_N };
static const char *const touch_names[] = {"id"};
enum { RT_TIMEOUT, RT_N };
static const char *const rwt_names[] = {"timeout"};

static Py_ssize_t jt_off[JT_NN], eng_off[E_N], job_off[J_N], tube_off[T_N], conn_off[C_N], record_off[R_N], reply_off[RP_N],
    jobreply_off[JR_N], put_off[P_N], delete_off[D_N], release_off[RL_N], bury_off[B_N], touch_off[TO_N],
    rwt_off[RT_N];

/* --- what configure() was given (strong references, kept for the process) ----------------- */

static PyTypeObject *JobTableType, *EngineType, *HeapType, *JobType, *TubeType, *ConnType, *RecordType,
    *ReplyType, *JobReplyType, *OutcomeType, *PutType, *ReserveType, *ReserveTimeoutType,
    *DeleteType, *ReleaseType, *BuryType, *TouchType;
static PyObject *st_ready, *st_reserved, *st_delayed, *st_buried; /* JobState members */
static PyObject *op_put, *op_delete, *op_reserve, *op_release, *op_bury, *op_touch; /* Op members */
static PyObject *reply_deleted, *reply_released, *reply_out_of_memory, *reply_buried, *reply_touched,
    *reply_timed_out, *reply_deadline_soon;
static PyObject *word_inserted, *word_reserved;
static PyObject *ctr_put, *ctr_reserve, *ctr_reserve_timeout, *ctr_delete, *ctr_release, *ctr_bury,
    *ctr_touch;
static PyObject *empty_str, *empty_bytes, *zero, *minus_one;
static long long jt_shift; /* jobtable.SHIFT */

static PyObject *m_put, *m_updates; /* the room's methods */

static int
intern_all(void)
{
    struct { PyObject **p; const char *s; } names[] = {
        {&m_put, "put"}, {&m_updates, "updates"},
        {&word_inserted, "INSERTED"}, {&word_reserved, "RESERVED"}, {&empty_str, ""},
        {&str_hpos, "hpos"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].p = PyUnicode_InternFromString(names[i].s)) == NULL)
            return -1;
    empty_bytes = PyBytes_FromStringAndSize(NULL, 0);
    zero = PyLong_FromLong(0);
    minus_one = PyLong_FromLong(-1);
    return empty_bytes && zero && minus_one ? 0 : -1;
}

/* Offsets of ``names`` in ``tp``; ``exact``: they must be all of its slots. */
static int
find_slots(PyTypeObject *tp, const char *const *names, int n, Py_ssize_t *off, int exact)
{
    for (int i = 0; i < n; i++) {
        PyObject *s = PyUnicode_InternFromString(names[i]);
        if (s == NULL)
            return -1;
        PyObject *d = _PyType_Lookup(tp, s); /* borrowed */
        Py_DECREF(s);
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)
                || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX
                || ((PyMemberDescrObject *)d)->d_member->flags & READONLY) {
            PyErr_Format(PyExc_TypeError, "%.100s.%s is not a plain slot", tp->tp_name, names[i]);
            return -1;
        }
        off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    if (exact && (tp->tp_basicsize != (Py_ssize_t)(sizeof(PyObject) + n * sizeof(PyObject *))
                  || tp->tp_dictoffset || tp->tp_weaklistoffset)) {
        PyErr_Format(PyExc_TypeError, "%.100s has slots the compiled engine does not know",
                     tp->tp_name);
        return -1;
    }
    return 0;
}

static int
get_type(PyObject *cfg, const char *key, PyTypeObject **out)
{
    PyObject *v = PyDict_GetItemString(cfg, key); /* borrowed */
    if (v == NULL || !PyType_Check(v)) {
        PyErr_Format(PyExc_TypeError, "configure() needs the class %s", key);
        return -1;
    }
    Py_INCREF(v);
    *out = (PyTypeObject *)v;
    return 0;
}

static int
get_obj(PyObject *cfg, const char *key, PyObject **out)
{
    PyObject *v = PyDict_GetItemString(cfg, key);
    if (v == NULL) {
        PyErr_Format(PyExc_TypeError, "configure() needs %s", key);
        return -1;
    }
    Py_INCREF(v);
    *out = v;
    return 0;
}

static int configured;

static PyObject *
configure(PyObject *mod, PyObject *cfg)
{
    if (!PyDict_Check(cfg)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes a dict");
        return NULL;
    }
    if (get_type(cfg, "Engine", &EngineType) || get_type(cfg, "IndexedHeap", &HeapType)
            || get_type(cfg, "Job", &JobType) || get_type(cfg, "Tube", &TubeType)
            || get_type(cfg, "ConnState", &ConnType) || get_type(cfg, "Record", &RecordType)
            || get_type(cfg, "Reply", &ReplyType) || get_type(cfg, "JobReply", &JobReplyType)
            || get_type(cfg, "Outcome", &OutcomeType) || get_type(cfg, "Put", &PutType)
            || get_type(cfg, "Reserve", &ReserveType)
            || get_type(cfg, "ReserveWithTimeout", &ReserveTimeoutType)
            || get_type(cfg, "Delete", &DeleteType) || get_type(cfg, "Release", &ReleaseType)
            || get_type(cfg, "Bury", &BuryType) || get_type(cfg, "Touch", &TouchType)
            || get_obj(cfg, "READY", &st_ready) || get_obj(cfg, "RESERVED", &st_reserved)
            || get_obj(cfg, "DELAYED", &st_delayed) || get_obj(cfg, "BURIED", &st_buried)
            || get_obj(cfg, "OP_PUT", &op_put) || get_obj(cfg, "OP_DELETE", &op_delete)
            || get_obj(cfg, "OP_RESERVE", &op_reserve) || get_obj(cfg, "OP_RELEASE", &op_release)
            || get_obj(cfg, "OP_BURY", &op_bury) || get_obj(cfg, "OP_TOUCH", &op_touch)
            || get_obj(cfg, "DELETED", &reply_deleted) || get_obj(cfg, "RELEASED", &reply_released)
            || get_obj(cfg, "OUT_OF_MEMORY", &reply_out_of_memory)
            || get_obj(cfg, "BURIED_REPLY", &reply_buried) || get_obj(cfg, "TOUCHED", &reply_touched)
            || get_obj(cfg, "TIMED_OUT", &reply_timed_out)
            || get_obj(cfg, "DEADLINE_SOON", &reply_deadline_soon)
            || get_obj(cfg, "cmd-put", &ctr_put) || get_obj(cfg, "cmd-reserve", &ctr_reserve)
            || get_obj(cfg, "cmd-reserve-with-timeout", &ctr_reserve_timeout)
            || get_obj(cfg, "cmd-delete", &ctr_delete) || get_obj(cfg, "cmd-release", &ctr_release)
            || get_obj(cfg, "cmd-bury", &ctr_bury) || get_obj(cfg, "cmd-touch", &ctr_touch)
            || get_type(cfg, "JobTable", &JobTableType))
        return NULL;
    PyObject *shift = PyDict_GetItemString(cfg, "JOB_CHUNK_SHIFT");
    if (shift == NULL || !PyLong_CheckExact(shift) || (jt_shift = PyLong_AsLongLong(shift)) < 1
            || jt_shift > 40) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "configure() needs JOB_CHUNK_SHIFT, an int in 1..40");
        return NULL;
    }
    if (find_slots(JobTableType, jobtable_names, JT_NN, jt_off, 1)
            || find_slots(EngineType, engine_names, E_N, eng_off, 0)
            || find_slots(JobType, job_names, J_N, job_off, 1)
            || find_slots(TubeType, tube_names, T_N, tube_off, 0)
            || find_slots(ConnType, conn_names, C_N, conn_off, 0)
            || find_slots(RecordType, record_names, R_N, record_off, 1)
            || find_slots(ReplyType, reply_names, RP_N, reply_off, 1)
            || find_slots(JobReplyType, jobreply_names, JR_N, jobreply_off, 1)
            || find_slots(PutType, put_names, P_N, put_off, 0)
            || find_slots(DeleteType, delete_names, D_N, delete_off, 0)
            || find_slots(ReleaseType, release_names, RL_N, release_off, 0)
            || find_slots(BuryType, bury_names, B_N, bury_off, 0)
            || find_slots(TouchType, touch_names, TO_N, touch_off, 0)
            || find_slots(ReserveTimeoutType, rwt_names, RT_N, rwt_off, 0))
        return NULL;
    if (!PyType_IsSubtype(OutcomeType, &PyTuple_Type)
            || OutcomeType->tp_basicsize != PyTuple_Type.tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "Outcome must be a plain tuple subclass");
        return NULL;
    }
    configured = 1;
    Py_RETURN_NONE;
}
