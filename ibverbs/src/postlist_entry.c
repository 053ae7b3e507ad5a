/* PostListEntry: a live view of one entry of a PostList (postlist.c). */
#include "common.h"

#include <arpa/inet.h>

#include "objects.h"

PyTypeObject *PostListEntry_Type;

#define ENTRY_PL(op) ((PostListObject *)((PostListEntryObject *)(op))->list)
#define ENTRY_I(op) (((PostListEntryObject *)(op))->index)

static PyObject *PostListEntry_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyErr_SetString(PyExc_TypeError, "PostListEntry objects come from PostList[i]");
    return NULL;
}

static void PostListEntry_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    Py_CLEAR(((PostListEntryObject *)op)->list);
    ibp_generic_dealloc(op);
}

/* No tp_clear: the view needs its list while it lives; the collector
 * breaks a cycle through one at the PostList or an SGE instead. */
static int PostListEntry_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(((PostListEntryObject *)op)->list);
    return 0;
}

/* The send request of a view, or NULL with AttributeError for a receive list. */
static struct ibv_send_wr *entry_send(PyObject *op, const char *field)
{
    PostListObject *pl = ENTRY_PL(op);
    if (pl->kind != PL_SEND) {
        PyErr_Format(PyExc_AttributeError, "a RecvWR has no %s", field);
        return NULL;
    }
    return PL_SEND_WR(pl, ENTRY_I(op));
}

/* The first SGE of a view's request, or NULL with AttributeError. */
static struct ibv_sge *entry_sge(PyObject *op)
{
    PostListObject *pl = ENTRY_PL(op);
    Py_ssize_t i = ENTRY_I(op);
    int num = pl->kind == PL_SEND ? PL_SEND_WR(pl, i)->num_sge : PL_RECV_WR(pl, i)->num_sge;
    if (num < 1) {
        PyErr_SetString(PyExc_AttributeError, "this work request has no SGE");
        return NULL;
    }
    return pl->kind == PL_SEND ? PL_SEND_WR(pl, i)->sg_list : PL_RECV_WR(pl, i)->sg_list;
}

/* Converted value for a setter, refusing while the list is being posted. */
static int entry_value(PyObject *op, PyObject *v, const char *name, uint64_t max, uint64_t *x)
{
    if (ibp_conv_u64(v, name, max, x) < 0)
        return -1;
    return ibp_pl_frozen(ENTRY_PL(op));
}

/* Which member of the wr union a send request uses. */
enum { WR_RDMA, WR_ATOMIC, WR_UD };

static int entry_union(PyObject *op)
{
    PostListObject *pl = ENTRY_PL(op);
    if (pl->entries[ENTRY_I(op)].ah != NULL)
        return WR_UD;
    return ibp_is_atomic(PL_SEND_WR(pl, ENTRY_I(op))->opcode) ? WR_ATOMIC : WR_RDMA;
}

static const char *union_name[] = {"an RDMA", "an atomic", "a UD"};

static int entry_needs(PyObject *op, int mask, const char *field)
{
    int u = entry_union(op);
    if (mask & (1 << u))
        return u;
    PyErr_Format(PyExc_AttributeError, "%s is not used by %s request", field, union_name[u]);
    return -1;
}

static PyObject *PostListEntry_get_wr_id(PyObject *op, void *c)
{
    PostListObject *pl = ENTRY_PL(op);
    (void)c;
    return PyLong_FromUnsignedLongLong(pl->kind == PL_SEND ? PL_SEND_WR(pl, ENTRY_I(op))->wr_id
                                                           : PL_RECV_WR(pl, ENTRY_I(op))->wr_id);
}

static int PostListEntry_set_wr_id(PyObject *op, PyObject *v, void *c)
{
    PostListObject *pl = ENTRY_PL(op);
    uint64_t x;
    (void)c;
    if (entry_value(op, v, "wr_id", UINT64_MAX, &x) < 0)
        return -1;
    if (pl->kind == PL_SEND)
        PL_SEND_WR(pl, ENTRY_I(op))->wr_id = x;
    else
        PL_RECV_WR(pl, ENTRY_I(op))->wr_id = x;
    return 0;
}

static PyObject *PostListEntry_get_num_sge(PyObject *op, void *c)
{
    PostListObject *pl = ENTRY_PL(op);
    (void)c;
    return PyLong_FromLong(pl->kind == PL_SEND ? PL_SEND_WR(pl, ENTRY_I(op))->num_sge
                                               : PL_RECV_WR(pl, ENTRY_I(op))->num_sge);
}

