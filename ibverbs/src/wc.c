/*
 * WC: a work completion; CQ.poll().  Its accessors and type shell are
 * generated (generated/wc.c.h, from spec/datapath/records.yaml); here are
 * the free list, the hot attribute lookup and the poll loop.
 */
#include "common.h"

#include "objects.h"

#include "wc.c.h"

/*
 * WC objects are made by the thousand and dropped at once: the freed ones
 * are kept (up to WC_FREE_MAX) and reused, so poll() pays neither the
 * allocator nor PyType_GenericAlloc's generic path.  Each is a plain
 * PyObject_Malloc block of sizeof(WCObject) (what tp_alloc gives for WC()
 * too), revived with PyObject_Init.
 */
#define WC_FREE_MAX 256
static PyObject *wc_free[WC_FREE_MAX];
static int wc_nfree;
/* Not where threads run without the GIL (IBP_NO_GIL): one list for the
 * process would need a lock on every WC made and freed, and one per thread
 * leaks what it holds when its thread ends; its allocator (mimalloc) keeps
 * per-thread pages already. */
#define WC_FREE_LIST (!IBP_NO_GIL)

PyObject *ibp_wc_new(const struct ibv_wc *wc)
{
    PyObject *op = WC_FREE_LIST && wc_nfree > 0 ? wc_free[--wc_nfree]
                                                : PyObject_Malloc(sizeof(WCObject));
    if (op == NULL)
        return PyErr_NoMemory();
    PyObject_Init(op, WC_Type);   /* type (a reference: heap type) and refcount 1 */
    ((WCObject *)op)->wc = *wc;
    return op;
}

static void ibp_WC_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    if (WC_FREE_LIST && type == WC_Type && wc_nfree < WC_FREE_MAX)
        wc_free[wc_nfree++] = op;
    else if (type == WC_Type)
        PyObject_Free(op);
    else    /* a subclass's instance: its own layout and allocator */
        ((freefunc)PyType_GetSlot(type, Py_tp_free))(op);
    Py_DECREF(type);
}

/* Small ints (counts, statuses, opcodes), made once at import (ibp_wc_init):
 * no call into libpython, and no check, on the busy-polling path. */
static PyObject *small_counts[256];

PyObject *ibp_count_result(long n)
{
    if (n < 0 || n >= 256)
        return PyLong_FromLong(n);
    return Py_NewRef(small_counts[n]);
}

/* The fields a completion loop reads, found by the identity of the
 * (interned) attribute name before the generic lookup: under emulation the
 * type's MRO lookup and descriptor call cost more than the field.  Only for
 * WC itself: a subclass inherits this slot, and its own property or class
 * attribute of one of these names must win, as for any other name. */
static PyObject *wc_hot_names[4];

static PyObject *ibp_WC_getattro(PyObject *op, PyObject *name)
{
    if (__builtin_expect(Py_TYPE(op) != WC_Type, 0))
        return PyObject_GenericGetAttr(op, name);
    if (name == wc_hot_names[0])
        return WC_get_status(op, NULL);
    if (name == wc_hot_names[1])
        return WC_get_opcode(op, NULL);
    if (name == wc_hot_names[2])
        return WC_get_wr_id(op, NULL);
    if (name == wc_hot_names[3])
        return WC_get_byte_len(op, NULL);
    return PyObject_GenericGetAttr(op, name);
}

static PyObject *ibp_WC_get_is_success(PyObject *op, void *c)
{
    (void)c;
    return PyBool_FromLong(((WCObject *)op)->wc.status == IBV_WC_SUCCESS);
}

static PyObject *ibp_WC_get_status_str(PyObject *op, void *c)
{
    (void)c;
    return PyUnicode_FromString(ibv_wc_status_str(((WCObject *)op)->wc.status));
}

static PyObject *ibp_WC_raise_for_status(PyObject *op, PyObject *unused)
{
    (void)unused;
    if (((WCObject *)op)->wc.status == IBV_WC_SUCCESS)
        Py_RETURN_NONE;
    return ibp_raise_completion(op);
}

