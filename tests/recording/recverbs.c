/*
 * A recording libibverbs for host tests: a sibling of bench/nullverbs.c,
 * loaded by the extension through IBVERBS_LIBRARY instead of
 * libibverbs.so.1 (tests/recording/recording.py builds it and runs test
 * code under it; read that module's docstring first).  No mock: the
 * binding runs its real code and hands its real requests to this
 * "provider", which keeps a copy of everything it is handed.
 *
 * One device, "rec0".  It opens, allocates PDs, registers MRs (lkey = rkey
 * = a fresh number each time), creates CQs (ibv_create_cq and, through the
 * verbs_context, ibv_create_cq_ex), RC/UD QPs (ibv_create_qp and, through
 * the verbs_context, ibv_create_qp_ex: recqpex.c), SRQs, WQs and AHs, and
 * modifies QPs and WQs.  Every object gets a fresh .handle
 * (one counter for all), so a test names an object by its Python
 * `.handle`.
 *
 * Records (rec_count, rec_read, rec_clear): one struct rec_request per
 * request handed to post_send, post_recv or post_srq_recv, every field of
 * ibv_send_wr/ibv_recv_wr, each union read through each of its members,
 * and the SGEs by value (the first REC_MAX_SGE of them).  `post` numbers
 * the post calls from 1, `index` is the request's place in its chain.  The
 * field names come from rec_field_names(), so Python builds its ctypes
 * mirror from them and the two cannot drift (recverbs.h).  An extended
 * QP's builder calls (wr_start ... wr_complete) are records too, one per
 * call: see recqpex.c.
 *
 * A CQ's lock, modelled on mlx5: a CQEx's start_poll that returns a
 * completion holds its CQ's lock until end_poll (rec_cq_set_locked holds
 * or drops it by hand, for any CQ).  mlx5 takes cq->lock in destroy_qp,
 * modify_qp to RESET, destroy_wq and modify_wq to RESET or from RESET to
 * RDY; on a held lock that is a self-deadlock on hardware.  Here such a
 * call does nothing, records a REC_WOULD_DEADLOCK request (target = the
 * QP's or WQ's handle, opcode = REC_LOCK_* saying which verb) and returns
 * EDEADLK, so a test can assert the binding never got that far.  The same
 * for a post_send on an extended QP between wr_start and wr_complete /
 * wr_abort (REC_LOCK_POST_SEND): rxe and mlx5 hold the send queue's lock
 * for the whole batch, and post_send takes it again.
 *
 * Completions: rec_cq_push(cq handle, wr_id, status, opcode, byte_len)
 * queues one; ibv_poll_cq and the CQEx poll take them in order.  A CQ
 * created with cqe = 1000000 + K also starts with K completions queued.
 *
 * Failures: rec_fail_next_post(rc, bad_index) makes the next post call
 * return rc (any sign: providers differ) with *bad at that request; a
 * QPEx's wr_complete counts as a post call (bad_index unused).
 *
 * Symbols the extension requires that this file lacks are stubs that
 * abort with their name (tests/recording/recording.py generates them, as
 * bench/host_micro.py does for nullverbs).
 */
#include "recverbs.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the records ---------------------------------------------------------- */

enum { REC_LOCK_DESTROY_QP = 1, REC_LOCK_MODIFY_QP = 2, REC_LOCK_DESTROY_WQ = 3,
       REC_LOCK_MODIFY_WQ = 4, REC_LOCK_POST_SEND = 5 };

pthread_mutex_t rec_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct rec_request *records;
static size_t records_len, records_cap;
static uint64_t posts;
static int fail_rc, fail_at = -1;

EXPORT const char *rec_field_names(void)
{
#define REC_NAME(name) #name ","
    return REC_FIELDS(REC_NAME);
#undef REC_NAME
}

EXPORT size_t rec_request_size(void) { return sizeof(struct rec_request); }
EXPORT int rec_max_sge(void) { return REC_MAX_SGE; }
EXPORT int rec_max_inline(void) { return REC_MAX_INLINE; }

EXPORT size_t rec_count(void)
{
    pthread_mutex_lock(&rec_mutex);
    size_t n = records_len;
    pthread_mutex_unlock(&rec_mutex);
    return n;
}

EXPORT int rec_read(size_t i, struct rec_request *out)
{
    int rc = -1;
    pthread_mutex_lock(&rec_mutex);
    if (i < records_len) {
        *out = records[i];
        rc = 0;
    }
    pthread_mutex_unlock(&rec_mutex);
    return rc;
}

