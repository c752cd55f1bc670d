/* stalkd.engine._heap: the compiled twin of engine/heap.py's IndexedHeap.
 *
 * heap.py is the reference: this type runs the same algorithms step for step (push and its
 * sift-up, Floyd's pop, removal by slot, update, load's "keep a list already in heap order"
 * check and heapq.heapify's order otherwise), so the same operations leave the same arrays and
 * the same ``hpos`` values (tests/engine/test_heap_differential.py holds both to that). What it
 * saves is the interpreter's cost per level of a sift: a reserve pops a ready heap of tens of
 * thousands of jobs, fifteen levels each.
 *
 * Keys are stored as signed 128-bit integers (callers pack ``major << 64 | minor``; every key the
 * engine builds is below 2**120), so a comparison is one machine instruction rather than a call
 * into the int type; a key that does not fit is refused with OverflowError. Entries keep the key
 * and the item side by side, so a sift moves both at once.
 *
 * An item's ``hpos`` is written through its slot when its class declares one (``__slots__``: the
 * engine's Job, Tube and ConnState), found once per class and cached, else with setattr.
 *
 * One translation unit: _cext/heapcore.c.h (keys, hpos, the sifts), _cext/heapbulk.c.h (load's
 * ordering, sorted_items), and here the methods, the type and the module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#ifndef __SIZEOF_INT128__
#error "stalkd.engine._heap needs a compiler with __int128 (heap.py is used instead)"
#endif

#include "_cext/heapcore.c.h"
#include "_cext/heapbulk.c.h"

/* --- methods ---------------------------------------------------------------------------- */

static PyObject *
Heap_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "IndexedHeap() takes no arguments");
        return NULL;
    }
    Heap *h = (Heap *)type->tp_alloc(type, 0);
    return (PyObject *)h;
}

static int
Heap_traverse(Heap *h, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; i < h->n; i++)
        Py_VISIT(h->e[i].item);
    Py_VISIT(h->ctype);
    return 0;
}

static int
Heap_clear(Heap *h)
{
    Entry *e = h->e;
    Py_ssize_t n = h->n;
    h->e = NULL;
    h->n = h->cap = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        Py_DECREF(e[i].item);
    PyMem_Free(e);
    Py_CLEAR(h->ctype);
    return 0;
}

static void
Heap_dealloc(Heap *h)
{
    PyObject_GC_UnTrack(h);
    Heap_clear(h);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static Py_ssize_t
Heap_len(Heap *h)
{
    return h->n;
}

static PyObject *
Heap_items(Heap *h, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(h->n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < h->n; i++) {
        Py_INCREF(h->e[i].item);
        PyList_SET_ITEM(out, i, h->e[i].item);
    }
    return out;
}

static PyObject *
Heap_keys(Heap *h, PyObject *Py_UNUSED(ignored))
{
    PyObject *out = PyList_New(h->n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < h->n; i++) {
        PyObject *k = key_to(h->e[i].key);
        if (k == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, k);
    }
    return out;
}

static PyObject *
Heap_iter(Heap *h)
{
    PyObject *items = Heap_items(h, NULL);
    if (items == NULL)
        return NULL;
    PyObject *it = PyObject_GetIter(items);
    Py_DECREF(items);
    return it;
}

static PyObject *
Heap_append_items_to(Heap *h, PyObject *out)
{
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "append_items_to() needs a list");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < h->n; i++)
        if (PyList_Append(out, h->e[i].item) < 0)
            return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Heap_peek(Heap *h, PyObject *Py_UNUSED(ignored))
{
    if (!h->n)
        Py_RETURN_NONE;
    Py_INCREF(h->e[0].item);
    return h->e[0].item;
}

static PyObject *
Heap_peek_key(Heap *h, PyObject *Py_UNUSED(ignored))
{
    if (!h->n)
        Py_RETURN_NONE;
    return key_to(h->e[0].key);
}

static PyObject *
Heap_due(Heap *h, PyObject *now)
{
    key_t128 t;
    if (key_from(now, &t) < 0)
        return NULL;
    return PyBool_FromLong(h->n && (h->e[0].key >> 64) <= t);
}

static PyObject *
Heap_key_of(Heap *h, PyObject *item)
{
    Py_ssize_t i = slot_of(h, item);
    return i < 0 ? NULL : key_to(h->e[i].key);
}