static PyObject *ibp_WC_repr(PyObject *op)
{
    const struct ibv_wc *wc = &((WCObject *)op)->wc;
    return PyUnicode_FromFormat("WC(wr_id=%llu, status=%s, opcode=%d, byte_len=%u, "
                                "qp_num=%u, wc_flags=%u)",
                                (unsigned long long)wc->wr_id,
                                ibv_wc_status_str(wc->status), (int)wc->opcode,
                                wc->byte_len, wc->qp_num, wc->wc_flags);
}

int ibp_wc_to_c(PyObject *obj, struct ibv_wc *out)
{
    if (!PyObject_TypeCheck(obj, WC_Type)) {
        PyErr_Format(PyExc_TypeError, "wc must be a WC, not %s", ibp_type_name(obj));
        return -1;
    }
    ibp_lock_t cs;
    ibp_lock(&cs, obj);     /* another object's argument: its setters hold it */
    *out = ((WCObject *)obj)->wc;
    ibp_unlock(&cs);
    return 0;
}

#define STACK_WCS 64

/*
 * A busy-polling loop drops each result before the next poll, and making
 * and freeing the list (and its WC objects) is most of what a poll costs
 * when the provider is fast (without this cache: 382 instead of 260
 * instructions an empty poll, 141 instead of 57 a WC of poll(16);
 * bench/host_micro.py).  So poll() keeps the lists it returned, two per
 * length up to RESULT_CACHE_MAX (empty ones included), and hands one back
 * when nobody else holds it (reference count 1).  The caller must not be
 * able to tell it from a new list:
 *
 * - No Python code runs while a list is refilled.  Its items are refilled
 *   in place where the list is their only holder and they are still WCs;
 *   anything else (a WC the program kept, an object it stored there) is
 *   replaced by a new WC, and what is replaced or evicted is dropped only
 *   once the result is complete and held (struct drops): dropping may run
 *   a finalizer, which may poll again (it then gets another list) or
 *   change the result (it is the caller's list by then).
 * - A cached list never keeps what a caller added for long.  One whose
 *   length changed (append, pop, ...) is evicted by the next poll of its
 *   length that finds no list free, one with a foreign item when it is
 *   refilled, and every garbage collection (automatic or gc.collect())
 *   evicts both kinds from every slot (wc_cache_purge, in gc.callbacks),
 *   so that a program that stops polling, or polls other lengths, frees
 *   them too.  The fast path (a free list of the length) checks nothing
 *   more than it did.
 *
 * Two per length, so that `wcs = cq.poll(n)` in a loop (the previous
 * result still held during the next call) finds one free as well.
 */
#define RESULT_CACHE_MAX 16
static PyObject *result_cache[RESULT_CACHE_MAX + 1][2];
/* Not where threads run without the GIL (IBP_NO_GIL): a list is taken
 * when its count says only the cache holds it, and two threads would take
 * the same one (and a count read from another thread is no proof that
 * nobody holds it); per thread, the lists would leak when their thread
 * ends.  Every poll makes its list there, and nothing is cached or purged. */
#define RESULT_CACHED (!IBP_NO_GIL)

/* What a poll replaced or evicted, to drop at its end: an item per WC and
 * the two lists of a length, or the one a new list displaces. */
struct drops {
    int n;
    PyObject *obj[RESULT_CACHE_MAX + 2];
};

static void drops_release(struct drops *d)
{
    while (d->n > 0)
        Py_DECREF(d->obj[--d->n]);
}

/* Whether cached list l of length n holds only WCs nobody else holds. */
static int list_is_clean(PyObject *l, Py_ssize_t n)
{
    if (Py_SIZE(l) != n)     /* Py_SIZE: no call */
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GetItem(l, i);
        if (Py_REFCNT(item) != 1 || !Py_IS_TYPE(item, WC_Type))
            return 0;
    }
    return 1;
}

/* Refill the WCs of cached list l that only l holds, from the first: the
 * index of the first item it could not refill (n: all of them). */
