/* QP.post_send, QP/SRQ/WQ.post_recv: work requests into C chains, posted. */
#include "common.h"

#include "objects.h"

#define STACK_WRS 32
#define STACK_SGES 64

/* Storage for one post: on the stack when small, else on the heap. */
struct chain {
    void *wrs;
    struct ibv_sge *sges;
    void *heap;
    PyObject *held;     /* a list of chain_lock_hold's tuples, or NULL */
    union {
        struct ibv_send_wr send[STACK_WRS];
        struct ibv_recv_wr recv[STACK_WRS];
    } stack_wrs;
    struct ibv_sge stack_sges[STACK_SGES];
};

static int chain_alloc(struct chain *c, Py_ssize_t nwr, size_t wr_size, Py_ssize_t nsge)
{
    c->heap = NULL;
    c->held = NULL;
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

/*
 * The requests of a list or iterable into s, and room for their chain in
 * c: 1 when there is a chain to build and post, 0 for no request (nothing
 * to post), -1 with an exception.  chain_end frees both.
 */
static int chain_start(struct wr_seq *s, struct chain *c, PyObject *arg, PyTypeObject *type,
                       const char *what, size_t wr_size)
{
    if (ibp_wr_seq_init(s, arg, type, what) < 0)
        return -1;
    if (s->n > 0 && chain_alloc(c, s->n, wr_size, s->nsge) == 0)
        return 1;
    ibp_wr_seq_done(s);
    return s->n == 0 ? 0 : -1;
}

static void chain_unhold(struct chain *c)
{
    if (c->held == NULL)
        return;
    for (Py_ssize_t i = 0; i < PyList_Size(c->held); i++)
        ibp_unhold_each(Py_NewRef(PyList_GetItem(c->held, i)));
    Py_CLEAR(c->held);
}

static PyObject *chain_end(struct wr_seq *s, struct chain *c, PyObject *result)
{
    chain_unhold(c);
    if (c->heap != NULL)
        PyMem_Free(c->heap);
    ibp_wr_seq_done(s);
    return result;
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

/* A send request locked with its list and what it names held for its post:
 * released with ibp_unhold_each(*held), then ibp_wr_unlock(l).  With the
 * GIL nothing else runs until the post returns: only a BIND_MW's bind_info
 * is copied (it keeps its MR meanwhile). */
static inline int send_wr_lock_hold(struct ibp_wr_lock *l, SendWRObject *w, PyObject **held,
                                    struct ibp_bind_snapshot *bind)
{
    if (IBP_NO_GIL)
        return ibp_send_wr_lock_hold_threads(l, w, held, bind);
    *held = NULL;
    bind->info = NULL;
    if (w->opcode != IBV_WR_BIND_MW || w->bind_info == NULL)
        return 0;
    int rc = ibp_bind_snapshot_take(w->bind_info, bind);
    Py_XDECREF(rc == 0 ? bind->mr : NULL);
    return rc;
}

/* send_wr_lock_hold for a chain: its holds released by chain_unhold
 * (chain_end), the request unlocked by the caller. */
static int chain_lock_hold(struct chain *c, struct ibp_wr_lock *l, SendWRObject *w,
                           struct ibp_bind_snapshot *bind)
{
    PyObject *held;
    if (send_wr_lock_hold(l, w, &held, bind) < 0)
        return -1;
    if (held == NULL)
        return 0;
    int rc = c->held == NULL && (c->held = PyList_New(0)) == NULL ? -1
             : PyList_Append(c->held, held);
    if (rc < 0) {
        ibp_unhold_each(held);
        ibp_wr_unlock(l);
    } else {
        Py_DECREF(held);
    }
    return rc;
}

/*
 * post_send / post_recv keep the GIL: on the common providers a post is a
 * few stores and a doorbell (rxe and siw make a system call), and giving
 * the GIL up and taking it back costs more than that, and much more when
 * another thread is waiting for it (it is then handed over, and taking it
 * back waits for that thread).  A PostList can be told to release it
 * (release_gil=True) where a post is slow and other threads must run.
 */
/*
 * The one request of post_send(wr) or post_send([wr]) (the plain API's
 * common case), or NULL: it takes the short way below, with the same
 * checks and none of a chain's bookkeeping.  An exact list is read in
 * place as ibp_wr_seq_init reads it (no Python code runs until the post).
 */
static inline PyObject *single_wr(PyObject *arg, PyTypeObject *type)
{
    if (PyList_CheckExact(arg)) {
        if (PyList_Size(arg) != 1)
            return NULL;
        arg = PyList_GetItem(arg, 0);
    } else if (IBP_NO_GIL && PyTuple_CheckExact(arg)) {
        if (PyTuple_Size(arg) != 1)     /* a list's snapshot (post_requests) */
            return NULL;
        arg = PyTuple_GetItem(arg, 0);
    }
    return PyObject_TypeCheck(arg, type) ? arg : NULL;
}

/* Where threads run without the GIL (IBP_NO_GIL) a chain never points
 * into a request's own storage (its kept SGEs): once the request is unlocked another thread's
 * post may keep others there.  A kept request is then filled as any. */
#define CHAIN_TAKES_KEPT (!IBP_NO_GIL)

/* A short way, on a free-threaded target, counts itself in flight on its
 * queue before it locks the request: that lock may wait, and the queue's
 * critical section is suspended meanwhile, so another thread's close()
 * must find it busy.  On a GIL target nothing (it runs no Python code). */
static inline void short_way_enter(PyObject *queue)
{
    if (IBP_NO_GIL)
        ibp_busy_enter(queue);
}

static inline void short_way_leave(PyObject *queue)
{
    if (IBP_NO_GIL)
        ibp_busy_leave(queue);
}

/* A kept request's post failed (out of line: the short way spends no
 * register on its arguments but the queue's). */
__attribute__((noinline, cold))
static PyObject *kept_post_failed(PyObject *self, const char *verb, int rc, uint64_t wr_id)
{
    return ibp_post_failed(self, verb, rc, 0, wr_id);
}

/* Where a kept request's post puts the provider's bad pointer (the only
 * request: never read).  Not on the stack, so that the short way keeps no
 * frame; one is enough, under the GIL. */
static IBP_THREAD_LOCAL struct ibv_send_wr *kept_bad_send;
static IBP_THREAD_LOCAL struct ibv_recv_wr *kept_bad_recv;

/* A SendWR that a post read before and that has not changed since
 * (ibp_send_wr_kept): posted from the request it keeps, with nothing to read. */
static inline PyObject *post_send_kept(PyObject *self, SendWRObject *w)
{
    w->prepared.wr_id = w->wr_id;
    int rc = ibv_post_send(QP_PTR(self), &w->prepared, &kept_bad_send);
    if (__builtin_expect(rc != 0, 0))
        return kept_post_failed(self, "ibv_post_send", rc, w->wr_id);
    return ibp_none();
}

/* Post one request with its SGEs on the stack.  When they do not fit,
 * NULL without an exception and *no_room set: nothing was posted, and the
 * caller takes a chain's way. */
static PyObject *post_send_one_locked(PyObject *self, SendWRObject *w, int *no_room,
                                      struct ibp_bind_snapshot *bind)
{
    if (ibp_send_wr_kept(w) && QP_PTR(self)->qp_type != IBV_QPT_UD)
        return post_send_kept(self, w);     /* post_send([wr]) */
    struct ibv_send_wr wr, *bad = NULL;
    struct ibv_sge sges[STACK_SGES];
    wr.sg_list = sges;
    if (ibp_check_ah_fits_qp(self, w->ah, 0) < 0)
        return NULL;
    int filled = ibp_send_wr_fill(w, w->sg_list, &wr, STACK_SGES, bind);
    if (filled != 0) {
        *no_room = filled > 0;
        return NULL;
    }
    if (check_inline_mrs(w->sg_list, &wr) < 0)
        return NULL;
    wr.next = NULL;
    int rc = ibv_post_send(QP_PTR(self), &wr, &bad);
    if (rc != 0)
        return ibp_post_failed(self, "ibv_post_send", rc, 0, bad ? bad->wr_id : 0);
    Py_RETURN_NONE;
}

/* Post one request: read and posted in its critical section, what it
 * names held (send_wr_lock_hold). */
static PyObject *post_send_one(PyObject *self, SendWRObject *w, int *no_room)
{
    struct ibp_wr_lock l;
    PyObject *held;
    struct ibp_bind_snapshot bind;
    if (send_wr_lock_hold(&l, w, &held, &bind) < 0)
        return NULL;
    PyObject *result = post_send_one_locked(self, w, no_room, &bind);
    ibp_unhold_each(held);
    ibp_wr_unlock(&l);
    return result;
}

/* Which receive queue a post_recv posts to: self is a QP, an SRQ or a WQ. */
enum recv_queue { RECV_QP, RECV_SRQ, RECV_WQ };

static inline int recv_verb(PyObject *self, enum recv_queue q, struct ibv_recv_wr *wrs,
                            struct ibv_recv_wr **bad)
{
    switch (q) {
    case RECV_WQ:
        return ibv_post_wq_recv(WQ_PTR(self), wrs, bad);
    case RECV_SRQ:
        return ibv_post_srq_recv(SRQ_PTR(self), wrs, bad);
    default:
        return ibv_post_recv(QP_PTR(self), wrs, bad);
    }
}

/* post(self, requests, q) of what a post reads: arg itself, or on a
 * free-threaded target a list's snapshot (a tuple, taken in the list's
 * critical section): a list is read in place, and another thread could
 * change it while its items are read. */
static PyObject *post_requests(PyObject *self, PyObject *arg, enum recv_queue q,
                               PyObject *(*post)(PyObject *, PyObject *, enum recv_queue))
{
    if (!IBP_NO_GIL || !PyList_CheckExact(arg))
        return post(self, arg, q);
    PyObject *requests = PySequence_Tuple(arg);
    if (requests == NULL)
        return NULL;
    PyObject *result = post(self, requests, q);
    Py_DECREF(requests);
    return result;
}

static const char *recv_verb_name(enum recv_queue q)
{
    return q == RECV_WQ ? "ibv_post_wq_recv" : q == RECV_SRQ ? "ibv_post_srq_recv"
                                                            : "ibv_post_recv";
}

/* post_send_kept's twin for a receive (its wr_id is in the request it
 * keeps). */
static inline PyObject *post_recv_kept(PyObject *self, RecvWRObject *w, enum recv_queue q)
{
    int rc = recv_verb(self, q, &w->prepared, &kept_bad_recv);
    if (__builtin_expect(rc != 0, 0))
        return kept_post_failed(self, recv_verb_name(q), rc, w->prepared.wr_id);
    return ibp_none();
}

/* A kept request through the queue's entry (spec entries: the provider's
 * function while open; IBP_ENTRY_CLOSED once closed). */
static inline int recv_entry(PyObject *self, enum recv_queue q, struct ibv_recv_wr *wr)
{
    switch (q) {
    case RECV_WQ:
        return WQ_entry_post_recv(self, wr, &kept_bad_recv);
    case RECV_SRQ:
        return SRQ_entry_post_recv(self, wr, &kept_bad_recv);
    default:
        return QP_entry_post_recv(self, wr, &kept_bad_recv);
    }
}

static PyObject *post_recv_one_locked(PyObject *self, RecvWRObject *w, enum recv_queue q,
                                      int *no_room);

/* The same for a receive. */
static PyObject *post_recv_one(PyObject *self, RecvWRObject *w, enum recv_queue q,
                               int *no_room)
{
    struct ibp_wr_lock l;
    ibp_wr_lock(&l, (PyObject *)w);
    PyObject *result = post_recv_one_locked(self, w, q, no_room);
    ibp_wr_unlock(&l);
    return result;
}

static PyObject *post_recv_one_locked(PyObject *self, RecvWRObject *w, enum recv_queue q,
                                      int *no_room)
{
    if (ibp_recv_wr_kept(w))
        return post_recv_kept(self, w, q);     /* post_recv([wr]) */
    struct ibv_recv_wr wr, *bad = NULL;
    struct ibv_sge sges[STACK_SGES];
    wr.sg_list = sges;
    int filled = ibp_recv_wr_fill(w, w->sg_list, &wr, STACK_SGES);
    if (filled != 0) {
        *no_room = filled > 0;
        return NULL;
    }
    int rc = recv_verb(self, q, &wr, &bad);
    if (rc != 0)
        return ibp_post_failed(self, recv_verb_name(q), rc, 0, bad ? bad->wr_id : 0);
    Py_RETURN_NONE;
}

/* An exact list or tuple of at most STACK_WRS requests: how many (0 for
 * anything else, or more). */
static Py_ssize_t stack_batch_size(PyObject *arg, int *is_list)
{
    *is_list = PyList_CheckExact(arg);
    if (!*is_list && !PyTuple_CheckExact(arg))
        return 0;
    Py_ssize_t n = *is_list ? PyList_Size(arg) : PyTuple_Size(arg);
    return n > STACK_WRS ? 0 : n;
}

static inline PyObject *batch_item(PyObject *arg, int is_list, Py_ssize_t i)
{
    return is_list ? PyList_GetItem(arg, i) : PyTuple_GetItem(arg, i);
}

/* A fill's outcome, its request unlocked. */
static inline int filled_unlocked(struct ibp_wr_lock *l, int filled)
{
    ibp_wr_unlock(l);
    return filled;
}

/* c holds the n requests filled into its stack storage. */
static Py_ssize_t chain_on_stack(struct chain *c, void *wrs, Py_ssize_t n)
{
    c->heap = NULL;
    c->wrs = wrs;
    c->sges = c->stack_sges;
    return n;
}

/*
 * An exact list or tuple of up to STACK_WRS requests whose SGEs fit in
 * STACK_SGES (the plain API's batches) is read once: each item is checked
 * and converted as it comes, without the counting pass of chain_start.
 * Returns how many requests are in c's stack storage, chained; 0 when they
 * do not fit or there are none (the caller then takes chain_start's way;
 * nothing was posted), -1 with an exception.  No Python code runs here, so
 * the list cannot change under it.
 */
static Py_ssize_t send_chain_on_stack(PyObject *self, PyObject *arg, struct chain *c)
{
    int is_list;
    Py_ssize_t n = stack_batch_size(arg, &is_list);
    struct ibv_send_wr *wrs = c->stack_wrs.send;
    struct ibv_sge *sge = c->stack_sges;
    int ud = QP_PTR(self)->qp_type == IBV_QPT_UD;
    c->held = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = batch_item(arg, is_list, i);
        if (!PyObject_TypeCheck(item, SendWR_Type))
            return ibp_bad_wr_item(i, "SendWR", item);
        SendWRObject *w = (SendWRObject *)item;
        struct ibv_send_wr *wr = &wrs[i];
        struct ibp_wr_lock l;
        struct ibp_bind_snapshot bind;
        /* its SGEs are those it keeps: none of the chain's room taken (only
         * with the GIL, where nothing else runs: no lock, nothing to hold) */
        if (CHAIN_TAKES_KEPT && ibp_send_wr_kept(w) && !ud) {
            ibp_send_wr_copy_kept(w, wr);
            wr->next = i + 1 < n ? &wrs[i + 1] : NULL;
            continue;
        }
        if (chain_lock_hold(c, &l, w, &bind) < 0)
            return -1;
        wr->sg_list = sge;
        int filled = ibp_check_ah_fits_qp(self, w->ah, i) < 0 ? -1
                     : ibp_send_wr_fill(w, w->sg_list, wr, c->stack_sges + STACK_SGES - sge, &bind);
        if (filled == 0 && check_inline_mrs(w->sg_list, wr) < 0)
            filled = -1;
        ibp_wr_unlock(&l);
        if (filled != 0)
            return filled > 0 ? 0 : -1;
        wr->next = i + 1 < n ? &wrs[i + 1] : NULL;
        sge += wr->num_sge;
    }
    return chain_on_stack(c, wrs, n);
}

/* post_recv's twin of send_chain_on_stack (typed for ibv_recv_wr). */
static Py_ssize_t recv_chain_on_stack(PyObject *arg, struct chain *c)
{
    int is_list;
    Py_ssize_t n = stack_batch_size(arg, &is_list);
    struct ibv_recv_wr *wrs = c->stack_wrs.recv;
    struct ibv_sge *sge = c->stack_sges;
    c->held = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = batch_item(arg, is_list, i);
        if (!PyObject_TypeCheck(item, RecvWR_Type))
            return ibp_bad_wr_item(i, "RecvWR", item);
        RecvWRObject *w = (RecvWRObject *)item;
        struct ibv_recv_wr *wr = &wrs[i];
        struct ibp_wr_lock l;
        ibp_wr_lock(&l, item);
        if (CHAIN_TAKES_KEPT && ibp_recv_wr_kept(w)) {
            *wr = w->prepared;
            ibp_wr_unlock(&l);
            wr->next = i + 1 < n ? &wrs[i + 1] : NULL;
            continue;
        }
        wr->sg_list = sge;
        int filled = filled_unlocked(&l, ibp_recv_wr_fill(w, w->sg_list, wr,
                                                          c->stack_sges + STACK_SGES - sge));
        if (filled != 0)
            return filled > 0 ? 0 : -1;
        wr->next = i + 1 < n ? &wrs[i + 1] : NULL;
        sge += wr->num_sge;
    }
    return chain_on_stack(c, wrs, n);
}

