/*
 * SendWR and RecvWR: work requests as Python objects holding C values,
 * and their conversion into C for a post.  Their accessors and type
 * shells are generated (generated/sendwr.c.h, recvwr.c.h, from
 * spec/datapath/records.yaml); here are sg_list and the repr.
 *
 * A SendWR keeps each field of struct ibv_send_wr it shows in a member of
 * its own: the members of the wr union (rdma, atomic, ud) share memory in
 * C, a request may set all of them, and the post fills the one its opcode
 * and QP type use.  imm_data is kept in network order, as in C.
 */
#include "common.h"

#include "objects.h"

#include "sendwr.c.h"
#include "recvwr.c.h"

/* Every setter but wr_id's (stored at each post) calls it: the request
 * prepared for the post (w->prepared) is built again at the next one. */
static inline void ibp_SendWR_changed(SendWRObject *w)
{
    w->ready = 0;
    w->sges.epoch = 0;
}

/* RecvWR's setters but wr_id's, and sg_list's getter. */
static inline void ibp_RecvWR_changed(RecvWRObject *w)
{
    w->sges.epoch = 0;
}

/*
 * sg_list must be None or a sequence of SGE.  As in the seed, the
 * constructor stores a copy (copy=1) and assignment stores the list itself
 * (a list's later appends are posted); anything else becomes a new list.
 * Items are checked here and again when posted (fill_sges), since the list
 * can change in between.
 */
static int ibp_set_sg_list(PyObject **slot, PyObject *value, int copy)
{
    if (value == NULL || value == Py_None) {
        Py_CLEAR(*slot);
        return 0;
    }
    /* An exact list's copy by slicing: PySequence_List goes through an
     * empty list and list.extend. */
    PyObject *list = !PyList_CheckExact(value) ? PySequence_List(value)
                     : copy ? PyList_GetSlice(value, 0, PY_SSIZE_T_MAX) : Py_NewRef(value);
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

/* A request without SGEs holds no list until sg_list is read: then an
 * empty one, kept, so that wr.sg_list.append(sge) is what gets posted. */
static PyObject *ibp_get_sg_list(PyObject **slot)
{
    if (*slot == NULL && (*slot = PyList_New(0)) == NULL)
        return NULL;
    return Py_NewRef(*slot);
}

static PyObject *ibp_SendWR_repr(PyObject *op)
{
    SendWRObject *s = (SendWRObject *)op;
    return PyUnicode_FromFormat("SendWR(wr_id=%llu, opcode=%u, send_flags=%u, sg_list=%R)",
                                (unsigned long long)s->wr_id, s->opcode, s->send_flags,
                                s->sg_list ? s->sg_list : Py_None);
}

static PyObject *ibp_RecvWR_repr(PyObject *op)
{
    RecvWRObject *r = (RecvWRObject *)op;
    return PyUnicode_FromFormat("RecvWR(wr_id=%llu, sg_list=%R)",
                                (unsigned long long)r->prepared.wr_id,
                                r->sg_list ? r->sg_list : Py_None);
}

/* ---- work requests into C (post.c, postlist.c) -------------------------- */

/* Both kinds of request keep their SGE list at the same place, so that
 * one pass over a sequence can count the SGEs of either. */
_Static_assert(offsetof(SendWRObject, sg_list) == offsetof(RecvWRObject, sg_list),
               "sg_list at one offset");
#define WR_SG_LIST(obj) (((RecvWRObject *)(obj))->sg_list)

int ibp_bad_wr_item(Py_ssize_t i, const char *what, PyObject *item)
{
    PyErr_Format(PyExc_TypeError, "item %zd must be a %s, not %s", i, what, ibp_type_name(item));
    return -1;
}

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
        PyObject *item = ibp_wr_seq_item(s, i);
        if (!PyObject_TypeCheck(item, type)) {
            ibp_wr_seq_done(s);
            return ibp_bad_wr_item(i, what, item);
        }
        s->nsge += ibp_sg_count(WR_SG_LIST(item));
    }
    return 0;
}

/* The SGEs of list into out, which has room for `room`: 1 (and nothing
 * written) when they do not fit, so that a caller can read a request once
 * before it knows how many SGEs the whole chain has. */
static inline int fill_sges(PyObject *list, struct ibv_sge *out, Py_ssize_t room, int *num)
{
    *num = 0;
    if (list == NULL)
        return 0;
    Py_ssize_t n = PyList_Size(list);
    if (n > room)
        return 1;
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
        if (ibp_check_readable(wr->sg_list[i].addr, wr->sg_list[i].length,
                               "inline data of an SGE") < 0)
            return -1;
    return 0;
}

/* The fields of w that its setters checked, into *wr (w->prepared): the
 * SGEs, the AH pointer, wr_id and next are the post's to fill. */
