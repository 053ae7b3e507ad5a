/*
 * Python -> C argument conversion with range checks.  Every integer that
 * reaches a verb goes through here: out of range is a ValueError naming the
 * argument, never a silent truncation.  At the end, the runtime of the
 * generated argument parsers (ibp_unpack_fastcall, ibp_unpack_tuple).
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

/* Declared in common.h, whose inlines called this file before: the
 * dependency goes one way (common.h declares, convert.c defines).  `inline`
 * (with common.h's extern declaration, this is their one external
 * definition) lets link-time optimisation inline them into every data-path
 * setter and poll as before: without it a setter costs 23 more instructions
 * (bench/host_micro.py --ir, entry_set_wr_id). */
inline int ibp_conv_u64(PyObject *v, const char *name, uint64_t max, uint64_t *out)
{
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s", name);
        return -1;
    }
    if (ibp_long_check(v)) {
        /* The common case in one call (PyLong_AsSsize_t: an int of one
         * digit is read at once, where PyLong_AsLongLongAndOverflow costs
         * some 10 instructions more); anything else (negative, beyond
         * Py_ssize_t: OverflowError, the only error an int raises here)
         * goes the general way, which words the error. */
        Py_ssize_t x = PyLong_AsSsize_t(v);
        if (x >= 0 && (size_t)x <= max) {
            *out = (uint64_t)x;
            return 0;
        }
        if (x == -1 && PyErr_Occurred())
            PyErr_Clear();
    }
    return ibp_conv_unsigned(v, name, max, out);
}

/* Per thread on a free-threaded target: a thread's memo is its own to
 * compare and update (a shared one could pair one thread's object with
 * another's value).  ibp_memo_take says what it may remember there. */
IBP_THREAD_LOCAL struct ibp_int_memo ibp_positive_int_memo;

inline int ibp_conv_positive_int(PyObject *arg, const char *name, int *out)
{
    struct ibp_int_memo *last = &ibp_positive_int_memo;
    if (arg == last->obj) {
        *out = last->value;
        return 0;
    }
    if (PyLong_CheckExact(arg)) {
        long v = PyLong_AsLong(arg);
        if (v > 0 && v <= INT32_MAX) {
            *out = (int)v;
            if (ibp_memo_take(&last->obj, arg))
                last->value = (int)v;
            return 0;
        }
        if (v == -1 && PyErr_Occurred())
            PyErr_Clear();   /* too big for a long: the general path says so */
    }
    uint64_t num;
    if (ibp_conv_unsigned(arg, name, INT32_MAX, &num) < 0)
        return -1;
    if (num == 0) {
        PyErr_Format(PyExc_ValueError, "%s must be positive", name);
        return -1;
    }
    *out = (int)num;
    return 0;
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

PyObject *ibp_conv_handles(PyObject *obj, const char *name, PyTypeObject *type)
{
    /* A tuple of what was actually read (a sequence's __len__ may lie),
     * never changed again: what is checked here is what is held and used. */
    PyObject *items = PySequence_Tuple(obj);
    if (items == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s must be a sequence, not %s", name,
                         ibp_type_name(obj));
        }
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_Size(items); i++) {
        PyObject *item = PyTuple_GetItem(items, i);
        if (!PyObject_TypeCheck(item, type)) {
            PyObject *tname = PyObject_GetAttrString((PyObject *)type, "__name__");
            PyErr_Format(PyExc_TypeError, "%s[%zd] must be a %S, not %s", name, i, tname,
                         ibp_type_name(item));
            Py_XDECREF(tname);
            Py_DECREF(items);
            return NULL;
        }
        if (ibp_check_open(item) < 0) {
            Py_DECREF(items);
            return NULL;
        }
    }
    return items;
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

/* ---- state threads share (common.h, CONTRIBUTING.md "Threads") ---------- */

