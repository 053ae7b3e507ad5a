/*
 * The data path, written by hand: work requests (SGE, SendWR, RecvWR),
 * completions (WC), posting, polling, completion and async events.
 *
 * Work request objects hold C values, not Python attributes, so posting
 * converts them with plain loads; chains of up to STACK_WRS requests and
 * STACK_SGES scatter/gather entries are built on the stack (no malloc per
 * post).  Blocking calls (get_cq_event, get_async_event) release the GIL
 * and mark their object busy so that close() from another thread fails
 * with EBUSY instead of freeing what the blocked call still uses.
 */
#include "common.h"

#include <arpa/inet.h>
#include <string.h>

#include "objects.h"

#define STACK_WRS 16
#define STACK_SGES 32

static PyTypeObject *SGE_Type;
static PyTypeObject *SendWR_Type;
static PyTypeObject *RecvWR_Type;
static PyTypeObject *WC_Type;
static PyTypeObject *AsyncEvent_Type;

static void generic_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(op);
    Py_DECREF(type);
}

static int conv_u64(PyObject *v, const char *name, uint64_t max, uint64_t *out)
{
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s", name);
        return -1;
    }
    return ibv_conv_unsigned(v, name, max, out);
}

/* ==== SGE ================================================================ */

typedef struct {
    PyObject_HEAD
    struct ibv_sge sge;
    PyObject *owner;     /* keeps the registered memory alive */
} SGEObject;

static int SGE_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"target", "length", "lkey", "offset", NULL};
    SGEObject *self = (SGEObject *)op;
    PyObject *target, *length_obj, *lkey_obj = NULL, *offset_obj = NULL;
    uint64_t length, lkey = 0, base, offset = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|OO:SGE", kwlist, &target,
                                     &length_obj, &lkey_obj, &offset_obj))
        return -1;
    if (offset_obj != NULL) {
        int64_t off;
        if (ibv_conv_signed(offset_obj, "offset", INT64_MIN, INT64_MAX, &off) < 0)
            return -1;
        if (off < 0) {
            PyErr_Format(PyExc_ValueError, "offset must be non-negative, got %lld",
                         (long long)off);
            return -1;
        }
        offset = (uint64_t)off;
    }
    {
        int64_t len;
        if (ibv_conv_signed(length_obj, "length", 0, INT64_MAX, &len) < 0)
            return -1;
        if ((uint64_t)len > UINT32_MAX) {
            PyErr_Format(PyExc_ValueError,
                         "SGE length must be below 2**32 (got %lld); split it "
                         "into several SGEs", (long long)len);
            return -1;
        }
        length = (uint64_t)len;
    }
    if (PyObject_TypeCheck(target, MR_Type)) {
        if (ibv_check_open(target) < 0)
            return -1;
        struct ibv_mr *mr = MR_PTR(target);
        if (offset > mr->length || length > mr->length - offset) {
            PyErr_Format(PyExc_ValueError,
                         "SGE range [offset %llu, +%llu) exceeds the MR's %zu bytes",
                         (unsigned long long)offset, (unsigned long long)length,
                         mr->length);
            return -1;
        }
        base = (uintptr_t)mr->addr;
        lkey = lkey_obj != NULL && lkey_obj != Py_None ? 0 : mr->lkey;
        if (lkey_obj != NULL && lkey_obj != Py_None &&
            ibv_conv_unsigned(lkey_obj, "lkey", UINT32_MAX, &lkey) < 0)
            return -1;
        Py_INCREF(target);
        Py_XSETREF(self->owner, target);
    } else {
        if (ibv_conv_unsigned(target, "target", UINT64_MAX, &base) < 0)
            return -1;
        if (lkey_obj != NULL && ibv_conv_unsigned(lkey_obj, "lkey", UINT32_MAX, &lkey) < 0)
            return -1;
        if (offset > UINT64_MAX - base) {
            PyErr_SetString(PyExc_ValueError, "address + offset exceeds 64 bits");
            return -1;
        }
    }
    self->sge.addr = base + offset;
    self->sge.length = (uint32_t)length;
    self->sge.lkey = (uint32_t)lkey;
    return 0;
}

static PyObject *SGE_get_addr(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLongLong(((SGEObject *)op)->sge.addr);
}

static int SGE_set_addr(PyObject *op, PyObject *v, void *c)
{
    uint64_t x;
    (void)c;
    if (conv_u64(v, "addr", UINT64_MAX, &x) < 0)
        return -1;
    ((SGEObject *)op)->sge.addr = x;
    return 0;
}

static PyObject *SGE_get_length(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(((SGEObject *)op)->sge.length);
}

static int SGE_set_length(PyObject *op, PyObject *v, void *c)
{
    uint64_t x;
    (void)c;
    if (v != NULL && PyLong_Check(v)) {
        unsigned long long big = PyLong_AsUnsignedLongLong(v);
        if (!PyErr_Occurred() && big > UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "SGE length must be below 2**32");
            return -1;
        }
        PyErr_Clear();
    }
    if (conv_u64(v, "length", UINT32_MAX, &x) < 0)
        return -1;
    ((SGEObject *)op)->sge.length = (uint32_t)x;
    return 0;
}

static PyObject *SGE_get_lkey(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(((SGEObject *)op)->sge.lkey);
}

