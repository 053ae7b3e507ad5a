/*
 * Python -> C argument conversion with range checks.  Every integer that
 * reaches a verb goes through here: out of range is a ValueError naming the
 * argument, never a silent truncation.
 */
#include "common.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static int as_long_long(PyObject *obj, const char *name, int *overflow,
                        long long *value, unsigned long long *uvalue)
{
    if (!PyLong_Check(obj)) {
        /* IntEnum/IntFlag are ints; anything else with __index__ too. */
        PyObject *index = PyNumber_Index(obj);
        if (index == NULL) {
            /* Not an integer: say which argument.  Anything else (an
             * exception raised by the object's own __index__) stands. */
            if (PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError, "%s must be an int, not %s", name,
                             ibp_type_name(obj));
            }
            return -1;
        }
        int rc = as_long_long(index, name, overflow, value, uvalue);
        Py_DECREF(index);
        return rc;
    }
    *value = PyLong_AsLongLongAndOverflow(obj, overflow);
    if (*value == -1 && PyErr_Occurred())
        return -1;
    *uvalue = 0;
    if (*overflow > 0) {
        /* Above LLONG_MAX: only an unsigned 64-bit value can hold it. */
        *uvalue = PyLong_AsUnsignedLongLong(obj);
        if (*uvalue == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            *overflow = 2;
        }
    }
    return 0;
}

int ibp_conv_unsigned(PyObject *obj, const char *name, uint64_t max, uint64_t *out)
{
    int overflow;
    long long v;
    unsigned long long uv;
    if (as_long_long(obj, name, &overflow, &v, &uv) < 0)
        return -1;
    if (overflow == 0 && v >= 0 && (uint64_t)v <= max) {
        *out = (uint64_t)v;
        return 0;
    }
    if (overflow == 1 && uv <= max) {
        *out = uv;
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "%s must be in 0..%llu, got %S", name,
                 (unsigned long long)max, obj);
    return -1;
}

int ibp_conv_signed(PyObject *obj, const char *name, int64_t min, int64_t max,
                    int64_t *out)
{
    int overflow;
    long long v;
    unsigned long long uv;
    if (as_long_long(obj, name, &overflow, &v, &uv) < 0)
        return -1;
    if (overflow == 0 && v >= min && v <= max) {
        *out = v;
        return 0;
    }
    PyErr_Format(PyExc_ValueError, "%s must be in %lld..%lld, got %S", name,
                 (long long)min, (long long)max, obj);
    return -1;
}

PyObject *ibp_conv_str(PyObject *obj, const char *name, const char **out)
{
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %s", name,
                     ibp_type_name(obj));
        return NULL;
    }
    PyObject *bytes = PyUnicode_AsUTF8String(obj);
    if (bytes == NULL)
        return NULL;
    *out = PyBytes_AsString(bytes);
    if (*out == NULL || strlen(*out) != (size_t)PyBytes_Size(bytes)) {
        Py_DECREF(bytes);
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "%s must not contain NUL", name);
        return NULL;
    }
    return bytes;
}

int ibp_conv_gid(PyObject *obj, const char *name, union ibv_gid *out)
{
    PyObject *raw;
    if (PyObject_IsInstance(obj, ibp_GidClass) == 1)
        raw = PyObject_GetAttrString(obj, "raw");
    else if (PyBytes_Check(obj) || PyByteArray_Check(obj) || PyList_Check(obj) || PyTuple_Check(obj))
        raw = PyBytes_FromObject(obj);      /* a list of 16 ints too, as the seed's bytes(dgid) */
    else {
        PyErr_Format(PyExc_TypeError, "%s must be a Gid or 16 bytes, not %s",
                     name, ibp_type_name(obj));
        return -1;
    }
    if (raw == NULL)
        return -1;
    if (PyBytes_Size(raw) != 16) {
        PyErr_Format(PyExc_ValueError, "%s must be exactly 16 bytes, got %zd",
                     name, PyBytes_Size(raw));
        Py_DECREF(raw);
        return -1;
    }
    memcpy(out->raw, PyBytes_AsString(raw), 16);
    Py_DECREF(raw);
    return 0;
}