static PyObject *send_chain_post(PyObject *self, struct ibv_send_wr *wrs)
{
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(QP_PTR(self), wrs, &bad);
    if (rc != 0)
        return ibp_post_failed(self, "ibv_post_send", rc, bad ? bad - wrs : 0, bad ? bad->wr_id : 0);
    Py_RETURN_NONE;
}

static PyObject *recv_chain_post(PyObject *self, struct ibv_recv_wr *wrs, enum recv_queue q)
{
    struct ibv_recv_wr *bad = NULL;
    int rc = recv_verb(self, q, wrs, &bad);
    if (rc != 0)
        return ibp_post_failed(self, recv_verb_name(q), rc, bad ? bad - wrs : 0,
                               bad ? bad->wr_id : 0);
    Py_RETURN_NONE;
}

/* A counted chain's SGEs no longer fit: only a list changed between the
 * count and the fill could do that, and no Python code runs in between. */
static int chain_overflow(int filled)
{
    if (filled > 0)
        PyErr_SetString(PyExc_RuntimeError, "sg_list changed while it was converted");
    return -1;
}

static PyObject *post_send_requests(PyObject *self, PyObject *arg, enum recv_queue unused);

/* Everything else post_send takes: a changed or new SendWR, a list, an
 * iterable, a PostList. */
