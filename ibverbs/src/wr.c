/* SendWR and RecvWR: work requests as Python objects holding C values. */
#include "common.h"

#include <arpa/inet.h>

#include "objects.h"

PyTypeObject *SendWR_Type;
PyTypeObject *RecvWR_Type;

static inline void SendWR_changed(SendWRObject *w)
{
    w->ready = 0;
}

/* A RecvWR is its wr_id and SGEs, nothing to prepare. */
#define RecvWR_changed(w) ((void)(w))

/*
 * sg_list must be None or a sequence of SGE.  As in the seed, the
 * constructor stores a copy (copy=1) and assignment stores the list itself
 * (a list's later appends are posted); anything else becomes a new list.
 * Items are checked here and again when posted (fill_sges), since the list
 * can change in between.
 */
static int set_sg_list(PyObject **slot, PyObject *value, int copy)
{
    if (value == NULL || value == Py_None) {
        Py_CLEAR(*slot);
        return 0;
    }
    PyObject *list = !copy && PyList_CheckExact(value) ? Py_NewRef(value) : PySequence_List(value);
    if (list == NULL) {
        /* Only "not iterable" is ours to word; MemoryError, KeyboardInterrupt
         * or an iterator's own error pass through. */
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "sg_list must be a list of SGE or None");
        }
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