EXPORT void rec_clear(void)
{
    pthread_mutex_lock(&rec_mutex);
    records_len = 0;
    pthread_mutex_unlock(&rec_mutex);
}

/* Every post_send sleeps this long first (rec_set_post_delay): a window,
 * wide enough to hit, in which another thread may close what the request
 * names (tests/host/thread_stress.py rec_ah_closed_while_posted). */
static unsigned post_delay_us;

EXPORT void rec_set_post_delay(unsigned usec)
{
    __atomic_store_n(&post_delay_us, usec, __ATOMIC_RELAXED);
}

EXPORT void rec_fail_next_post(int rc, int bad_index)
{
    pthread_mutex_lock(&rec_mutex);
    fail_rc = rc;
    fail_at = bad_index;
    pthread_mutex_unlock(&rec_mutex);
}

/* Called with rec_mutex held. */
struct rec_request *rec_append(void)
{
    if (records_len == records_cap) {
        size_t cap = records_cap ? records_cap * 2 : 256;
        struct rec_request *grown = realloc(records, cap * sizeof(*grown));
        if (grown == NULL) {
            fputs("recverbs: out of memory for records\n", stderr);
            abort();
        }
        records = grown;
        records_cap = cap;
    }
    struct rec_request *r = &records[records_len++];
    memset(r, 0, sizeof(*r));
    return r;
}

void rec_sges(struct rec_request *r, const struct ibv_sge *sg_list, int num_sge)
{
    r->sg_list = (uintptr_t)sg_list;
    r->num_sge = (uint64_t)(int64_t)num_sge;
    int n = num_sge < 0 ? 0 : num_sge > REC_MAX_SGE ? REC_MAX_SGE : num_sge;
    if (sg_list != NULL)
        memcpy(r->sge, sg_list, (size_t)n * sizeof(*sg_list));
    r->sges_recorded = sg_list != NULL ? (uint64_t)n : 0;
}

/* ---- live objects, by handle ---------------------------------------------- */

enum { OBJ_CQ = 1, OBJ_AH, OBJ_QP, OBJ_WQ, OBJ_SRQ, OBJ_MR, OBJ_MW };

struct rec_object {
    struct rec_object *next;
    int type;
    uint32_t handle;
    void *ptr;
};

static struct rec_object *live;
static uint32_t next_handle = 1;

static uint32_t obj_add(int type, void *ptr)
{
    struct rec_object *o = calloc(1, sizeof(*o));
    if (o == NULL)
        abort();
    pthread_mutex_lock(&rec_mutex);
    o->type = type;
    o->ptr = ptr;
    o->handle = next_handle++;
    o->next = live;
    live = o;
    pthread_mutex_unlock(&rec_mutex);
    return o->handle;
}

static void obj_remove(void *ptr)
{
    pthread_mutex_lock(&rec_mutex);
    for (struct rec_object **p = &live; *p; p = &(*p)->next)
        if ((*p)->ptr == ptr) {
            struct rec_object *gone = *p;
            *p = gone->next;
            free(gone);
            break;
        }
    pthread_mutex_unlock(&rec_mutex);
}

/* Called with rec_mutex held. */
static struct rec_object *obj_find_ptr(int type, const void *ptr)
{
    for (struct rec_object *o = live; o; o = o->next)
        if (o->type == type && o->ptr == ptr)
            return o;
    return NULL;
}

/* Called with rec_mutex held: the AH's .handle, UINT32_MAX for a pointer
 * that is no live AH of this provider. */
uint32_t rec_ah_handle(const struct ibv_ah *ah)
{
    struct rec_object *o = obj_find_ptr(OBJ_AH, ah);
    return o ? o->handle : UINT32_MAX;
}

/* Called with rec_mutex held: the MR's .handle, UINT32_MAX for a pointer
 * that is no live MR of this provider (one deregistered: a real provider
 * would read freed memory there). */
uint32_t rec_mr_handle(const struct ibv_mr *mr)
{
    struct rec_object *o = obj_find_ptr(OBJ_MR, mr);
    return o ? o->handle : UINT32_MAX;
}

static void *obj_find_handle(int type, uint32_t handle)
{
    void *ptr = NULL;
    pthread_mutex_lock(&rec_mutex);
    for (struct rec_object *o = live; o; o = o->next)
        if (o->type == type && o->handle == handle)
            ptr = o->ptr;
    pthread_mutex_unlock(&rec_mutex);
    return ptr;
}

