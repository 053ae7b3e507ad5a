/*
 * The data path, written by hand: work requests (SGE, SendWR, RecvWR),
 * completions (WC), posting, polling, completion and async events.
 *
 * Work request objects hold C values, not Python attributes, so posting
 * converts them with plain loads; chains of up to STACK_WRS requests and
 * STACK_SGES scatter/gather entries are built on the stack (no malloc per
 * post).  For hot loops, a PostList is converted once and posted as is,
 * and a WCBuffer receives completions with no object per completion
 * (CQ.poll_into); WC objects of poll() come from a free list.  Blocking
 * calls (get_cq_event, get_async_event) release the GIL and mark their
 * object busy so that close() from another thread fails with EBUSY
 * instead of freeing what the blocked call still uses; non-blocking posts
 * and polls keep it (see ibp_hand_QP_post_send).
 */
#include "common.h"

#include <arpa/inet.h>
#include <string.h>

#include "objects.h"

#define STACK_WRS 32
#define STACK_SGES 64

static PyTypeObject *SGE_Type;
static PyTypeObject *SendWR_Type;
static PyTypeObject *RecvWR_Type;
static PyTypeObject *WC_Type;
static PyTypeObject *WCBuffer_Type;
static PyTypeObject *PostList_Type;
static PyTypeObject *PostListEntry_Type;
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
    if (PyLong_Check(v)) {
        /* The common case in one call; anything else (negative, too big)
         * goes the general way, which words the error. */
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow == 0 && x >= 0 && (unsigned long long)x <= max) {
            *out = (uint64_t)x;
            return 0;
        }
        if (x == -1 && PyErr_Occurred())
            return -1;
    }
    return ibp_conv_unsigned(v, name, max, out);
}

/*
 * Constructor arguments by position or keyword, all optional objects like
 * PyArg_ParseTupleAndKeywords("|OOO...") with its error messages, but
 * without making a str of every keyword name on every call (which is what
 * that costs): the names are interned once, and a call's keywords (interned
 * by the compiler) are matched by identity first.
 */
struct argspec {
    const char *fname;
    int nrequired;
    const char *const *names;   /* NULL-terminated */
    PyObject **interned;        /* filled by argspec_init */
    int n;
};

static int argspec_init(struct argspec *spec)
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