static int SGE_set_lkey(PyObject *op, PyObject *v, void *c)
{
    uint64_t x;
    (void)c;
    if (conv_u64(v, "lkey", UINT32_MAX, &x) < 0)
        return -1;
    ((SGEObject *)op)->sge.lkey = (uint32_t)x;
    return 0;
}

static PyObject *SGE_get_owner(PyObject *op, void *c)
{
    PyObject *owner = ((SGEObject *)op)->owner;
    (void)c;
    return Py_NewRef(owner ? owner : Py_None);
}

static PyObject *SGE_keepalive(PyObject *op, PyObject *owner)
{
    Py_INCREF(owner);
    Py_XSETREF(((SGEObject *)op)->owner, owner == Py_None ? (Py_DECREF(owner), NULL) : owner);
    return Py_NewRef(op);
}

static PyObject *SGE_repr(PyObject *op)
{
    SGEObject *self = (SGEObject *)op;
    char buf[96];
    snprintf(buf, sizeof(buf), "SGE(addr=0x%llx, length=%u, lkey=0x%x)",
             (unsigned long long)self->sge.addr, self->sge.length, self->sge.lkey);
    return PyUnicode_FromString(buf);
}

static int SGE_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(((SGEObject *)op)->owner);
    return 0;
}

static int SGE_clear(PyObject *op)
{
    Py_CLEAR(((SGEObject *)op)->owner);
    return 0;
}

static void SGE_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    SGE_clear(op);
    generic_dealloc(op);
}