static uint32_t fresh_handle(void)
{
    pthread_mutex_lock(&rec_mutex);
    uint32_t h = next_handle++;
    pthread_mutex_unlock(&rec_mutex);
    return h;
}

/* ---- CQs, their completions and their lock --------------------------------- */

#define REC_CQ_RING 1024

struct rec_completion {
    uint64_t wr_id;
    uint32_t status, opcode, byte_len;
};

struct rec_cq {
    struct ibv_cq_ex ex;         /* its head is the struct ibv_cq (ibv_cq_ex_to_cq) */
    int locked;
    unsigned head, len;
    struct rec_completion ring[REC_CQ_RING];
    struct rec_completion current;
};

static struct rec_cq *rec_cq_of(struct ibv_cq *cq) { return (struct rec_cq *)cq; }

EXPORT int rec_cq_push(uint32_t handle, uint64_t wr_id, uint32_t status, uint32_t opcode,
                       uint32_t byte_len)
{
    struct rec_cq *cq = obj_find_handle(OBJ_CQ, handle);
    if (cq == NULL)
        return -ENOENT;
    pthread_mutex_lock(&rec_mutex);
    int rc = -ENOSPC;
    if (cq->len < REC_CQ_RING) {
        cq->ring[(cq->head + cq->len++) % REC_CQ_RING] =
            (struct rec_completion){wr_id, status, opcode, byte_len};
        rc = 0;
    }
    pthread_mutex_unlock(&rec_mutex);
    return rc;
}

EXPORT int rec_cq_set_locked(uint32_t handle, int locked)
{
    struct rec_cq *cq = obj_find_handle(OBJ_CQ, handle);
    if (cq == NULL)
        return -ENOENT;
    cq->locked = locked;
    return 0;
}

EXPORT int rec_cq_locked(uint32_t handle)
{
    struct rec_cq *cq = obj_find_handle(OBJ_CQ, handle);
    return cq == NULL ? -ENOENT : cq->locked;
}

/* Takes the oldest completion into *out; 0, or ENOENT when there is none. */
static int cq_take(struct rec_cq *cq, struct rec_completion *out)
{
    int rc = ENOENT;
    pthread_mutex_lock(&rec_mutex);
    if (cq->len > 0) {
        *out = cq->ring[cq->head];
        cq->head = (cq->head + 1) % REC_CQ_RING;
        cq->len--;
        rc = 0;
    }
    pthread_mutex_unlock(&rec_mutex);
    return rc;
}

static int rec_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc)
{
    struct rec_cq *cq = rec_cq_of(ibcq);
    struct rec_completion c;
    int n = 0;
    while (n < num && cq_take(cq, &c) == 0) {
        memset(&wc[n], 0, sizeof(wc[n]));
        wc[n].wr_id = c.wr_id;
        wc[n].status = c.status;
        wc[n].opcode = c.opcode;
        wc[n].byte_len = c.byte_len;
        wc[n].qp_num = 1;
        n++;
    }
    return n;
}

static int rec_req_notify_cq(struct ibv_cq *cq, int solicited_only) { return 0; }

static void cqex_load(struct rec_cq *cq)
{
    cq->ex.wr_id = cq->current.wr_id;
    cq->ex.status = cq->current.status;
}

static int rec_start_poll(struct ibv_cq_ex *ex, struct ibv_poll_cq_attr *attr)
{
    struct rec_cq *cq = (struct rec_cq *)ex;
    if (cq_take(cq, &cq->current) != 0)
        return ENOENT;            /* mlx5 drops the lock before it says so */
    cq->locked = 1;
    cqex_load(cq);
    return 0;
}

static int rec_next_poll(struct ibv_cq_ex *ex)
{
    struct rec_cq *cq = (struct rec_cq *)ex;
    if (cq_take(cq, &cq->current) != 0)
        return ENOENT;
    cqex_load(cq);
    return 0;
}

