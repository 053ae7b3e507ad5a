/*
 * Lifetime rules shared by every verbs handle object.
 *
 * A child holds strong references to its parents, so a parent is never
 * deallocated first; and a parent counts its open children, so close()
 * on it fails with EBUSY (leaving everything usable) instead of asking the
 * kernel to free a resource that is still in use.
 */
#include "common.h"

#include <stdio.h>

const char *ibv_type_name(PyObject *obj)
{
    /* The Limited API hides tp_name; read __name__ into a buffer.  Callers
     * hold the GIL and format the message at once, so one buffer is enough. */
    static char buffer[128];
    PyObject *name = PyObject_GetAttrString((PyObject *)Py_TYPE(obj), "__name__");
    PyObject *bytes = name ? PyUnicode_AsUTF8String(name) : NULL;
    const char *utf8 = bytes ? PyBytes_AsString(bytes) : NULL;
    if (utf8 == NULL) {
        PyErr_Clear();
        utf8 = "object";
    }
    snprintf(buffer, sizeof(buffer), "%s", utf8);
    Py_XDECREF(bytes);
    Py_XDECREF(name);
    return buffer;
}

int ibv_check_closable(PyObject *obj, const char *verb)
{
    IbvHandle *h = IBV_HANDLE(obj);
    if (h->live_children > 0) {
        ibv_raise_detail(verb, EBUSY,
                         "%s failed: %s still has %zd open child object(s); "
                         "close them first", verb, ibv_type_name(obj),
                         h->live_children);
        return -1;
    }
    if (h->busy > 0) {
        ibv_raise_detail(verb, EBUSY,
                         "%s failed: another thread is inside a call on this "
                         "%s", verb, ibv_type_name(obj));
        return -1;
    }
    return 0;
}

PyObject *ibv_handle_new(PyTypeObject *type, void *ptr, PyObject **parent_slots,
                         PyObject *const *parents, int nparents)
{
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    PyObject *obj = alloc(type, 0);
    if (obj == NULL)
        return NULL;
    IbvHandle *h = IBV_HANDLE(obj);
    h->ptr = ptr;
    h->live_children = 0;
    h->busy = 0;
    for (int i = 0; i < nparents; i++) {
        PyObject *parent = parents[i];
        if (parent != NULL) {
            Py_INCREF(parent);
            IBV_HANDLE(parent)->live_children++;
        }
        parent_slots[i] = parent;
    }
    return obj;
}

void ibv_handle_release_parents(PyObject *const *parents, int nparents)
{
    for (int i = 0; i < nparents; i++)
        if (parents[i] != NULL)
            IBV_HANDLE(parents[i])->live_children--;
}

void ibv_report_unraisable(PyObject *obj, const char *verb, int err)
{
    /* A failed destroy in dealloc cannot raise; say so on stderr, the way
     * CPython reports exceptions in __del__. */
    ibv_raise(verb, err);
    PyErr_WriteUnraisable(obj);
}

/* ---- registry: verbs pointer -> Python object -------------------------- */

static PyObject *registry;   /* dict: int(pointer) -> int(object address) */

int ibv_registry_add(void *ptr, PyObject *obj)
{
    if (registry == NULL && (registry = PyDict_New()) == NULL)
        return -1;
    PyObject *key = PyLong_FromVoidPtr(ptr);
    PyObject *value = PyLong_FromVoidPtr(obj);
    int rc = (key && value) ? PyDict_SetItem(registry, key, value) : -1;
    Py_XDECREF(key);
    Py_XDECREF(value);
    return rc;
}

void ibv_registry_remove(void *ptr)
{
    if (registry == NULL)
        return;
    PyObject *key = PyLong_FromVoidPtr(ptr);
    if (key == NULL || PyDict_DelItem(registry, key) < 0)
        PyErr_Clear();   /* never added (a failed wrap): nothing to undo */
    Py_XDECREF(key);
}

PyObject *ibv_registry_get(void *ptr)
{
    if (registry == NULL)
        return NULL;
    PyObject *key = PyLong_FromVoidPtr(ptr);
    if (key == NULL) {
        PyErr_Clear();
        return NULL;
    }
    PyObject *value = PyDict_GetItem(registry, key);   /* borrowed */
    Py_DECREF(key);
    if (value == NULL)
        return NULL;
    PyObject *obj = (PyObject *)PyLong_AsVoidPtr(value);
    Py_INCREF(obj);
    return obj;
}