static PyObject *post_send_any(PyObject *self, PyObject *arg)
{
    return post_requests(self, arg, RECV_QP, post_send_requests);
}

static PyObject *post_send_requests(PyObject *self, PyObject *arg, enum recv_queue unused)
{
    (void)unused;
    struct wr_seq s;
    struct chain c;
    int no_room = 0;
    if (Py_IS_TYPE(arg, PostList_Type))
        return ibp_postlist_post(self, arg, POST_SEND);
    PyObject *one = single_wr(arg, SendWR_Type);
    if (one != NULL) {
        PyObject *result = post_send_one(self, (SendWRObject *)one, &no_room);
        if (!no_room)
            return result;
    } else {
        Py_ssize_t n = send_chain_on_stack(self, arg, &c);
        PyObject *result = n > 0 ? send_chain_post(self, c.wrs) : NULL;
        chain_unhold(&c);
        if (n != 0)
            return result;
    }
    int started = chain_start(&s, &c, arg, SendWR_Type, "SendWR", sizeof(struct ibv_send_wr));
    if (started <= 0)
        return started == 0 ? Py_NewRef(Py_None) : NULL;
    PyObject *result = NULL;
    /* An iterable's own code ran in chain_start, after post_send's first
     * check: it may have opened a wr_start batch on this QP, whose send
     * queue lock the provider would then take again. */
    if (s.owned != NULL && ibp_qp_send_idle(self, "post_send") < 0)
        return chain_end(&s, &c, NULL);
    struct ibv_send_wr *wrs = c.wrs;
    struct ibv_sge *sge = c.sges;
    for (Py_ssize_t i = 0; i < s.n; i++) {
        struct ibv_send_wr *wr = &wrs[i];
        SendWRObject *w = (SendWRObject *)ibp_wr_seq_item(&s, i);
        wr->sg_list = sge;
        struct ibp_wr_lock l;
        struct ibp_bind_snapshot bind;
        if (chain_lock_hold(&c, &l, w, &bind) < 0)
            goto done;
        int filled = ibp_check_ah_fits_qp(self, w->ah, i) < 0 ? -1
                     : ibp_send_wr_fill(w, w->sg_list, wr, s.nsge - (sge - c.sges), &bind);
        if (filled == 0 && check_inline_mrs(w->sg_list, wr) < 0)
            filled = -1;
        ibp_wr_unlock(&l);
        if (filled != 0) {
            chain_overflow(filled);
            goto done;
        }
        wr->next = i + 1 < s.n ? &wrs[i + 1] : NULL;
        sge += wr->num_sge;
    }
    result = send_chain_post(self, wrs);
done:
    return chain_end(&s, &c, result);
}