PyObject *ibp_publish(PyObject **slot, PyObject *made)
{
    if (made == NULL)
        return NULL;
#if IBP_FREE_THREADED
    /* the first store wins; release: what made holds is seen with it */
    PyObject *first = NULL;
    if (!__atomic_compare_exchange_n(slot, &first, made, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        Py_DECREF(made);
        return first;
    }
#else
    *slot = made;
#endif
    return made;
}

/* A GIL target keeps a reference, so that the address is not reused while
 * remembered.  A free-threaded one keeps the memo per thread, where a
 * reference would leak at the thread's exit: it remembers an immortal int
 * only (small ints, constants of the code), which is never freed. */
int ibp_memo_take(PyObject **slot, PyObject *obj)
{
#if IBP_FREE_THREADED
    if (!ibp_is_immortal(obj))
        return 0;
    *slot = obj;
#else
    Py_XSETREF(*slot, Py_NewRef(obj));
#endif
    return 1;
}

/* ---- the data-path types' setters and constructors ---------------------- */

/* ---- the runtime of the generated parsers (common.h) --------------------- */

/*
 * Arguments by position or keyword into out[] (NULL where not given), with
 * PyArg_ParseTupleAndKeywords's messages but without making a str of every
 * keyword name on every call (which is what that costs): the names are
 * interned on first use, and a call's keywords (interned by the compiler)
 * are matched by identity first.
 */
static int parser_intern(struct ibp_parser *p)
{
    int n = 0;
    while (p->names[n] != NULL)
        n++;
    PyObject **interned = PyMem_Calloc(n ? n : 1, sizeof(PyObject *));
    if (interned == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < n; i++)
        if ((interned[i] = PyUnicode_InternFromString(p->names[i])) == NULL) {
            while (--i >= 0)
                Py_DECREF(interned[i]);
            PyMem_Free(interned);
            return -1;
        }
    p->n = n;
    p->interned = interned;
    return 0;
}

/* Free-threaded, interning is published under a lock: a thread that
 * finds interned set (acquire) sees n too.  Two first calls at once both
 * intern; the second drops its copy.  Nothing else is ever stored. */
static int parser_intern_once(struct ibp_parser *p)
{
#if IBP_FREE_THREADED
    static ibp_mutex_t parser_lock;
    struct ibp_parser mine = *p;
    mine.interned = NULL;
    if (parser_intern(&mine) < 0)
        return -1;
    ibp_mutex_lock(&parser_lock);
    int first = p->interned == NULL;
    if (first) {
        p->n = mine.n;
        ibp_release_store(&p->interned, mine.interned);
    }
    ibp_mutex_unlock(&parser_lock);
    if (!first) {
        for (int i = 0; i < mine.n; i++)
            Py_DECREF(mine.interned[i]);
        PyMem_Free(mine.interned);
    }
    return 0;
#else
    return parser_intern(p);
#endif
}

static inline int parser_ready(struct ibp_parser *p)
{
    return ibp_acquire_load(&p->interned) != NULL ? 0 : parser_intern_once(p);
}

/* The position of str key among the names, or -1 (no error set). */
static int keyword_position(const struct ibp_parser *p, PyObject *key)
{
    for (int j = 0; j < p->n; j++)
        if (key == p->interned[j] || PyUnicode_Compare(key, p->interned[j]) == 0)
            return j;
    return -1;
}

static int invalid_keyword(const struct ibp_parser *p, PyObject *key)
{
    PyErr_Format(PyExc_TypeError, "'%U' is an invalid keyword argument for %s()", key, p->fname);
    return -1;
}

/* The position of a keyword that is not one of the interned names itself
 * (made at run time), or -1 with TypeError. */
static int keyword_by_value(const struct ibp_parser *p, PyObject *key)
{
    if (!PyUnicode_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "keywords must be strings");
        return -1;
    }
    int j = keyword_position(p, key);
    return j >= 0 ? j : invalid_keyword(p, key);
}

/* out[<key's position>] = value; keywords the compiler interned are
 * found by identity. */
static inline int store_keyword(const struct ibp_parser *p, PyObject *key, PyObject *value,
                                PyObject **out, int *next)
{
    /* In locals: the stores to out[] could alias them, and they would be
     * reloaded at each step of the scan. */
    PyObject *const *names = p->interned;
    const int n = p->n;
    /* Keywords mostly come in the order of the names: the one after the
     * previous keyword's first (*next), then the scan. */
    int j = *next;
    if (j >= n || key != names[j]) {
        j = 0;
        while (j < n && key != names[j])
            j++;
        if (j == n && (j = keyword_by_value(p, key)) < 0)
            return -1;
    }
    *next = j + 1;
    if (out[j] != NULL) {
        PyErr_Format(PyExc_TypeError, "argument for %s() given by name ('%s') and position (%d)",
                     p->fname, p->names[j], j + 1);
        return -1;
    }
    out[j] = value;
    return 0;
}

