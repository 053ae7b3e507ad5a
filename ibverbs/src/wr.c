/*
 * SendWR and RecvWR: work requests as Python objects holding C values,
 * and their conversion into C for a post.  Their accessors and type
 * shells are generated (generated/sendwr.c.h, recvwr.c.h, from
 * spec/datapath/records.yaml); here are sg_list and the repr.
 *
 * A SendWR keeps each field of struct ibv_send_wr it shows in a member of
 * its own: the members of the wr union (rdma, atomic, ud) share memory in
 * C, a request may set all of them, and the post fills the one its rules
 * pick (SendWR_prepare, generated).  imm_data is kept in network order,
 * as in C.
 */
#include "common.h"

#include "objects.h"

#include "sendwr.c.h"
#include "recvwr.c.h"

/* Called after every store of a field (each setter but wr_id's, which
 * each post reads; __init__ at its end; the collector's clear): a new
 * stamp, so that the request prepared and the one kept, built from the
 * stamp before, are built again at the next post (common.h's struct
 * ibp_sge_cache).  After the store, never before: a post in between (from
 * a finalizer, or another thread) builds from the new value under the old
 * stamp, which this one then retires. */
static inline void ibp_SendWR_changed(SendWRObject *w)
{
    w->stamp = ibp_next_stamp();
}

/*
 * sg_list is None or a sequence.  As in the seed, the constructor stores a
 * copy (copy=1) and assignment stores the list itself (a list's later
 * appends are posted); anything else becomes a new list.  Its items are
 * checked when posted (fill_sges), as the seed does: a test double stands
 * in for an SGE until the request reaches a QP.
 */
static int ibp_set_sg_list(PyObject **slot, PyObject *value, int copy)
{
    if (value == NULL || value == Py_None) {
        Py_CLEAR(*slot);
        return 0;
    }
    /* An exact list's copy by slicing: PySequence_List goes through an
     * empty list and list.extend, and PyList_New and a store per item cost
     * more (a list of one SGE: 30 instructions) than the slice, which
     * makes the list inside. */
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

Py_ssize_t ibp_wr_sg_count(PyObject *w)
{
    ibp_lock_t cs;
    ibp_lock(&cs, w);
    Py_ssize_t n = ibp_sg_count(WR_SG_LIST(w));
    ibp_unlock(&cs);
    return n;
}

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
        s->nsge = ibp_wr_sg_count(arg);
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
        s->nsge += ibp_wr_sg_count(item);
    }
    return 0;
}

#if IBP_FREE_THREADED
/* A critical section nested in another suspends the outer one until it
 * ends when it has to wait: the request and its list are therefore taken
 * together (PyCriticalSection2), never one inside the other.  The list is
 * found in the request's own critical section first; the request may have
 * another one by the time both are held: then again. */
void ibp_wr_lock(struct ibp_wr_lock *l, PyObject *w)
{
    l->sg_list = NULL;
    if (!IBP_NO_GIL)
        return;
    for (;;) {
        ibp_lock(&l->request, w);
        PyObject *list = WR_SG_LIST(w);
        l->sg_list = list;
        if (list == NULL)
            return;
        Py_INCREF(list);
        ibp_unlock(&l->request);
        PyCriticalSection2_Begin(&l->both, w, list);
        if (WR_SG_LIST(w) == list)
            return;
        PyCriticalSection2_End(&l->both);
        Py_DECREF(list);
    }
}

void ibp_wr_unlock(struct ibp_wr_lock *l)
{
    if (!IBP_NO_GIL)
        return;
    if (l->sg_list != NULL) {
        PyCriticalSection2_End(&l->both);
        Py_DECREF(l->sg_list);
    } else {
        ibp_unlock(&l->request);
    }
}
#endif

/* The SGEs of list into out, which has room for `room`: 1 (and nothing
 * written) when they do not fit, so that a caller can read a request once
 * before it knows how many SGEs the whole chain has.  The first
 * IBP_CACHED_SGES items' stamps, as they were when read, into stamps (0
 * for one that is not exactly an SGE: nothing is kept from it). */
