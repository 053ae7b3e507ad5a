/*
 * A PostList is a chain of work requests converted once into C (struct
 * ibv_send_wr or ibv_recv_wr, linked, with their SGEs, in one block) and
 * posted as is, any number of times: qp.post_send(plist) is one verb call
 * with no conversion and no allocation.  Entries are updated in place
 * through views (plist[i].wr_id = ..., .addr, .length, .remote_addr, ...)
 * or replaced whole (plist[i] = SendWR(...)).  What the requests name (the
 * MRs of their SGEs, AHs) is kept alive with the list; AHs are checked to
 * be open at each post.  The type shell is generated (generated/postlist.c.h,
 * from spec/datapath/records.yaml); here are the constructor, the GC slots,
 * the conversion of an entry, the post and the sequence slots.
 */
#include "common.h"

#include "objects.h"

#include "postlist.c.h"

/* Convert request w (of the list's kind, type-checked) into entry i, whose
 * sg_list pointer is already set.  On failure entry i is left as it was.
 *
 * The one allocation (the tuple of SGE owners) comes first: it may run the
 * garbage collector, hence finalizers that could change w.  What is read
 * after it is read under a strong reference and re-checked.
 *
 * On a free-threaded target w is read in its critical section
 * (ibp_wr_lock), which suspends the list's while it waits: the list's
 * entry is written only once w's has ended (the list's is then held again). */
static int pl_fill(PostListObject *pl, Py_ssize_t i, PyObject *w)
{
    struct ibp_wr_lock l;
    int locked = 1;
    ibp_wr_lock(&l, w);
    struct pl_entry *e = &pl->entries[i];
    PyObject *sg_list = pl->kind == PL_SEND ? ((SendWRObject *)w)->sg_list
                                            : ((RecvWRObject *)w)->sg_list;
    Py_ssize_t nsge = ibp_sg_count(sg_list), nowners = 0;
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
    if (ibp_sg_count(sg_list) != nsge) {
        PyErr_SetString(PyExc_RuntimeError, "sg_list changed while it was converted");
        goto done;
    }
    if (nsge > e->sge_room) {
        PyErr_Format(PyExc_ValueError,
                     "the %s has %zd SGEs; entry %zd of the PostList has room for %d",
                     ibp_pl_what(pl), nsge, i, e->sge_room);
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
        if (ibp_send_wr_fill((SendWRObject *)w, sg_list, &tmp.send, nsge, NULL) != 0)
            goto done;
    } else {
        tmp.recv.sg_list = sges;
        if (ibp_recv_wr_fill((RecvWRObject *)w, sg_list, &tmp.recv, nsge) != 0)
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
    PyObject *ah = pl->kind == PL_SEND ? ((SendWRObject *)w)->ah : NULL;
    Py_XINCREF(ah);
    ibp_wr_unlock(&l);
    locked = 0;
    /* The allocations above may have run the GC, hence other threads: one
     * of them may be posting this list with the GIL released now. */
    if (ibp_pl_frozen(pl) < 0) {
        Py_XDECREF(ah);
        goto done;
    }
    /* The entry keeps its own SGE room and its link to the next entry. */
    struct ibv_sge *room = pl->kind == PL_SEND ? PL_SEND_WR(pl, i)->sg_list
                                               : PL_RECV_WR(pl, i)->sg_list;
    if (pl->kind == PL_SEND) {
        tmp.send.sg_list = room;
        tmp.send.next = PL_SEND_WR(pl, i)->next;
        *PL_SEND_WR(pl, i) = tmp.send;
    } else {
        tmp.recv.sg_list = room;
        tmp.recv.next = PL_RECV_WR(pl, i)->next;
        *PL_RECV_WR(pl, i) = tmp.recv;
    }
    memcpy(room, sges, nsge * sizeof(*sges));
    pl->n_ah += (ah != NULL) - (e->ah != NULL);
    Py_XSETREF(e->ah, ah);
    Py_XSETREF(e->owners, owners);
    owners = NULL;
    rc = 0;
done:
    if (locked)
        ibp_wr_unlock(&l);
    if (sges != stack_sges)
        PyMem_Free(sges);
    Py_XDECREF(owners);
    Py_XDECREF(sg_list);
    return rc;
}

/* PostList(wrs, *, release_gil=False): the generated parser passes NULL
 * for what was not given. */
static PyObject *ibp_hand_PostList_new_impl(PyTypeObject *type, PyObject *arg,
                                            PyObject *release_gil_obj)
{
    int release_gil = release_gil_obj != NULL ? PyObject_IsTrue(release_gil_obj) : 0;
    struct wr_seq s;
    if (release_gil < 0)
        return NULL;
    /* A list or tuple (subclasses included) is read once, into a tuple:
     * building allocates (and may so run finalizers), and a subclass's
     * __len__ and __iter__ need not agree with its storage.  Everything
     * after, the kind and the count included, comes from what was read. */
    PyObject *snapshot = NULL;
    if (PyList_Check(arg) || PyTuple_Check(arg)) {
        if ((snapshot = PySequence_Tuple(arg)) == NULL)
            return NULL;
        if (PyTuple_Size(snapshot) == 0) {
            Py_DECREF(snapshot);
            PyErr_SetString(PyExc_ValueError, "a PostList needs at least one work request");
            return NULL;
        }
        arg = snapshot;
    }
    int kind;
    PyObject *first = snapshot != NULL ? PyTuple_GetItem(snapshot, 0) : arg;
    if (PyObject_TypeCheck(first, RecvWR_Type)) {
        kind = PL_RECV;
    } else if (snapshot != NULL || PyObject_TypeCheck(arg, SendWR_Type)) {
        kind = PL_SEND;     /* a list whose first item is neither: ibp_wr_seq_init says so */
    } else {
        PyErr_Format(PyExc_TypeError, "PostList needs SendWR or RecvWR objects (one, or a "
                     "list of them), not %s", ibp_type_name(arg));
        return NULL;
    }
    if (ibp_wr_seq_init(&s, arg, kind == PL_SEND ? SendWR_Type : RecvWR_Type,
                        kind == PL_SEND ? "SendWR" : "RecvWR") < 0) {
        Py_XDECREF(snapshot);
        return NULL;
    }
    s.owned = snapshot;     /* s reads it in place (an exact tuple) and now owns it */
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
        PyObject *w = ibp_wr_seq_item(&s, i);
        Py_ssize_t k = ibp_wr_sg_count(w);
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
        if (pl_fill(pl, i, ibp_wr_seq_item(&s, i)) < 0)
            goto fail;
    }
    ibp_wr_seq_done(&s);
    return (PyObject *)pl;
fail:
    ibp_wr_seq_done(&s);
    Py_XDECREF((PyObject *)pl);
    return NULL;
}