static void rec_end_poll(struct ibv_cq_ex *ex) { ((struct rec_cq *)ex)->locked = 0; }
static enum ibv_wc_opcode rd_opcode(struct ibv_cq_ex *ex) { return ((struct rec_cq *)ex)->current.opcode; }
static uint32_t rd_byte_len(struct ibv_cq_ex *ex) { return ((struct rec_cq *)ex)->current.byte_len; }
static uint32_t rd_zero32(struct ibv_cq_ex *ex) { return 0; }
static uint32_t rd_qp_num(struct ibv_cq_ex *ex) { return 1; }
static __be32 rd_imm(struct ibv_cq_ex *ex) { return 0; }
static unsigned int rd_wc_flags(struct ibv_cq_ex *ex) { return 0; }
static uint8_t rd_zero8(struct ibv_cq_ex *ex) { return 0; }
static uint16_t rd_zero16(struct ibv_cq_ex *ex) { return 0; }
static uint64_t rd_zero64(struct ibv_cq_ex *ex) { return 0; }
static void rd_tm_info(struct ibv_cq_ex *ex, struct ibv_wc_tm_info *tm) { memset(tm, 0, sizeof(*tm)); }

static struct rec_cq *cq_new(struct ibv_context *ctx, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel)
{
    struct rec_cq *cq = calloc(1, sizeof(*cq));
    if (cq == NULL)
        return NULL;
    cq->ex.context = ctx;
    cq->ex.channel = channel;
    cq->ex.cq_context = cq_context;
    cq->ex.cqe = cqe;
    pthread_mutex_init(&cq->ex.mutex, NULL);
    pthread_cond_init(&cq->ex.cond, NULL);
    cq->ex.start_poll = rec_start_poll;
    cq->ex.next_poll = rec_next_poll;
    cq->ex.end_poll = rec_end_poll;
    cq->ex.read_opcode = rd_opcode;
    cq->ex.read_vendor_err = rd_zero32;
    cq->ex.read_byte_len = rd_byte_len;
    cq->ex.read_imm_data = rd_imm;
    cq->ex.read_qp_num = rd_qp_num;
    cq->ex.read_src_qp = rd_zero32;
    cq->ex.read_wc_flags = rd_wc_flags;
    cq->ex.read_slid = rd_zero32;
    cq->ex.read_sl = rd_zero8;
    cq->ex.read_dlid_path_bits = rd_zero8;
    cq->ex.read_completion_ts = rd_zero64;
    cq->ex.read_cvlan = rd_zero16;
    cq->ex.read_flow_tag = rd_zero32;
    cq->ex.read_tm_info = rd_tm_info;
    cq->ex.read_completion_wallclock_ns = rd_zero64;
    cq->ex.handle = obj_add(OBJ_CQ, cq);
    int k = cqe >= 1000000 ? cqe - 1000000 : 0;
    for (int i = 0; i < k && i < REC_CQ_RING; i++)
        rec_cq_push(cq->ex.handle, (uint64_t)i, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0);
    return cq;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int comp_vector)
{
    struct rec_cq *cq = cq_new(ctx, cqe, cq_context, channel);
    return cq ? ibv_cq_ex_to_cq(&cq->ex) : NULL;
}

static struct ibv_cq_ex *rec_create_cq_ex(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
    struct rec_cq *cq = cq_new(ctx, (int)attr->cqe, attr->cq_context, attr->channel);
    if (cq == NULL)
        errno = ENOMEM;
    return cq ? &cq->ex : NULL;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
    obj_remove(cq);
    free(cq);
    return 0;
}

/* ---- the lock check ----------------------------------------------------------- */

static int cq_is_locked(struct ibv_cq *cq) { return cq != NULL && rec_cq_of(cq)->locked; }

static int would_deadlock(uint32_t target, int verb)
{
    pthread_mutex_lock(&rec_mutex);
    struct rec_request *r = rec_append();
    r->kind = REC_WOULD_DEADLOCK;
    r->target = target;
    r->opcode = (uint64_t)verb;
    pthread_mutex_unlock(&rec_mutex);
    return EDEADLK;
}

/* ---- the data path ------------------------------------------------------------ */

/* Called with rec_mutex held. */
uint64_t rec_next_post(void) { return ++posts; }

/* Called with rec_mutex held: the failure rec_fail_next_post asked for, once. */
int rec_post_fails(int count, int *bad_index)
{
    int rc = fail_rc;
    *bad_index = fail_at < 0 ? 0 : fail_at < count ? fail_at : count - 1;
    fail_rc = 0;
    fail_at = -1;
    return rc;
}