static inline int fill_sges(PyObject *list, struct ibv_sge *out, Py_ssize_t room, int *num,
                            uint64_t *stamps)
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
            PyErr_Format(PyExc_TypeError, "sg_list[%zd] must be an SGE, not %s", i,
                         ibp_type_name(item));
            return -1;
        }
        uint64_t stamp = ibp_sge_read(item, &out[i]);   /* without its lock: sge.c */
        if (i < IBP_CACHED_SGES)
            stamps[i] = Py_IS_TYPE(item, SGE_Type) ? stamp : 0;
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

/*
 * The prepared request into *wr: SendWR_prepare (generated from
 * spec/datapath/records.yaml) placed each field.  wr_id and next are the
 * post's to fill, and only the opcodes of the struct's last union (BIND_MW
 * and TSO, ibp_send_wr_uses_ext) read it: every other opcode takes only
 * sg_list up to it.  Under emulation every load and store costs, and a
 * post converts 32 requests per call.  sg_list and num_sge are those of
 * the SGEs kept (ibp_send_wr_kept), or the filling post's to overwrite.
 */
#define PREPARED_FROM offsetof(struct ibv_send_wr, sg_list)
static inline void copy_prepared(const SendWRObject *w, struct ibv_send_wr *wr)
{
    if (__builtin_expect(ibp_send_wr_uses_ext(w->opcode), 0))
        *wr = w->prepared;
    else
        memcpy((char *)wr + PREPARED_FROM, (const char *)&w->prepared + PREPARED_FROM,
               IBP_SEND_WR_EXT_FROM - PREPARED_FROM);
}

/* Whether a list's item array is where common.h's ibp_list_item reads it
 * (right after the PyVarObject head, as in every CPython release this
 * builds for), checked once on a list of this interpreter: if not, nothing
 * is kept, and every post reads its list through the API. */
static int list_layout_checked(void)
{
    static int checked = -1;    /* threads that check at once find the same */
    if (ibp_relaxed_load(&checked) < 0) {
        PyObject *a = PyLong_FromLong(1001), *b = PyLong_FromLong(1002);
        PyObject *list = a && b ? PyList_New(0) : NULL;
        int found = list != NULL && PyList_Append(list, a) == 0 && PyList_Append(list, b) == 0 &&
                    Py_SIZE(list) == 2 && ibp_list_item(list, 0) == a && ibp_list_item(list, 1) == b;
        if (PyErr_Occurred())
            PyErr_Clear();      /* no room to check: keep nothing, try again later */
        ibp_relaxed_store(&checked, list == NULL ? -1 : found);
        Py_XDECREF(list);
        Py_XDECREF(a);
        Py_XDECREF(b);
    }
    return ibp_relaxed_load(&checked) == 1;
}

/*
 * After a post read a request's n SGEs (sges) from sg_list: keep their
 * values and stamps in c with the request's stamp, so that the posts after
 * it send the request as it is while they match (ibp_send_wr_kept,
 * ibp_recv_wr_kept).  The SGEs' stamps are those fill_sges read with their
 * values (sge_stamps).  0 when nothing is kept:
 * too many SGEs, no list (a request without SGEs is rare enough to read
 * each time; nor an empty list), a list that is not the request's (the
 * post compares the request's), an item that is not exactly an SGE or was
 * never stamped, a fork() child (a kept request's post makes no fork
 * check, post.c).
 */
static int keep_sges(PyObject *own, PyObject *sg_list, const struct ibv_sge *sges,
                     const uint64_t *sge_stamps, int n, uint64_t stamp, struct ibp_sge_cache *c)
{
    c->n = 0;
    if (n < 1 || n > IBP_CACHED_SGES || own == NULL || sg_list != own || ibp_forked ||
        Py_SIZE(own) != n || !list_layout_checked())
        return 0;
    for (int i = 0; i < n; i++) {
        if (sge_stamps[i] == 0)
            return 0;
        c->sge_stamp[i] = sge_stamps[i];
        c->sge[i] = sges[i];
    }
    c->stamp = stamp;
    c->n = n;
    /* not in a fork() child: ibp_forked above; threads store the same */
    if (ibp_relaxed_load(&ibp_kept_sge_type) != SGE_Type)
        ibp_relaxed_store(&ibp_kept_sge_type, SGE_Type);
    return 1;
}