static inline int refill_in_place(PyObject *l, const struct ibv_wc *wcs, int n)
{
    PyTypeObject *wc_type = WC_Type;     /* not reloaded after each call */
    for (int i = 0; i < n; i++) {
        PyObject *item = PyList_GetItem(l, i);     /* borrowed */
        if (Py_REFCNT(item) != 1 || !Py_IS_TYPE(item, wc_type))
            return i;
        ((WCObject *)item)->wc = wcs[i];
    }
    return n;
}

static PyObject *new_result(const struct ibv_wc *wcs, int n)
{
    PyObject *list = PyList_New(n);
    if (list == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *wc = ibp_wc_new(&wcs[i]);
        if (wc == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SetItem(list, i, wc);
    }
    return list;
}

/* The rest of cached list l from item `from` on, which is not a WC only l
 * holds: each such item is replaced by a new WC and dropped once l is
 * complete and held by its caller. */
static PyObject *refill_rest(PyObject *l, const struct ibv_wc *wcs, int from, int n)
{
    struct drops d;
    PyObject *result = NULL;
    d.n = 0;
    for (int i = from; i < n; i++) {
        PyObject *item = PyList_GetItem(l, i);
        if (Py_REFCNT(item) == 1 && Py_IS_TYPE(item, WC_Type)) {
            ((WCObject *)item)->wc = wcs[i];
            continue;
        }
        PyObject *wc = ibp_wc_new(&wcs[i]);
        if (wc == NULL)
            goto done;
        d.obj[d.n++] = Py_NewRef(item);
        PyList_SetItem(l, i, wc);       /* steals wc; item lives on in d */
    }
    result = Py_NewRef(l);
done:
    drops_release(&d);
    return result;
}

/* Neither cached list of length n is free: a new one, in a slot (an empty
 * one first, else the two take turns), evicting those a caller resized. */
static PyObject *result_in_new_list(PyObject **slots, const struct ibv_wc *wcs, int n)
{
    struct drops d;
    static int turn;
    d.n = 0;
    for (int i = 0; i < 2; i++)
        if (slots[i] != NULL && Py_REFCNT(slots[i]) == 1) {     /* so not of length n */
            d.obj[d.n++] = slots[i];
            slots[i] = NULL;
        }
    PyObject *list = new_result(wcs, n);
    if (list != NULL) {
        int i = slots[0] == NULL ? 0 : slots[1] == NULL ? 1 : (turn ^= 1);
        if (slots[i] != NULL)
            d.obj[d.n++] = slots[i];
        slots[i] = Py_NewRef(list);
    }
    drops_release(&d);
    return list;
}

/* Out of line: the common poll (up to RESULT_CACHE_MAX, the cached list
 * free) takes cached_result's short way, and the rest costs it no
 * registers. */
__attribute__((noinline))
static PyObject *poll_result(const struct ibv_wc *wcs, int n)
{
    if (n > RESULT_CACHE_MAX || !RESULT_CACHED)
        return new_result(wcs, n);
    PyObject **slots = result_cache[n];
    for (int i = 0; i < 2; i++) {
        PyObject *l = slots[i];
        if (l != NULL && Py_REFCNT(l) == 1 && Py_SIZE(l) == n) {   /* Py_SIZE: no call */
            int k = refill_in_place(l, wcs, n);
            return k == n ? Py_NewRef(l) : refill_rest(l, wcs, k, n);
        }
    }
    return result_in_new_list(slots, wcs, n);
}

/* gc.callbacks: at each collection's start, evict the cached lists a
 * caller changed and let go of (see above). */
static PyObject *wc_cache_purge(PyObject *module, PyObject *args)
{
    (void)module;
    (void)args;
    for (int n = 0; n <= RESULT_CACHE_MAX; n++)
        for (int i = 0; i < 2; i++) {
            PyObject *l = result_cache[n][i];
            if (l != NULL && Py_REFCNT(l) == 1 && !list_is_clean(l, n)) {
                result_cache[n][i] = NULL;      /* before: dropping may run code */
                Py_DECREF(l);
            }
        }
    Py_RETURN_NONE;
}

static PyMethodDef wc_cache_purge_def = {
    "_poll_cache_purge", wc_cache_purge, METH_VARARGS,
    "_poll_cache_purge(phase, info, /)\n--\n\n"
    "gc callback: evict the poll() results a caller changed and dropped.",
};

/* poll and poll_into keep the GIL: ibv_poll_cq never blocks and costs tens
 * of nanoseconds, less than releasing and retaking the GIL. */
static PyObject *poll_failed(int n)
{
    return ibp_raise("ibv_poll_cq", ibp_error_code(n));
}

/* A poll of more than RESULT_CACHE_MAX: its WCs on the stack up to
 * STACK_WCS, else on the heap. */
__attribute__((noinline))
static PyObject *poll_many(struct ibv_cq *cq, int num)
{
    struct ibv_wc stack[STACK_WCS], *wcs = stack;
    /* More than the CQ holds cannot come back: no larger buffer. */
    if (num > cq->cqe && cq->cqe > 0)
        num = cq->cqe;
    if (num > STACK_WCS) {
        wcs = PyMem_Malloc((size_t)num * sizeof(*wcs));
        if (wcs == NULL)
            return PyErr_NoMemory();
    }
    errno = 0;      /* a provider may fail without setting it: no stale value */
    int n = ibv_poll_cq(cq, num, wcs);
    PyObject *list = n < 0 ? poll_failed(n) : poll_result(wcs, n);
    if (wcs != stack)
        PyMem_Free(wcs);
    return list;
}

/* Cached list l, its n WCs refilled in place (out of line: the loop's
 * registers are not the empty poll's to save): l, or NULL when one of
 * them could not be (poll_result's way then). */
__attribute__((noinline))
static PyObject *refilled(PyObject *l, const struct ibv_wc *wcs, int n)
{
    if (refill_in_place(l, wcs, n) != n)
        return NULL;
    Py_INCREF(l);
    return l;
}

/* The cached list of length n (<= RESULT_CACHE_MAX) that nobody else
 * holds, with its WCs refilled in place, or NULL: poll_result's way. */
static inline PyObject *cached_result(const struct ibv_wc *wcs, int n)
{
    for (int i = 0; RESULT_CACHED && i < 2; i++) {
        PyObject *l = result_cache[n][i];
        if (l != NULL && Py_REFCNT(l) == 1 && Py_SIZE(l) == n) {
            /* poll(1)'s one WC here, more out of line */
            if (n > 1)
                return refilled(l, wcs, n);
            if (n == 1 && refill_in_place(l, wcs, 1) != 1)
                return NULL;
            Py_INCREF(l);
            return l;
        }
    }
    return NULL;
}

/* A poll of an open CQ that may be polled (not a CQEx mid-poll). */
static inline PyObject *poll_cq(struct ibv_cq *cq, int num)
{
    if (num > RESULT_CACHE_MAX)
        return poll_many(cq, num);
    struct ibv_wc wcs[RESULT_CACHE_MAX];
    errno = 0;      /* a provider may fail without setting it: no stale value */
    int n = ibv_poll_cq(cq, num, wcs);
    /* n a constant for the empty poll, a busy loop's most common one */
    PyObject *list = n == 0 ? cached_result(wcs, 0)
                   : n > 0 && n <= RESULT_CACHE_MAX ? cached_result(wcs, n) : NULL;
    if (list != NULL)
        return list;
    return n < 0 ? poll_failed(n) : poll_result(wcs, n);
}

/* CQ.poll(num_entries), anything its short way does not take:
 * generated/cq.c.h enters the call and converts num_entries first (an
 * __index__ may close the CQ). */
PyObject *ibp_hand_CQ_poll_impl(PyObject *self, int num)
{
    if (ibp_check_open(self) < 0 || ibp_cq_check_not_polling(self) < 0)
        return NULL;
    return poll_cq(CQ_PTR(self), num);
}

/*
 * The short way (spec short_way): poll(n) by position of an open plain CQ
 * (a CQEx may be mid-poll) with the int object the last conversion of
 * num_entries remembered (a polling loop's), before the call is entered.
 * Nothing of it runs Python code while it uses the CQ (a refill is in
 * place; what poll_result replaces is dropped once the result is
 * complete, the CQ no longer used), so it needs no in-flight mark.  A
 * fork() child takes the long way, which refuses a parent's CQ.
 */
PyObject *ibp_hand_CQ_poll_short(PyObject *self, PyObject *num_entries_obj)
{
    struct ibv_cq *cq = CQ_PTR(self);
    if (__builtin_expect(num_entries_obj == ibp_positive_int_memo.obj && cq != NULL &&
                         !ibp_forked && Py_IS_TYPE(self, CQ_Type), 1))
        return poll_cq(cq, ibp_positive_int_memo.value);
    return ibp_CQ_poll_entered(self, num_entries_obj);
}

/* ---- fault injection for the tests (IBVERBS_TEST_HOOKS=1, as handles.c's) ---- */

/* A provider's poll_cq may fail without setting errno, and may leave errno
 * set by a call that succeeded.  _poll_fault(cq, rc) makes the next two
 * polls of cq through its provider do both: the first returns no
 * completion and sets errno to EAGAIN, the second returns rc (negative)
 * and leaves errno alone; then the provider's own poll_cq is back.  Other
 * CQs of the context poll through the provider meanwhile. */
static struct {
    struct ibv_cq *cq;
    int (*real)(struct ibv_cq *, int, struct ibv_wc *);
    int step, rc;
} poll_fault;

static int faulty_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    if (cq != poll_fault.cq)
        return poll_fault.real(cq, num, wc);
    if (poll_fault.step++ == 0) {
        errno = EAGAIN;
        return 0;
    }
    cq->context->ops.poll_cq = poll_fault.real;
    poll_fault.cq = NULL;
    return poll_fault.rc;
}