static void rec_send_wr(struct rec_request *r, const struct ibv_send_wr *wr)
{
    r->wr_id = wr->wr_id;
    rec_sges(r, wr->sg_list, wr->num_sge);
    r->opcode = wr->opcode;
    r->send_flags = wr->send_flags;
    r->imm_data = wr->imm_data;
    r->rdma_remote_addr = wr->wr.rdma.remote_addr;
    r->rdma_rkey = wr->wr.rdma.rkey;
    r->atomic_remote_addr = wr->wr.atomic.remote_addr;
    r->atomic_compare_add = wr->wr.atomic.compare_add;
    r->atomic_swap = wr->wr.atomic.swap;
    r->atomic_rkey = wr->wr.atomic.rkey;
    r->ud_ah = (uintptr_t)wr->wr.ud.ah;
    r->ud_ah_handle = rec_ah_handle(wr->wr.ud.ah);
    r->ud_remote_qpn = wr->wr.ud.remote_qpn;
    r->ud_remote_qkey = wr->wr.ud.remote_qkey;
    r->xrc_remote_srqn = wr->qp_type.xrc.remote_srqn;
    r->bind_mw = (uintptr_t)wr->bind_mw.mw;
    r->bind_rkey = wr->bind_mw.rkey;
    r->bind_mr = (uintptr_t)wr->bind_mw.bind_info.mr;
    r->bind_mr_handle = wr->opcode == IBV_WR_BIND_MW ? rec_mr_handle(wr->bind_mw.bind_info.mr) : 0;
    r->bind_addr = wr->bind_mw.bind_info.addr;
    r->bind_length = wr->bind_mw.bind_info.length;
    r->bind_access = wr->bind_mw.bind_info.mw_access_flags;
    r->tso_hdr = (uintptr_t)wr->tso.hdr;
    r->tso_hdr_sz = wr->tso.hdr_sz;
    r->tso_mss = wr->tso.mss;
}

static int rec_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    if (((struct rec_qp *)qp)->batch != 0) {
        *bad = wr;
        return would_deadlock(qp->handle, REC_LOCK_POST_SEND);
    }
    struct ibv_send_wr *first = wr;
    int count = 0;
    unsigned delay = __atomic_load_n(&post_delay_us, __ATOMIC_RELAXED);
    if (delay != 0)
        usleep(delay);
    pthread_mutex_lock(&rec_mutex);
    uint64_t post = rec_next_post();
    for (; wr; wr = wr->next, count++) {
        struct rec_request *r = rec_append();
        r->kind = REC_SEND;
        r->post = post;
        r->index = (uint64_t)count;
        r->target = qp->qp_num;
        rec_send_wr(r, wr);
    }
    int bad_index, rc = rec_post_fails(count, &bad_index);
    pthread_mutex_unlock(&rec_mutex);
    if (rc != 0)
        for (*bad = first; bad_index-- > 0;)
            *bad = (*bad)->next;
    return rc;
}

static int rec_recv_chain(int kind, uint32_t target, struct ibv_recv_wr *wr,
                          struct ibv_recv_wr **bad)
{
    struct ibv_recv_wr *first = wr;
    int count = 0;
    pthread_mutex_lock(&rec_mutex);
    uint64_t post = rec_next_post();
    for (; wr; wr = wr->next, count++) {
        struct rec_request *r = rec_append();
        r->kind = (uint64_t)kind;
        r->post = post;
        r->index = (uint64_t)count;
        r->target = target;
        r->wr_id = wr->wr_id;
        rec_sges(r, wr->sg_list, wr->num_sge);
    }
    int bad_index, rc = rec_post_fails(count, &bad_index);
    pthread_mutex_unlock(&rec_mutex);
    if (rc != 0)
        for (*bad = first; bad_index-- > 0;)
            *bad = (*bad)->next;
    return rc;
}

static int rec_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return rec_recv_chain(REC_RECV, qp->qp_num, wr, bad);
}

static int rec_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return rec_recv_chain(REC_SRQ_RECV, srq->handle, wr, bad);
}

static int rec_post_wq_recv(struct ibv_wq *wq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return rec_recv_chain(REC_RECV, wq->wq_num, wr, bad);
}

/* ---- device, context, PD, MR -------------------------------------------------- */

static struct ibv_device rec_device = {
    .node_type = IBV_NODE_CA,
    .transport_type = IBV_TRANSPORT_IB,
    .name = "rec0",
    .dev_name = "uverbs-rec0",
};

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
    struct ibv_device **list = calloc(2, sizeof(*list));
    if (list == NULL)
        return NULL;
    list[0] = &rec_device;
    if (num)
        *num = 1;
    return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }
