/* The compiled heap's state and its single-entry moves: keys as 128-bit integers, the
 * items' hpos slot, the sifts (heap.py's _up, _down and _take), push and pop. Included by
 * _heap.c, and by _engine.c, which moves jobs in these heaps directly. */

typedef __int128 key_t128;

typedef struct {
    key_t128 key;
    PyObject *item; /* a strong reference */
} Entry;

typedef struct {
    PyObject_HEAD
    Entry *e;
    Py_ssize_t n;
    Py_ssize_t cap;
    PyTypeObject *ctype; /* the item class whose hpos slot offset is cached (a strong ref) */
    Py_ssize_t coff;     /* that offset; 0: no usable slot, use getattr/setattr */
} Heap;

static PyObject *str_hpos;

/* --- keys ------------------------------------------------------------------------------- */

static int
key_from(PyObject *o, key_t128 *out)
{
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "heap keys are ints, not %.100s", Py_TYPE(o)->tp_name);
        return -1;
    }
    int overflow = 0;
    long long small = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (!overflow) {
        if (small == -1 && PyErr_Occurred())
            return -1;
        *out = small;
        return 0;
    }
    unsigned char buf[16];
#if PY_VERSION_HEX >= 0x030D0000
    Py_ssize_t need = PyLong_AsNativeBytes(o, buf, 16, Py_ASNATIVEBYTES_LITTLE_ENDIAN);
    if (need < 0)
        return -1;
    if (need > 16) {
        PyErr_SetString(PyExc_OverflowError, "heap key does not fit in 128 bits");
        return -1;
    }
#else
    if (_PyLong_AsByteArray((PyLongObject *)o, buf, 16, 1, 1) < 0)
        return -1;
#endif
    unsigned __int128 u = 0;
    for (int i = 15; i >= 0; i--)
        u = (u << 8) | buf[i];
    *out = (key_t128)u;
    return 0;
}

static PyObject *
key_to(key_t128 k)
{
    if (k >= LLONG_MIN && k <= LLONG_MAX)
        return PyLong_FromLongLong((long long)k);
    unsigned char buf[16];
    unsigned __int128 u = (unsigned __int128)k;
    for (int i = 0; i < 16; i++) {
        buf[i] = (unsigned char)(u & 0xff);
        u >>= 8;
    }
#if PY_VERSION_HEX >= 0x030D0000
    return PyLong_FromNativeBytes(buf, 16, Py_ASNATIVEBYTES_LITTLE_ENDIAN);
#else
    return _PyLong_FromByteArray(buf, 16, 1, 1);
#endif
}

/* --- hpos ------------------------------------------------------------------------------- */

static Py_ssize_t
hpos_offset(Heap *h, PyTypeObject *tp)
{
    if (tp == h->ctype)
        return h->coff;
    Py_ssize_t off = 0;
    PyObject *d = _PyType_Lookup(tp, str_hpos); /* borrowed */
    if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY))
            off = m->offset;
    }
    Py_INCREF(tp);
    Py_XSETREF(h->ctype, tp);
    h->coff = off;
    return off;
}

static int
set_hpos(Heap *h, PyObject *item, Py_ssize_t i)
{
    PyObject *v = PyLong_FromSsize_t(i);
    if (v == NULL)
        return -1;
    Py_ssize_t off = hpos_offset(h, Py_TYPE(item));
    if (off > 0) {
        PyObject **slot = (PyObject **)((char *)item + off);
        PyObject *old = *slot;
        *slot = v;
        Py_XDECREF(old);
        return 0;
    }
    int r = PyObject_SetAttr(item, str_hpos, v);
    Py_DECREF(v);
    return r;
}