static PyObject *poll_fault_hook(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *cq;
    int rc;
    if (!PyArg_ParseTuple(args, "Oi:_poll_fault", &cq, &rc))
        return NULL;
    if (!PyObject_TypeCheck(cq, CQ_Type) || rc >= 0) {
        PyErr_SetString(PyExc_ValueError, "_poll_fault takes a CQ and a negative rc");
        return NULL;
    }
    if (ibp_check_open(cq) < 0)
        return NULL;
    if (poll_fault.cq != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a _poll_fault is pending");
        return NULL;
    }
    struct ibv_context *ctx = CQ_PTR(cq)->context;
    poll_fault.real = ctx->ops.poll_cq;
    poll_fault.cq = CQ_PTR(cq);
    poll_fault.step = 0;
    poll_fault.rc = rc;
    ctx->ops.poll_cq = faulty_poll_cq;
    Py_RETURN_NONE;
}

static PyMethodDef wc_test_hooks[] = {
    {"_poll_fault", poll_fault_hook, METH_VARARGS,
     "_poll_fault($module, cq, rc, /)\n--\n\n"
     "Test hook: cq's next two polls leave errno set, then fail with rc."},
    {NULL, NULL, 0, NULL},
};

int ibp_wc_test_hooks_init(PyObject *module)
{
    return ibp_test_hooks_enabled() ? PyModule_AddFunctions(module, wc_test_hooks) : 0;
}

int ibp_wc_init(void)
{
    for (long n = 0; n < 256; n++)
        if ((small_counts[n] = PyLong_FromLong(n)) == NULL)
            return -1;
    static const char *const hot[4] = {"status", "opcode", "wr_id", "byte_len"};
    for (int i = 0; i < 4; i++)
        if ((wc_hot_names[i] = PyUnicode_InternFromString(hot[i])) == NULL)
            return -1;
    if (!RESULT_CACHED)
        return 0;       /* nothing to purge */
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *callbacks = gc != NULL ? PyObject_GetAttrString(gc, "callbacks") : NULL;
    PyObject *purge = callbacks != NULL ? PyCFunction_New(&wc_cache_purge_def, NULL) : NULL;
    int rc = purge != NULL && PyList_Check(callbacks) ? PyList_Append(callbacks, purge) : -1;
    if (rc < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "gc.callbacks is not a list");
    Py_XDECREF(purge);
    Py_XDECREF(callbacks);
    Py_XDECREF(gc);
    return rc;
}