/* An inline send entry must keep pointing at readable memory. */
static int entry_inline_check(PyObject *op)
{
    PostListObject *pl = ENTRY_PL(op);
    return pl->kind == PL_SEND ? ibp_check_inline_sges(PL_SEND_WR(pl, ENTRY_I(op))) : 0;
}

#define ENTRY_SGE_FIELD(field, max)                                              \
    static PyObject *PostListEntry_get_##field(PyObject *op, void *c)            \
    {                                                                            \
        struct ibv_sge *sge = entry_sge(op);                                     \
        (void)c;                                                                 \
        return sge ? PyLong_FromUnsignedLongLong(sge->field) : NULL;             \
    }                                                                            \
    static int PostListEntry_set_##field(PyObject *op, PyObject *v, void *c)     \
    {                                                                            \
        struct ibv_sge *sge;                                                     \
        uint64_t x;                                                              \
        (void)c;                                                                 \
        if (entry_value(op, v, #field, max, &x) < 0 || (sge = entry_sge(op)) == NULL) \
            return -1;                                                           \
        uint64_t old = sge->field;                                               \
        sge->field = x;                                                          \
        if (entry_inline_check(op) < 0) {                                        \
            sge->field = old;                                                    \
            return -1;                                                           \
        }                                                                        \
        return 0;                                                                \
    }

ENTRY_SGE_FIELD(addr, UINT64_MAX)
ENTRY_SGE_FIELD(length, UINT32_MAX)
ENTRY_SGE_FIELD(lkey, UINT32_MAX)

static PyObject *PostListEntry_get_opcode(PyObject *op, void *c)
{
    struct ibv_send_wr *wr = entry_send(op, "opcode");
    (void)c;
    return wr ? PyLong_FromLong(wr->opcode) : NULL;
}

static PyObject *PostListEntry_get_send_flags(PyObject *op, void *c)
{
    struct ibv_send_wr *wr = entry_send(op, "send_flags");
    (void)c;
    return wr ? PyLong_FromUnsignedLong(wr->send_flags) : NULL;
}

static int PostListEntry_set_send_flags(PyObject *op, PyObject *v, void *c)
{
    struct ibv_send_wr *wr = entry_send(op, "send_flags");
    uint64_t x;
    (void)c;
    if (wr == NULL || entry_value(op, v, "send_flags", UINT32_MAX, &x) < 0)
        return -1;
    unsigned int old = wr->send_flags;
    wr->send_flags = (unsigned int)x;
    if (ibp_check_inline_sges(wr) < 0) {
        wr->send_flags = old;
        return -1;
    }
    return 0;
}

static PyObject *PostListEntry_get_imm_data(PyObject *op, void *c)
{
    struct ibv_send_wr *wr = entry_send(op, "imm_data");
    (void)c;
    return wr ? PyLong_FromUnsignedLong(ntohl(wr->imm_data)) : NULL;
}

static int PostListEntry_set_imm_data(PyObject *op, PyObject *v, void *c)
{
    struct ibv_send_wr *wr = entry_send(op, "imm_data");
    uint64_t x;
    (void)c;
    if (wr == NULL || entry_value(op, v, "imm_data", UINT32_MAX, &x) < 0)
        return -1;
    wr->imm_data = htonl((uint32_t)x);
    return 0;
}

/* Union fields: which members have them, and where. */
#define M_RDMA (1 << WR_RDMA)
#define M_ATOMIC (1 << WR_ATOMIC)
#define M_UD (1 << WR_UD)

static uint64_t *entry_u64(struct ibv_send_wr *wr, int u, int which)
{
    /* which: 0 remote_addr, 1 compare_add, 2 swap */
    if (which == 0)
        return u == WR_RDMA ? &wr->wr.rdma.remote_addr : &wr->wr.atomic.remote_addr;
    return which == 1 ? &wr->wr.atomic.compare_add : &wr->wr.atomic.swap;
}

static uint32_t *entry_u32(struct ibv_send_wr *wr, int u, int which)
{
    /* which: 0 rkey, 1 remote_qpn, 2 remote_qkey */
    if (which == 0)
        return u == WR_RDMA ? &wr->wr.rdma.rkey : &wr->wr.atomic.rkey;
    return which == 1 ? &wr->wr.ud.remote_qpn : &wr->wr.ud.remote_qkey;
}

#define ENTRY_UNION_FIELD(field, mask, bits, which)                                \
    static PyObject *PostListEntry_get_##field(PyObject *op, void *c)              \
    {                                                                              \
        struct ibv_send_wr *wr = entry_send(op, #field);                           \
        int u;                                                                     \
        (void)c;                                                                   \
        if (wr == NULL || (u = entry_needs(op, mask, #field)) < 0)                 \
            return NULL;                                                           \
        return PyLong_FromUnsignedLongLong(*entry_u##bits(wr, u, which));          \
    }                                                                              \
    static int PostListEntry_set_##field(PyObject *op, PyObject *v, void *c)       \
    {                                                                              \
        struct ibv_send_wr *wr = entry_send(op, #field);                           \
        uint64_t x;                                                                \
        int u;                                                                     \
        (void)c;                                                                   \
        /* the value's __index__ may replace the entry: pick the member after */  \
        if (wr == NULL || entry_value(op, v, #field, UINT##bits##_MAX, &x) < 0 ||  \
            (u = entry_needs(op, mask, #field)) < 0)                               \
            return -1;                                                             \
        *entry_u##bits(wr, u, which) = x;                                          \
        return 0;                                                                  \
    }

ENTRY_UNION_FIELD(remote_addr, M_RDMA | M_ATOMIC, 64, 0)
ENTRY_UNION_FIELD(compare_add, M_ATOMIC, 64, 1)
ENTRY_UNION_FIELD(swap, M_ATOMIC, 64, 2)
ENTRY_UNION_FIELD(rkey, M_RDMA | M_ATOMIC, 32, 0)
ENTRY_UNION_FIELD(remote_qpn, M_UD, 32, 1)
ENTRY_UNION_FIELD(remote_qkey, M_UD, 32, 2)

static PyObject *PostListEntry_get_index(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(ENTRY_I(op));
}

static PyObject *PostListEntry_get_list(PyObject *op, void *c)
{
    (void)c;
    return Py_NewRef(((PostListEntryObject *)op)->list);
}

static PyObject *PostListEntry_repr(PyObject *op)
{
    PostListObject *pl = ENTRY_PL(op);
    Py_ssize_t i = ENTRY_I(op);
    if (pl->kind == PL_RECV) {
        struct ibv_recv_wr *wr = PL_RECV_WR(pl, i);
        return PyUnicode_FromFormat("PostListEntry(%zd, RecvWR, wr_id=%llu, num_sge=%d)", i,
                                    (unsigned long long)wr->wr_id, wr->num_sge);
    }
    struct ibv_send_wr *wr = PL_SEND_WR(pl, i);
    return PyUnicode_FromFormat("PostListEntry(%zd, SendWR, wr_id=%llu, opcode=%d, "
                                "send_flags=%u, num_sge=%d)", i, (unsigned long long)wr->wr_id,
                                (int)wr->opcode, wr->send_flags, wr->num_sge);
}

#define ENTRY_RW(field, doc) {#field, PostListEntry_get_##field, PostListEntry_set_##field, doc, NULL}
#define ENTRY_RO(field, doc) {#field, PostListEntry_get_##field, NULL, doc, NULL}

static PyGetSetDef PostListEntry_getset[] = {
    ENTRY_RW(wr_id, "Returned in the completion."),
    ENTRY_RW(addr, "Address of the first SGE."),
    ENTRY_RW(length, "Length of the first SGE (< 2**32)."),
    ENTRY_RW(lkey, "Local key of the first SGE."),
    ENTRY_RO(num_sge, "Number of SGEs (fixed; assign a new request to change)."),
    ENTRY_RO(opcode, "WROpcode (fixed; assign a new request to change). Send only."),
    ENTRY_RW(send_flags, "SendFlags. Send only."),
    ENTRY_RW(imm_data, "Immediate data, host order. Send only."),
    ENTRY_RW(remote_addr, "RDMA/atomic remote address."),
    ENTRY_RW(rkey, "RDMA/atomic remote key."),
    ENTRY_RW(compare_add, "Atomic compare or add value."),
    ENTRY_RW(swap, "Atomic swap value."),
    ENTRY_RW(remote_qpn, "UD: remote QP number."),
    ENTRY_RW(remote_qkey, "UD: remote Q_Key."),
    ENTRY_RO(index, "Position in the list."),
    ENTRY_RO(list, "The PostList."),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot PostListEntry_slots[] = {
    {Py_tp_doc, (void *)"A live view of one entry of a PostList (PostList[i]): reading and "
                        "setting its fields reads and writes the converted C request."},
    {Py_tp_new, (void *)PostListEntry_new},
    {Py_tp_dealloc, (void *)PostListEntry_dealloc},
    {Py_tp_traverse, (void *)PostListEntry_traverse},
    {Py_tp_repr, (void *)PostListEntry_repr},
    {Py_tp_getset, PostListEntry_getset},
    {0, NULL},
};

PyType_Spec PostListEntry_spec = {"ibverbs.PostListEntry", sizeof(PostListEntryObject),
                                         0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                                         PostListEntry_slots};