/* A kept SendWR (ibp_send_wr_kept) into *wr, its SGEs those it keeps; the
 * caller sets next. */
void ibp_send_wr_copy_kept(const SendWRObject *w, struct ibv_send_wr *wr)
{
    copy_prepared(w, wr);
    SendWR_fill(w, wr);
}

int ibp_bind_snapshot_take(PyObject *info, struct ibp_bind_snapshot *b)
{
    struct MWBindInfoObject *self = (struct MWBindInfoObject *)info;
    ibp_lock_t cs;
    ibp_lock(&cs, info);
    b->info = info;
    b->c = self->c;
    b->mr = self->ref_mr;
    int rc = 0;
    if (b->mr != NULL && !PyObject_TypeCheck(b->mr, MR_Type)) {
        /* It stores any object, as the seed's did.  Its check says what is
         * wrong now, while the object is the bind_info's: once copied out,
         * another thread's store may free it. */
        rc = -1;
        if (MWBindInfo_prepare(self) == 0)
            PyErr_SetString(PyExc_SystemError, "MWBindInfo_prepare took a non-MR");
    } else {
        Py_XINCREF(b->mr);
    }
    ibp_unlock(&cs);
    return rc;
}

/* One SendWR into *wr, its SGEs from sg_list (w's, or a reference to it
 * the caller holds) into wr->sg_list, which has room for `room`: 1 when
 * they do not fit.  The caller sets next afterwards.  Allocates nothing
 * (so runs no Python code). */
int ibp_send_wr_fill(SendWRObject *w, PyObject *sg_list, struct ibv_send_wr *wr, Py_ssize_t room,
                     struct ibp_bind_snapshot *bind)
{
    struct ibv_sge *sg = wr->sg_list;
    uint64_t sge_stamps[IBP_CACHED_SGES];
    uint64_t stamp = w->stamp;
    /* the stamp before the fields: a store in between leaves this
     * request prepared under the stamp it retires */
    if (w->prepared_stamp != stamp || stamp == 0) {
        SendWR_prepare(w, &w->prepared);
        w->prepared_stamp = stamp;
    }
    copy_prepared(w, wr);
    SendWR_fill(w, wr);
    wr->sg_list = sg;
    int rc = fill_sges(sg_list, sg, room, &wr->num_sge, sge_stamps);
    if (rc != 0)
        return rc;
    if ((wr->send_flags & IBV_SEND_INLINE) && ibp_check_inline_sges(wr) < 0)
        return -1;
    if (w->opcode == IBV_WR_BIND_MW) {
        /* The MW and MR pointers are read at each post (the SendWR holds
         * both while it runs), never prepared: their objects can close. */
        if (w->mw == NULL || w->bind_info == NULL) {
            PyErr_SetString(PyExc_ValueError, "a BIND_MW request needs mw and bind_info");
            return -1;
        }
        /* The bind_info as its post took it, never read here: another
         * thread may be setting it, and only the MR taken is held. */
        if (bind == NULL || bind->info != w->bind_info) {
            PyErr_SetString(PyExc_SystemError, "a BIND_MW request filled without its bind_info");
            return -1;
        }
        struct MWBindInfoObject taken;
        taken.c = bind->c;
        taken.ref_mr = bind->mr;
        if (ibp_check_open(w->mw) < 0 || MWBindInfo_prepare(&taken) < 0)
            return -1;
        wr->bind_mw.mw = MW_PTR(w->mw);
        wr->bind_mw.rkey = w->rkey;
        wr->bind_mw.bind_info = taken.c;
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
        && keep_sges(w->sg_list, sg_list, sg, sge_stamps, wr->num_sge, stamp, &w->sges)) {
        w->prepared.sg_list = w->sges.sge;
        w->prepared.num_sge = wr->num_sge;
    }
    return 0;
}