PyObject *ibp_gid_to_py(const union ibv_gid *gid)
{
    PyObject *raw = PyBytes_FromStringAndSize((const char *)gid->raw, 16);
    if (raw == NULL)
        return NULL;
    PyObject *result = PyObject_CallFunctionObjArgs(ibp_GidClass, raw, NULL);
    Py_DECREF(raw);
    return result;
}

PyObject *ibp_chars_to_py(const char *chars, size_t size)
{
    size_t len = strnlen(chars, size);
    return PyUnicode_DecodeUTF8(chars, (Py_ssize_t)len, "replace");
}

PyObject *ibp_array_to_py(const void *data, size_t size)
{
    return PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)size);
}

int ibp_conv_handle(PyObject *obj, const char *name, PyTypeObject *type,
                    int none_ok, PyObject **out)
{
    if (obj == Py_None && none_ok) {
        *out = NULL;
        return 0;
    }
    /* The real type, not isinstance(): an object can claim any class
     * through __class__, and its memory is read as a handle below. */
    if (!PyObject_TypeCheck(obj, type)) {
        PyObject *tname = PyObject_GetAttrString((PyObject *)type, "__name__");
        PyErr_Format(PyExc_TypeError, "%s must be %s%S, not %s", name,
                     none_ok ? "None or " : "", tname, ibp_type_name(obj));
        Py_XDECREF(tname);
        return -1;
    }
    if (ibp_check_open(obj) < 0)
        return -1;
    *out = obj;
    return 0;
}

/*
 * With IBV_SEND_INLINE the provider copies the SGEs' bytes in this process
 * while posting, so an SGE built from a bad integer address would crash the
 * interpreter there.  process_vm_readv() on ourselves reads one byte of
 * every page of the range and fails with EFAULT instead of faulting; where
 * it is refused (seccomp: EPERM/ENOSYS) mincore() at least catches unmapped
 * pages.
 */
#define PROBE_PAGES 64

static int probe_pages(uintptr_t first, size_t npages, size_t page, uintptr_t start)
{
    struct iovec remote[PROBE_PAGES];
    unsigned char sink[PROBE_PAGES];
    struct iovec local = {.iov_base = sink, .iov_len = npages};
    for (size_t i = 0; i < npages; i++) {
        uintptr_t p = first + i * page;
        remote[i].iov_base = (void *)(p < start ? start : p);
        remote[i].iov_len = 1;
    }
    /* syscall(): the glibc wrapper would raise the wheel's glibc floor to 2.15 */
    ssize_t got = syscall(SYS_process_vm_readv, (long)getpid(), &local, 1UL, remote,
                          (unsigned long)npages, 0UL);
    if (got == (ssize_t)npages)
        return 0;
    if (got < 0 && (errno == EPERM || errno == ENOSYS)) {
        unsigned char vec[PROBE_PAGES];
        return mincore((void *)first, npages * page, vec) == 0 ? 0 : -1;
    }
    return -1;
}

int ibp_check_readable(uint64_t addr, uint64_t length, const char *what)
{
    if (length == 0)
        return 0;
    if (addr > UINTPTR_MAX - (length - 1))
        goto bad;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr, last = (uintptr_t)(addr + (length - 1));
    uintptr_t first = start & ~(uintptr_t)(page - 1);
    size_t pages = (last - first) / page + 1;
    for (size_t done = 0; done < pages; done += PROBE_PAGES) {
        size_t n = pages - done < PROBE_PAGES ? pages - done : PROBE_PAGES;
        if (probe_pages(first + done * page, n, page, start) < 0)
            goto bad;
    }
    return 0;
bad:
    {
        /* PyErr_Format knows no '#' flag (it would print the format itself) */
        char range[64];
        snprintf(range, sizeof(range), "[%#llx, +%llu)", (unsigned long long)addr,
                 (unsigned long long)length);
        PyErr_Format(PyExc_ValueError, "%s: %s is not readable memory of this process",
                     what, range);
    }
    return -1;
}

/* ---- the data-path types' setters and constructors ---------------------- */

/*
 * Constructor arguments by position or keyword, all optional objects like
 * PyArg_ParseTupleAndKeywords("|OOO...") with its error messages, but
 * without making a str of every keyword name on every call (which is what
 * that costs): the names are interned once, and a call's keywords (interned
 * by the compiler) are matched by identity first.
 */