#define U64_FIELD_CHANGED(Type, field, max, changed)                                            \
    static PyObject *Type##_get_##field(PyObject *op, void *c)                   \
    {                                                                            \
        (void)c;                                                                 \
        return PyLong_FromUnsignedLongLong(((Type##Object *)op)->field);         \
    }                                                                            \
    static int Type##_set_##field(PyObject *op, PyObject *v, void *c)            \
    {                                                                            \
        uint64_t x;                                                              \
        (void)c;                                                                 \
        if (ibp_conv_u64(v, #field, max, &x) < 0)                                    \
            return -1;                                                           \
        ((Type##Object *)op)->field = x;                                         \
        changed((Type##Object *)op);                                             \
        return 0;                                                                \
    }

#define U64_FIELD(Type, field, max) U64_FIELD_CHANGED(Type, field, max, Type##_changed)
/* wr_id is stored at each post, not prepared: setting it per post is common */
U64_FIELD_CHANGED(SendWR, wr_id, UINT64_MAX, (void))

/*
 * Only opcodes of enum ibv_wr_opcode: providers index tables with it (rxe
 * in the kernel as a signed int: 2**31 and above oops the machine, seen on
 * Linux 6.1; mlx5 in this process).  14 and 15 are IBV_WR_FLUSH and
 * IBV_WR_ATOMIC_WRITE of rdma-core >= 45, newer than the baseline headers.
 */
static int valid_wr_opcode(uint64_t opcode)
{
    return opcode <= IBV_WR_DRIVER1 || opcode == 14 || opcode == 15;
}

static PyObject *SendWR_get_opcode(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromUnsignedLong(((SendWRObject *)op)->opcode);
}

static int SendWR_set_opcode(PyObject *op, PyObject *v, void *c)
{
    uint64_t x;
    (void)c;
    if (ibp_conv_u64(v, "opcode", UINT32_MAX, &x) < 0)
        return -1;
    if (!valid_wr_opcode(x)) {
        PyErr_Format(PyExc_ValueError, "opcode %llu is not a WROpcode", (unsigned long long)x);
        return -1;
    }
    ((SendWRObject *)op)->opcode = (uint32_t)x;
    SendWR_changed((SendWRObject *)op);
    return 0;
}
U64_FIELD(SendWR, send_flags, UINT32_MAX)
U64_FIELD(SendWR, remote_addr, UINT64_MAX)
U64_FIELD(SendWR, rkey, UINT32_MAX)
U64_FIELD(SendWR, imm_data, UINT32_MAX)
U64_FIELD(SendWR, compare_add, UINT64_MAX)
U64_FIELD(SendWR, swap, UINT64_MAX)
U64_FIELD(SendWR, remote_qpn, UINT32_MAX)
U64_FIELD(SendWR, remote_qkey, UINT32_MAX)
U64_FIELD(SendWR, invalidate_rkey, UINT32_MAX)
U64_FIELD(RecvWR, wr_id, UINT64_MAX)

/* A request without SGEs holds no list until sg_list is read: then an
 * empty one, kept, so that wr.sg_list.append(sge) is what gets posted. */
static PyObject *get_sg_list(PyObject **slot)
{
    if (*slot == NULL && (*slot = PyList_New(0)) == NULL)
        return NULL;
    return Py_NewRef(*slot);
}

static PyObject *SendWR_get_sg_list(PyObject *op, void *c)
{
    (void)c;
    return get_sg_list(&((SendWRObject *)op)->sg_list);
}

static int SendWR_set_sg_list(PyObject *op, PyObject *v, void *c)
{
    (void)c;
    return set_sg_list(&((SendWRObject *)op)->sg_list, v, 0);
}

static int SendWR_init_sg_list(PyObject *op, PyObject *v, void *c)
{
    (void)c;
    return set_sg_list(&((SendWRObject *)op)->sg_list, v, 1);
}

static PyObject *RecvWR_get_sg_list(PyObject *op, void *c)
{
    (void)c;
    return get_sg_list(&((RecvWRObject *)op)->sg_list);
}

static int RecvWR_set_sg_list(PyObject *op, PyObject *v, void *c)
{
    (void)c;
    return set_sg_list(&((RecvWRObject *)op)->sg_list, v, 0);
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
    SendWR_changed((SendWRObject *)op);
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

/* mw / bind_info: an object of type, or None. */
static int set_typed(PyObject **slot, PyObject *v, PyTypeObject *type, const char *name)
{
    if (v == NULL || v == Py_None) {
        Py_CLEAR(*slot);
        return 0;
    }
    if (!PyObject_TypeCheck(v, type)) {
        PyErr_Format(PyExc_TypeError, "%s must be a %s or None, not %s", name,
                     type == MW_Type ? "MW" : "MWBindInfo", ibv_type_name(v));
        return -1;
    }
    Py_INCREF(v);
    Py_XSETREF(*slot, v);
    return 0;
}

static PyObject *SendWR_get_mw(PyObject *op, void *c)
{
    PyObject *v = ((SendWRObject *)op)->mw;
    (void)c;
    return Py_NewRef(v ? v : Py_None);
}

static int SendWR_set_mw(PyObject *op, PyObject *v, void *c)
{
    (void)c;
    SendWR_changed((SendWRObject *)op);
    return set_typed(&((SendWRObject *)op)->mw, v, MW_Type, "mw");
}

static PyObject *SendWR_get_bind_info(PyObject *op, void *c)
{
    PyObject *v = ((SendWRObject *)op)->bind_info;
    (void)c;
    return Py_NewRef(v ? v : Py_None);
}

static int SendWR_set_bind_info(PyObject *op, PyObject *v, void *c)
{
    (void)c;
    SendWR_changed((SendWRObject *)op);
    return set_typed(&((SendWRObject *)op)->bind_info, v, MWBindInfo_Type, "bind_info");
}

static const char *const SendWR_names[] = {
    "wr_id", "sg_list", "opcode", "send_flags", "remote_addr", "rkey", "imm_data",
    "compare_add", "swap", "ah", "remote_qpn", "remote_qkey", "invalidate_rkey",
    "mw", "bind_info", NULL};
static struct argspec SendWR_args = {"SendWR", 0, SendWR_names, NULL, 0};

static int SendWR_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static setter setters[] = {SendWR_set_wr_id, SendWR_init_sg_list, SendWR_set_opcode,
                               SendWR_set_send_flags, SendWR_set_remote_addr,
                               SendWR_set_rkey, SendWR_set_imm_data,
                               SendWR_set_compare_add, SendWR_set_swap, SendWR_set_ah,
                               SendWR_set_remote_qpn, SendWR_set_remote_qkey,
                               SendWR_set_invalidate_rkey, SendWR_set_mw,
                               SendWR_set_bind_info};
    PyObject *v[15];
    if (ibp_parse_args(&SendWR_args, args, kwargs, v) < 0)
        return -1;
    for (int i = 0; i < 15; i++)
        if (v[i] != NULL && setters[i](op, v[i], NULL) < 0)
            return -1;
    return 0;
}

static const char *const RecvWR_names[] = {"wr_id", "sg_list", NULL};
static struct argspec RecvWR_args = {"RecvWR", 0, RecvWR_names, NULL, 0};

static int RecvWR_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    PyObject *v[2];
    if (ibp_parse_args(&RecvWR_args, args, kwargs, v) < 0)
        return -1;
    if (v[0] != NULL && RecvWR_set_wr_id(op, v[0], NULL) < 0)
        return -1;
    if (v[1] != NULL && set_sg_list(&((RecvWRObject *)op)->sg_list, v[1], 1) < 0)
        return -1;
    return 0;
}

static int SendWR_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(((SendWRObject *)op)->sg_list);
    Py_VISIT(((SendWRObject *)op)->ah);
    Py_VISIT(((SendWRObject *)op)->mw);
    Py_VISIT(((SendWRObject *)op)->bind_info);
    return 0;
}

static int SendWR_clear(PyObject *op)
{
    SendWR_changed((SendWRObject *)op);
    Py_CLEAR(((SendWRObject *)op)->sg_list);
    Py_CLEAR(((SendWRObject *)op)->ah);
    Py_CLEAR(((SendWRObject *)op)->mw);
    Py_CLEAR(((SendWRObject *)op)->bind_info);
    return 0;
}

static void SendWR_dealloc(PyObject *op)
{
    PyObject_GC_UnTrack(op);
    SendWR_clear(op);
    ibp_generic_dealloc(op);
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
    ibp_generic_dealloc(op);
}

#define GETSET(Type, field, doc) {#field, Type##_get_##field, Type##_set_##field, doc, NULL}

static PyGetSetDef SendWR_getset[] = {
    GETSET(SendWR, wr_id, "Returned in the completion."),
    GETSET(SendWR, sg_list, "List of SGE (an empty list by default)."),
    GETSET(SendWR, opcode, "WROpcode."),
    GETSET(SendWR, send_flags, "SendFlags."),
    GETSET(SendWR, remote_addr, "RDMA/atomic remote address."),
    GETSET(SendWR, rkey, "RDMA/atomic remote key."),
    GETSET(SendWR, imm_data, "Immediate data, host order (sent in network order)."),
    GETSET(SendWR, compare_add, "Atomic compare (CMP_AND_SWP) or add (FETCH_AND_ADD) value."),
    GETSET(SendWR, swap, "Atomic swap value."),
    GETSET(SendWR, ah, "UD: address handle (a UD QP requires one, other QPs refuse one)."),
    GETSET(SendWR, remote_qpn, "UD: remote QP number."),
    GETSET(SendWR, remote_qkey, "UD: remote Q_Key."),
    GETSET(SendWR, invalidate_rkey, "The rkey to invalidate (opcodes LOCAL_INV and SEND_WITH_INV)."),
    GETSET(SendWR, mw, "The (type 2) MW to bind (opcode BIND_MW); rkey is its new rkey (ibverbs.inc_rkey(mw.rkey)), which MW.rkey may not show."),
    GETSET(SendWR, bind_info, "The MWBindInfo of opcode BIND_MW (the MR range and access to bind to)."),
    {NULL, NULL, NULL, NULL, NULL},
};

static PyGetSetDef RecvWR_getset[] = {
    GETSET(RecvWR, wr_id, "Returned in the completion."),
    GETSET(RecvWR, sg_list, "List of SGE (an empty list by default)."),
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
                        "remote_qkey=0, invalidate_rkey=0, mw=None, bind_info=None)\n--\n\n"
                        "A send work request (struct ibv_send_wr)."},
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

PyType_Spec SendWR_spec = {"ibverbs.SendWR", sizeof(SendWRObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                                  SendWR_slots};
PyType_Spec RecvWR_spec = {"ibverbs.RecvWR", sizeof(RecvWRObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                                  RecvWR_slots};

/* ---- work requests into C (post.c, postlist.c) -------------------------- */

/* Both kinds of request keep their SGE list at the same place, so that
 * one pass over a sequence can count the SGEs of either. */
_Static_assert(offsetof(SendWRObject, sg_list) == offsetof(RecvWRObject, sg_list),
               "sg_list at one offset");
#define WR_SG_LIST(obj) (((RecvWRObject *)(obj))->sg_list)

void ibp_wr_seq_done(struct wr_seq *s)
{
    Py_CLEAR(s->owned);
}

int ibp_wr_seq_init(struct wr_seq *s, PyObject *arg, PyTypeObject *type, const char *what)
{
    s->one = s->seq = s->owned = NULL;
    s->is_list = 0;
    s->nsge = 0;
    if (PyObject_TypeCheck(arg, type)) {
        s->one = arg;
        s->n = 1;
        s->nsge = ibp_sg_count(WR_SG_LIST(arg));
        return 0;
    }
    if (PyList_CheckExact(arg)) {
        s->seq = arg;
        s->is_list = 1;
    } else if (PyTuple_CheckExact(arg)) {
        s->seq = arg;
    } else {
        PyObject *iter = PyObject_GetIter(arg);     /* iterated once, here */
        if (iter == NULL) {
            PyErr_Format(PyExc_TypeError, "expected a %s or an iterable of them, not %s", what,
                         ibv_type_name(arg));
            return -1;
        }
        s->owned = s->seq = PySequence_Tuple(iter);
        Py_DECREF(iter);
        if (s->seq == NULL)
            return -1;
    }
    s->n = s->is_list ? PyList_Size(s->seq) : PyTuple_Size(s->seq);
    for (Py_ssize_t i = 0; i < s->n; i++) {
        PyObject *item = ibp_wr_seq_item(s, i);
        if (!PyObject_TypeCheck(item, type)) {
            PyErr_Format(PyExc_TypeError, "item %zd must be a %s, not %s", i, what,
                         ibv_type_name(item));
            ibp_wr_seq_done(s);
            return -1;
        }
        s->nsge += ibp_sg_count(WR_SG_LIST(item));
    }
    return 0;
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

/* The provider copies inline data from these addresses in this process. */
int ibp_check_inline_sges(const struct ibv_send_wr *wr)
{
    if (!(wr->send_flags & IBV_SEND_INLINE))
        return 0;
    for (int i = 0; i < wr->num_sge; i++)
        if (ibv_check_readable(wr->sg_list[i].addr, wr->sg_list[i].length,
                               "inline data of an SGE") < 0)
            return -1;
    return 0;
}

/* The fields of w that its setters checked, into *wr (w->prepared): the
 * SGEs, the AH pointer, wr_id and next are the post's to fill. */
static void send_wr_prepare(const SendWRObject *w, struct ibv_send_wr *wr)
{
    memset(wr, 0, sizeof(*wr));
    wr->opcode = (enum ibv_wr_opcode)w->opcode;
    wr->send_flags = w->send_flags;
    if (w->opcode == IBV_WR_LOCAL_INV || w->opcode == IBV_WR_SEND_WITH_INV)
        wr->invalidate_rkey = w->invalidate_rkey;   /* shares imm_data's place */
    else
        wr->imm_data = htonl(w->imm_data);
    /* wr.rdma, wr.atomic and wr.ud share memory (and rkey sits at a
     * different offset in each): fill the one the request uses. */
    if (w->ah != NULL) {
        wr->wr.ud.remote_qpn = w->remote_qpn;
        wr->wr.ud.remote_qkey = w->remote_qkey;
    } else if (ibp_is_atomic(w->opcode)) {
        wr->wr.atomic.remote_addr = w->remote_addr;
        wr->wr.atomic.compare_add = w->compare_add;
        wr->wr.atomic.swap = w->swap;
        wr->wr.atomic.rkey = w->rkey;
    } else {
        wr->wr.rdma.remote_addr = w->remote_addr;
        wr->wr.rdma.rkey = w->rkey;
    }
}

/* One SendWR into *wr, its SGEs from sg_list (w's, or a reference to it
 * the caller holds); wr->sg_list must point at room for them.  The caller
 * sets next afterwards.  Allocates nothing (so runs no Python code). */
int ibp_send_wr_fill(SendWRObject *w, PyObject *sg_list, struct ibv_send_wr *wr)
{
    struct ibv_sge *sg = wr->sg_list;
    if (w->opcode == IBV_WR_BIND_MW) {
        /* bind_mw has a union of its own (with tso): the MW and MR are
         * read at post time, and the SendWR holds both while it runs.
         * Never prepared: it carries pointers of objects that can close. */
        memset(wr, 0, sizeof(*wr));
        wr->opcode = IBV_WR_BIND_MW;
        wr->send_flags = w->send_flags;
        wr->imm_data = htonl(w->imm_data);
    } else {
        if (!w->ready) {
            send_wr_prepare(w, &w->prepared);
            w->ready = 1;
        }
        *wr = w->prepared;
    }
    wr->wr_id = w->wr_id;
    wr->sg_list = sg;
    if (fill_sges(sg_list, sg, &wr->num_sge) < 0)
        return -1;
    if ((wr->send_flags & IBV_SEND_INLINE) && ibp_check_inline_sges(wr) < 0)
        return -1;
    if (w->opcode == IBV_WR_BIND_MW) {
        if (w->mw == NULL || w->bind_info == NULL) {
            PyErr_SetString(PyExc_ValueError, "a BIND_MW request needs mw and bind_info");
            return -1;
        }
        struct MWBindInfoObject *info = (struct MWBindInfoObject *)w->bind_info;
        if (ibv_check_open(w->mw) < 0 || MWBindInfo_prepare(info) < 0)
            return -1;
        wr->bind_mw.mw = MW_PTR(w->mw);
        wr->bind_mw.rkey = w->rkey;
        wr->bind_mw.bind_info = info->c;
        return 0;
    }
    /* whether the AH is still open is the post's to check, every time */
    if (w->ah != NULL) {
        if (ibv_check_open(w->ah) < 0)
            return -1;
        wr->wr.ud.ah = AH_PTR(w->ah);
    }
    return 0;
}

int ibp_recv_wr_fill(const RecvWRObject *w, PyObject *sg_list, struct ibv_recv_wr *wr)
{
    wr->wr_id = w->wr_id;
    wr->next = NULL;
    return fill_sges(sg_list, wr->sg_list, &wr->num_sge);
}

PyObject *ibp_post_failed(const char *verb, int rc, Py_ssize_t index, uint64_t wr_id)
{
    return ibv_raise_detail(verb, rc, "%s failed: %s (work request %zd, wr_id=%llu)",
                            verb, strerror(rc), index, (unsigned long long)wr_id);
}

/* wr.ud.ah shares its memory with wr.rdma.remote_addr: a UD request
 * without an AH would hand the provider a remote address as an AH pointer
 * (and an AH on another QP type would become a remote address). */
int ibp_check_ah_fits_qp(PyObject *qp, int has_ah, Py_ssize_t index)
{
    int ud = QP_PTR(qp)->qp_type == IBV_QPT_UD;
    if (ud && !has_ah) {
        PyErr_Format(PyExc_ValueError, "work request %zd has no ah: a UD QP sends "
                     "through an address handle (SendWR(ah=..., remote_qpn=..., "
                     "remote_qkey=...))", index);
        return -1;
    }
    if (!ud && has_ah) {
        PyErr_Format(PyExc_ValueError, "work request %zd has an ah, but only a UD QP "
                     "takes one", index);
        return -1;
    }
    return 0;
}

int ibp_wr_init(void)
{
    return ibp_argspec_init(&SendWR_args) < 0 || ibp_argspec_init(&RecvWR_args) < 0 ? -1 : 0;
}