/* Too many arguments by position; with keyword-only names, too many in
 * all first (PyArg_ParseTupleAndKeywords's checks of a "...|...$..." format,
 * in its order).  nkw counts only there: other parsers pass 0. */
static int positional(const struct ibp_parser *p, Py_ssize_t nargs, Py_ssize_t nkw)
{
    int max = p->n - p->nkwonly;
    if (p->nkwonly == 0 && nargs > p->n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d argument%s (%zd given)", p->fname,
                     p->n, p->n == 1 ? "" : "s", nargs);
        return -1;
    }
    if (p->nkwonly == 0 || (nargs + nkw <= p->n && nargs <= max))
        return 0;
    if (nargs + nkw > p->n)
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d %sargument%s (%zd given)",
                     p->fname, p->n, nargs == 0 ? "keyword " : "", p->n == 1 ? "" : "s",
                     nargs + nkw);
    else if (max == 0)
        PyErr_Format(PyExc_TypeError, "%s() takes no positional arguments", p->fname);
    else    /* "at most": the keyword-only arguments are optional (a "|" before the "$") */
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional argument%s (%zd given)",
                     p->fname, max, max == 1 ? "" : "s", nargs);
    return -1;
}

static inline int required(const struct ibp_parser *p, PyObject **out)
{
    for (int i = 0; i < p->nrequired; i++)
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos %d)",
                         p->fname, p->names[i], i + 1);
            return -1;
        }
    return 0;
}

int ibp_unpack_tuple(struct ibp_parser *p, PyObject *args, PyObject *kwargs, PyObject **out)
{
    Py_ssize_t nargs = PyTuple_Size(args);
    if (parser_ready(p) < 0 ||
        positional(p, nargs, kwargs != NULL && p->nkwonly ? PyDict_Size(kwargs) : 0) < 0)
        return -1;
    const int n = p->n;
    int i = 0;
    for (; i < nargs; i++)          /* nargs <= n: positional() checked */
        out[i] = PyTuple_GetItem(args, i);
    for (; i < n; i++)
        out[i] = NULL;
    /* A parser with keyword-only names stands for a "...|...$..." format of
     * PyArg_ParseTupleAndKeywords (the constructors of WCBuffer and
     * PostList), which names a missing argument before an unknown keyword. */
    PyObject *unknown = NULL;
    if (kwargs != NULL) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        int next = (int)nargs;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            if (p->nkwonly && PyUnicode_Check(key) && keyword_position(p, key) < 0) {
                if (unknown == NULL)
                    unknown = key;
                continue;
            }
            if (store_keyword(p, key, value, out, &next) < 0)
                return -1;
        }
    }
    if (required(p, out) < 0)
        return -1;
    return unknown != NULL ? invalid_keyword(p, unknown) : 0;
}

#if IBP_TYPE_VECTORCALL
/* What ibp_unpack_vector's quick ways leave (records.h): the full parse,
 * into out[], which comes all NULL; a parse that found every keyword puts
 * kwnames and their positions into the parser's memo (common.h). */
int ibp_unpack_vector_full(struct ibp_parser *p, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames, PyObject **out)
{
    Py_ssize_t nkw = kwnames != NULL ? Py_SIZE(kwnames) : 0;
    if (parser_ready(p) < 0)
        return -1;
    for (int i = 0; i < nargs && i < p->n; i++)
        out[i] = args[i];
    /* All by position, as many as may be: no check can fail, and no name
     * is looked at (the quick way once the parser is ready). */
    if (nkw == 0 && nargs >= p->nrequired && nargs <= p->n - p->nkwonly)
        return 0;
#if !IBP_FREE_THREADED || IBP_OPAQUE_OBJECT
    unsigned char kwpos[IBP_KWNAMES_MEMO];
#endif
    if (positional(p, nargs, p->nkwonly ? nkw : 0) < 0)
        return -1;
    /* As ibp_unpack_tuple: with keyword-only names, a missing argument is
     * named before an unknown keyword.  kwnames holds only str. */
    PyObject *unknown = NULL;
    int next = (int)nargs;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GetItem(kwnames, k);
        if (p->nkwonly && keyword_position(p, key) < 0) {
            if (unknown == NULL)
                unknown = key;
            continue;
        }
        if (store_keyword(p, key, args[nargs + k], out, &next) < 0)
            return -1;
#if !IBP_FREE_THREADED || IBP_OPAQUE_OBJECT
        if (k < IBP_KWNAMES_MEMO)
            kwpos[k] = (unsigned char)(next - 1);
#endif
    }
    if (required(p, out) < 0)
        return -1;
    if (unknown != NULL)
        return invalid_keyword(p, unknown);
