/*
 * Methods written in Python (spec key `python: module:function`).
 *
 * The generated method table points at a trampoline that calls this: the
 * Python function is a method of the class from the start (help(), dir(),
 * the stubs and the reference see it), nothing is attached to the class
 * after import, and its module is imported on the first call only, so
 * `import ibverbs` pays nothing for it.
 */
#include "common.h"

PyObject *
ibp_call_python(PyObject **cache, const char *module, const char *name,
                PyObject *self, PyObject *args, PyObject *kwargs)
{
    /* Kept for the life of the process once found (by whichever thread
     * first: ibp_publish). */
    PyObject *function = ibp_acquire_load(cache);
    if (function == NULL && (function = ibp_publish(cache, ibp_import_attr(module, name))) == NULL)
        return NULL;
    Py_ssize_t n = args == NULL ? 0 : PyTuple_Size(args);
    if (n < 0)
        return NULL;
    PyObject *full = PyTuple_New(n + 1);
    if (full == NULL)
        return NULL;
    PyTuple_SetItem(full, 0, Py_NewRef(self));   /* steals the new reference */
    for (Py_ssize_t i = 0; i < n; i++)
        PyTuple_SetItem(full, i + 1, Py_NewRef(PyTuple_GetItem(args, i)));
    PyObject *result = PyObject_Call(function, full, kwargs);
    Py_DECREF(full);
    return result;
}