static int
get_hpos(Heap *h, PyObject *item, Py_ssize_t *i)
{
    Py_ssize_t off = hpos_offset(h, Py_TYPE(item));
    PyObject *v;
    if (off > 0) {
        v = *(PyObject **)((char *)item + off);
        if (v == NULL) {
            PyErr_SetString(PyExc_AttributeError, "hpos");
            return -1;
        }
        Py_INCREF(v);
    } else {
        v = PyObject_GetAttr(item, str_hpos);
        if (v == NULL)
            return -1;
    }
    *i = PyLong_AsSsize_t(v);
    Py_DECREF(v);
    return (*i == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* The slot of ``item`` in this heap, or -1 with ValueError (heap.py's remove() check). */
static Py_ssize_t
slot_of(Heap *h, PyObject *item)
{
    Py_ssize_t i;
    if (get_hpos(h, item, &i) < 0)
        return -1;
    if (i < 0 || i >= h->n || h->e[i].item != item) {
        PyErr_SetString(PyExc_ValueError, "item is not in this heap");
        return -1;
    }
    return i;
}

/* --- the sifts (heap.py's _up, _down, pop, _take) ----------------------------------------- */

static int
grow(Heap *h, Py_ssize_t need)
{
    if (need <= h->cap)
        return 0;
    Py_ssize_t cap = h->cap < 8 ? 8 : h->cap;
    while (cap < need)
        cap += cap >> 1;
    Entry *e = PyMem_Realloc(h->e, (size_t)cap * sizeof(Entry));
    if (e == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    h->e = e;
    h->cap = cap;
    return 0;
}

static int
up(Heap *h, Py_ssize_t i)
{
    Entry *e = h->e;
    Entry x = e[i];
    while (i > 0) {
        Py_ssize_t p = (i - 1) >> 1;
        if (e[p].key <= x.key)
            break;
        e[i] = e[p];
        if (set_hpos(h, e[i].item, i) < 0)
            goto fail;
        i = p;
    }
    e[i] = x;
    return set_hpos(h, x.item, i);
fail:
    e[i] = x; /* keep every item in the array exactly once */
    return -1;
}

static int
down(Heap *h, Py_ssize_t i)
{
    Entry *e = h->e;
    Py_ssize_t n = h->n;
    Entry x = e[i];
    for (;;) {
        Py_ssize_t c = 2 * i + 1;
        if (c >= n)
            break;
        Py_ssize_t r = c + 1;
        if (r < n && e[r].key < e[c].key)
            c = r;
        if (x.key <= e[c].key)
            break;
        e[i] = e[c];
        if (set_hpos(h, e[i].item, i) < 0)
            goto fail;
        i = c;
    }
    e[i] = x;
    return set_hpos(h, x.item, i);
fail:
    e[i] = x;
    return -1;
}

/* Remove slot i (heap.py's _take); the removed item's reference is returned to the caller. */
static PyObject *
take(Heap *h, Py_ssize_t i)
{
    Entry *e = h->e;
    PyObject *gone = e[i].item;
    if (set_hpos(h, gone, -1) < 0)
        return NULL;
    Entry last = e[--h->n];
    if (i == h->n)
        return gone;
    e[i] = last;
    if (i > 0 && last.key < e[(i - 1) >> 1].key) {
        if (up(h, i) < 0)
            goto fail;
    } else if (down(h, i) < 0) {
        goto fail;
    }
    return gone;
fail:
    Py_DECREF(gone);
    return NULL;
}

/* Add an entry (the heap takes its own reference to item). */
static int
push_entry(Heap *h, key_t128 k, PyObject *item)
{
    if (grow(h, h->n + 1) < 0)
        return -1;
    Py_INCREF(item);
    h->e[h->n].key = k;
    h->e[h->n].item = item;
    h->n++;
    return up(h, h->n - 1);
}

/* Remove the top of a non-empty heap; its reference goes to the caller. */
static PyObject *
pop_top(Heap *h)
{
    Entry *e = h->e;
    PyObject *top = e[0].item;
    if (set_hpos(h, top, -1) < 0)
        return NULL;
    Entry last = e[--h->n];
    Py_ssize_t n = h->n;
    if (!n)
        return top;
    /* Floyd's variant, as heap.py: the hole walks down to a leaf, then the last entry
     * fills it and sifts up. */
    Py_ssize_t i = 0, c = 1;
    while (c < n) {
        Py_ssize_t r = c + 1;
        if (r < n && e[r].key < e[c].key)
            c = r;
        e[i] = e[c];
        if (set_hpos(h, e[i].item, i) < 0)
            goto fail;
        i = c;
        c = 2 * i + 1;
    }
    while (i > 0) {
        Py_ssize_t p = (i - 1) >> 1;
        if (e[p].key <= last.key)
            break;
        e[i] = e[p];
        if (set_hpos(h, e[i].item, i) < 0)
            goto fail;
        i = p;
    }
    e[i] = last;
    if (set_hpos(h, last.item, i) < 0) {
        Py_DECREF(top);
        return NULL;
    }
    return top;
fail:
    e[i] = last;
    Py_DECREF(top);
    return NULL;
}