static int ibp_PostList_traverse(PyObject *op, visitproc visit, void *arg)
{
    PostListObject *pl = (PostListObject *)op;
    Py_VISIT(Py_TYPE(op));      /* its heap type, which it holds */
    if (pl->entries != NULL)
        for (Py_ssize_t i = 0; i < pl->n; i++) {
            Py_VISIT(pl->entries[i].ah);
            Py_VISIT(pl->entries[i].owners);
        }
    return 0;
}

static int ibp_PostList_clear(PyObject *op)
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

static void ibp_PostList_dealloc(PyObject *op)
{
    PostListObject *pl = (PostListObject *)op;
    PyObject_GC_UnTrack(op);
    ibp_PostList_clear(op);
    PyMem_Free(pl->entries);
    PyMem_Free(pl->wrs);
    ibp_generic_dealloc(op);
}

/* Every AH still open (a closed one would be a dangling pointer). */
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
    return ibp_check_inline_sges(wr);
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
 * the MRs of their SGEs, busy (close() says EBUSY) while it runs.  On a
 * free-threaded target every post holds them: another thread could close
 * one between the post's check and the provider's read. */
static void pl_hold_one(PyObject *obj, int delta)
{
    if (delta > 0)
        ibp_busy_hold(obj);
    else
        ibp_busy_leave(obj);
}

static void pl_hold(PostListObject *pl, int delta)
{
    for (Py_ssize_t i = 0; i < pl->n; i++) {
        struct pl_entry *e = &pl->entries[i];
        if (e->ah != NULL)
            pl_hold_one(e->ah, delta);
        Py_ssize_t n = e->owners == NULL ? 0 : PyTuple_Size(e->owners);
        for (Py_ssize_t j = 0; j < n; j++) {
            PyObject *owner = PyTuple_GetItem(e->owners, j);
            if (PyObject_TypeCheck(owner, MR_Type))
                pl_hold_one(owner, delta);
        }
    }
}

static PyObject *postlist_post_locked(PyObject *self, PostListObject *pl,
                                      enum post_target target);

