/*
 * Raising ibverbs.VerbsError and friends.  The exception classes are
 * defined in Python (ibverbs/errors.py) so that they pickle and read like
 * any OSError; C holds references to them, fetched once at import.
 */
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

PyObject *ibp_VerbsError;
PyObject *ibp_CompletionError;
PyObject *ibp_GidClass;

const char *ibp_type_name(PyObject *obj)
{
    /* The Limited API hides tp_name; read __name__ into a buffer.  Callers
     * format the message at once, so one buffer a thread is enough (one
     * for the process on a GIL target, which puts the threads in turn). */
    static IBP_THREAD_LOCAL char buffer[128];
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

PyObject *ibp_import_attr(const char *module, const char *name)
{
    PyObject *mod = PyImport_ImportModule(module);
    if (mod == NULL)
        return NULL;
    PyObject *obj = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    return obj;
}

int ibp_errors_init(void)
{
    ibp_VerbsError = ibp_import_attr("ibverbs.errors", "VerbsError");
    ibp_CompletionError = ibp_import_attr("ibverbs.errors", "CompletionError");
    ibp_GidClass = ibp_import_attr("ibverbs._gid", "Gid");
    if (!ibp_VerbsError || !ibp_CompletionError || !ibp_GidClass)
        return -1;
    return 0;
}

static PyObject *raise_with(PyObject *args)
{
    if (args == NULL)
        return NULL;
    PyObject *exc = PyObject_CallObject(ibp_VerbsError, args);
    Py_DECREF(args);
    if (exc == NULL)
        return NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *ibp_raise(const char *operation, int err)
{
    return raise_with(Py_BuildValue("(si)", operation, err));
}

PyObject *ibp_raise_detail(const char *operation, int err, const char *fmt, ...)
{
    char detail[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    /* A detail is the whole message (VerbsError as the seed's OSError):
     * it starts "<operation> failed: ", written here unless already there. */
    char text[320];
    size_t oplen = strlen(operation);
    if (strncmp(detail, operation, oplen) == 0 && strncmp(detail + oplen, " failed: ", 9) == 0)
        snprintf(text, sizeof(text), "%s", detail);
    else
        snprintf(text, sizeof(text), "%s failed: %s", operation, detail);
    return raise_with(Py_BuildValue("(sis)", operation, err, text));
}

PyObject *ibp_raise_explained(const char *operation, int err, const char *why)
{
    if (why == NULL || why[0] == '\0')
        return ibp_raise(operation, err);
    return ibp_raise_detail(operation, err, "%s: %s", strerror(err), why);
}

int ibp_error_code(long rc)
{
    if (rc > 0)
        return (int)rc;
    /* Below -1 it is a negated errno (siw and erdma return -ENOMEM), whatever
     * errno a call inside the provider happened to leave; -1 is librdmacm's
     * "see errno". */
    if (rc < -1 && rc > -4096)
        return (int)-rc;
    if (errno > 0)
        return errno;
    if (rc < 0)
        return (int)-rc;
    return EIO;
}

PyObject *ibp_raise_closed(PyObject *obj)
{
    const char *name = ibp_type_name(obj);
    char text[160];
    snprintf(text, sizeof(text), "%s is closed", name);    /* the seed's words */
    return raise_with(Py_BuildValue("(sis)", name, EBADF, text));
}

PyObject *ibp_raise_unavailable(const char *symbol, const char *since)
{
    PyErr_Format(PyExc_RuntimeError,
                 "%s is unavailable: the installed libibverbs.so.1 does not "
                 "export it (added in rdma-core %s; upgrade rdma-core)",
                 symbol, since);
    return NULL;
}

PyObject *ibp_raise_completion(PyObject *wc)
{
    PyObject *exc = PyObject_CallFunctionObjArgs(ibp_CompletionError, wc, NULL);
    if (exc == NULL)
        return NULL;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
    return NULL;
}