static PyObject *
Heap_push(Heap *h, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "push(key, item)");
        return NULL;
    }
    key_t128 k;
    if (key_from(args[0], &k) < 0 || push_entry(h, k, args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Heap_pop(Heap *h, PyObject *Py_UNUSED(ignored))
{
    if (!h->n) {
        PyErr_SetString(PyExc_IndexError, "pop from an empty heap");
        return NULL;
    }
    return pop_top(h);
}

static PyObject *
Heap_remove(Heap *h, PyObject *item)
{
    Py_ssize_t i = slot_of(h, item);
    if (i < 0)
        return NULL;
    PyObject *gone = take(h, i);
    if (gone == NULL)
        return NULL;
    Py_DECREF(gone);
    Py_RETURN_NONE;
}

static PyObject *
Heap_update(Heap *h, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "update(item, key)");
        return NULL;
    }
    key_t128 k;
    if (key_from(args[1], &k) < 0)
        return NULL;
    Py_ssize_t i = slot_of(h, args[0]);
    if (i < 0)
        return NULL;
    key_t128 old = h->e[i].key;
    h->e[i].key = k;
    if ((k < old ? up(h, i) : down(h, i)) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Heap_load(Heap *h, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "load(keys, items)");
        return NULL;
    }
    if (h->n) {
        PyErr_SetString(PyExc_ValueError, "load() needs an empty heap");
        return NULL;
    }
    if (fill(h, args[0], args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Heap_add_many(Heap *h, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "add_many(keys, items)");
        return NULL;
    }
    Py_ssize_t nk = PyObject_Length(args[0]), ni = PyObject_Length(args[1]);
    if (nk < 0 || ni < 0)
        return NULL;
    if (!nk)
        Py_RETURN_NONE;
    if (nk != ni) {
        PyErr_Format(PyExc_ValueError, "add_many() got %zd keys for %zd items", nk, ni);
        return NULL;
    }
    if (nk * 8 < h->n) {
        for (Py_ssize_t i = 0; i < nk; i++) {
            PyObject *k = PySequence_GetItem(args[0], i);
            PyObject *it = k == NULL ? NULL : PySequence_GetItem(args[1], i);
            PyObject *pair[2] = {k, it};
            PyObject *r = it == NULL ? NULL : Heap_push(h, pair, 2);
            Py_XDECREF(k);
            Py_XDECREF(it);
            if (r == NULL)
                return NULL;
            Py_DECREF(r);
        }
        Py_RETURN_NONE;
    }
    /* heap.py: rebuild from this heap's arrays followed by the new ones */
    PyObject *all_keys = Heap_keys(h, NULL);
    PyObject *all_items = all_keys == NULL ? NULL : Heap_items(h, NULL);
    PyObject *r = NULL;
    if (all_items != NULL) {
        PyObject *ek = PyObject_CallMethod(all_keys, "extend", "O", args[0]);
        PyObject *ei = ek == NULL ? NULL : PyObject_CallMethod(all_items, "extend", "O", args[1]);
        Py_XDECREF(ek);
        Py_XDECREF(ei);
        if (ei != NULL) {
            Heap_clear(h);
            if (fill(h, all_keys, all_items) == 0)
                r = Py_NewRef(Py_None);
        }
    }
    Py_XDECREF(all_keys);
    Py_XDECREF(all_items);
    return r;
}

static PyObject *
Heap_sorted_items(Heap *h, PyObject *Py_UNUSED(ignored))
{
    Order *o = PyMem_Malloc((size_t)(h->n ? h->n : 1) * sizeof(Order));
    if (o == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < h->n; i++) {
        o[i].key = h->e[i].key;
        o[i].index = i;
    }
    qsort(o, (size_t)h->n, sizeof(Order), cmp_order); /* the index breaks ties: stable */
    PyObject *out = PyList_New(h->n);
    if (out != NULL)
        for (Py_ssize_t i = 0; i < h->n; i++) {
            PyObject *it = h->e[o[i].index].item;
            Py_INCREF(it);
            PyList_SET_ITEM(out, i, it);
        }
    PyMem_Free(o);
    return out;
}

static PyMethodDef Heap_methods[] = {
    {"append_items_to", (PyCFunction)Heap_append_items_to, METH_O, NULL},
    {"peek", (PyCFunction)Heap_peek, METH_NOARGS, NULL},
    {"peek_key", (PyCFunction)Heap_peek_key, METH_NOARGS, NULL},
    {"due", (PyCFunction)Heap_due, METH_O, NULL},
    {"key_of", (PyCFunction)Heap_key_of, METH_O, NULL},
    {"push", (PyCFunction)(void (*)(void))Heap_push, METH_FASTCALL, NULL},
    {"pop", (PyCFunction)Heap_pop, METH_NOARGS, NULL},
    {"remove", (PyCFunction)Heap_remove, METH_O, NULL},
    {"update", (PyCFunction)(void (*)(void))Heap_update, METH_FASTCALL, NULL},
    {"load", (PyCFunction)(void (*)(void))Heap_load, METH_FASTCALL, NULL},
    {"add_many", (PyCFunction)(void (*)(void))Heap_add_many, METH_FASTCALL, NULL},
    {"sorted_items", (PyCFunction)Heap_sorted_items, METH_NOARGS, NULL},
    {"key_list", (PyCFunction)Heap_keys, METH_NOARGS, NULL},
    {"item_list", (PyCFunction)Heap_items, METH_NOARGS, NULL},
    {"__class_getitem__", Py_GenericAlias, METH_O | METH_CLASS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMappingMethods Heap_as_mapping = {
    .mp_length = (lenfunc)Heap_len,
};

static PyTypeObject HeapType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "stalkd.engine._heap.IndexedHeap",
    .tp_doc = "Min-heap of items with int keys; items remember their slot in hpos "
              "(the compiled twin of stalkd.engine.heap.IndexedHeap).",
    .tp_basicsize = sizeof(Heap),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = Heap_new,
    .tp_dealloc = (destructor)Heap_dealloc,
    .tp_traverse = (traverseproc)Heap_traverse,
    .tp_clear = (inquiry)Heap_clear,
    .tp_iter = (getiterfunc)Heap_iter,
    .tp_as_mapping = &Heap_as_mapping,
    .tp_methods = Heap_methods,
};

static struct PyModuleDef heapmodule = {
    PyModuleDef_HEAD_INIT, "stalkd.engine._heap",
    "The compiled IndexedHeap (stalkd.engine.heap is the reference).", -1, NULL,
};

PyMODINIT_FUNC
PyInit__heap(void)
{
    str_hpos = PyUnicode_InternFromString("hpos");
    if (str_hpos == NULL || PyType_Ready(&HeapType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&heapmodule);
    if (m == NULL)
        return NULL;
    Py_INCREF(&HeapType);
    if (PyModule_AddObject(m, "IndexedHeap", (PyObject *)&HeapType) < 0) {
        Py_DECREF(&HeapType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
