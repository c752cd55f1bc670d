/* ActiveSegment's __slots__, read and written at their offsets (the class is checked exactly,
 * so the offsets hold): a look-up through the class per field was a tenth of a write.
 * Included once, by _write.c. */
enum { A_POS, A_LIMIT, A_ZERO_AHEAD, A_ZEROED, A_BASE, A_EPOCH, A_FD, A_MM_BATCHES, A_USERS, A_RETIRED, A_COUNT };
static const char *active_slots[A_COUNT] = {
    "pos", "limit", "zero_ahead", "zeroed", "base", "epoch", "fd", "mm_batches", "users", "retired",
};
static Py_ssize_t active_offset[A_COUNT];

#define SLOT(o, k) (*(PyObject **)((char *)(o) + active_offset[k]))

/* A slot of an ActiveSegment as a Py_ssize_t: 0, or -1 when unset or not an int (no error). */
static int
slot_size(PyObject *act, int k, Py_ssize_t *out)
{
    PyObject *v = SLOT(act, k);
    if (v == NULL || !PyLong_CheckExact(v))
        return -1;
    *out = PyLong_AsSsize_t(v);
    if (*out == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

static int
set_slot_size(PyObject *act, int k, Py_ssize_t v)
{
    PyObject *x = PyLong_FromSsize_t(v);
    if (x == NULL)
        return -1;
    Py_XSETREF(SLOT(act, k), x);
    return 0;
}

/* configure: the offsets of ActiveSegment's slots (member descriptors of objects). */
static int
find_slots(PyTypeObject *cls)
{
    for (int k = 0; k < A_COUNT; k++) {
        PyObject *d = PyDict_GetItemString(cls->tp_dict, active_slots[k]);
        if (d == NULL || !PyObject_TypeCheck(d, &PyMemberDescr_Type)
                || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_TypeError, "configure: ActiveSegment.%s is not a slot", active_slots[k]);
            return -1;
        }
        active_offset[k] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    return 0;
}
