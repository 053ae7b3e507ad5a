/* WCBuffer: completions polled into C storage (CQ.poll_into). */
#include "common.h"

#include <arpa/inet.h>

#include "objects.h"

PyTypeObject *WCBuffer_Type;

typedef struct {
    PyObject_HEAD
    int capacity;
    int count;             /* valid entries: what the last poll_into returned */
    int raise_on_error;    /* poll_into raises CompletionError for a failed entry */
    struct ibv_wc *wc;
} WCBufferObject;

#define WCBUF_MAX (1 << 20)

static PyObject *WCBuffer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"capacity", "raise_on_error", NULL};
    PyObject *cap_obj = NULL;
    uint64_t cap = 16;
    int raise_on_error = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O$p:WCBuffer", kwlist, &cap_obj,
                                     &raise_on_error))
        return NULL;
    if (cap_obj != NULL && ibv_conv_unsigned(cap_obj, "capacity", WCBUF_MAX, &cap) < 0)
        return NULL;
    if (cap == 0) {
        PyErr_SetString(PyExc_ValueError, "capacity must be positive");
        return NULL;
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

static void WCBuffer_dealloc(PyObject *op)
{
    PyMem_Free(((WCBufferObject *)op)->wc);
    ibp_generic_dealloc(op);
}

/* Index arg into the valid entries (negative counts from the end). */
static const struct ibv_wc *wcbuf_at(PyObject *op, PyObject *arg)
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

#define WCBUF_FIELD(field, expr)                                                 \
    static PyObject *WCBuffer_##field(PyObject *op, PyObject *arg)               \
    {                                                                            \
        const struct ibv_wc *wc = wcbuf_at(op, arg);                             \
        if (wc == NULL)                                                          \
            return NULL;                                                         \
        unsigned long long v = (unsigned long long)(expr);                       \
        return v < 256 ? ibp_count_result((long)v) : PyLong_FromUnsignedLongLong(v); \
    }

WCBUF_FIELD(wr_id, wc->wr_id)
WCBUF_FIELD(status, wc->status)
WCBUF_FIELD(opcode, wc->opcode)
WCBUF_FIELD(byte_len, wc->byte_len)
WCBUF_FIELD(imm_data, ntohl(wc->imm_data))
WCBUF_FIELD(wc_flags, wc->wc_flags)
WCBUF_FIELD(qp_num, wc->qp_num)
WCBUF_FIELD(src_qp, wc->src_qp)
WCBUF_FIELD(vendor_err, wc->vendor_err)

/* CompletionError for the first valid entry that failed; 0 when none did. */
static int wcbuf_check(WCBufferObject *b)
{
    for (int i = 0; i < b->count; i++)
        if (b->wc[i].status != IBV_WC_SUCCESS) {
            PyObject *wc = ibp_wc_new(&b->wc[i]);
            if (wc == NULL)
                return -1;
            ibv_raise_completion(wc);
            Py_DECREF(wc);
            return -1;
        }
    return 0;
}

static PyObject *WCBuffer_raise_for_status(PyObject *op, PyObject *unused)
{
    (void)unused;
    if (wcbuf_check((WCBufferObject *)op) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *WCBuffer_count_opcode(PyObject *op, PyObject *arg)
{
    WCBufferObject *b = (WCBufferObject *)op;
    /* A polling loop passes the same opcode object every time: remember
     * the last one converted (an int, whose value cannot change; the
     * reference held keeps its address from being reused). */
    static PyObject *last_arg;
    static uint64_t last_opcode;
    uint64_t opcode;
    if (arg == last_arg) {
        opcode = last_opcode;
    } else {
        if (ibv_conv_unsigned(arg, "opcode", UINT32_MAX, &opcode) < 0)
            return NULL;
        if (PyLong_Check(arg)) {
            Py_XSETREF(last_arg, Py_NewRef(arg));
            last_opcode = opcode;
        }
    }
    long k = 0;
    for (int i = 0; i < b->count; i++)
        k += b->wc[i].opcode == opcode;
    return ibp_count_result(k);
}

static PyObject *WCBuffer_wr_ids(PyObject *op, PyObject *unused)
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

static PyObject *WCBuffer_clear(PyObject *op, PyObject *unused)
{
    (void)unused;
    ((WCBufferObject *)op)->count = 0;
    Py_RETURN_NONE;
}

static Py_ssize_t WCBuffer_length(PyObject *op)
{
    return ((WCBufferObject *)op)->count;
}

static PyObject *WCBuffer_item(PyObject *op, Py_ssize_t i)
{
    WCBufferObject *b = (WCBufferObject *)op;
    if (i < 0 || i >= b->count) {
        PyErr_SetString(PyExc_IndexError, "WCBuffer index out of range");
        return NULL;
    }
    return ibp_wc_new(&b->wc[i]);
}

static PyObject *WCBuffer_get_capacity(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromLong(((WCBufferObject *)op)->capacity);
}

static PyObject *WCBuffer_repr(PyObject *op)
{
    WCBufferObject *b = (WCBufferObject *)op;
    return PyUnicode_FromFormat("WCBuffer(capacity=%d%s, %d valid)", b->capacity,
                                b->raise_on_error ? ", raise_on_error=True" : "", b->count);
}

#define WCBUF_METHOD(field, doc)                                                 \
    {#field, WCBuffer_##field, METH_O,                                           \
     #field "($self, i, /)\n--\n\n" doc " of valid entry i (IndexError outside)."}

static PyMethodDef WCBuffer_methods[] = {
    WCBUF_METHOD(wr_id, "wr_id"),
    WCBUF_METHOD(status, "WCStatus"),
    WCBUF_METHOD(opcode, "WCOpcode"),
    WCBUF_METHOD(byte_len, "Bytes received"),
    WCBUF_METHOD(imm_data, "Immediate data (host order)"),
    WCBUF_METHOD(wc_flags, "WCFlags"),
    WCBUF_METHOD(qp_num, "Local QP number"),
    WCBUF_METHOD(src_qp, "Remote QP number (UD)"),
    WCBUF_METHOD(vendor_err, "Vendor error syndrome"),
    {"raise_for_status", WCBuffer_raise_for_status, METH_NOARGS,
     "raise_for_status($self, /)\n--\n\n"
     "Raise CompletionError for the first valid entry whose status is not SUCCESS."},
    {"count_opcode", WCBuffer_count_opcode, METH_O,
     "count_opcode($self, opcode, /)\n--\n\n"
     "How many valid entries have this WCOpcode (e.g. WCOpcode.RECV: receives that "
     "arrived, on a CQ shared with sends)."},
    {"wr_ids", WCBuffer_wr_ids, METH_NOARGS,
     "wr_ids($self, /)\n--\n\nThe wr_id of every valid entry, as a list."},
    {"clear", WCBuffer_clear, METH_NOARGS,
     "clear($self, /)\n--\n\nForget the valid entries (len() becomes 0)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *WCBuffer_get_raise_on_error(PyObject *op, void *c)
{
    (void)c;
    return PyBool_FromLong(((WCBufferObject *)op)->raise_on_error);
}

static int WCBuffer_set_raise_on_error(PyObject *op, PyObject *v, void *c)
{
    (void)c;
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete raise_on_error");
        return -1;
    }
    int truth = PyObject_IsTrue(v);
    if (truth < 0)
        return -1;
    ((WCBufferObject *)op)->raise_on_error = truth;
    return 0;
}

static PyGetSetDef WCBuffer_getset[] = {
    {"capacity", WCBuffer_get_capacity, NULL, "Completions one poll_into can take.", NULL},
    {"raise_on_error", WCBuffer_get_raise_on_error, WCBuffer_set_raise_on_error,
     "poll_into raises CompletionError when an entry failed (the entries stay valid).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot WCBuffer_slots[] = {
    {Py_tp_doc, (void *)
     "WCBuffer(capacity=16, *, raise_on_error=False)\n--\n\n"
     "Reusable storage for completions: cq.poll_into(buf) polls up to capacity "
     "completions into it (struct ibv_wc, in C) and returns how many, creating no "
     "object per completion.  With raise_on_error, poll_into raises CompletionError "
     "(for the first failed one) when any of them failed; all stay in the buffer.\n\n"
     "len(buf) is the number of valid entries (what the last poll_into returned).  "
     "buf.wr_id(i), .status(i), .opcode(i), .byte_len(i), .imm_data(i), .wc_flags(i), "
     ".qp_num(i), .src_qp(i), .vendor_err(i) read one field of entry i; "
     "buf.raise_for_status() raises CompletionError for the first failed one; "
     "buf.count_opcode(op) counts the entries of one WCOpcode; "
     "buf[i] (and iteration) gives a WC copy of an entry.  The next poll_into "
     "overwrites the entries."},
    {Py_tp_new, (void *)WCBuffer_new},
    {Py_tp_dealloc, (void *)WCBuffer_dealloc},
    {Py_tp_repr, (void *)WCBuffer_repr},
    {Py_tp_methods, WCBuffer_methods},
    {Py_tp_getset, WCBuffer_getset},
    {Py_sq_length, (void *)WCBuffer_length},
    {Py_sq_item, (void *)WCBuffer_item},
    {0, NULL},
};

PyType_Spec WCBuffer_spec = {"ibverbs.WCBuffer", sizeof(WCBufferObject), 0,
                                    Py_TPFLAGS_DEFAULT, WCBuffer_slots};

PyObject *ibv_hand_CQ_poll_into(PyObject *self, PyObject *arg)
{
    if (ibv_check_open(self) < 0 || ibv_cq_check_not_polling(self) < 0)
        return NULL;
    if (!Py_IS_TYPE(arg, WCBuffer_Type)) {
        PyErr_Format(PyExc_TypeError, "poll_into needs a WCBuffer, not %s", ibv_type_name(arg));
        return NULL;
    }
    WCBufferObject *b = (WCBufferObject *)arg;
    int n = ibv_poll_cq(CQ_PTR(self), b->capacity, b->wc);
    if (n < 0) {
        b->count = 0;
        return ibv_raise("ibv_poll_cq", ibv_error_code(n));
    }
    b->count = n;
    if (b->raise_on_error && n > 0 && wcbuf_check(b) < 0)
        return NULL;
    return ibp_count_result(n);
}