/* A PostList handed to a post is read and posted in its critical section
 * (its own methods take it too): another thread's update waits, or, with
 * release_gil=True while the post runs without the lock, raises (posting). */
PyObject *ibp_postlist_post(PyObject *self, PyObject *list, enum post_target target)
{
    ibp_lock_t cs;
    ibp_lock(&cs, list);
    PostListObject *pl = (PostListObject *)list;
    if (IBP_NO_GIL) {
        /* Frozen first: a hold may wait for an AH's or MR's lock, and
         * meanwhile this list's lock is another thread's to take. */
        pl->posting++;
        pl_hold(pl, 1);
    }
    PyObject *result = postlist_post_locked(self, pl, target);
    if (IBP_NO_GIL) {
        pl_hold(pl, -1);
        pl->posting--;
    }
    ibp_unlock(&cs);
    return result;
}

static PyObject *postlist_post_locked(PyObject *self, PostListObject *pl,
                                      enum post_target target)
{
    int want = target == POST_SEND ? PL_SEND : PL_RECV;
    if (pl->kind != want) {
        PyErr_Format(PyExc_TypeError, "%s needs a PostList of %s, not of %s",
                     target == POST_SEND ? "post_send" : "post_recv",
                     want == PL_SEND ? "SendWR" : "RecvWR", ibp_pl_what(pl));
        return NULL;
    }
    /* A list may be posted on any QP: its AHs are checked against this one. */
    if (target == POST_SEND && (pl->n_ah > 0 || QP_PTR(self)->qp_type == IBV_QPT_UD)) {
        for (Py_ssize_t i = 0; i < pl->n; i++)
            if (ibp_check_ah_fits_qp(self, pl->entries[i].ah, i) < 0)
                return NULL;
    }
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
        /* The list is frozen (updates raise) until the post returns; the
         * QP/SRQ is busy already (its wrapper's ibp_call_enter). */
        pl->posting++;
        if (!IBP_NO_GIL)     /* held already */
            pl_hold(pl, 1);
        Py_BEGIN_ALLOW_THREADS
        ibp_test_pause_point();   /* IBVERBS_TEST_HOOKS */
        rc = target == POST_SEND ? ibv_post_send(handle, pl->wrs, &bad_send)
           : target == POST_RECV ? ibv_post_recv(handle, pl->wrs, &bad_recv)
           : ibv_post_srq_recv(handle, pl->wrs, &bad_recv);
        Py_END_ALLOW_THREADS
        if (!IBP_NO_GIL)
            pl_hold(pl, -1);
        pl->posting--;
    }
    if (rc != 0) {
        if (target == POST_SEND)
            return ibp_post_failed(self, "ibv_post_send", rc,
                                   bad_send ? bad_send - PL_SEND_WR(pl, 0) : 0,
                                   bad_send ? bad_send->wr_id : 0);
        return ibp_post_failed(self, target == POST_RECV ? "ibv_post_recv" : "ibv_post_srq_recv", rc,
                               bad_recv ? bad_recv - PL_RECV_WR(pl, 0) : 0,
                               bad_recv ? bad_recv->wr_id : 0);
    }
    Py_RETURN_NONE;
}

/* len() and [i]: the same two slots as WCBuffer's (wcbuffer.c), written
 * out on purpose: two lines each over the type's own count, clearer than a
 * helper shared across the two types. */
static Py_ssize_t ibp_PostList_length(PyObject *op)
{
    return ((PostListObject *)op)->n;
}

static PyObject *ibp_PostList_item(PyObject *op, Py_ssize_t i)
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

static int ibp_PostList_ass_item(PyObject *op, Py_ssize_t i, PyObject *value)
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
        PyErr_Format(PyExc_TypeError, "PostList entry must be a %s, not %s", ibp_pl_what(pl),
                     ibp_type_name(value));
        return -1;
    }
    if (ibp_pl_frozen(pl) < 0)
        return -1;
    return pl_fill(pl, i, value);
}

static PyObject *ibp_PostList_get_kind(PyObject *op, void *c)
{
    (void)c;
    return Py_NewRef((PyObject *)(((PostListObject *)op)->kind == PL_SEND ? SendWR_Type
                                                                          : RecvWR_Type));
}

static PyObject *ibp_PostList_repr(PyObject *op)
{
    PostListObject *pl = (PostListObject *)op;
    return PyUnicode_FromFormat("PostList(%zd %s%s)", pl->n, ibp_pl_what(pl),
                                pl->release_gil ? ", release_gil=True" : "");
}