/* QP.post_send(wrs), anything its short way does not take: generated/qp.c.h
 * parses the argument and enters the call. */
PyObject *ibp_hand_QP_post_send_impl(PyObject *self, PyObject *arg)
{
    if (ibp_check_open(self) < 0 || ibp_qp_send_idle(self, "post_send") < 0)
        return NULL;
    return post_send_any(self, arg);
}

/*
 * The short way (spec short_way): post_send(wr) by position of a kept
 * request to an open plain QP, posted before the call is entered.  It runs
 * no Python code and keeps the GIL, so nothing can close the QP meanwhile
 * (no in-flight mark is needed), and ibp_send_wr_kept is never true in a
 * fork() child (nothing is kept there, and no SGE matches a request kept
 * before the fork: common.h's ibp_kept_sge_type), which is the fork check.  A kept request never needs an AH (ibp_send_wr_fill
 * keeps none with one), so only a UD QP, which refuses a request without
 * one, takes it the long way; so does a QPEx (its wr_start() batch) or a
 * subclass.
 */
PyObject *ibp_hand_QP_post_send_short(PyObject *self, PyObject *wrs)
{
    struct ibv_qp *qp = QP_PTR(self);
    if (__builtin_expect(Py_IS_TYPE(wrs, SendWR_Type) && qp != NULL && Py_IS_TYPE(self, QP_Type), 1)) {
        SendWRObject *w = (SendWRObject *)wrs;
        struct ibp_wr_lock l;
        short_way_enter(self);
        ibp_wr_lock(&l, wrs);
        if (__builtin_expect(ibp_send_wr_kept(w) && qp->qp_type != IBV_QPT_UD, 1)) {
            PyObject *result = post_send_kept(self, w);
            ibp_wr_unlock(&l);
            short_way_leave(self);
            return result;
        }
        ibp_wr_unlock(&l);
        short_way_leave(self);
    }
    return ibp_QP_post_send_entered(self, wrs);
}

