/*
 * WCBuffer: completions polled into C storage (CQ.poll_into).  Its field
 * methods and type shell are generated (generated/wcbuffer.c.h, from
 * spec/datapath/records.yaml); here are the constructor, the entry lookup
 * and the loops over the entries.
 */
#include "common.h"

#include "objects.h"

#include "wcbuffer.c.h"

#define WCBUF_MAX (1 << 20)

/* WCBuffer(capacity=16, *, raise_on_error=False): the generated parser
 * passes NULL for what was not given. */
static PyObject *ibp_hand_WCBuffer_new_impl(PyTypeObject *type, PyObject *cap_obj,
                                            PyObject *roe_obj)
{
    uint64_t cap = 16;
    /* the truth first, as the parser's "p" took it before the capacity */
    int raise_on_error = roe_obj != NULL ? PyObject_IsTrue(roe_obj) : 0;
    if (raise_on_error < 0)
        return NULL;
    if (cap_obj != NULL) {
        /* 1..WCBUF_MAX in the message: a range that says 0 would be a lie */
        int64_t v;
        if (ibp_conv_signed(cap_obj, "capacity", 1, WCBUF_MAX, &v) < 0)
            return NULL;
        cap = (uint64_t)v;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    WCBufferObject *b = (WCBufferObject *)alloc(type, 0);
    if (b == NULL)
        return NULL;
    b->wc = PyMem_Calloc(cap, sizeof(struct ibv_wc));
    if (b->wc == NULL) {
        Py_DECREF(b);
        return PyErr_NoMemory();
    }
    b->capacity = (int)cap;
    b->count = 0;
    b->raise_on_error = raise_on_error;
    return (PyObject *)b;
}

static void ibp_WCBuffer_dealloc(PyObject *op)
{
    PyMem_Free(((WCBufferObject *)op)->wc);
    ibp_generic_dealloc(op);
}

/* Index arg into the valid entries (negative counts from the end). */
static const struct ibv_wc *ibp_wcbuf_at(PyObject *op, PyObject *arg)
{
    WCBufferObject *b = (WCBufferObject *)op;
    Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (i < 0)
        i += b->count;
    if (i < 0 || i >= b->count) {
        PyErr_SetString(PyExc_IndexError, "WCBuffer index out of range");
        return NULL;
    }
    return &b->wc[i];
}

/* CompletionError for the first valid entry that failed; 0 when none did. */
static int wcbuf_check(WCBufferObject *b)
{
    for (int i = 0; i < b->count; i++)
        if (b->wc[i].status != IBV_WC_SUCCESS) {
            PyObject *wc = ibp_wc_new(&b->wc[i]);
            if (wc == NULL)
                return -1;
            ibp_raise_completion(wc);
            Py_DECREF(wc);
            return -1;
        }
    return 0;
}

static PyObject *ibp_WCBuffer_raise_for_status(PyObject *op, PyObject *unused)
{
    (void)unused;
    if (wcbuf_check((WCBufferObject *)op) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *ibp_WCBuffer_count_opcode(PyObject *op, PyObject *arg)
{
    WCBufferObject *b = (WCBufferObject *)op;
    /* A polling loop passes the same opcode object every time: remember
     * the last one converted (an int, whose value cannot change; the
     * reference held keeps its address from being reused), per thread on
     * a free-threaded target (ibp_memo_take: an immortal one there). */
    static IBP_THREAD_LOCAL PyObject *last_arg;
    static IBP_THREAD_LOCAL uint64_t last_opcode;
    uint64_t opcode;
    if (arg == last_arg) {
        opcode = last_opcode;
    } else {
        if (ibp_conv_unsigned(arg, "opcode", UINT32_MAX, &opcode) < 0)
            return NULL;
        if (PyLong_Check(arg) && ibp_memo_take(&last_arg, arg))
            last_opcode = opcode;
    }
    long k = 0;
    for (int i = 0; i < b->count; i++)
        k += b->wc[i].opcode == opcode;
    return ibp_count_result(k);
}

static PyObject *ibp_WCBuffer_wr_ids(PyObject *op, PyObject *unused)
{
    WCBufferObject *b = (WCBufferObject *)op;
    (void)unused;
    PyObject *list = PyList_New(b->count);
    if (list == NULL)
        return NULL;
    for (int i = 0; i < b->count; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(b->wc[i].wr_id);
        if (v == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SetItem(list, i, v);
    }
    return list;
}

static PyObject *ibp_WCBuffer_clear(PyObject *op, PyObject *unused)
{
    (void)unused;
    ((WCBufferObject *)op)->count = 0;
    Py_RETURN_NONE;
}

static Py_ssize_t ibp_WCBuffer_length(PyObject *op)
{
    return ((WCBufferObject *)op)->count;
}

static PyObject *ibp_WCBuffer_item(PyObject *op, Py_ssize_t i)
{
    WCBufferObject *b = (WCBufferObject *)op;
    if (i < 0 || i >= b->count) {
        PyErr_SetString(PyExc_IndexError, "WCBuffer index out of range");
        return NULL;
    }
    return ibp_wc_new(&b->wc[i]);
}

static PyObject *ibp_WCBuffer_get_capacity(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromLong(((WCBufferObject *)op)->capacity);
}

static PyObject *ibp_WCBuffer_repr(PyObject *op)
{
    WCBufferObject *b = (WCBufferObject *)op;
    return PyUnicode_FromFormat("WCBuffer(capacity=%d%s, %d valid)", b->capacity,
                                b->raise_on_error ? ", raise_on_error=True" : "", b->count);
}

/* CQ.poll_into(buffer), in self's (the CQ's) critical section: the
 * buffer is another object, which a free-threaded target locks too (its
 * own methods hold it), so that a poll_into into it from another thread,
 * or its readers, wait until this one has filled it and set its count.
 * generated/cq.c.h checks that it is a WCBuffer. */
static PyObject *poll_into(PyObject *self, WCBufferObject *b)
{
    errno = 0;      /* a provider may fail without setting it: no stale value */
    int n = ibv_poll_cq(CQ_PTR(self), b->capacity, b->wc);
    if (n < 0) {
        b->count = 0;
        return ibp_raise("ibv_poll_cq", ibp_error_code(n));
    }
    b->count = n;
    if (b->raise_on_error && n > 0 && wcbuf_check(b) < 0)
        return NULL;
    return ibp_count_result(n);
}

PyObject *ibp_hand_CQ_poll_into_impl(PyObject *self, WCBufferObject *b)
{
    if (ibp_check_open(self) < 0 || ibp_cq_check_not_polling(self) < 0)
        return NULL;
    ibp_lock_t cs;
    ibp_lock(&cs, b);
    PyObject *result = poll_into(self, b);
    ibp_unlock(&cs);
    return result;
}