int ibp_recv_wr_fill(RecvWRObject *w, PyObject *sg_list, struct ibv_recv_wr *wr,
                     Py_ssize_t room)
{
    uint64_t sge_stamps[IBP_CACHED_SGES];
    RecvWR_fill(w, wr);
    wr->next = NULL;
    int rc = fill_sges(sg_list, wr->sg_list, room, &wr->num_sge, sge_stamps);
    if (rc == 0 && keep_sges(w->sg_list, sg_list, wr->sg_list, sge_stamps, wr->num_sge, 0,
                             &w->sges)) {
        w->prepared.next = NULL;
        w->prepared.sg_list = w->sges.sge;
        w->prepared.num_sge = wr->num_sge;
    }
    return rc;
}

PyObject *ibp_post_failed(PyObject *queue, const char *verb, int rc, Py_ssize_t index,
                          uint64_t wr_id)
{
    /* Providers disagree on the sign: mlx5 and rxe return ENOMEM, siw and
     * erdma -ENOMEM.  A post does not set errno, so the return is all. */
    int err = rc < 0 ? -rc : rc;
    char why[IBP_WHY_LEN];
    int send = strcmp(verb, "ibv_post_send") == 0;
    if (!ibp_explain_post(why, sizeof(why), queue, send, err))
        return ibp_raise_detail(verb, err, "%s failed: %s (work request %zd, wr_id=%llu)",
                                verb, strerror(err), index, (unsigned long long)wr_id);
    return ibp_raise_detail(verb, err, "%s failed: %s: %s (work request %zd, wr_id=%llu)",
                            verb, strerror(err), why, index, (unsigned long long)wr_id);
}

/* wr.ud.ah shares its memory with wr.rdma.remote_addr: a UD request
 * without an AH would hand the provider a remote address as an AH pointer
 * (and an AH on another QP type would become a remote address).  An AH of
 * another device or PD than the QP's reaches the provider as is: it reads
 * that device's address vector (a PD's AHs are its own to the verbs
 * spec), so it is refused here, as QPEx.wr_set_ud_addr refuses it. */
int ibp_check_ah_fits_qp(PyObject *qp, PyObject *ah, Py_ssize_t index)
{
    struct ibv_qp *q = QP_PTR(qp);
    int ud = q->qp_type == IBV_QPT_UD;
    if (ud && ah == NULL) {
        PyErr_Format(PyExc_ValueError, "work request %zd has no ah: a UD QP sends "
                     "through an address handle (SendWR(ah=..., remote_qpn=..., "
                     "remote_qkey=...))", index);
        return -1;
    }
    if (!ud && ah != NULL) {
        PyErr_Format(PyExc_ValueError, "work request %zd has an ah, but only a UD QP "
                     "takes one", index);
        return -1;
    }
    if (ah == NULL)
        return 0;
    if (ibp_check_open(ah) < 0)
        return -1;
    struct ibv_ah *a = AH_PTR(ah);
    if (a->context != q->context) {
        PyErr_Format(PyExc_ValueError, "work request %zd: its ah belongs to another "
                     "context (device) than the QP", index);
        return -1;
    }
    if (a->pd != q->pd) {
        PyErr_Format(PyExc_ValueError, "work request %zd: its ah belongs to another PD "
                     "than the QP", index);
        return -1;
    }
    return 0;
}

/* ---- what a send request names, held for its post (post.c) -------------- */

/*
 * On a free-threaded target what the provider reads of a send request
 * besides the QP and the request (its AH; a BIND_MW's MW and its
 * bind_info's MR; an INLINE request's MRs, whose buffers it copies) is held
 * from before the request is read until its post returns, as a PostList's
 * are (postlist.c, pl_hold): another thread's close() of one says EBUSY
 * meanwhile, instead of destroying what the provider is about to read.  A
 * hold may wait for that object's lock, which suspends the request's: the
 * request is read again after it, and held anew when what it names
 * changed.  On a GIL target no close() runs during a post: nothing held
 * (post.c, send_wr_lock_hold).
 */