static int parse_args(const struct argspec *spec, PyObject *args, PyObject *kwargs,
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

/* ==== SGE ================================================================ */

typedef struct {
    PyObject_HEAD
    struct ibv_sge sge;
    PyObject *owner;     /* keeps the registered memory alive */
} SGEObject;

static const char *const SGE_names[] = {"target", "length", "lkey", "offset", NULL};
static struct argspec SGE_args = {"SGE", 2, SGE_names, NULL, 0};

/* SGE(target, length, lkey, offset) into self (lkey_obj, offset_obj may be NULL). */
static int sge_set(SGEObject *self, PyObject *target, PyObject *length_obj,
                   PyObject *lkey_obj, PyObject *offset_obj)
{
    uint64_t length, lkey = 0, base, offset = 0;
    if (offset_obj != NULL) {
        int64_t off;
        if (ibp_conv_signed(offset_obj, "offset", INT64_MIN, INT64_MAX, &off) < 0)
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
        if (PyLong_Check(length_obj)) {
            /* Any int from 2**32 on, however large, gets the message that says why. */
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(length_obj, &overflow);
            if (overflow > 0 || (overflow == 0 && v > (long long)UINT32_MAX)) {
                PyErr_SetString(PyExc_ValueError, "SGE length must be below 2**32; split it "
                                "into several SGEs");
                return -1;
            }
            if (v == -1 && PyErr_Occurred())
                return -1;
        }
        if (ibp_conv_signed(length_obj, "length", 0, INT64_MAX, &len) < 0)
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
        if (ibp_check_open(target) < 0)
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
            ibp_conv_unsigned(lkey_obj, "lkey", UINT32_MAX, &lkey) < 0)
            return -1;
        Py_INCREF(target);
        Py_XSETREF(self->owner, target);
    } else {
        if (conv_u64(target, "target", UINT64_MAX, &base) < 0)
            return -1;
        if (lkey_obj != NULL && conv_u64(lkey_obj, "lkey", UINT32_MAX, &lkey) < 0)
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

static int SGE_init(PyObject *op, PyObject *args, PyObject *kwargs)
{
    PyObject *v[4];
    if (parse_args(&SGE_args, args, kwargs, v) < 0)
        return -1;
    return sge_set((SGEObject *)op, v[0], v[1], v[2], v[3]);
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
        int overflow = 0;
        long long big = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow > 0 || (overflow == 0 && big > (long long)UINT32_MAX)) {
            PyErr_SetString(PyExc_ValueError, "SGE length must be below 2**32");
            return -1;
        }
        if (big == -1 && PyErr_Occurred())
            return -1;
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

/* BASETYPE: the seed's classes could be subclassed. */
static PyType_Spec SGE_spec = {"ibverbs.SGE", sizeof(SGEObject), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, SGE_slots};

int ibp_sge_from_py(PyObject *obj, struct ibv_sge *out)
{
    if (!PyObject_TypeCheck(obj, SGE_Type)) {
        PyErr_Format(PyExc_TypeError, "expected an SGE, not %s", ibp_type_name(obj));
        return -1;
    }
    *out = ((SGEObject *)obj)->sge;
    return 0;
}

static const char *const MR_sge_names[] = {"length", "offset", NULL};
static struct argspec MR_sge_args = {"sge", 0, MR_sge_names, NULL, 0};

/* MR.sge(length=None, offset=0): SGE(mr, length, None, offset), made
 * directly (no argument tuple, no type call). */
PyObject *ibp_hand_MR_sge(PyObject *self, PyObject *args, PyObject *kwargs)
{
    PyObject *v[2];
    if (parse_args(&MR_sge_args, args, kwargs, v) < 0)
        return NULL;
    PyObject *length = v[0] ? v[0] : Py_None, *offset = v[1];
    if (ibp_check_open(self) < 0)
        return NULL;
    PyObject *offset_obj = offset ? Py_NewRef(offset) : PyLong_FromLong(0);
    if (offset_obj == NULL)
        return NULL;
    PyObject *length_obj;
    if (length == Py_None) {
        int64_t off;
        /* the offset's __index__ may have closed the MR */
        if (ibp_conv_signed(offset_obj, "offset", INT64_MIN, INT64_MAX, &off) < 0 ||
            ibp_check_open(self) < 0) {
            Py_DECREF(offset_obj);
            return NULL;
        }
        size_t total = MR_PTR(self)->length;
        length_obj = PyLong_FromLongLong(off >= 0 && (uint64_t)off <= total
                                         ? (long long)(total - (uint64_t)off) : 0);
    } else {
        length_obj = Py_NewRef(length);
    }
    PyObject *sge = length_obj ? PyType_GenericAlloc(SGE_Type, 0) : NULL;
    if (sge != NULL && sge_set((SGEObject *)sge, self, length_obj, Py_None, offset_obj) < 0)
        Py_CLEAR(sge);
    Py_XDECREF(length_obj);
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
    uint32_t invalidate_rkey;   /* LOCAL_INV, SEND_WITH_INV */
    PyObject *mw;          /* BIND_MW: the MW, or NULL */
    PyObject *bind_info;   /* BIND_MW: an MWBindInfo, or NULL */
    /* The request as posted, less its SGEs, its AH pointer and next: built
     * at the first post after a change (every setter clears `ready`) and
     * copied as is by the posts after it, instead of zeroing 128 bytes and
     * storing each field again.  Only fields the setters have range-checked
     * go in; what can change without a setter (the SGE list and its items,
     * whether the AH, MW or MRs are still open, inline memory) is checked
     * at every post as before. */
    int ready;
    struct ibv_send_wr prepared;
} SendWRObject;

static inline void SendWR_changed(SendWRObject *w)
{
    w->ready = 0;
}

/* A RecvWR is its wr_id and SGEs, nothing to prepare. */
#define RecvWR_changed(w) ((void)(w))

typedef struct {
    PyObject_HEAD
    uint64_t wr_id;
    PyObject *sg_list;
} RecvWRObject;

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
                         ibp_type_name(PyList_GetItem(list, i)));
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
        if (conv_u64(v, #field, max, &x) < 0)                                    \
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
    if (conv_u64(v, "opcode", UINT32_MAX, &x) < 0)
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
        PyErr_Format(PyExc_TypeError, "ah must be an AH or None, not %s", ibp_type_name(v));
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
                     type == MW_Type ? "MW" : "MWBindInfo", ibp_type_name(v));
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
    if (parse_args(&SendWR_args, args, kwargs, v) < 0)
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
    if (parse_args(&RecvWR_args, args, kwargs, v) < 0)
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

static PyType_Spec SendWR_spec = {"ibverbs.SendWR", sizeof(SendWRObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                                  SendWR_slots};
static PyType_Spec RecvWR_spec = {"ibverbs.RecvWR", sizeof(RecvWRObject), 0,
                                  Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                                  RecvWR_slots};

/* ---- building C chains -------------------------------------------------- */

/* SGEs in an sg_list slot (NULL or a list). */
static inline Py_ssize_t sg_count(PyObject *list)
{
    return list != NULL ? PyList_Size(list) : 0;
}

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

/*
 * The work requests of one post: a single request, or any iterable of
 * them (as the seed took).  An exact list or tuple is read in place, with
 * borrowed items: no Python code runs while a chain is built (no callbacks,
 * no __index__), so it cannot change under us.  Anything else (subclasses,
 * generators) is copied into a tuple first, as it may run code when
 * iterated.  An empty one gives n == 0: nothing to post.
 */
struct wr_seq {
    PyObject *one;      /* the single request, or NULL */
    PyObject *seq;      /* the list or tuple read, or NULL */
    PyObject *owned;    /* a tuple copy to release, or NULL */
    int is_list;
    Py_ssize_t n;
    Py_ssize_t nsge;    /* SGEs of all the requests */
};

/* Both kinds of request keep their SGE list at the same place, so that
 * one pass over a sequence can count the SGEs of either. */
_Static_assert(offsetof(SendWRObject, sg_list) == offsetof(RecvWRObject, sg_list),
               "sg_list at one offset");
#define WR_SG_LIST(obj) (((RecvWRObject *)(obj))->sg_list)

static inline PyObject *wr_seq_item(const struct wr_seq *s, Py_ssize_t i)
{
    if (s->one != NULL)
        return s->one;
    return s->is_list ? PyList_GetItem(s->seq, i) : PyTuple_GetItem(s->seq, i);
}

static void wr_seq_done(struct wr_seq *s)
{
    Py_CLEAR(s->owned);
}

static int wr_seq_init(struct wr_seq *s, PyObject *arg, PyTypeObject *type, const char *what)
{
    s->one = s->seq = s->owned = NULL;
    s->is_list = 0;
    s->nsge = 0;
    if (PyObject_TypeCheck(arg, type)) {
        s->one = arg;
        s->n = 1;
        s->nsge = sg_count(WR_SG_LIST(arg));
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
                         ibp_type_name(arg));
            return -1;
        }
        s->owned = s->seq = PySequence_Tuple(iter);
        Py_DECREF(iter);
        if (s->seq == NULL)
            return -1;
    }
    s->n = s->is_list ? PyList_Size(s->seq) : PyTuple_Size(s->seq);
    for (Py_ssize_t i = 0; i < s->n; i++) {
        PyObject *item = wr_seq_item(s, i);
        if (!PyObject_TypeCheck(item, type)) {
            PyErr_Format(PyExc_TypeError, "item %zd must be a %s, not %s", i, what,
                         ibp_type_name(item));
            wr_seq_done(s);
            return -1;
        }
        s->nsge += sg_count(WR_SG_LIST(item));
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
static int check_inline_sges(const struct ibv_send_wr *wr)
{
    if (!(wr->send_flags & IBV_SEND_INLINE))
        return 0;
    for (int i = 0; i < wr->num_sge; i++)
        if (ibp_check_readable(wr->sg_list[i].addr, wr->sg_list[i].length,
                               "inline data of an SGE") < 0)
            return -1;
    return 0;
}

/* An INLINE request's SGEs must not name a closed MR (its buffer export is
 * gone, so the memory may be too). */
static int check_inline_mrs(PyObject *sg_list, const struct ibv_send_wr *wr)
{
    if (!(wr->send_flags & IBV_SEND_INLINE) || sg_list == NULL)
        return 0;
    for (Py_ssize_t j = 0; j < PyList_Size(sg_list); j++) {
        PyObject *owner = ((SGEObject *)PyList_GetItem(sg_list, j))->owner;
        if (owner != NULL && PyObject_TypeCheck(owner, MR_Type) && ibp_check_open(owner) < 0)
            return -1;
    }
    return 0;
}

static inline int is_atomic(uint32_t opcode)
{
    return opcode == IBV_WR_ATOMIC_CMP_AND_SWP || opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
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
    } else if (is_atomic(w->opcode)) {
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
static int send_wr_fill(SendWRObject *w, PyObject *sg_list, struct ibv_send_wr *wr)
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
    if ((wr->send_flags & IBV_SEND_INLINE) && check_inline_sges(wr) < 0)
        return -1;
    if (w->opcode == IBV_WR_BIND_MW) {
        if (w->mw == NULL || w->bind_info == NULL) {
            PyErr_SetString(PyExc_ValueError, "a BIND_MW request needs mw and bind_info");
            return -1;
        }
        struct MWBindInfoObject *info = (struct MWBindInfoObject *)w->bind_info;
        if (ibp_check_open(w->mw) < 0 || MWBindInfo_prepare(info) < 0)
            return -1;
        wr->bind_mw.mw = MW_PTR(w->mw);
        wr->bind_mw.rkey = w->rkey;
        wr->bind_mw.bind_info = info->c;
        return 0;
    }
    /* whether the AH is still open is the post's to check, every time */
    if (w->ah != NULL) {
        if (ibp_check_open(w->ah) < 0)
            return -1;
        wr->wr.ud.ah = AH_PTR(w->ah);
    }
    return 0;
}

static int recv_wr_fill(const RecvWRObject *w, PyObject *sg_list, struct ibv_recv_wr *wr)
{
    wr->wr_id = w->wr_id;
    wr->next = NULL;
    return fill_sges(sg_list, wr->sg_list, &wr->num_sge);
}

static PyObject *post_failed(const char *verb, int rc, Py_ssize_t index, uint64_t wr_id)
{
    return ibp_raise_detail(verb, rc, "%s failed: %s (work request %zd, wr_id=%llu)",
                            verb, strerror(rc), index, (unsigned long long)wr_id);
}

enum post_target { POST_SEND, POST_RECV, POST_SRQ_RECV };

/* wr.ud.ah shares its memory with wr.rdma.remote_addr: a UD request
 * without an AH would hand the provider a remote address as an AH pointer
 * (and an AH on another QP type would become a remote address). */
static int check_ah_fits_qp(PyObject *qp, int has_ah, Py_ssize_t index)
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

static PyObject *postlist_post(PyObject *self, PyObject *list, enum post_target target);

/*
 * post_send / post_recv keep the GIL: on the common providers a post is a
 * few stores and a doorbell (rxe and siw make a system call), and giving
 * the GIL up and taking it back costs more than that, and much more when
 * another thread is waiting for it (it is then handed over, and taking it
 * back waits for that thread).  A PostList can be told to release it
 * (release_gil=True) where a post is slow and other threads must run.
 */
/* The one argument of a METH_FASTCALL | METH_KEYWORDS method (common.h),
 * by position or by its keyword `name` (the seed's names). */
static inline PyObject *one_arg(const char *fname, const char *name, PyObject *const *args,
                                Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames != NULL ? PyTuple_Size(kwnames) : 0;
    if (nargs == 1 && nkw == 0)
        return args[0];
    if (nargs == 0 && nkw == 1) {
        PyObject *key = PyTuple_GetItem(kwnames, 0);
        if (PyUnicode_CompareWithASCIIString(key, name) == 0)
            return args[0];
        PyErr_Format(PyExc_TypeError, "'%U' is an invalid keyword argument for %s()", key, fname);
        return NULL;
    }
    if (nargs + nkw == 0)
        PyErr_Format(PyExc_TypeError, "%s() missing required argument '%s' (pos 1)", fname, name);
    else
        PyErr_Format(PyExc_TypeError, "%s() takes exactly one argument (%zd given)", fname,
                     nargs + nkw);
    return NULL;
}

/*
 * The one request of post_send(wr) or post_send([wr]) (the plain API's
 * common case), or NULL: it takes the short way below, with the same
 * checks and none of a chain's bookkeeping.  An exact list is read in
 * place as wr_seq_init reads it (no Python code runs until the post).
 */
static inline PyObject *single_wr(PyObject *arg, PyTypeObject *type)
{
    if (PyList_CheckExact(arg)) {
        if (PyList_Size(arg) != 1)
            return NULL;
        arg = PyList_GetItem(arg, 0);
    }
    return PyObject_TypeCheck(arg, type) ? arg : NULL;
}

static PyObject *post_send_one(PyObject *self, SendWRObject *w)
{
    struct ibv_send_wr wr, *bad = NULL;
    struct ibv_sge sges[STACK_SGES];
    wr.sg_list = sges;
    if (check_ah_fits_qp(self, w->ah != NULL, 0) < 0 || send_wr_fill(w, w->sg_list, &wr) < 0 ||
        check_inline_mrs(w->sg_list, &wr) < 0)
        return NULL;
    wr.next = NULL;
    int rc = ibv_post_send(QP_PTR(self), &wr, &bad);
    if (rc != 0)
        return post_failed("ibv_post_send", rc, 0, bad ? bad->wr_id : 0);
    Py_RETURN_NONE;
}

static PyObject *post_recv_one(PyObject *self, RecvWRObject *w, int srq)
{
    struct ibv_recv_wr wr, *bad = NULL;
    struct ibv_sge sges[STACK_SGES];
    wr.sg_list = sges;
    if (recv_wr_fill(w, w->sg_list, &wr) < 0)
        return NULL;
    int rc = srq == 2 ? ibv_post_wq_recv(WQ_PTR(self), &wr, &bad)
           : srq ? ibv_post_srq_recv(SRQ_PTR(self), &wr, &bad)
                 : ibv_post_recv(QP_PTR(self), &wr, &bad);
    if (rc != 0)
        return post_failed(srq == 2 ? "ibv_post_wq_recv" : srq ? "ibv_post_srq_recv"
                           : "ibv_post_recv", rc, 0, bad ? bad->wr_id : 0);
    Py_RETURN_NONE;
}

PyObject *ibp_hand_QP_post_send(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    struct wr_seq s;
    struct chain c;
    PyObject *arg = one_arg("post_send", "wrs", args, nargs, kwnames);
    if (arg == NULL)
        return NULL;
    if (ibp_check_open(self) < 0 || ibp_qp_send_idle(self, "post_send") < 0)
        return NULL;
    if (Py_IS_TYPE(arg, PostList_Type))
        return postlist_post(self, arg, POST_SEND);
    PyObject *one = single_wr(arg, SendWR_Type);
    if (one != NULL && sg_count(((SendWRObject *)one)->sg_list) <= STACK_SGES)
        return post_send_one(self, (SendWRObject *)one);
    if (wr_seq_init(&s, arg, SendWR_Type, "SendWR") < 0)
        return NULL;
    if (s.n == 0) {
        wr_seq_done(&s);
        Py_RETURN_NONE;
    }
    PyObject *result = NULL;
    if (chain_alloc(&c, s.n, sizeof(struct ibv_send_wr), s.nsge) < 0)
        goto done;
    struct ibv_send_wr *wrs = c.wrs;
    struct ibv_sge *sge = c.sges;
    for (Py_ssize_t i = 0; i < s.n; i++) {
        struct ibv_send_wr *wr = &wrs[i];
        SendWRObject *w = (SendWRObject *)wr_seq_item(&s, i);
        wr->sg_list = sge;
        if (check_ah_fits_qp(self, w->ah != NULL, i) < 0 || send_wr_fill(w, w->sg_list, wr) < 0 ||
            check_inline_mrs(w->sg_list, wr) < 0)
            goto done;
        wr->next = i + 1 < s.n ? &wrs[i + 1] : NULL;
        sge += wr->num_sge;
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
    if (c.heap != NULL)
        PyMem_Free(c.heap);
    wr_seq_done(&s);
    return result;
}

/* srq: 0 a QP, 1 an SRQ, 2 a WQ (ibv_post_wq_recv) */
static PyObject *post_recv(PyObject *self, PyObject *arg, int srq)
{
    struct wr_seq s;
    struct chain c;
    if (ibp_check_open(self) < 0)
        return NULL;
    if (Py_IS_TYPE(arg, PostList_Type) && srq == 2) {
        PyErr_SetString(PyExc_TypeError, "WQ.post_recv takes a RecvWR or a list of them, not a PostList");
        return NULL;
    }
    if (Py_IS_TYPE(arg, PostList_Type))
        return postlist_post(self, arg, srq ? POST_SRQ_RECV : POST_RECV);
    PyObject *one = single_wr(arg, RecvWR_Type);
    if (one != NULL && sg_count(((RecvWRObject *)one)->sg_list) <= STACK_SGES)
        return post_recv_one(self, (RecvWRObject *)one, srq);
    if (wr_seq_init(&s, arg, RecvWR_Type, "RecvWR") < 0)
        return NULL;
    if (s.n == 0) {
        wr_seq_done(&s);
        Py_RETURN_NONE;
    }
    PyObject *result = NULL;
    if (chain_alloc(&c, s.n, sizeof(struct ibv_recv_wr), s.nsge) < 0)
        goto done;
    struct ibv_recv_wr *wrs = c.wrs;
    struct ibv_sge *sge = c.sges;
    for (Py_ssize_t i = 0; i < s.n; i++) {
        struct ibv_recv_wr *wr = &wrs[i];
        RecvWRObject *w = (RecvWRObject *)wr_seq_item(&s, i);
        wr->sg_list = sge;
        if (recv_wr_fill(w, w->sg_list, wr) < 0)
            goto done;
        wr->next = i + 1 < s.n ? &wrs[i + 1] : NULL;
        sge += wr->num_sge;
    }
    struct ibv_recv_wr *bad = NULL;
    int rc = srq == 2 ? ibv_post_wq_recv(WQ_PTR(self), wrs, &bad)
           : srq ? ibv_post_srq_recv(SRQ_PTR(self), wrs, &bad)
                 : ibv_post_recv(QP_PTR(self), wrs, &bad);
    if (rc != 0) {
        Py_ssize_t index = bad ? bad - wrs : 0;
        post_failed(srq == 2 ? "ibv_post_wq_recv" : srq ? "ibv_post_srq_recv" : "ibv_post_recv", rc, index,
                    bad ? bad->wr_id : 0);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    if (c.heap != NULL)
        PyMem_Free(c.heap);
    wr_seq_done(&s);
    return result;
}

PyObject *ibp_hand_QP_post_recv(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    PyObject *arg = one_arg("post_recv", "wrs", args, nargs, kwnames);
    return arg == NULL ? NULL : post_recv(self, arg, 0);
}

PyObject *ibp_hand_SRQ_post_recv(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    PyObject *arg = one_arg("post_recv", "wrs", args, nargs, kwnames);
    return arg == NULL ? NULL : post_recv(self, arg, 1);
}

PyObject *ibp_hand_WQ_post_recv(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    PyObject *arg = one_arg("post_recv", "wrs", args, nargs, kwnames);
    return arg == NULL ? NULL : post_recv(self, arg, 2);
}

/* ==== prebuilt work request lists ======================================== */

/*
 * A PostList is a chain of work requests converted once into C (struct
 * ibv_send_wr or ibv_recv_wr, linked, with their SGEs, in one block) and
 * posted as is, any number of times: qp.post_send(plist) is one verb call
 * with no conversion and no allocation.  Entries are updated in place
 * through views (plist[i].wr_id = ..., .addr, .length, .remote_addr, ...)
 * or replaced whole (plist[i] = SendWR(...)).  What the requests name (the
 * MRs of their SGEs, AHs) is kept alive with the list; AHs are checked to
 * be open at each post.
 */

enum { PL_SEND, PL_RECV };

struct pl_entry {
    int sge_room;        /* SGEs this entry has room for */
    PyObject *ah;        /* the AH of a UD send, or NULL */
    PyObject *owners;    /* tuple of what the SGEs keep alive, or NULL */
};

typedef struct {
    PyObject_HEAD
    int kind;                  /* PL_SEND or PL_RECV */
    int release_gil;           /* post with the GIL released */
    Py_ssize_t n;
    Py_ssize_t n_ah;           /* entries with an AH */
    Py_ssize_t posting;        /* posts in flight with the GIL released */
    void *wrs;                 /* n work requests, then their SGEs (one block) */
    struct pl_entry *entries;
} PostListObject;

typedef struct {
    PyObject_HEAD
    PyObject *list;            /* the PostList */
    Py_ssize_t index;
} PostListEntryObject;

#define PL_SEND_WR(pl, i) (&((struct ibv_send_wr *)(pl)->wrs)[i])
#define PL_RECV_WR(pl, i) (&((struct ibv_recv_wr *)(pl)->wrs)[i])

static int pl_frozen(PostListObject *pl)
{
    if (pl->posting) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the PostList is being posted (release_gil=True); update it after");
        return -1;
    }
    return 0;
}

static const char *pl_what(const PostListObject *pl)
{
    return pl->kind == PL_SEND ? "SendWR" : "RecvWR";
}

/* Convert request w (of the list's kind, type-checked) into entry i, whose
 * sg_list pointer is already set.  On failure entry i is left as it was.
 *
 * The one allocation (the tuple of SGE owners) comes first: it may run the
 * garbage collector, hence finalizers that could change w.  What is read
 * after it is read under a strong reference and re-checked. */
static int pl_fill(PostListObject *pl, Py_ssize_t i, PyObject *w)
{
    struct pl_entry *e = &pl->entries[i];
    PyObject *sg_list = pl->kind == PL_SEND ? ((SendWRObject *)w)->sg_list
                                            : ((RecvWRObject *)w)->sg_list;
    Py_ssize_t nsge = sg_count(sg_list), nowners = 0;
    for (Py_ssize_t j = 0; j < nsge; j++) {
        PyObject *item = PyList_GetItem(sg_list, j);
        if (PyObject_TypeCheck(item, SGE_Type) && ((SGEObject *)item)->owner != NULL)
            nowners++;
    }
    Py_XINCREF(sg_list);
    PyObject *owners = nowners ? PyTuple_New(nowners) : NULL;
    struct ibv_sge stack_sges[8], *sges = stack_sges;
    int rc = -1;
    if (nowners && owners == NULL)
        goto done;
    if (sg_count(sg_list) != nsge) {
        PyErr_SetString(PyExc_RuntimeError, "sg_list changed while it was converted");
        goto done;
    }
    if (nsge > e->sge_room) {
        PyErr_Format(PyExc_ValueError,
                     "the %s has %zd SGEs; entry %zd of the PostList has room for %d",
                     pl_what(pl), nsge, i, e->sge_room);
        goto done;
    }
    /* Convert into scratch space first, so that a failure changes nothing. */
    if (nsge > 8 && (sges = PyMem_Malloc(nsge * sizeof(*sges))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    union { struct ibv_send_wr send; struct ibv_recv_wr recv; } tmp;
    if (pl->kind == PL_SEND && ((SendWRObject *)w)->opcode == IBV_WR_BIND_MW) {
        /* it would keep raw MW and MR pointers beyond the SendWR's life */
        PyErr_SetString(PyExc_ValueError, "a BIND_MW request cannot be in a PostList: "
                        "post it with QP.post_send");
        goto done;
    }
    if (pl->kind == PL_SEND) {
        tmp.send.sg_list = sges;
        if (send_wr_fill((SendWRObject *)w, sg_list, &tmp.send) < 0)
            goto done;
    } else {
        tmp.recv.sg_list = sges;
        if (recv_wr_fill((RecvWRObject *)w, sg_list, &tmp.recv) < 0)
            goto done;
    }
    Py_ssize_t k = 0;
    for (Py_ssize_t j = 0; j < nsge; j++) {
        PyObject *owner = ((SGEObject *)PyList_GetItem(sg_list, j))->owner;
        if (owner == NULL)
            continue;
        if (k == nowners) {
            PyErr_SetString(PyExc_RuntimeError, "sg_list changed while it was converted");
            goto done;
        }
        PyTuple_SetItem(owners, k++, Py_NewRef(owner));
    }
    if (k != nowners) {
        PyErr_SetString(PyExc_RuntimeError, "sg_list changed while it was converted");
        goto done;
    }
    /* The allocations above may have run the GC, hence other threads: one
     * of them may be posting this list with the GIL released now. */
    if (pl_frozen(pl) < 0)
        goto done;
    PyObject *ah = pl->kind == PL_SEND ? ((SendWRObject *)w)->ah : NULL;
    if (pl->kind == PL_SEND) {
        struct ibv_send_wr *wr = PL_SEND_WR(pl, i);
        struct ibv_sge *room = wr->sg_list;
        struct ibv_send_wr *next = wr->next;
        *wr = tmp.send;
        wr->sg_list = room;
        wr->next = next;
        memcpy(room, sges, nsge * sizeof(*sges));
    } else {
        struct ibv_recv_wr *wr = PL_RECV_WR(pl, i);
        struct ibv_sge *room = wr->sg_list;
        struct ibv_recv_wr *next = wr->next;
        *wr = tmp.recv;
        wr->sg_list = room;
        wr->next = next;
        memcpy(room, sges, nsge * sizeof(*sges));
    }
    pl->n_ah += (ah != NULL) - (e->ah != NULL);
    Py_XINCREF(ah);
    Py_XSETREF(e->ah, ah);
    Py_XSETREF(e->owners, owners);
    owners = NULL;
    rc = 0;
done:
    if (sges != stack_sges)
        PyMem_Free(sges);
    Py_XDECREF(owners);
    Py_XDECREF(sg_list);
    return rc;
}

static PyObject *PostList_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"wrs", "release_gil", NULL};
    PyObject *arg;
    int release_gil = 0;
    struct wr_seq s;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$p:PostList", kwlist, &arg, &release_gil))
        return NULL;
    int kind;
    if (PyObject_TypeCheck(arg, SendWR_Type)) {
        kind = PL_SEND;
    } else if (PyObject_TypeCheck(arg, RecvWR_Type)) {
        kind = PL_RECV;
    } else {
        PyObject *first = NULL;
        if ((PyList_Check(arg) && PyList_Size(arg) > 0 && (first = PyList_GetItem(arg, 0))) ||
            (PyTuple_Check(arg) && PyTuple_Size(arg) > 0 && (first = PyTuple_GetItem(arg, 0)))) {
            kind = PyObject_TypeCheck(first, RecvWR_Type) ? PL_RECV : PL_SEND;
        } else if (PyList_Check(arg) || PyTuple_Check(arg)) {
            PyErr_SetString(PyExc_ValueError, "a PostList needs at least one work request");
            return NULL;
        } else {
            PyErr_Format(PyExc_TypeError, "PostList needs SendWR or RecvWR objects (one, or a "
                         "list of them), not %s", ibp_type_name(arg));
            return NULL;
        }
    }
    if (wr_seq_init(&s, arg, kind == PL_SEND ? SendWR_Type : RecvWR_Type,
                    kind == PL_SEND ? "SendWR" : "RecvWR") < 0)
        return NULL;
    if (s.seq != NULL && s.owned == NULL) {
        /* Building allocates (and may so run finalizers): read a snapshot. */
        s.owned = s.seq = PySequence_Tuple(s.seq);
        s.is_list = 0;
        if (s.seq == NULL)
            return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    PostListObject *pl = (PostListObject *)alloc(type, 0);
    if (pl == NULL)
        goto fail;
    pl->kind = kind;
    pl->release_gil = release_gil;
    size_t wr_size = kind == PL_SEND ? sizeof(struct ibv_send_wr) : sizeof(struct ibv_recv_wr);
    Py_ssize_t nsge = 0;
    pl->entries = PyMem_Calloc(s.n, sizeof(struct pl_entry));
    if (pl->entries == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    pl->n = s.n;
    for (Py_ssize_t i = 0; i < s.n; i++) {
        PyObject *w = wr_seq_item(&s, i);
        Py_ssize_t k = sg_count(kind == PL_SEND ? ((SendWRObject *)w)->sg_list
                                                : ((RecvWRObject *)w)->sg_list);
        if (k > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "too many SGEs");
            goto fail;
        }
        pl->entries[i].sge_room = (int)k;
        nsge += k;
    }
    pl->wrs = PyMem_Calloc(1, s.n * wr_size + (nsge ? nsge : 1) * sizeof(struct ibv_sge));
    if (pl->wrs == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    struct ibv_sge *sge = (struct ibv_sge *)((char *)pl->wrs + s.n * wr_size);
    for (Py_ssize_t i = 0; i < s.n; i++) {
        if (kind == PL_SEND) {
            PL_SEND_WR(pl, i)->sg_list = sge;
            PL_SEND_WR(pl, i)->next = i + 1 < s.n ? PL_SEND_WR(pl, i + 1) : NULL;
        } else {
            PL_RECV_WR(pl, i)->sg_list = sge;
            PL_RECV_WR(pl, i)->next = i + 1 < s.n ? PL_RECV_WR(pl, i + 1) : NULL;
        }
        sge += pl->entries[i].sge_room;
        if (pl_fill(pl, i, wr_seq_item(&s, i)) < 0)
            goto fail;
    }
    wr_seq_done(&s);
    return (PyObject *)pl;
fail:
    wr_seq_done(&s);
    Py_XDECREF(pl);
    return NULL;
}

static int PostList_traverse(PyObject *op, visitproc visit, void *arg)
{
    PostListObject *pl = (PostListObject *)op;
    if (pl->entries != NULL)
        for (Py_ssize_t i = 0; i < pl->n; i++) {
            Py_VISIT(pl->entries[i].ah);
            Py_VISIT(pl->entries[i].owners);
        }
    return 0;
}

static int PostList_clear(PyObject *op)
{
    PostListObject *pl = (PostListObject *)op;
    if (pl->entries != NULL)
        for (Py_ssize_t i = 0; i < pl->n; i++) {
            if (pl->entries[i].ah != NULL)
                pl->n_ah--;
            Py_CLEAR(pl->entries[i].ah);
            Py_CLEAR(pl->entries[i].owners);
        }
    return 0;
}

static void PostList_dealloc(PyObject *op)
{
    PostListObject *pl = (PostListObject *)op;
    PyObject_GC_UnTrack(op);
    PostList_clear(op);
    PyMem_Free(pl->entries);
    PyMem_Free(pl->wrs);
    generic_dealloc(op);
}

/* Every AH still open (a closed one would be a dangling pointer). */
static int pl_check_ahs(PostListObject *pl)
{
    for (Py_ssize_t i = 0; i < pl->n; i++) {
        PyObject *ah = pl->entries[i].ah;
        if (ah != NULL && ibp_check_open(ah) < 0)
            return -1;
    }
    return 0;
}

/* The provider copies INLINE data from the SGEs' addresses at post time:
 * their MRs must still be open (MR.close() drops the export that kept a
 * Python buffer in place) and the memory readable. */
static int check_inline_owners(PyObject *sg_owners, const struct ibv_send_wr *wr)
{
    if (!(wr->send_flags & IBV_SEND_INLINE))
        return 0;
    Py_ssize_t n = sg_owners == NULL ? 0 : PyTuple_Size(sg_owners);
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *owner = PyTuple_GetItem(sg_owners, j);
        if (PyObject_TypeCheck(owner, MR_Type) && ibp_check_open(owner) < 0)
            return -1;
    }
    return check_inline_sges(wr);
}

static int pl_check_inline(PostListObject *pl)
{
    if (pl->kind != PL_SEND)
        return 0;
    for (Py_ssize_t i = 0; i < pl->n; i++)
        if (check_inline_owners(pl->entries[i].owners, PL_SEND_WR(pl, i)) < 0)
            return -1;
    return 0;
}

/* What a release_gil post reads besides the QP: the AHs of its entries and
 * the MRs of their SGEs, busy (close() says EBUSY) while it runs. */
static void pl_hold(PostListObject *pl, int delta)
{
    for (Py_ssize_t i = 0; i < pl->n; i++) {
        struct pl_entry *e = &pl->entries[i];
        if (e->ah != NULL)
            IBP_HANDLE(e->ah)->busy += delta;
        Py_ssize_t n = e->owners == NULL ? 0 : PyTuple_Size(e->owners);
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *owner = PyTuple_GetItem(e->owners, j);
            if (PyObject_TypeCheck(owner, MR_Type))
                IBP_HANDLE(owner)->busy += delta;
        }
    }
}

static PyObject *postlist_post(PyObject *self, PyObject *list, enum post_target target)
{
    PostListObject *pl = (PostListObject *)list;
    int want = target == POST_SEND ? PL_SEND : PL_RECV;
    if (pl->kind != want) {
        PyErr_Format(PyExc_TypeError, "%s needs a PostList of %s, not of %s",
                     target == POST_SEND ? "post_send" : "post_recv",
                     want == PL_SEND ? "SendWR" : "RecvWR", pl_what(pl));
        return NULL;
    }
    if (target == POST_SEND && pl->n_ah != (QP_PTR(self)->qp_type == IBV_QPT_UD ? pl->n : 0)) {
        for (Py_ssize_t i = 0; i < pl->n; i++)
            if (check_ah_fits_qp(self, pl->entries[i].ah != NULL, i) < 0)
                return NULL;
    }
    if (pl->n_ah > 0 && pl_check_ahs(pl) < 0)
        return NULL;
    if (pl_check_inline(pl) < 0)
        return NULL;
    void *handle = IBP_HANDLE(self)->ptr;
    struct ibv_send_wr *bad_send = NULL;
    struct ibv_recv_wr *bad_recv = NULL;
    int rc;
    if (!pl->release_gil) {
        rc = target == POST_SEND ? ibv_post_send(handle, pl->wrs, &bad_send)
           : target == POST_RECV ? ibv_post_recv(handle, pl->wrs, &bad_recv)
           : ibv_post_srq_recv(handle, pl->wrs, &bad_recv);
    } else {
        /* The QP/SRQ is busy (close() says EBUSY) and the list frozen
         * (updates raise) until the post returns. */
        ibp_busy_enter(self);
        pl->posting++;
        pl_hold(pl, 1);
        Py_BEGIN_ALLOW_THREADS
        rc = target == POST_SEND ? ibv_post_send(handle, pl->wrs, &bad_send)
           : target == POST_RECV ? ibv_post_recv(handle, pl->wrs, &bad_recv)
           : ibv_post_srq_recv(handle, pl->wrs, &bad_recv);
        Py_END_ALLOW_THREADS
        pl_hold(pl, -1);
        pl->posting--;
        ibp_busy_leave(self);
    }
    if (rc != 0) {
        if (target == POST_SEND)
            return post_failed("ibv_post_send", rc,
                               bad_send ? bad_send - PL_SEND_WR(pl, 0) : 0,
                               bad_send ? bad_send->wr_id : 0);
        return post_failed(target == POST_RECV ? "ibv_post_recv" : "ibv_post_srq_recv", rc,
                           bad_recv ? bad_recv - PL_RECV_WR(pl, 0) : 0,
                           bad_recv ? bad_recv->wr_id : 0);
    }
    Py_RETURN_NONE;
}

static Py_ssize_t PostList_length(PyObject *op)
{
    return ((PostListObject *)op)->n;
}

static PyObject *PostList_item(PyObject *op, Py_ssize_t i)
{
    PostListObject *pl = (PostListObject *)op;
    if (i < 0 || i >= pl->n) {
        PyErr_SetString(PyExc_IndexError, "PostList index out of range");
        return NULL;
    }
    PostListEntryObject *e = (PostListEntryObject *)PyType_GenericAlloc(PostListEntry_Type, 0);
    if (e == NULL)
        return NULL;
    e->list = Py_NewRef(op);
    e->index = i;
    return (PyObject *)e;
}

static int PostList_ass_item(PyObject *op, Py_ssize_t i, PyObject *value)
{
    PostListObject *pl = (PostListObject *)op;
    if (i < 0 || i >= pl->n) {
        PyErr_SetString(PyExc_IndexError, "PostList index out of range");
        return -1;
    }
    if (value == NULL) {
        PyErr_SetString(PyExc_TypeError, "PostList entries cannot be deleted");
        return -1;
    }
    PyTypeObject *want = pl->kind == PL_SEND ? SendWR_Type : RecvWR_Type;
    if (!PyObject_TypeCheck(value, want)) {
        PyErr_Format(PyExc_TypeError, "PostList entry must be a %s, not %s", pl_what(pl),
                     ibp_type_name(value));
        return -1;
    }
    if (pl_frozen(pl) < 0)
        return -1;
    return pl_fill(pl, i, value);
}

static PyObject *PostList_get_release_gil(PyObject *op, void *c)
{
    (void)c;
    return PyBool_FromLong(((PostListObject *)op)->release_gil);
}

static int PostList_set_release_gil(PyObject *op, PyObject *v, void *c)
{
    (void)c;
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete release_gil");
        return -1;
    }
    int truth = PyObject_IsTrue(v);
    if (truth < 0)
        return -1;
    ((PostListObject *)op)->release_gil = truth;
    return 0;
}

static PyObject *PostList_get_kind(PyObject *op, void *c)
{
    (void)c;
    return Py_NewRef((PyObject *)(((PostListObject *)op)->kind == PL_SEND ? SendWR_Type
                                                                          : RecvWR_Type));
}

static PyObject *PostList_repr(PyObject *op)
{
    PostListObject *pl = (PostListObject *)op;
    return PyUnicode_FromFormat("PostList(%zd %s%s)", pl->n, pl_what(pl),
                                pl->release_gil ? ", release_gil=True" : "");
}

static PyGetSetDef PostList_getset[] = {
    {"release_gil", PostList_get_release_gil, PostList_set_release_gil,
     "Post with the GIL released (default False; see the class doc).", NULL},
    {"kind", PostList_get_kind, NULL, "SendWR or RecvWR: what the list holds.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot PostList_slots[] = {
    {Py_tp_doc, (void *)
     "PostList(wrs, *, release_gil=False)\n--\n\n"
     "A chain of work requests converted once into C and posted many times.\n\n"
     "wrs is a SendWR or RecvWR, or a non-empty list of them (all of one kind).  "
     "qp.post_send(plist) (or qp.post_recv / srq.post_recv for RecvWR) posts the whole "
     "chain in one verb call, with no conversion and no allocation.\n\n"
     "plist[i] is a live view of entry i (PostListEntry): setting its wr_id, "
     "send_flags, remote_addr, rkey, imm_data, compare_add, swap, remote_qpn, "
     "remote_qkey, or addr / length / lkey (of its first SGE) writes the C request "
     "directly.  plist[i] = wr converts a whole new request into entry i (as many "
     "SGEs as the entry was built with, or fewer).  The MRs and AHs the requests "
     "name are kept alive with the list; an AH closed since, or the MR of an INLINE "
     "entry's SGE, is reported at the next post (VerbsError EBADF).\n\n"
     "release_gil: post with the GIL released.  Off by default: on most providers a "
     "post is a few stores and a doorbell, cheaper than giving up the GIL.  Turn it "
     "on where a post is a slow system call (rxe, siw) and other Python threads must "
     "run meanwhile; while such a post is in flight the QP refuses close() (EBUSY) "
     "and the list refuses updates (RuntimeError)."},
    {Py_tp_new, (void *)PostList_new},
    {Py_tp_dealloc, (void *)PostList_dealloc},
    {Py_tp_traverse, (void *)PostList_traverse},
    {Py_tp_clear, (void *)PostList_clear},
    {Py_tp_repr, (void *)PostList_repr},
    {Py_tp_getset, PostList_getset},
    {Py_sq_length, (void *)PostList_length},
    {Py_sq_item, (void *)PostList_item},
    {Py_sq_ass_item, (void *)PostList_ass_item},
    {0, NULL},
};

static PyType_Spec PostList_spec = {"ibverbs.PostList", sizeof(PostListObject), 0,
                                    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, PostList_slots};

/* ---- PostListEntry: a view of one entry --------------------------------- */

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
    generic_dealloc(op);
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
    if (conv_u64(v, name, max, x) < 0)
        return -1;
    return pl_frozen(ENTRY_PL(op));
}

/* Which member of the wr union a send request uses. */
enum { WR_RDMA, WR_ATOMIC, WR_UD };

static int entry_union(PyObject *op)
{
    PostListObject *pl = ENTRY_PL(op);
    if (pl->entries[ENTRY_I(op)].ah != NULL)
        return WR_UD;
    return is_atomic(PL_SEND_WR(pl, ENTRY_I(op))->opcode) ? WR_ATOMIC : WR_RDMA;
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
    return pl->kind == PL_SEND ? check_inline_sges(PL_SEND_WR(pl, ENTRY_I(op))) : 0;
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
    if (check_inline_sges(wr) < 0) {
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

static PyType_Spec PostListEntry_spec = {"ibverbs.PostListEntry", sizeof(PostListEntryObject),
                                         0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
                                         PostListEntry_slots};

/* ==== completions ======================================================== */

typedef struct {
    PyObject_HEAD
    struct ibv_wc wc;
} WCObject;

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

static PyObject *wc_new(const struct ibv_wc *wc)
{
    PyObject *op = wc_nfree > 0 ? wc_free[--wc_nfree] : PyObject_Malloc(sizeof(WCObject));
    if (op == NULL)
        return PyErr_NoMemory();
    PyObject_Init(op, WC_Type);   /* type (a reference: heap type) and refcount 1 */
    ((WCObject *)op)->wc = *wc;
    return op;
}

static void WC_dealloc(PyObject *op)
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
static PyObject *count_result(long n)
{
    static PyObject *counts[256];
    if (n < 0 || n >= 256)
        return PyLong_FromLong(n);
    if (counts[n] == NULL && (counts[n] = PyLong_FromLong(n)) == NULL)
        return NULL;
    return Py_NewRef(counts[n]);
}

#define WC_INT(field, expr)                                                      \
    static PyObject *WC_get_##field(PyObject *op, void *c)                       \
    {                                                                            \
        const struct ibv_wc *wc = &((WCObject *)op)->wc;                         \
        (void)c;                                                                 \
        unsigned long long v = (unsigned long long)(expr);                       \
        return v < 256 ? count_result((long)v) : PyLong_FromUnsignedLongLong(v); \
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

/* The fields a completion loop reads, found by the identity of the
 * (interned) attribute name before the generic lookup: under emulation the
 * type's MRO lookup and descriptor call cost more than the field. */
static PyObject *wc_hot_names[4];

static PyObject *WC_getattro(PyObject *op, PyObject *name)
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
    return ibp_raise_completion(op);
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
    {Py_tp_dealloc, (void *)WC_dealloc},
    {Py_tp_repr, (void *)WC_repr},
    {Py_tp_getattro, (void *)WC_getattro},
    {Py_tp_getset, WC_getset},
    {Py_tp_methods, WC_methods},
    {0, NULL},
};

static PyType_Spec WC_spec = {"ibverbs.WC", sizeof(WCObject), 0,
                              Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
                              WC_slots};

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

/* num_entries of poll(): an int in 1..INT32_MAX.  Plain ints take a short
 * path; anything else (IntEnum, __index__) the general conversion. */
static int num_entries_arg(PyObject *arg, int *out)
{
    /* A polling loop passes the same int object every time (small ints are
     * shared): remember the last one converted.  Exact ints only, which
     * cannot change. */
    static PyObject *last_arg;
    static int last_num;
    if (arg == last_arg) {
        *out = last_num;
        return 0;
    }
    if (PyLong_CheckExact(arg)) {
        long v = PyLong_AsLong(arg);
        if (v > 0 && v <= INT32_MAX) {
            *out = last_num = (int)v;
            Py_XSETREF(last_arg, Py_NewRef(arg));
            return 0;
        }
        if (v == -1 && PyErr_Occurred())
            PyErr_Clear();   /* too big for a long: the general path says so */
    }
    uint64_t num;
    if (ibp_conv_unsigned(arg, "num_entries", INT32_MAX, &num) < 0)
        return -1;
    if (num == 0) {
        PyErr_SetString(PyExc_ValueError, "num_entries must be positive");
        return -1;
    }
    *out = (int)num;
    return 0;
}

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
        PyObject *wc = wc_new(&wcs[i]);
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
        PyObject *wc = wc_new(&wcs[i]);
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
PyObject *ibp_hand_CQ_poll(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    int num;
    struct ibv_wc stack[STACK_WCS], *wcs = stack;
    PyObject *arg = one_arg("poll", "num_entries", args, nargs, kwnames);
    if (arg == NULL)
        return NULL;
    /* Converted first: an __index__ may close the CQ. */
    if (num_entries_arg(arg, &num) < 0)
        return NULL;
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

/* ==== WCBuffer =========================================================== */

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
    if (cap_obj != NULL && ibp_conv_unsigned(cap_obj, "capacity", WCBUF_MAX, &cap) < 0)
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
    generic_dealloc(op);
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
        return v < 256 ? count_result((long)v) : PyLong_FromUnsignedLongLong(v); \
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
            PyObject *wc = wc_new(&b->wc[i]);
            if (wc == NULL)
                return -1;
            ibp_raise_completion(wc);
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
        if (ibp_conv_unsigned(arg, "opcode", UINT32_MAX, &opcode) < 0)
            return NULL;
        if (PyLong_Check(arg)) {
            Py_XSETREF(last_arg, Py_NewRef(arg));
            last_opcode = opcode;
        }
    }
    long k = 0;
    for (int i = 0; i < b->count; i++)
        k += b->wc[i].opcode == opcode;
    return count_result(k);
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
    return wc_new(&b->wc[i]);
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

static PyType_Spec WCBuffer_spec = {"ibverbs.WCBuffer", sizeof(WCBufferObject), 0,
                                    Py_TPFLAGS_DEFAULT, WCBuffer_slots};

PyObject *ibp_hand_CQ_poll_into(PyObject *self, PyObject *arg)
{
    if (ibp_check_open(self) < 0 || ibp_cq_check_not_polling(self) < 0)
        return NULL;
    if (!Py_IS_TYPE(arg, WCBuffer_Type)) {
        PyErr_Format(PyExc_TypeError, "poll_into needs a WCBuffer, not %s", ibp_type_name(arg));
        return NULL;
    }
    WCBufferObject *b = (WCBufferObject *)arg;
    int n = ibv_poll_cq(CQ_PTR(self), b->capacity, b->wc);
    if (n < 0) {
        b->count = 0;
        return ibp_raise("ibv_poll_cq", ibp_error_code(n));
    }
    b->count = n;
    if (b->raise_on_error && n > 0 && wcbuf_check(b) < 0)
        return NULL;
    return count_result(n);
}

PyObject *ibp_hand_CQ_req_notify(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"solicited_only", NULL};
    int solicited_only = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:req_notify", kwlist, &solicited_only))
        return NULL;
    if (ibp_check_open(self) < 0)
        return NULL;
    int rc = ibv_req_notify_cq(CQ_PTR(self), solicited_only);
    if (rc != 0)
        return ibp_raise("ibv_req_notify_cq", ibp_error_code(rc));
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
PyObject *ibp_hand_CQ_ack_events(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"nevents", NULL};
    PyObject *nevents_obj = NULL;
    uint64_t nevents = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:ack_events", kwlist, &nevents_obj))
        return NULL;
    if (nevents_obj != NULL &&
        ibp_conv_unsigned(nevents_obj, "nevents", UINT32_MAX, &nevents) < 0)
        return NULL;
    if (nevents == 0) {
        PyErr_SetString(PyExc_ValueError, "nevents must be positive");
        return NULL;
    }
    if (ibp_check_open(self) < 0)
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

PyObject *ibp_hand_CompChannel_get_cq_event(PyObject *self, PyObject *unused)
{
    (void)unused;
    for (;;) {
        struct ibv_cq *cq = NULL;
        void *cq_context = NULL;
        int rc, err = 0;
        if (ibp_check_open(self) < 0)
            return NULL;
        struct ibv_comp_channel *channel = CompChannel_PTR(self);
        ibp_busy_enter(self);
        Py_BEGIN_ALLOW_THREADS
        errno = 0;
        rc = ibv_get_cq_event(channel, &cq, &cq_context);
        err = errno;
        if (rc == 0)
            ibv_ack_cq_events(cq, 1);
        Py_END_ALLOW_THREADS
        ibp_busy_leave(self);
        if (rc != 0)
            return ibp_raise("ibv_get_cq_event", err ? err : EIO);
        PyObject *obj = ibp_registry_get(cq);
        if (obj != NULL && !PyObject_TypeCheck(obj, CQ_Type))
            Py_CLEAR(obj);   /* the registry maps QPs, SRQs, CM IDs too */
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
                                      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
                                      AsyncEvent_slots};

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
PyObject *ibp_hand_Context_get_async_event(PyObject *self, PyObject *unused)
{
    struct ibv_async_event event;
    int rc, err = 0;
    (void)unused;
    if (ibp_check_open(self) < 0)
        return NULL;
    struct ibv_context *ctx = Context_PTR(self);
    ibp_busy_enter(self);
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = ibv_get_async_event(ctx, &event);
    err = errno;
    if (rc == 0)
        ibv_ack_async_event(&event);
    Py_END_ALLOW_THREADS
    ibp_busy_leave(self);
    if (rc != 0)
        return ibp_raise("ibv_get_async_event", err ? err : EIO);
    PyObject *op = PyType_GenericAlloc(AsyncEvent_Type, 0);
    if (op == NULL)
        return NULL;
    AsyncEventObject *ev = (AsyncEventObject *)op;
    ev->event = event;
    void *element = event_element(&event);
    ev->element = element ? ibp_registry_get(element) : NULL;
    ev->acked = 0;
    return op;
}

PyObject *ibp_hand_Context_ack_async_event(PyObject *self, PyObject *const *args,
                                           Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *arg = one_arg("ack_async_event", "ev", args, nargs, kwnames);
    (void)self;
    if (arg == NULL)
        return NULL;
    if (!PyObject_TypeCheck(arg, AsyncEvent_Type)) {
        PyErr_Format(PyExc_TypeError, "expected an AsyncEvent, not %s", ibp_type_name(arg));
        return NULL;
    }
    ((AsyncEventObject *)arg)->acked = 1;
    Py_RETURN_NONE;
}

/* ==== registration ======================================================= */

int ibp_datapath_init(PyObject *module)
{
    static const char *const hot[4] = {"status", "opcode", "wr_id", "byte_len"};
    for (int i = 0; i < 4; i++)
        if ((wc_hot_names[i] = PyUnicode_InternFromString(hot[i])) == NULL)
            return -1;
    if (argspec_init(&SGE_args) < 0 || argspec_init(&SendWR_args) < 0 ||
        argspec_init(&RecvWR_args) < 0 || argspec_init(&MR_sge_args) < 0)
        return -1;
    struct { PyTypeObject **type; PyType_Spec *spec; const char *name; } types[] = {
        {&SGE_Type, &SGE_spec, "SGE"},
        {&SendWR_Type, &SendWR_spec, "SendWR"},
        {&RecvWR_Type, &RecvWR_spec, "RecvWR"},
        {&WC_Type, &WC_spec, "WC"},
        {&WCBuffer_Type, &WCBuffer_spec, "WCBuffer"},
        {&PostList_Type, &PostList_spec, "PostList"},
        {&PostListEntry_Type, &PostListEntry_spec, "PostListEntry"},
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