EXPORT const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }
EXPORT __be64 ibv_get_device_guid(struct ibv_device *d) { return 0; }
EXPORT int ibv_get_device_index(struct ibv_device *d) { return 0; }

static struct ibv_wq *rec_create_wq(struct ibv_context *ctx, struct ibv_wq_init_attr *attr)
{
    struct ibv_wq *wq = calloc(1, sizeof(*wq));
    if (wq == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    wq->context = ctx;
    wq->wq_context = attr->wq_context;
    wq->pd = attr->pd;
    wq->cq = attr->cq;
    wq->wq_type = attr->wq_type;
    wq->state = IBV_WQS_RESET;
    wq->post_recv = rec_post_wq_recv;
    wq->handle = obj_add(OBJ_WQ, wq);
    wq->wq_num = wq->handle;
    return wq;
}

static int rec_modify_wq(struct ibv_wq *wq, struct ibv_wq_attr *attr)
{
    if (attr->attr_mask & IBV_WQ_ATTR_STATE) {
        enum ibv_wq_state from = (attr->attr_mask & IBV_WQ_ATTR_CURR_STATE) ? attr->curr_wq_state
                                                                            : wq->state;
        int takes_lock = attr->wq_state == IBV_WQS_RESET ||
                         (from == IBV_WQS_RESET && attr->wq_state == IBV_WQS_RDY);
        if (takes_lock && cq_is_locked(wq->cq))
            return would_deadlock(wq->handle, REC_LOCK_MODIFY_WQ);
        wq->state = attr->wq_state;
    }
    return 0;
}

static int rec_destroy_wq(struct ibv_wq *wq)
{
    if (cq_is_locked(wq->cq))
        return would_deadlock(wq->handle, REC_LOCK_DESTROY_WQ);
    obj_remove(wq);
    free(wq);
    return 0;
}

static int rec_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr,
                          size_t len)
{
    memset(attr, 0, len);
    attr->state = IBV_PORT_ACTIVE;
    attr->max_mtu = attr->active_mtu = IBV_MTU_4096;
    attr->gid_tbl_len = 1;
    attr->pkey_tbl_len = 1;
    attr->lid = 1;
    attr->link_layer = IBV_LINK_LAYER_INFINIBAND;
    return 0;
}

EXPORT int (ibv_query_port)(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
    return rec_query_port(ctx, port, (struct ibv_port_attr *)attr, sizeof(struct ibv_port_attr));
}

EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
    memset(attr, 0, sizeof(*attr));
    attr->max_qp = attr->max_cq = attr->max_mr = attr->max_pd = 1 << 16;
    attr->max_qp_wr = attr->max_cqe = attr->max_srq_wr = 1 << 20;
    attr->max_sge = attr->max_srq_sge = REC_MAX_SGE;
    attr->max_srq = attr->max_ah = 1 << 16;
    attr->phys_port_cnt = 1;
    return 0;
}

/* Memory windows (ibv_alloc_mw and ibv_dealloc_mw are inline: they call
 * these through the context's ops). */
static struct ibv_mw *rec_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
    struct ibv_mw *mw = calloc(1, sizeof(*mw));
    if (mw == NULL)
        return NULL;
    mw->context = pd->context;
    mw->pd = pd;
    mw->type = type;
    mw->handle = obj_add(OBJ_MW, mw);
    mw->rkey = 0x3000 + mw->handle;
    return mw;
}

static int rec_dealloc_mw(struct ibv_mw *mw)
{
    obj_remove(mw);
    free(mw);
    return 0;
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    struct verbs_context *vctx = calloc(1, sizeof(*vctx));
    if (vctx == NULL)
        return NULL;
    struct ibv_context *ctx = &vctx->context;
    vctx->sz = sizeof(*vctx);
    vctx->create_cq_ex = rec_create_cq_ex;
    vctx->create_qp_ex = rec_create_qp_ex;
    vctx->create_wq = rec_create_wq;
    vctx->modify_wq = rec_modify_wq;
    vctx->destroy_wq = rec_destroy_wq;
    vctx->query_port = rec_query_port;
    ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
    ctx->device = device;
    ctx->cmd_fd = -1;
    ctx->async_fd = -1;
    ctx->num_comp_vectors = 1;
    pthread_mutex_init(&ctx->mutex, NULL);
    ctx->ops.poll_cq = rec_poll_cq;
    ctx->ops.post_send = rec_post_send;
    ctx->ops.post_recv = rec_post_recv;
    ctx->ops.post_srq_recv = rec_post_srq_recv;
    ctx->ops.req_notify_cq = rec_req_notify_cq;
    ctx->ops.alloc_mw = rec_alloc_mw;
    ctx->ops.dealloc_mw = rec_dealloc_mw;
    return ctx;
}