static PyObject *send_wr_handles(SendWRObject *w, struct ibp_bind_snapshot *bind)
{
    /* The bind_info (the MR it names, and what the fill hands over) first,
     * in the bind_info's critical section: taking it may suspend the
     * request's, so the request is read after it (and the bind_info taken
     * again if the request has another one by then). */
    PyObject *info = NULL, *mr = NULL;
    while (w->opcode == IBV_WR_BIND_MW && w->bind_info != NULL && w->bind_info != info) {
        Py_XDECREF(info);
        Py_CLEAR(mr);
        info = Py_NewRef(w->bind_info);
        if (ibp_bind_snapshot_take(info, bind) < 0) {
            Py_DECREF(info);
            return NULL;
        }
        mr = bind->mr;
    }
    PyObject *mw = w->opcode == IBV_WR_BIND_MW ? w->mw : NULL;
    if (w->opcode != IBV_WR_BIND_MW || w->bind_info == NULL)
        Py_CLEAR(mr);
    int with_inline = (w->send_flags & IBV_SEND_INLINE) && w->sg_list != NULL;
    PyObject *handles = NULL;
    if (w->ah == NULL && mw == NULL && mr == NULL && !with_inline) {
        handles = Py_NewRef(Py_None);
        goto done;
    }
    if (mw == NULL && mr == NULL && !with_inline) {    /* a UD request: its AH alone */
        handles = PyTuple_Pack(1, w->ah);
        goto done;
    }
    PyObject *found = PyList_New(0);
    if (found == NULL)
        goto done;
    PyObject *named[] = {w->ah, mw, mr};
    for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++)
        if (named[i] != NULL && PyList_Append(found, named[i]) < 0)
            goto fail;
    for (Py_ssize_t j = 0; with_inline && j < PyList_Size(w->sg_list); j++) {
        /* not an SGE (the list is the caller's, changed since): the fill
         * says so, nothing of it to hold */
        PyObject *item = PyList_GetItem(w->sg_list, j);
        PyObject *owner = PyObject_TypeCheck(item, SGE_Type) ? ((SGEObject *)item)->owner : NULL;
        if (owner != NULL && PyObject_TypeCheck(owner, MR_Type) && PyList_Append(found, owner) < 0)
            goto fail;
    }
    handles = PyList_AsTuple(found);
fail:
    Py_DECREF(found);
done:
    Py_XDECREF(info);
    Py_XDECREF(mr);
    return handles;
}

static int same_handles(PyObject *a, PyObject *b)
{
    if (PyTuple_Size(a) != PyTuple_Size(b))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_Size(a); i++)
        if (PyTuple_GetItem(a, i) != PyTuple_GetItem(b, i))
            return 0;
    return 1;
}

/* *held: what ibp_unhold_each releases (NULL: nothing held); *bind: a
 * BIND_MW request's bind_info as the fill hands it over, its MR held. */
static int send_wr_hold(SendWRObject *w, PyObject **held, struct ibp_bind_snapshot *bind)
{
    *held = NULL;
    bind->info = NULL;
    for (;;) {
        PyObject *wanted = send_wr_handles(w, bind);
        if (wanted == NULL || wanted == Py_None) {
            Py_XDECREF(wanted);
            return wanted == NULL ? -1 : 0;
        }
        int rc = ibp_hold_each(wanted, held);
        Py_DECREF(wanted);
        if (rc < 0)
            return -1;
        PyObject *now = send_wr_handles(w, bind);
        int same = now != NULL && now != Py_None && same_handles(now, *held);
        Py_XDECREF(now);
        if (same)
            return 0;
        ibp_unhold_each(*held);
        *held = NULL;
        if (now == NULL)
            return -1;
    }
}

/* Where other threads run (IBP_NO_GIL), the request locked with its list
 * (ibp_wr_lock) and what it names held (send_wr_hold): 0, or -1 with an
 * exception and nothing locked or held.  A hold that waits for its
 * object's lock suspends the request's, and the request may take another
 * list meanwhile, which the lock does not cover (the fill and the INLINE
 * check read the request's list): then all is released and taken again. */
int ibp_send_wr_lock_hold_threads(struct ibp_wr_lock *l, SendWRObject *w, PyObject **held,
                                  struct ibp_bind_snapshot *bind)
{
    for (;;) {
        ibp_wr_lock(l, (PyObject *)w);
        if (send_wr_hold(w, held, bind) < 0) {
            ibp_wr_unlock(l);
            return -1;
        }
        if (w->sg_list == l->sg_list)
            return 0;
        ibp_unhold_each(*held);
        ibp_wr_unlock(l);
    }
}