static PyGetSetDef SGE_getset[] = {
    {"addr", SGE_get_addr, SGE_set_addr, "Start address.", NULL},
    {"length", SGE_get_length, SGE_set_length, "Length in bytes (< 2**32).", NULL},
    {"lkey", SGE_get_lkey, SGE_set_lkey, "Local key of the MR.", NULL},
    {"owner", SGE_get_owner, NULL, "Object kept alive with this SGE (an MR or GpuMR).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef SGE_methods[] = {
    {"_keepalive", SGE_keepalive, METH_O,
     "_keepalive($self, owner, /)\n--\n\nKeep owner alive with this SGE; returns self."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot SGE_slots[] = {
    {Py_tp_doc, (void *)"SGE(target, length, lkey=0, offset=0)\n--\n\n"
                        "One scatter/gather entry.  target is an MR (address and lkey "
                        "taken from it, range checked) or an integer address."},
    {Py_tp_init, (void *)SGE_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_dealloc, (void *)SGE_dealloc},
    {Py_tp_traverse, (void *)SGE_traverse},
    {Py_tp_clear, (void *)SGE_clear},
    {Py_tp_repr, (void *)SGE_repr},
    {Py_tp_getset, SGE_getset},
    {Py_tp_methods, SGE_methods},
    {0, NULL},
};

static PyType_Spec SGE_spec = {"ibverbs.SGE", sizeof(SGEObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, SGE_slots};

PyObject *ibv_hand_MR_sge(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"length", "offset", NULL};
    PyObject *length = Py_None, *offset = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:sge", kwlist, &length, &offset))
        return NULL;
    if (ibv_check_open(self) < 0)
        return NULL;
    PyObject *offset_obj = offset ? Py_NewRef(offset) : PyLong_FromLong(0);
    if (offset_obj == NULL)
        return NULL;
    PyObject *length_obj;
    if (length == Py_None) {
        int64_t off;
        if (ibv_conv_signed(offset_obj, "offset", INT64_MIN, INT64_MAX, &off) < 0) {
            Py_DECREF(offset_obj);
            return NULL;
        }
        size_t total = MR_PTR(self)->length;
        length_obj = PyLong_FromLongLong(off >= 0 && (uint64_t)off <= total
                                         ? (long long)(total - (uint64_t)off) : 0);
    } else {
        length_obj = Py_NewRef(length);
    }
    if (length_obj == NULL) {
        Py_DECREF(offset_obj);
        return NULL;
    }
    PyObject *sge = PyObject_CallFunction((PyObject *)SGE_Type, "OOOO", self, length_obj,
                                          Py_None, offset_obj);
    Py_DECREF(length_obj);
    Py_DECREF(offset_obj);
    return sge;
}

/* ==== work requests ====================================================== */

typedef struct {
    PyObject_HEAD
    uint64_t wr_id;
    PyObject *sg_list;     /* list of SGE, or NULL */
    uint32_t opcode;
    uint32_t send_flags;
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t imm_data;     /* host order */
    uint64_t compare_add;
    uint64_t swap;
    PyObject *ah;          /* AH or NULL */
    uint32_t remote_qpn;
    uint32_t remote_qkey;
} SendWRObject;

typedef struct {
    PyObject_HEAD
    uint64_t wr_id;
    PyObject *sg_list;
} RecvWRObject;

/* sg_list must be None or a sequence of SGE; stored as a new list. */
static int set_sg_list(PyObject **slot, PyObject *value)
{
    if (value == NULL || value == Py_None) {
        Py_CLEAR(*slot);
        return 0;
    }
    PyObject *list = PySequence_List(value);
    if (list == NULL) {
        PyErr_SetString(PyExc_TypeError, "sg_list must be a list of SGE or None");
        return -1;
    }
    Py_ssize_t n = PyList_Size(list);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyObject_TypeCheck(PyList_GetItem(list, i), SGE_Type)) {
            PyErr_Format(PyExc_TypeError, "sg_list[%zd] must be an SGE, not %s", i,
                         ibv_type_name(PyList_GetItem(list, i)));
            Py_DECREF(list);
            return -1;
        }
    }
    Py_XSETREF(*slot, list);
    return 0;
}

#define U64_FIELD(Type, field, max)                                              \
    static PyObject *Type##_get_##field(PyObject *op, void *c)                   \
    {                                                                            \
        (void)c;                                                                 \
        return PyLong_FromUnsignedLongLong(((Type##Object *)op)->field);         \
    }                                                                            \
    static int Type##_set_##field(PyObject *op, PyObject *v, void *c)            \
    {                                                                            \
        uint64_t x;                                                              \
        (void)c;                                                                 \
        if (conv_u64(v, #field, max, &x) < 0)                                    \
            return -1;                                                           \
        ((Type##Object *)op)->field = x;                                         \
        return 0;                                                                \
    }

U64_FIELD(SendWR, wr_id, UINT64_MAX)
U64_FIELD(SendWR, opcode, UINT32_MAX)
U64_FIELD(SendWR, send_flags, UINT32_MAX)
U64_FIELD(SendWR, remote_addr, UINT64_MAX)
U64_FIELD(SendWR, rkey, UINT32_MAX)
U64_FIELD(SendWR, imm_data, UINT32_MAX)
U64_FIELD(SendWR, compare_add, UINT64_MAX)
U64_FIELD(SendWR, swap, UINT64_MAX)
U64_FIELD(SendWR, remote_qpn, UINT32_MAX)
U64_FIELD(SendWR, remote_qkey, UINT32_MAX)
U64_FIELD(RecvWR, wr_id, UINT64_MAX)

static PyObject *SendWR_get_sg_list(PyObject *op, void *c)
{
    PyObject *v = ((SendWRObject *)op)->sg_list;
    (void)c;
    return Py_NewRef(v ? v : Py_None);
}

static int SendWR_set_sg_list(PyObject *op, PyObject *v, void *c)
{
    (void)c;
    return set_sg_list(&((SendWRObject *)op)->sg_list, v);
}

static PyObject *RecvWR_get_sg_list(PyObject *op, void *c)
{
    PyObject *v = ((RecvWRObject *)op)->sg_list;
    (void)c;
    return Py_NewRef(v ? v : Py_None);
}

static int RecvWR_set_sg_list(PyObject *op, PyObject *v, void *c)
{
    (void)c;
    return set_sg_list(&((RecvWRObject *)op)->sg_list, v);
}

static PyObject *SendWR_get_ah(PyObject *op, void *c)
{
    PyObject *v = ((SendWRObject *)op)->ah;
    (void)c;
    return Py_NewRef(v ? v : Py_None);
}

static int SendWR_set_ah(PyObject *op, PyObject *v, void *c)
{
    (void)c;
    if (v == NULL || v == Py_None) {
        Py_CLEAR(((SendWRObject *)op)->ah);
        return 0;
    }
    if (!PyObject_TypeCheck(v, AH_Type)) {
        PyErr_Format(PyExc_TypeError, "ah must be an AH or None, not %s", ibv_type_name(v));
        return -1;
    }
    Py_INCREF(v);
    Py_XSETREF(((SendWRObject *)op)->ah, v);
    return 0;
}

static int SendWR_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"wr_id", "sg_list", "opcode", "send_flags", "remote_addr",
                             "rkey", "imm_data", "compare_add", "swap", "ah",
                             "remote_qpn", "remote_qkey", NULL};
    static setter setters[] = {SendWR_set_wr_id, SendWR_set_sg_list, SendWR_set_opcode,
                               SendWR_set_send_flags, SendWR_set_remote_addr,
                               SendWR_set_rkey, SendWR_set_imm_data,
                               SendWR_set_compare_add, SendWR_set_swap, SendWR_set_ah,
                               SendWR_set_remote_qpn, SendWR_set_remote_qkey};
    PyObject *v[12] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOOOOOOOOOOO:SendWR", kwlist,
                                     &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                                     &v[7], &v[8], &v[9], &v[10], &v[11]))
        return -1;
    for (int i = 0; i < 12; i++)
        if (v[i] != NULL && setters[i](op, v[i], NULL) < 0)
            return -1;
    return 0;
}

static int RecvWR_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"wr_id", "sg_list", NULL};
    PyObject *wr_id = NULL, *sg_list = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:RecvWR", kwlist, &wr_id, &sg_list))
        return -1;
    if (wr_id != NULL && RecvWR_set_wr_id(op, wr_id, NULL) < 0)
        return -1;
    if (sg_list != NULL && RecvWR_set_sg_list(op, sg_list, NULL) < 0)
        return -1;
    return 0;
}

static int SendWR_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(((SendWRObject *)op)->sg_list);
    Py_VISIT(((SendWRObject *)op)->ah);
    return 0;
}

static int SendWR_clear(PyObject *op)
{
    Py_CLEAR(((SendWRObject *)op)->sg_list);
    Py_CLEAR(((SendWRObject *)op)->ah);
    return 0;
}

static void SendWR_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    SendWR_clear(op);
    generic_dealloc(op);
}

static int RecvWR_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(((RecvWRObject *)op)->sg_list);
    return 0;
}

static int RecvWR_clear(PyObject *op)
{
    Py_CLEAR(((RecvWRObject *)op)->sg_list);
    return 0;
}