EXPORT int ibv_close_device(struct ibv_context *ctx)
{
    free(verbs_get_ctx(ctx));
    return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));
    if (pd) {
        pd->context = ctx;
        pd->handle = fresh_handle();
    }
    return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                       uint64_t iova, unsigned int access)
{
    struct ibv_mr *mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return NULL;
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = addr;
    mr->length = length;
    mr->handle = obj_add(OBJ_MR, mr);
    mr->lkey = 0x1000 + mr->handle;
    mr->rkey = 0x2000 + mr->handle;
    return mr;
}

EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

EXPORT struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length,
                                        uint64_t iova, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
    obj_remove(mr);
    free(mr);
    return 0;
}

/* ---- QPs, SRQs, AHs ----------------------------------------------------------- */

struct rec_qp *rec_qp_new(struct ibv_pd *pd, const struct ibv_qp_init_attr *attr)
{
    static uint32_t qpn = 0x11;
    if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UD && attr->qp_type != IBV_QPT_UC) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    struct rec_qp *rq = calloc(1, sizeof(*rq));
    if (rq == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    struct ibv_qp *qp = &rq->qpx.qp_base;
    qp->context = pd->context;
    qp->qp_context = attr->qp_context;
    qp->pd = pd;
    qp->send_cq = attr->send_cq;
    qp->recv_cq = attr->recv_cq;
    qp->srq = attr->srq;
    qp->qp_type = attr->qp_type;
    pthread_mutex_lock(&rec_mutex);
    qp->qp_num = qpn++;
    pthread_mutex_unlock(&rec_mutex);
    qp->state = IBV_QPS_RESET;
    pthread_mutex_init(&qp->mutex, NULL);
    pthread_cond_init(&qp->cond, NULL);
    qp->handle = obj_add(OBJ_QP, qp);
    return rq;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    struct rec_qp *rq = rec_qp_new(pd, attr);
    return rq ? &rq->qpx.qp_base : NULL;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    if (mask & IBV_QP_STATE) {
        if (attr->qp_state == IBV_QPS_RESET &&
            (cq_is_locked(qp->send_cq) || cq_is_locked(qp->recv_cq)))
            return would_deadlock(qp->handle, REC_LOCK_MODIFY_QP);
        qp->state = attr->qp_state;
    }
    return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask,
                        struct ibv_qp_init_attr *init)
{
    memset(attr, 0, sizeof(*attr));
    memset(init, 0, sizeof(*init));
    attr->qp_state = attr->cur_qp_state = qp->state;
    init->send_cq = qp->send_cq;
    init->recv_cq = qp->recv_cq;
    init->srq = qp->srq;
    init->qp_type = qp->qp_type;
    return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
    if (cq_is_locked(qp->send_cq) || cq_is_locked(qp->recv_cq))
        return would_deadlock(qp->handle, REC_LOCK_DESTROY_QP);
    obj_remove(qp);
    free((struct rec_qp *)qp);    /* every QP is a rec_qp: rec_qp_new */
    return 0;
}

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
    struct ibv_srq *srq = calloc(1, sizeof(*srq));
    if (srq == NULL)
        return NULL;
    srq->context = pd->context;
    srq->srq_context = attr->srq_context;
    srq->pd = pd;
    pthread_mutex_init(&srq->mutex, NULL);
    pthread_cond_init(&srq->cond, NULL);
    srq->handle = obj_add(OBJ_SRQ, srq);
    return srq;
}

EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
    obj_remove(srq);
    free(srq);
    return 0;
}

EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask) { return 0; }

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
    struct ibv_ah *ah = calloc(1, sizeof(*ah));
    if (ah == NULL)
        return NULL;
    ah->context = pd->context;
    ah->pd = pd;
    ah->handle = obj_add(OBJ_AH, ah);
    return ah;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
    obj_remove(ah);
    free(ah);
    return 0;
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    return status == IBV_WC_SUCCESS ? "success" : "error";
}
