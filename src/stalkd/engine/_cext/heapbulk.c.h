/* The compiled heap's bulk work: load()'s heap check and heapq.heapify's order, the
 * duplicate-key check, and sorted_items()'s order. Included by _heap.c after heapcore. */

/* heapq's heapify (its _siftup then _siftdown per parent, last parent first) over entries:
 * with unique keys this is the order heap.py's load() reaches by heapifying the keys and
 * lining the items up by key. */
static void
heapify(Entry *e, Py_ssize_t n)
{
    for (Py_ssize_t start = n / 2 - 1; start >= 0; start--) {
        Py_ssize_t pos = start;
        Entry x = e[pos];
        Py_ssize_t child = 2 * pos + 1;
        while (child < n) {
            Py_ssize_t right = child + 1;
            if (right < n && !(e[child].key < e[right].key))
                child = right;
            e[pos] = e[child];
            pos = child;
            child = 2 * pos + 1;
        }
        e[pos] = x;
        while (pos > start) {
            Py_ssize_t parent = (pos - 1) >> 1;
            if (x.key < e[parent].key) {
                e[pos] = e[parent];
                pos = parent;
                continue;
            }
            break;
        }
        e[pos] = x;
    }
}

static int
is_heap(const Entry *e, Py_ssize_t n)
{
    for (Py_ssize_t i = 1; i < n; i++)
        if (e[i].key < e[(i - 1) >> 1].key)
            return 0;
    return 1;
}

static int
cmp_keys(const void *a, const void *b)
{
    key_t128 x = *(const key_t128 *)a, y = *(const key_t128 *)b;
    return x < y ? -1 : x > y;
}

static int
has_duplicates(const Entry *e, Py_ssize_t n)
{
    key_t128 *ks = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(key_t128));
    if (ks == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        ks[i] = e[i].key;
    qsort(ks, (size_t)n, sizeof(key_t128), cmp_keys);
    int dup = 0;
    for (Py_ssize_t i = 1; i < n && !dup; i++)
        dup = ks[i] == ks[i - 1];
    PyMem_Free(ks);
    return dup;
}

/* Fill an empty heap from two sequences (load and add_many). */
static int
fill(Heap *h, PyObject *keys, PyObject *items)
{
    PyObject *ks = PySequence_Fast(keys, "load() needs a list of keys");
    if (ks == NULL)
        return -1;
    PyObject *its = PySequence_Fast(items, "load() needs a list of items");
    if (its == NULL) {
        Py_DECREF(ks);
        return -1;
    }
    int rc = -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ks);
    if (n != PySequence_Fast_GET_SIZE(its)) {
        PyErr_Format(PyExc_ValueError, "load() got %zd keys for %zd items", n,
                     PySequence_Fast_GET_SIZE(its));
        goto out;
    }
    Entry *e = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Entry));
    if (e == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (key_from(PySequence_Fast_GET_ITEM(ks, i), &e[i].key) < 0) {
            PyMem_Free(e);
            goto out;
        }
        e[i].item = PySequence_Fast_GET_ITEM(its, i);
    }
    if (n > 1 && !is_heap(e, n)) {
        int dup = has_duplicates(e, n);
        if (dup) {
            if (dup > 0)
                PyErr_SetString(PyExc_ValueError, "load() needs unique keys");
            PyMem_Free(e);
            goto out;
        }
        heapify(e, n);
    }
    for (Py_ssize_t i = 0; i < n; i++)
        Py_INCREF(e[i].item);
    PyMem_Free(h->e);
    h->e = e;
    h->n = h->cap = n;
    rc = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (set_hpos(h, e[i].item, i) < 0) {
            rc = -1;
            break;
        }
out:
    Py_DECREF(ks);
    Py_DECREF(its);
    return rc;
}

typedef struct {
    key_t128 key;
    Py_ssize_t index;
} Order;

static int
cmp_order(const void *a, const void *b)
{
    const Order *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}