int ibp_argspec_init(struct argspec *spec)
{
    int n = 0;
    while (spec->names[n] != NULL)
        n++;
    spec->interned = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    if (spec->interned == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < n; i++)
        if ((spec->interned[i] = PyUnicode_InternFromString(spec->names[i])) == NULL)
            return -1;
    spec->n = n;
    return 0;
}

int ibp_parse_args(const struct argspec *spec, PyObject *args, PyObject *kwargs,
                      PyObject **out)
{
    Py_ssize_t nargs = PyTuple_Size(args);
    if (nargs > spec->n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d argument%s (%zd given)",
                     spec->fname, spec->n, spec->n == 1 ? "" : "s", nargs);
        return -1;
    }
    for (int i = 0; i < spec->n; i++)
        out[i] = i < nargs ? PyTuple_GetItem(args, i) : NULL;
    if (kwargs != NULL) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            int j = 0;
            while (j < spec->n && key != spec->interned[j])
                j++;
            if (j == spec->n) {
                if (!PyUnicode_Check(key)) {
                    PyErr_SetString(PyExc_TypeError, "keywords must be strings");
                    return -1;
                }
                j = 0;
                while (j < spec->n && PyUnicode_Compare(key, spec->interned[j]) != 0)
                    j++;
                if (j == spec->n) {
                    PyErr_Format(PyExc_TypeError, "'%U' is an invalid keyword argument for %s()",
                                 key, spec->fname);
                    return -1;
                }
            }
            if (out[j] != NULL) {
                PyErr_Format(PyExc_TypeError,
                             "argument for %s() given by name ('%s') and position (%d)",
                             spec->fname, spec->names[j], j + 1);
                return -1;
            }
            out[j] = value;
        }
    }
    for (int i = 0; i < spec->nrequired; i++)
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)",
                         spec->fname, spec->names[i], i + 1);
            return -1;
        }
    return 0;
}

/* ---- the generated METH_FASTCALL parsers' slow path (common.h) ---------- */

static int one_argument(const char *fname, const char *name, PyObject *const *args,
                        Py_ssize_t nargs, Py_ssize_t nkw, PyObject *kwnames, PyObject **out)
{
    if (nargs == 1 && nkw == 0) {
        *out = args[0];
        return 0;
    }
    if (nargs == 0 && nkw == 1) {
        PyObject *key = PyTuple_GetItem(kwnames, 0);
        if (PyUnicode_CompareWithASCIIString(key, name) == 0) {
            *out = args[0];
            return 0;
        }
        PyErr_Format(PyExc_TypeError, "'%U' is an invalid keyword argument for %s()", key, fname);
        return -1;
    }
    if (nargs + nkw == 0)
        PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos 1)", fname, name);
    else
        PyErr_Format(PyExc_TypeError, "%s() takes exactly one argument (%zd given)", fname,
                     nargs + nkw);
    return -1;
}

int ibp_unpack_fastcall(const char *fname, const char *const *names, int nrequired,
                        PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                        PyObject **out)
{
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_Size(kwnames) : 0;
    int n = 0;
    while (names[n] != NULL)
        n++;
    if (n == 1 && nrequired == 1)
        return one_argument(fname, names[0], args, nargs, nkw, kwnames, out);
    if (nargs + nkw > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d %sargument%s (%zd given)", fname,
                     n, nargs == 0 ? "keyword " : "", n == 1 ? "" : "s", nargs + nkw);
        return -1;
    }
    for (int i = 0; i < n; i++)
        out[i] = i < nargs ? args[i] : NULL;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GetItem(kwnames, k);
        int j = 0;
        while (j < n && PyUnicode_CompareWithASCIIString(key, names[j]) != 0)
            j++;
        if (j == n) {
            PyErr_Format(PyExc_TypeError, "'%U' is an invalid keyword argument for %s()", key,
                         fname);
            return -1;
        }
        if (out[j] != NULL) {
            PyErr_Format(PyExc_TypeError, "argument for %s() given by name ('%s') and position (%d)",
                         fname, names[j], j + 1);
            return -1;
        }
        out[j] = args[nargs + k];
    }
    for (int i = 0; i < nrequired; i++)
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)", fname,
                         names[i], i + 1);
            return -1;
        }
    return 0;
}
