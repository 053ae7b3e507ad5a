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

PyObject *ibp_wc_new(const struct ibv_wc *wc)
{
    PyObject *op = wc_nfree > 0 ? wc_free[--wc_nfree] : PyObject_Malloc(sizeof(WCObject));
    if (op == NULL)
        return PyErr_NoMemory();
    PyObject_Init(op, WC_Type);   /* type (a reference: heap type) and refcount 1 */
    ((WCObject *)op)->wc = *wc;
    return op;
}

static void ibp_WC_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    if (type == WC_Type && wc_nfree < WC_FREE_MAX)
        wc_free[wc_nfree++] = op;
    else if (type == WC_Type)
        PyObject_Free(op);
    else    /* a subclass's instance: its own layout and allocator */
        ((freefunc)PyType_GetSlot(type, Py_tp_free))(op);
    Py_DECREF(type);
}

/* Small ints (counts, statuses, opcodes), made once: no call into
 * libpython on the busy-polling path. */
PyObject *ibp_count_result(long n)
{
    static PyObject *counts[256];
    if (n < 0 || n >= 256)
        return PyLong_FromLong(n);
    if (counts[n] == NULL && (counts[n] = PyLong_FromLong(n)) == NULL)
        return NULL;
    return Py_NewRef(counts[n]);
}

/* The fields a completion loop reads, found by the identity of the
 * (interned) attribute name before the generic lookup: under emulation the
 * type's MRO lookup and descriptor call cost more than the field. */
static PyObject *wc_hot_names[4];

static PyObject *ibp_WC_getattro(PyObject *op, PyObject *name)
{
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
    *out = ((WCObject *)obj)->wc;
    return 0;
}

#define STACK_WCS 64

/*
 * A busy-polling loop drops each result before the next poll, and making
 * and freeing the list (and its WC objects) is most of what a poll costs
 * when the provider is fast.  So poll() keeps the lists it returned, two
 * per length up to RESULT_CACHE_MAX (empty ones included), and hands one
 * back when nobody else holds it (reference count 1): the caller cannot
 * tell it from a new list, as no one else can see it.  Its items are
 * refilled in place where the list is their only holder and they are
 * still WCs; a WC the program kept is replaced by a new one.  Two per
 * length, so that `wcs = cq.poll(n)` in a loop (the previous result still
 * held during the next call) finds one free as well.
 */
#define RESULT_CACHE_MAX 16
static PyObject *result_cache[RESULT_CACHE_MAX + 1][2];

static int list_is_free(PyObject *l, int n)
{
    return l != NULL && Py_REFCNT(l) == 1 && Py_SIZE(l) == n;   /* Py_SIZE: no call */
}

static int refill_result(PyObject *list, const struct ibv_wc *wcs, int n)
{
    for (int i = 0; i < n; i++) {
        PyObject *item = PyList_GetItem(list, i);     /* borrowed */
        if (Py_REFCNT(item) == 1 && Py_IS_TYPE(item, WC_Type)) {
            ((WCObject *)item)->wc = wcs[i];
            continue;
        }
        PyObject *wc = ibp_wc_new(&wcs[i]);
        if (wc == NULL)
            return -1;
        PyList_SetItem(list, i, wc);    /* steals wc, drops the old item */
    }
    return 0;
}

static PyObject *poll_result(const struct ibv_wc *wcs, int n)
{
    PyObject **slots = n <= RESULT_CACHE_MAX ? result_cache[n] : NULL;
    if (slots != NULL) {
        for (int i = 0; i < 2; i++) {
            if (list_is_free(slots[i], n)) {
                if (refill_result(slots[i], wcs, n) < 0)
                    return NULL;
                return Py_NewRef(slots[i]);
            }
        }
    }
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
    if (slots != NULL) {
        /* An empty slot first; else both lists live on with their holders
         * (or were resized): take turns replacing them. */
        static int turn;
        int i = slots[0] == NULL ? 0 : slots[1] == NULL ? 1 : (turn ^= 1);
        Py_XSETREF(slots[i], Py_NewRef(list));
    }
    return list;
}

/* poll and poll_into keep the GIL: ibv_poll_cq never blocks and costs tens
 * of nanoseconds, less than releasing and retaking the GIL. */
/* CQ.poll(num_entries): generated/cq.c.h converts num_entries first (an
 * __index__ may close the CQ). */
PyObject *ibp_hand_CQ_poll_impl(PyObject *self, int num)
{
    struct ibv_wc stack[STACK_WCS], *wcs = stack;
    if (ibp_check_open(self) < 0 || ibp_cq_check_not_polling(self) < 0)
        return NULL;
    /* More than the CQ holds cannot come back: no larger buffer. */
    if (num > CQ_PTR(self)->cqe && CQ_PTR(self)->cqe > 0)
        num = CQ_PTR(self)->cqe;
    if (num > STACK_WCS) {
        wcs = PyMem_Malloc((size_t)num * sizeof(*wcs));
        if (wcs == NULL)
            return PyErr_NoMemory();
    }
    int n = ibv_poll_cq(CQ_PTR(self), num, wcs);
    PyObject *list = NULL;
    if (n < 0) {
        ibp_raise("ibv_poll_cq", ibp_error_code(n));
        goto done;
    }
    list = poll_result(wcs, n);
done:
    if (wcs != stack)
        PyMem_Free(wcs);
    return list;
}

int ibp_wc_init(void)
{
    static const char *const hot[4] = {"status", "opcode", "wr_id", "byte_len"};
    for (int i = 0; i < 4; i++)
        if ((wc_hot_names[i] = PyUnicode_InternFromString(hot[i])) == NULL)
            return -1;
    return 0;
}