static void send_wr_prepare(const SendWRObject *w, struct ibv_send_wr *wr)
{
    memset(wr, 0, sizeof(*wr));
    wr->opcode = w->opcode;
    wr->send_flags = w->send_flags;
    if (w->opcode == IBV_WR_LOCAL_INV || w->opcode == IBV_WR_SEND_WITH_INV)
        wr->invalidate_rkey = w->invalidate_rkey;   /* shares imm_data's place */
    else
        wr->imm_data = w->imm_data;     /* network order already */
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

/*
 * The prepared fields into *wr.  The common opcodes take only sg_list
 * through the qp_type union (wr_id and next are the post's to fill, and
 * only BIND_MW and TSO read the union after it): under emulation every
 * load and store costs, and a post converts 32 requests per call.  Any
 * other opcode gets the whole request, zeroes included.  sg_list and
 * num_sge are those of the SGEs kept (ibp_wr_kept), or the filling post's
 * to overwrite.
 */
#define PREPARED_FROM offsetof(struct ibv_send_wr, sg_list)
#define PREPARED_TO offsetof(struct ibv_send_wr, bind_mw)
static inline void copy_prepared(const SendWRObject *w, struct ibv_send_wr *wr)
{
    switch (w->opcode) {
    case IBV_WR_RDMA_WRITE: case IBV_WR_RDMA_WRITE_WITH_IMM: case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM: case IBV_WR_RDMA_READ: case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD: case IBV_WR_LOCAL_INV: case IBV_WR_SEND_WITH_INV:
        memcpy((char *)wr + PREPARED_FROM, (const char *)&w->prepared + PREPARED_FROM,
               PREPARED_TO - PREPARED_FROM);
        return;
    default:
        *wr = w->prepared;
    }
}

/*
 * After a post read a request's n SGEs (sges) from sg_list, its own list:
 * keep their values in c and mark each SGE as held by a cache, so that
 * the posts after it send the request as it is (ibp_wr_kept).  0 when
 * they cannot be kept: too many, no list (a request without SGEs is rare
 * enough to read each time), the list is not the request's alone, or this
 * is a fork() child (a kept request's post makes no fork check, post.c).
 */
static int keep_sges(PyObject *own, PyObject *sg_list, const struct ibv_sge *sges, int n,
                     struct ibp_sge_cache *c)
{
    if (n > IBP_CACHED_SGES || own == NULL || sg_list != own || Py_REFCNT(own) != 1 || ibp_forked)
        return 0;
    for (int i = 0; i < n; i++) {
        ((SGEObject *)PyList_GetItem(own, i))->cached = 1;
        c->sge[i] = sges[i];
    }
    c->epoch = ibp_sge_epoch;
    return 1;
}

/* A kept SendWR (ibp_wr_kept) into *wr, its SGEs those it keeps; the
 * caller sets next. */
void ibp_send_wr_copy_kept(const SendWRObject *w, struct ibv_send_wr *wr)
{
    copy_prepared(w, wr);
    wr->wr_id = w->wr_id;
}

/* One SendWR into *wr, its SGEs from sg_list (w's, or a reference to it
 * the caller holds) into wr->sg_list, which has room for `room`: 1 when
 * they do not fit.  The caller sets next afterwards.  Allocates nothing
 * (so runs no Python code). */
int ibp_send_wr_fill(SendWRObject *w, PyObject *sg_list, struct ibv_send_wr *wr, Py_ssize_t room)
{
    struct ibv_sge *sg = wr->sg_list;
    if (w->opcode == IBV_WR_BIND_MW) {
        /* bind_mw has a union of its own (with tso): the MW and MR are
         * read at post time, and the SendWR holds both while it runs.
         * Never prepared: it carries pointers of objects that can close. */
        memset(wr, 0, sizeof(*wr));
        wr->opcode = IBV_WR_BIND_MW;
        wr->send_flags = w->send_flags;
        wr->imm_data = w->imm_data;     /* network order already */
    } else {
        if (!w->ready) {
            send_wr_prepare(w, &w->prepared);
            w->ready = 1;
        }
        copy_prepared(w, wr);
    }
    wr->wr_id = w->wr_id;
    wr->sg_list = sg;
    int rc = fill_sges(sg_list, sg, room, &wr->num_sge);
    if (rc != 0)
        return rc;
    if ((wr->send_flags & IBV_SEND_INLINE) && ibp_check_inline_sges(wr) < 0)
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
        return 0;
    }
    /* Kept whole when no post has to check anything of it again: no AH
     * (it can close), no INLINE data (its buffers are checked at each
     * post), not BIND_MW (its MW and MR are read at each post). */
    if (!(w->send_flags & IBV_SEND_INLINE)
        && keep_sges(w->sg_list, sg_list, sg, wr->num_sge, &w->sges)) {
        w->prepared.sg_list = w->sges.sge;
        w->prepared.num_sge = wr->num_sge;
    }
    return 0;
}

int ibp_recv_wr_fill(RecvWRObject *w, PyObject *sg_list, struct ibv_recv_wr *wr,
                     Py_ssize_t room)
{
    wr->wr_id = w->prepared.wr_id;
    wr->next = NULL;
    int rc = fill_sges(sg_list, wr->sg_list, room, &wr->num_sge);
    if (rc == 0 && keep_sges(w->sg_list, sg_list, wr->sg_list, wr->num_sge, &w->sges)) {
        w->prepared.next = NULL;
        w->prepared.sg_list = w->sges.sge;
        w->prepared.num_sge = wr->num_sge;
    }
    return rc;
}

PyObject *ibp_post_failed(PyObject *queue, const char *verb, int rc, Py_ssize_t index,
                          uint64_t wr_id)
{
    char why[IBP_WHY_LEN];
    int send = strcmp(verb, "ibv_post_send") == 0;
    if (!ibp_explain_post(why, sizeof(why), queue, send, rc))
        return ibp_raise_detail(verb, rc, "%s failed: %s (work request %zd, wr_id=%llu)",
                                verb, strerror(rc), index, (unsigned long long)wr_id);
    return ibp_raise_detail(verb, rc, "%s failed: %s: %s (work request %zd, wr_id=%llu)",
                            verb, strerror(rc), why, index, (unsigned long long)wr_id);
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