#if !IBP_FREE_THREADED || IBP_OPAQUE_OBJECT
    if (!IBP_NO_GIL && nkw > 0 && nkw <= IBP_KWNAMES_MEMO) {
        memcpy(p->kwpos, kwpos, (size_t)nkw);
        Py_INCREF(kwnames);
        Py_XSETREF(p->kwnames, kwnames);    /* the old tuple's dealloc runs no Python code */
    }
#endif
    return 0;
}

PyObject *ibp_call_type_vector(PyObject *type, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames)
{
    /* Not PyObject_Vectorcall(type, ...): that is the vectorcall slot again. */
    ternaryfunc type_call = (ternaryfunc)PyType_GetSlot(Py_TYPE(type), Py_tp_call);
    Py_ssize_t nargs = ibp_vectorcall_nargs(nargsf);
    Py_ssize_t nkw = kwnames != NULL ? Py_SIZE(kwnames) : 0;
    PyObject *tuple = PyTuple_New(nargs), *kwargs = NULL, *result = NULL;
    if (tuple == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++)
        PyTuple_SetItem(tuple, i, Py_NewRef(args[i]));     /* steals the new reference */
    if (nkw > 0) {
        if ((kwargs = PyDict_New()) == NULL)
            goto done;
        for (Py_ssize_t k = 0; k < nkw; k++)
            if (PyDict_SetItem(kwargs, PyTuple_GetItem(kwnames, k), args[nargs + k]) < 0)
                goto done;
    }
    result = type_call(type, tuple, kwargs);
done:
    Py_DECREF(tuple);
    Py_XDECREF(kwargs);
    return result;
}
#endif

/* The one argument of a method that takes exactly one (the seed's
 * post_send(wrs), poll(num_entries)): the seed's messages. */
static int one_argument(const struct ibp_parser *p, PyObject *const *args, Py_ssize_t nargs,
                        Py_ssize_t nkw, PyObject *kwnames, PyObject **out)
{
    if (nargs + nkw == 1) {
        out[0] = NULL;
        if (nargs == 1) {
            out[0] = args[0];
            return 0;
        }
        int next = 0;
        return store_keyword(p, PyTuple_GetItem(kwnames, 0), args[0], out, &next);
    }
    if (nargs + nkw == 0)
        PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos 1)", p->fname,
                     p->names[0]);
    else
        PyErr_Format(PyExc_TypeError, "%s() takes exactly one argument (%zd given)", p->fname,
                     nargs + nkw);
    return -1;
}

int ibp_unpack_fastcall(struct ibp_parser *p, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames, PyObject **out)
{
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_Size(kwnames) : 0;
    if (parser_ready(p) < 0)
        return -1;
    if (p->n == 1 && p->nrequired == 1 && p->nkwonly == 0)
        return one_argument(p, args, nargs, nkw, kwnames, out);
    if (positional(p, nargs, nkw) < 0)
        return -1;
    for (int i = 0; i < p->n; i++)
        out[i] = i < nargs ? args[i] : NULL;
    int next = (int)nargs;
    for (Py_ssize_t k = 0; k < nkw; k++)
        if (store_keyword(p, PyTuple_GetItem(kwnames, k), args[nargs + k], out, &next) < 0)
            return -1;
    return required(p, out);
}

int ibp_packed_items_ok(const char *data, Py_ssize_t len, size_t head_size, unsigned count,
                        size_t kind_offset, size_t size_offset,
                        const struct ibp_packed_kind *kinds, size_t nkinds, uint32_t kind_flags)
{
    size_t header = (size_offset > kind_offset + sizeof(uint32_t)
                     ? size_offset : kind_offset + sizeof(uint32_t)) + sizeof(uint16_t);
    if (len < 0 || (size_t)len < head_size)
        return 0;
    size_t at = head_size;
    for (unsigned i = 0; i < count; i++) {
        if ((size_t)len - at < header)
            return 0;
        uint32_t kind;
        uint16_t size;
        memcpy(&kind, data + at + kind_offset, sizeof(kind));
        memcpy(&size, data + at + size_offset, sizeof(size));
        if (size < header || (size_t)len - at < size)
            return 0;
        for (size_t k = 0; k < nkinds; k++)
            if ((kind & ~kind_flags) == kinds[k].kind && size < kinds[k].size)
                return 0;
        at += size;
    }
    return at == (size_t)len;
}