/* Its chain loop has
 * the shape of post_send's on purpose (duplicates reports the pair): each
 * is typed for its struct (ibv_send_wr / ibv_recv_wr) and its fill
 * function, which LTO inlines; one shared loop would need a function
 * pointer per request. */
static PyObject *post_recv_requests(PyObject *self, PyObject *arg, enum recv_queue q);

static PyObject *post_recv(PyObject *self, PyObject *arg, enum recv_queue q)
{
    if (ibp_check_open(self) < 0)
        return NULL;
    return post_requests(self, arg, q, post_recv_requests);
}

static PyObject *post_recv_requests(PyObject *self, PyObject *arg, enum recv_queue q)
{
    struct wr_seq s;
    struct chain c;
    int no_room = 0;
    if (Py_IS_TYPE(arg, PostList_Type) && q == RECV_WQ) {
        PyErr_SetString(PyExc_TypeError, "WQ.post_recv takes a RecvWR or a list of them, not a PostList");
        return NULL;
    }
    if (Py_IS_TYPE(arg, PostList_Type))
        return ibp_postlist_post(self, arg, q == RECV_SRQ ? POST_SRQ_RECV : POST_RECV);
    PyObject *one = single_wr(arg, RecvWR_Type);
    if (one != NULL) {
        PyObject *result = post_recv_one(self, (RecvWRObject *)one, q, &no_room);
        if (!no_room)
            return result;
    } else {
        Py_ssize_t n = recv_chain_on_stack(arg, &c);
        if (n != 0)
            return n < 0 ? NULL : recv_chain_post(self, c.wrs, q);
    }
    int started = chain_start(&s, &c, arg, RecvWR_Type, "RecvWR", sizeof(struct ibv_recv_wr));
    if (started <= 0)
        return started == 0 ? Py_NewRef(Py_None) : NULL;
    PyObject *result = NULL;
    struct ibv_recv_wr *wrs = c.wrs;
    struct ibv_sge *sge = c.sges;
    for (Py_ssize_t i = 0; i < s.n; i++) {
        struct ibv_recv_wr *wr = &wrs[i];
        RecvWRObject *w = (RecvWRObject *)ibp_wr_seq_item(&s, i);
        wr->sg_list = sge;
        struct ibp_wr_lock l;
        ibp_wr_lock(&l, (PyObject *)w);
        int filled = filled_unlocked(&l, ibp_recv_wr_fill(w, w->sg_list, wr,
                                                          s.nsge - (sge - c.sges)));
        if (filled != 0) {
            chain_overflow(filled);
            goto done;
        }
        wr->next = i + 1 < s.n ? &wrs[i + 1] : NULL;
        sge += wr->num_sge;
    }
    result = recv_chain_post(self, wrs, q);
done:
    return chain_end(&s, &c, result);
}