static void RecvWR_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    RecvWR_clear(op);
    generic_dealloc(op);
}

#define GETSET(Type, field, doc) {#field, Type##_get_##field, Type##_set_##field, doc, NULL}

static PyGetSetDef SendWR_getset[] = {
    GETSET(SendWR, wr_id, "Returned in the completion."),
    GETSET(SendWR, sg_list, "List of SGE (or None)."),
    GETSET(SendWR, opcode, "WROpcode."),
    GETSET(SendWR, send_flags, "SendFlags."),
    GETSET(SendWR, remote_addr, "RDMA/atomic remote address."),
    GETSET(SendWR, rkey, "RDMA/atomic remote key."),
    GETSET(SendWR, imm_data, "Immediate data, host order (sent in network order)."),
    GETSET(SendWR, compare_add, "Atomic compare (CMP_AND_SWP) or add (FETCH_AND_ADD) value."),
    GETSET(SendWR, swap, "Atomic swap value."),
    GETSET(SendWR, ah, "UD: address handle."),
    GETSET(SendWR, remote_qpn, "UD: remote QP number."),
    GETSET(SendWR, remote_qkey, "UD: remote Q_Key."),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyGetSetDef RecvWR_getset[] = {
    GETSET(RecvWR, wr_id, "Returned in the completion."),
    GETSET(RecvWR, sg_list, "List of SGE (or None)."),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *SendWR_repr(PyObject *op)
{
    SendWRObject *s = (SendWRObject *)op;
    return PyUnicode_FromFormat("SendWR(wr_id=%llu, opcode=%u, send_flags=%u, sg_list=%R)",
                                (unsigned long long)s->wr_id, s->opcode, s->send_flags,
                                s->sg_list ? s->sg_list : Py_None);
}

static PyObject *RecvWR_repr(PyObject *op)
{
    RecvWRObject *r = (RecvWRObject *)op;
    return PyUnicode_FromFormat("RecvWR(wr_id=%llu, sg_list=%R)",
                                (unsigned long long)r->wr_id,
                                r->sg_list ? r->sg_list : Py_None);
}

static PyType_Slot SendWR_slots[] = {
    {Py_tp_doc, (void *)"SendWR(wr_id=0, sg_list=None, opcode=0, send_flags=0, remote_addr=0, "
                        "rkey=0, imm_data=0, compare_add=0, swap=0, ah=None, remote_qpn=0, "
                        "remote_qkey=0)\n--\n\nA send work request (struct ibv_send_wr)."},
    {Py_tp_init, (void *)SendWR_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_dealloc, (void *)SendWR_dealloc},
    {Py_tp_traverse, (void *)SendWR_traverse},
    {Py_tp_clear, (void *)SendWR_clear},
    {Py_tp_repr, (void *)SendWR_repr},
    {Py_tp_getset, SendWR_getset},
    {0, NULL},
};

static PyType_Slot RecvWR_slots[] = {
    {Py_tp_doc, (void *)"RecvWR(wr_id=0, sg_list=None)\n--\n\nA receive work request."},
    {Py_tp_init, (void *)RecvWR_init},
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_dealloc, (void *)RecvWR_dealloc},
    {Py_tp_traverse, (void *)RecvWR_traverse},
    {Py_tp_clear, (void *)RecvWR_clear},
    {Py_tp_repr, (void *)RecvWR_repr},
    {Py_tp_getset, RecvWR_getset},
    {0, NULL},
};

static PyType_Spec SendWR_spec = {"ibverbs.SendWR", sizeof(SendWRObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, SendWR_slots};
static PyType_Spec RecvWR_spec = {"ibverbs.RecvWR", sizeof(RecvWRObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, RecvWR_slots};

/* ---- building C chains -------------------------------------------------- */

/* Storage for one post: on the stack when small, else on the heap. */
struct chain {
    void *wrs;
    struct ibv_sge *sges;
    void *heap;
    union {
        struct ibv_send_wr send[STACK_WRS];
        struct ibv_recv_wr recv[STACK_WRS];
    } stack_wrs;
    struct ibv_sge stack_sges[STACK_SGES];
};

/* The work requests of wr_or_list as a borrowed array (items) and count;
 * *seq gets a new reference to keep alive. */
static int as_items(PyObject *wr_or_list, PyTypeObject *type, const char *what,
                    PyObject **seq, PyObject ***items, Py_ssize_t *n)
{
    if (PyObject_TypeCheck(wr_or_list, type)) {
        *seq = PyTuple_Pack(1, wr_or_list);
    } else if (PyList_Check(wr_or_list) || PyTuple_Check(wr_or_list)) {
        *seq = PySequence_Tuple(wr_or_list);
    } else {
        PyErr_Format(PyExc_TypeError, "expected a %s or a list of them, not %s", what,
                     ibv_type_name(wr_or_list));
        return -1;
    }
    if (*seq == NULL)
        return -1;
    *n = PyTuple_Size(*seq);
    if (*n == 0) {
        PyErr_Format(PyExc_ValueError, "no %s to post", what);
        Py_CLEAR(*seq);
        return -1;
    }
    *items = NULL;
    for (Py_ssize_t i = 0; i < *n; i++)
        if (!PyObject_TypeCheck(PyTuple_GetItem(*seq, i), type)) {
            PyErr_Format(PyExc_TypeError, "item %zd must be a %s, not %s", i, what,
                         ibv_type_name(PyTuple_GetItem(*seq, i)));
            Py_CLEAR(*seq);
            return -1;
        }
    return 0;
}

static int chain_alloc(struct chain *c, Py_ssize_t nwr, size_t wr_size, Py_ssize_t nsge)
{
    c->heap = NULL;
    if (nwr <= STACK_WRS && nsge <= STACK_SGES) {
        c->wrs = &c->stack_wrs;
        c->sges = c->stack_sges;
        return 0;
    }
    c->heap = PyMem_Malloc(nwr * wr_size + (nsge ? nsge : 1) * sizeof(struct ibv_sge));
    if (c->heap == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->wrs = c->heap;
    c->sges = (struct ibv_sge *)((char *)c->heap + nwr * wr_size);
    return 0;
}

static Py_ssize_t count_sges(PyObject *seq, Py_ssize_t n, size_t sg_offset)
{
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *list = *(PyObject **)((char *)PyTuple_GetItem(seq, i) + sg_offset);
        if (list != NULL)
            total += PyList_Size(list);
    }
    return total;
}

static int fill_sges(PyObject *list, struct ibv_sge *out, int *num)
{
    *num = 0;
    if (list == NULL)
        return 0;
    Py_ssize_t n = PyList_Size(list);
    if (n > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many SGEs");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GetItem(list, i);
        if (!PyObject_TypeCheck(item, SGE_Type)) {
            PyErr_SetString(PyExc_TypeError, "sg_list items must be SGE");
            return -1;
        }
        out[i] = ((SGEObject *)item)->sge;
    }
    *num = (int)n;
    return 0;
}

static PyObject *post_failed(const char *verb, int rc, Py_ssize_t index, uint64_t wr_id)
{
    return ibv_raise_detail(verb, rc, "%s failed: %s (work request %zd, wr_id=%llu)",
                            verb, strerror(rc), index, (unsigned long long)wr_id);
}

PyObject *ibv_hand_QP_post_send(PyObject *self, PyObject *arg)
{
    PyObject *seq, **items;
    Py_ssize_t n;
    struct chain c;
    if (ibv_check_open(self) < 0)
        return NULL;
    if (as_items(arg, SendWR_Type, "SendWR", &seq, &items, &n) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t nsge = count_sges(seq, n, offsetof(SendWRObject, sg_list));
    if (chain_alloc(&c, n, sizeof(struct ibv_send_wr), nsge) < 0)
        goto done;
    struct ibv_send_wr *wrs = c.wrs;
    struct ibv_sge *sge = c.sges;
    for (Py_ssize_t i = 0; i < n; i++) {
        SendWRObject *w = (SendWRObject *)PyTuple_GetItem(seq, i);
        struct ibv_send_wr *wr = &wrs[i];
        memset(wr, 0, sizeof(*wr));
        wr->wr_id = w->wr_id;
        wr->next = i + 1 < n ? &wrs[i + 1] : NULL;
        wr->sg_list = sge;
        if (fill_sges(w->sg_list, sge, &wr->num_sge) < 0)
            goto done;
        sge += wr->num_sge;
        wr->opcode = (enum ibv_wr_opcode)w->opcode;
        wr->send_flags = w->send_flags;
        wr->imm_data = htonl(w->imm_data);
        /* wr.rdma, wr.atomic and wr.ud share memory (and rkey sits at a
         * different offset in each): fill the one the request uses. */
        if (w->ah != NULL) {
            if (ibv_check_open(w->ah) < 0)
                goto done;
            wr->wr.ud.ah = AH_PTR(w->ah);
            wr->wr.ud.remote_qpn = w->remote_qpn;
            wr->wr.ud.remote_qkey = w->remote_qkey;
        } else if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                   w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
            wr->wr.atomic.remote_addr = w->remote_addr;
            wr->wr.atomic.compare_add = w->compare_add;
            wr->wr.atomic.swap = w->swap;
            wr->wr.atomic.rkey = w->rkey;
        } else {
            wr->wr.rdma.remote_addr = w->remote_addr;
            wr->wr.rdma.rkey = w->rkey;
        }
    }
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(QP_PTR(self), wrs, &bad);
    if (rc != 0) {
        Py_ssize_t index = bad ? bad - wrs : 0;
        post_failed("ibv_post_send", rc, index, bad ? bad->wr_id : 0);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(c.heap);
    Py_DECREF(seq);
    return result;
}

static PyObject *post_recv(PyObject *self, PyObject *arg, int srq)
{
    PyObject *seq, **items;
    Py_ssize_t n;
    struct chain c;
    if (ibv_check_open(self) < 0)
        return NULL;
    if (as_items(arg, RecvWR_Type, "RecvWR", &seq, &items, &n) < 0)
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t nsge = count_sges(seq, n, offsetof(RecvWRObject, sg_list));
    if (chain_alloc(&c, n, sizeof(struct ibv_recv_wr), nsge) < 0)
        goto done;
    struct ibv_recv_wr *wrs = c.wrs;
    struct ibv_sge *sge = c.sges;
    for (Py_ssize_t i = 0; i < n; i++) {
        RecvWRObject *w = (RecvWRObject *)PyTuple_GetItem(seq, i);
        struct ibv_recv_wr *wr = &wrs[i];
        wr->wr_id = w->wr_id;
        wr->next = i + 1 < n ? &wrs[i + 1] : NULL;
        wr->sg_list = sge;
        if (fill_sges(w->sg_list, sge, &wr->num_sge) < 0)
            goto done;
        sge += wr->num_sge;
    }
    struct ibv_recv_wr *bad = NULL;
    int rc = srq ? ibv_post_srq_recv(SRQ_PTR(self), wrs, &bad)
                 : ibv_post_recv(QP_PTR(self), wrs, &bad);
    if (rc != 0) {
        Py_ssize_t index = bad ? bad - wrs : 0;
        post_failed(srq ? "ibv_post_srq_recv" : "ibv_post_recv", rc, index,
                    bad ? bad->wr_id : 0);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(c.heap);
    Py_DECREF(seq);
    return result;
}

PyObject *ibv_hand_QP_post_recv(PyObject *self, PyObject *arg)
{
    return post_recv(self, arg, 0);
}

PyObject *ibv_hand_SRQ_post_recv(PyObject *self, PyObject *arg)
{
    return post_recv(self, arg, 1);
}

/* ==== completions ======================================================== */

typedef struct {
    PyObject_HEAD
    struct ibv_wc wc;
} WCObject;

#define WC_INT(field, expr)                                                      \
    static PyObject *WC_get_##field(PyObject *op, void *c)                       \
    {                                                                            \
        const struct ibv_wc *wc = &((WCObject *)op)->wc;                         \
        (void)c;                                                                 \
        return PyLong_FromUnsignedLongLong((unsigned long long)(expr));          \
    }

WC_INT(wr_id, wc->wr_id)
WC_INT(status, wc->status)
WC_INT(opcode, wc->opcode)
WC_INT(vendor_err, wc->vendor_err)
WC_INT(byte_len, wc->byte_len)
WC_INT(imm_data, ntohl(wc->imm_data))
WC_INT(invalidated_rkey, wc->invalidated_rkey)
WC_INT(qp_num, wc->qp_num)
WC_INT(src_qp, wc->src_qp)
WC_INT(wc_flags, wc->wc_flags)
WC_INT(pkey_index, wc->pkey_index)
WC_INT(slid, wc->slid)
WC_INT(sl, wc->sl)
WC_INT(dlid_path_bits, wc->dlid_path_bits)

static PyObject *WC_get_is_success(PyObject *op, void *c)
{
    (void)c;
    return PyBool_FromLong(((WCObject *)op)->wc.status == IBV_WC_SUCCESS);
}

static PyObject *WC_get_status_str(PyObject *op, void *c)
{
    (void)c;
    return PyUnicode_FromString(ibv_wc_status_str(((WCObject *)op)->wc.status));
}

static PyObject *WC_raise_for_status(PyObject *op, PyObject *unused)
{
    (void)unused;
    if (((WCObject *)op)->wc.status == IBV_WC_SUCCESS)
        Py_RETURN_NONE;
    return ibv_raise_completion(op);
}

static PyObject *WC_repr(PyObject *op)
{
    const struct ibv_wc *wc = &((WCObject *)op)->wc;
    return PyUnicode_FromFormat("WC(wr_id=%llu, status=%s, opcode=%d, byte_len=%u, "
                                "qp_num=%u, wc_flags=%u)",
                                (unsigned long long)wc->wr_id,
                                ibv_wc_status_str(wc->status), (int)wc->opcode,
                                wc->byte_len, wc->qp_num, wc->wc_flags);
}

#define WC_GET(field, doc) {#field, WC_get_##field, NULL, doc, NULL}

static PyGetSetDef WC_getset[] = {
    WC_GET(wr_id, "wr_id of the work request."),
    WC_GET(status, "WCStatus."),
    WC_GET(opcode, "WCOpcode."),
    WC_GET(vendor_err, "Vendor error syndrome."),
    WC_GET(byte_len, "Bytes received (receive completions)."),
    WC_GET(imm_data, "Immediate data in host order (valid with WCFlags.WITH_IMM)."),
    WC_GET(invalidated_rkey, "Invalidated rkey (valid with WCFlags.WITH_INV)."),
    WC_GET(qp_num, "Local QP number."),
    WC_GET(src_qp, "Remote QP number (UD)."),
    WC_GET(wc_flags, "WCFlags."),
    WC_GET(pkey_index, "P_Key index (GSI)."),
    WC_GET(slid, "Source LID."),
    WC_GET(sl, "Service level."),
    WC_GET(dlid_path_bits, "DLID path bits."),
    WC_GET(is_success, "status == WCStatus.SUCCESS."),
    WC_GET(status_str, "ibv_wc_status_str(status)."),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef WC_methods[] = {
    {"raise_for_status", WC_raise_for_status, METH_NOARGS,
     "raise_for_status($self, /)\n--\n\nRaise CompletionError unless the status is SUCCESS."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot WC_slots[] = {
    {Py_tp_doc, (void *)"A work completion (struct ibv_wc), from CQ.poll()."},
    {Py_tp_dealloc, (void *)generic_dealloc},
    {Py_tp_repr, (void *)WC_repr},
    {Py_tp_getset, WC_getset},
    {Py_tp_methods, WC_methods},
    {0, NULL},
};

static PyType_Spec WC_spec = {"ibverbs.WC", sizeof(WCObject), 0,
                              Py_TPFLAGS_DEFAULT,
                              WC_slots};

int ibv_wc_to_c(PyObject *obj, struct ibv_wc *out)
{
    if (!PyObject_TypeCheck(obj, WC_Type)) {
        PyErr_Format(PyExc_TypeError, "wc must be a WC, not %s", ibv_type_name(obj));
        return -1;
    }
    *out = ((WCObject *)obj)->wc;
    return 0;
}

#define STACK_WCS 64

PyObject *ibv_hand_CQ_poll(PyObject *self, PyObject *arg)
{
    uint64_t num;
    struct ibv_wc stack[STACK_WCS], *wcs = stack;
    if (ibv_check_open(self) < 0)
        return NULL;
    if (ibv_conv_unsigned(arg, "num_entries", INT32_MAX, &num) < 0)
        return NULL;
    if (num == 0) {
        PyErr_SetString(PyExc_ValueError, "num_entries must be positive");
        return NULL;
    }
    if (num > STACK_WCS) {
        wcs = PyMem_Malloc(num * sizeof(*wcs));
        if (wcs == NULL)
            return PyErr_NoMemory();
    }
    int n = ibv_poll_cq(CQ_PTR(self), (int)num, wcs);
    PyObject *list = NULL;
    if (n < 0) {
        ibv_raise("ibv_poll_cq", ibv_error_code(n));
        goto done;
    }
    list = PyList_New(n);
    if (list == NULL)
        goto done;
    for (int i = 0; i < n; i++) {
        PyObject *wc = PyType_GenericAlloc(WC_Type, 0);
        if (wc == NULL) {
            Py_CLEAR(list);
            goto done;
        }
        ((WCObject *)wc)->wc = wcs[i];
        PyList_SetItem(list, i, wc);
    }
done:
    if (wcs != stack)
        PyMem_Free(wcs);
    return list;
}

PyObject *ibv_hand_CQ_req_notify(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"solicited_only", NULL};
    int solicited_only = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:req_notify", kwlist, &solicited_only))
        return NULL;
    if (ibv_check_open(self) < 0)
        return NULL;
    int rc = ibv_req_notify_cq(CQ_PTR(self), solicited_only);
    if (rc != 0)
        return ibv_raise("ibv_req_notify_cq", ibv_error_code(rc));
    Py_RETURN_NONE;
}

/*
 * CQ events are acknowledged to libibverbs as soon as they are read, in
 * get_cq_event itself: ibv_destroy_cq waits for every event to be acked,
 * and a destroy (in close() or dealloc, under the GIL) waiting for a thread
 * that needs the GIL to ack would deadlock.  The CQ object returned is a
 * strong reference, which is what the ack protects in C.  ack_events()
 * keeps the verbs contract visible: it accounts for what was received.
 */
PyObject *ibv_hand_CQ_ack_events(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"nevents", NULL};
    PyObject *nevents_obj = NULL;
    uint64_t nevents = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:ack_events", kwlist, &nevents_obj))
        return NULL;
    if (nevents_obj != NULL &&
        ibv_conv_unsigned(nevents_obj, "nevents", UINT32_MAX, &nevents) < 0)
        return NULL;
    if (ibv_check_open(self) < 0)
        return NULL;
    struct CQObject *cq = (struct CQObject *)self;
    if (nevents > cq->events_received) {
        PyErr_Format(PyExc_ValueError,
                     "cannot ack %llu: more CQ events than received (%u unacked)",
                     (unsigned long long)nevents, cq->events_received);
        return NULL;
    }
    cq->events_received -= (unsigned int)nevents;
    Py_RETURN_NONE;
}

PyObject *ibv_hand_CompChannel_get_cq_event(PyObject *self, PyObject *unused)
{
    (void)unused;
    for (;;) {
        struct ibv_cq *cq = NULL;
        void *cq_context = NULL;
        int rc, err = 0;
        if (ibv_check_open(self) < 0)
            return NULL;
        struct ibv_comp_channel *channel = CompChannel_PTR(self);
        ibv_busy_enter(self);
        Py_BEGIN_ALLOW_THREADS
        errno = 0;
        rc = ibv_get_cq_event(channel, &cq, &cq_context);
        err = errno;
        if (rc == 0)
            ibv_ack_cq_events(cq, 1);
        Py_END_ALLOW_THREADS
        ibv_busy_leave(self);
        if (rc != 0)
            return ibv_raise("ibv_get_cq_event", err ? err : EIO);
        PyObject *obj = ibv_registry_get(cq);
        if (obj == NULL)
            continue;   /* its CQ was destroyed meanwhile: wait for the next */
        ((struct CQObject *)obj)->events_received++;
        return obj;
    }
}

/* ==== async events ======================================================= */

typedef struct {
    PyObject_HEAD
    struct ibv_async_event event;
    PyObject *element;   /* the QP, CQ or SRQ named by the event, or NULL */
    int acked;
} AsyncEventObject;

static PyObject *AsyncEvent_get_event_type(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromLong(((AsyncEventObject *)op)->event.event_type);
}

static PyObject *AsyncEvent_get_event_type_str(PyObject *op, void *c)
{
    (void)c;
    return PyUnicode_FromString(ibv_event_type_str(((AsyncEventObject *)op)->event.event_type));
}

static PyObject *AsyncEvent_get_element(PyObject *op, void *c)
{
    PyObject *e = ((AsyncEventObject *)op)->element;
    (void)c;
    return Py_NewRef(e ? e : Py_None);
}

static PyObject *AsyncEvent_get_port_num(PyObject *op, void *c)
{
    const struct ibv_async_event *ev = &((AsyncEventObject *)op)->event;
    (void)c;
    switch (ev->event_type) {
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
        return PyLong_FromLong(ev->element.port_num);
    default:
        Py_RETURN_NONE;
    }
}

static PyObject *AsyncEvent_get_acked(PyObject *op, void *c)
{
    (void)c;
    return PyBool_FromLong(((AsyncEventObject *)op)->acked);
}

static PyObject *AsyncEvent_repr(PyObject *op)
{
    AsyncEventObject *self = (AsyncEventObject *)op;
    return PyUnicode_FromFormat("AsyncEvent(%s, element=%R)",
                                ibv_event_type_str(self->event.event_type),
                                self->element ? self->element : Py_None);
}

static int AsyncEvent_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(((AsyncEventObject *)op)->element);
    return 0;
}

static int AsyncEvent_clear(PyObject *op)
{
    Py_CLEAR(((AsyncEventObject *)op)->element);
    return 0;
}

static void AsyncEvent_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    AsyncEvent_clear(op);
    generic_dealloc(op);
}

static PyGetSetDef AsyncEvent_getset[] = {
    {"event_type", AsyncEvent_get_event_type, NULL, "EventType.", NULL},
    {"event_type_str", AsyncEvent_get_event_type_str, NULL, "ibv_event_type_str().", NULL},
    {"element", AsyncEvent_get_element, NULL, "The QP, CQ or SRQ concerned (or None).", NULL},
    {"port_num", AsyncEvent_get_port_num, NULL, "The port, for port events (else None).", NULL},
    {"acked", AsyncEvent_get_acked, NULL, "True once ack_async_event() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot AsyncEvent_slots[] = {
    {Py_tp_doc, (void *)"An asynchronous event (Context.get_async_event)."},
    {Py_tp_dealloc, (void *)AsyncEvent_dealloc},
    {Py_tp_traverse, (void *)AsyncEvent_traverse},
    {Py_tp_clear, (void *)AsyncEvent_clear},
    {Py_tp_repr, (void *)AsyncEvent_repr},
    {Py_tp_getset, AsyncEvent_getset},
    {0, NULL},
};

static PyType_Spec AsyncEvent_spec = {"ibverbs.AsyncEvent", sizeof(AsyncEventObject), 0,
                                      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, AsyncEvent_slots};

static void *event_element(const struct ibv_async_event *ev)
{
    switch (ev->event_type) {
    case IBV_EVENT_CQ_ERR:
        return ev->element.cq;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        return ev->element.srq;
    case IBV_EVENT_WQ_FATAL:
        return ev->element.wq;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return ev->element.qp;
    default:
        return NULL;
    }
}

/*
 * Like CQ events, async events are acked right after they are read, with
 * the GIL still released (ibv_destroy_qp waits for the ack); the
 * AsyncEvent holds a strong reference to the object it names instead.
 * ack_async_event() is therefore idempotent bookkeeping.
 */
PyObject *ibv_hand_Context_get_async_event(PyObject *self, PyObject *unused)
{
    struct ibv_async_event event;
    int rc, err = 0;
    (void)unused;
    if (ibv_check_open(self) < 0)
        return NULL;
    struct ibv_context *ctx = Context_PTR(self);
    ibv_busy_enter(self);
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = ibv_get_async_event(ctx, &event);
    err = errno;
    if (rc == 0)
        ibv_ack_async_event(&event);
    Py_END_ALLOW_THREADS
    ibv_busy_leave(self);
    if (rc != 0)
        return ibv_raise("ibv_get_async_event", err ? err : EIO);
    PyObject *op = PyType_GenericAlloc(AsyncEvent_Type, 0);
    if (op == NULL)
        return NULL;
    AsyncEventObject *ev = (AsyncEventObject *)op;
    ev->event = event;
    void *element = event_element(&event);
    ev->element = element ? ibv_registry_get(element) : NULL;
    ev->acked = 0;
    return op;
}

PyObject *ibv_hand_Context_ack_async_event(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyObject_TypeCheck(arg, AsyncEvent_Type)) {
        PyErr_Format(PyExc_TypeError, "expected an AsyncEvent, not %s", ibv_type_name(arg));
        return NULL;
    }
    ((AsyncEventObject *)arg)->acked = 1;
    Py_RETURN_NONE;
}

/* ==== registration ======================================================= */

int ibv_datapath_init(PyObject *module)
{
    struct { PyTypeObject **type; PyType_Spec *spec; const char *name; } types[] = {
        {&SGE_Type, &SGE_spec, "SGE"},
        {&SendWR_Type, &SendWR_spec, "SendWR"},
        {&RecvWR_Type, &RecvWR_spec, "RecvWR"},
        {&WC_Type, &WC_spec, "WC"},
        {&AsyncEvent_Type, &AsyncEvent_spec, "AsyncEvent"},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        PyObject *type = PyType_FromSpec(types[i].spec);
        if (type == NULL)
            return -1;
        *types[i].type = (PyTypeObject *)type;
        Py_INCREF(type);
        if (PyModule_AddObject(module, types[i].name, type) < 0) {
            Py_DECREF(type);
            return -1;
        }
    }
    return 0;
}