/* ---- enum members -------------------------------------------------------- */

struct ibp_enum_table ibp_enum_tables[IBP_ENUM_COUNT];
static const char *const enum_names[IBP_ENUM_COUNT] = {IBP_ENUM_NAMES};
static PyObject *enum_base;         /* enum.Enum */

#if IBP_FREE_THREADED && !defined(Py_LIMITED_API) && !defined(Py_TARGET_ABI3T)
/* Every thread's completions hand out the same members (WCStatus.SUCCESS):
 * with free threads each Py_INCREF of one from a thread that does not own
 * it is an atomic add on one cache line, which the cores then pass back and
 * forth, and that alone kept two threads polling at 1.35x one thread.  A
 * member kept here is never freed anyway, so it is made immortal, as
 * CPython makes None and True, and its count is no longer written.  3.14
 * has no public call for it (its own singletons use this one, which it
 * exports; a stable ABI has none, abi3t's included: there they stay mortal). */
PyAPI_FUNC(void) _Py_SetImmortal(PyObject *op);
#define keep_forever(member) _Py_SetImmortal(member)
#else
#define keep_forever(member) ((void)0)
#endif

/* The same for our classes (module.c's ibp_add_type): every instance made
 * and freed per message (a WC per completion) writes its class's count,
 * and two threads polling then share that line (plain API, 2 threads over
 * 1: 1.6, and 1.8-2.3 with WC's class immortal).  Kept for good anyway. */
void ibp_keep_forever(PyObject *obj)
{
    keep_forever(obj);
    (void)obj;
}

/* The class and the members are looked up or made on first use, by
 * whichever thread, and published (ibp_publish): kept for good. */
static PyObject *enum_class(int which)
{
    struct ibp_enum_table *t = &ibp_enum_tables[which];
    PyObject *cls = ibp_acquire_load(&t->cls);
    if (cls == NULL)
        cls = ibp_publish(&t->cls, ibp_import_attr("ibverbs.enums", enum_names[which]));
    return cls;
}

PyObject *ibp_enum_make(int which, unsigned long long bits, int is_signed)
{
    PyObject *number = is_signed ? PyLong_FromLongLong((long long)bits)
                                 : PyLong_FromUnsignedLongLong(bits);
    PyObject *cls = enum_class(which);
    if (number == NULL || cls == NULL) {
        Py_XDECREF(number);
        return NULL;
    }
    PyObject *member = PyObject_CallFunctionObjArgs(cls, number, NULL);
    if (member == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
        PyErr_Clear();              /* no member of an IntEnum: the int itself */
        member = Py_NewRef(number);
    }
    Py_DECREF(number);
    if (member != NULL && bits < IBP_ENUM_TABLE_LEN) {
        keep_forever(member);
        ibp_publish(&ibp_enum_tables[which].members[bits], Py_NewRef(member));   /* kept for good */
    }
    return member;
}

int ibp_enum_check(int which, PyObject *value, const char *what)
{
    if (PyLong_CheckExact(value))
        return 0;
    PyObject *base = ibp_acquire_load(&enum_base);
    if (base == NULL && (base = ibp_publish(&enum_base, ibp_import_attr("enum", "Enum"))) == NULL)
        return -1;
    PyObject *cls = enum_class(which);
    if (cls == NULL)
        return -1;
    int is_enum = PyObject_IsInstance(value, base);
    if (is_enum <= 0)
        return is_enum;             /* an int subclass, a numpy int, ...: as before */
    int ours = PyObject_IsInstance(value, cls);
    if (ours != 0)
        return ours < 0 ? -1 : 0;
    PyObject *shown = PyObject_Repr(value);
    if (shown == NULL)
        return -1;
    PyErr_Format(PyExc_TypeError, "%s must be %s or an int, not %U", what,
                 enum_names[which], shown);
    Py_DECREF(shown);
    return -1;
}