/* post_recv(wrs) of a QP, an SRQ, a WQ, anything their short way does not
 * take: generated/{qp,srq,wq}.c.h parse the argument and enter the call. */
PyObject *ibp_hand_QP_post_recv_impl(PyObject *self, PyObject *wrs)
{
    return post_recv(self, wrs, RECV_QP);
}

PyObject *ibp_hand_SRQ_post_recv_impl(PyObject *self, PyObject *wrs)
{
    return post_recv(self, wrs, RECV_SRQ);
}

PyObject *ibp_hand_WQ_post_recv_impl(PyObject *self, PyObject *wrs)
{
    return post_recv(self, wrs, RECV_WQ);
}

/* Their short way (spec short_way), as post_send's: a kept RecvWR by
 * position, posted before the call is entered.  Through the queue's entry,
 * which is the open check: a closed queue's returns IBP_ENTRY_CLOSED and
 * names the queue in ibp_entry_closed, and the long way then raises as it
 * does for any closed queue.  A failure's message names the queue's state
 * and size (explain.c), so self is kept across the provider's call: one
 * saved register, 4 instructions (CONTRIBUTING, "Where the budgets stand"). */
static inline PyObject *post_recv_short(PyObject *self, PyObject *wrs, enum recv_queue q,
                                        PyObject *(*entered)(PyObject *, PyObject *))
{
    if (__builtin_expect(Py_IS_TYPE(wrs, RecvWR_Type), 1)) {
        RecvWRObject *w = (RecvWRObject *)wrs;
        struct ibp_wr_lock l;
        short_way_enter(self);
        ibp_wr_lock(&l, wrs);
        if (__builtin_expect(ibp_recv_wr_kept(w), 1)) {
            int rc = recv_entry(self, q, &w->prepared);
            uint64_t wr_id = w->prepared.wr_id;
            ibp_wr_unlock(&l);
            short_way_leave(self);
            if (__builtin_expect(rc == 0, 1))
                return ibp_none();
            if (rc == IBP_ENTRY_CLOSED)
                return entered(ibp_entry_closed, wrs);
            return kept_post_failed(self, recv_verb_name(q), rc, wr_id);
        }
        ibp_wr_unlock(&l);
        short_way_leave(self);
    }
    return entered(self, wrs);
}

PyObject *ibp_hand_QP_post_recv_short(PyObject *self, PyObject *wrs)
{
    return post_recv_short(self, wrs, RECV_QP, ibp_QP_post_recv_entered);
}

PyObject *ibp_hand_SRQ_post_recv_short(PyObject *self, PyObject *wrs)
{
    return post_recv_short(self, wrs, RECV_SRQ, ibp_SRQ_post_recv_entered);
}

PyObject *ibp_hand_WQ_post_recv_short(PyObject *self, PyObject *wrs)
{
    return post_recv_short(self, wrs, RECV_WQ, ibp_WQ_post_recv_entered);
}
