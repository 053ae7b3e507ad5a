/* repr() and _asdict() for the generated struct classes. */
#include "common.h"

PyObject *ibp_asdict_fields(PyObject *obj, const char *const *names)
{
    PyObject *dict = PyDict_New();
    if (dict == NULL)
        return NULL;
    for (; *names; names++) {
        PyObject *value = PyObject_GetAttrString(obj, *names);
        if (value == NULL || PyDict_SetItemString(dict, *names, value) < 0) {
            Py_XDECREF(value);
            Py_DECREF(dict);
            return NULL;
        }
        Py_DECREF(value);
    }
    return dict;
}

PyObject *ibp_repr_fields(PyObject *obj, const char *const *names)
{
    PyObject *parts = PyList_New(0);
    if (parts == NULL)
        return NULL;
    PyObject *result = NULL;
    for (; *names; names++) {
        PyObject *value = PyObject_GetAttrString(obj, *names);
        if (value == NULL)
            goto done;
        PyObject *part = PyUnicode_FromFormat("%s=%R", *names, value);
        Py_DECREF(value);
        if (part == NULL || PyList_Append(parts, part) < 0) {
            Py_XDECREF(part);
            goto done;
        }
        Py_DECREF(part);
    }
    /* Make, use, release, check: the same steps as errors.c raise_with,
     * the usual reference-counting pattern rather than shared logic. */
    PyObject *sep = PyUnicode_FromString(", ");
    if (sep == NULL)
        goto done;
    PyObject *joined = PyUnicode_Join(sep, parts);
    Py_DECREF(sep);
    if (joined == NULL)
        goto done;
    result = PyUnicode_FromFormat("%s(%U)", ibp_type_name(obj), joined);
    Py_DECREF(joined);
done:
    Py_DECREF(parts);
    return result;
}
