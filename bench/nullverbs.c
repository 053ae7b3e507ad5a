/*
 * A null libibverbs for host microbenchmarks (bench/host_micro.py): loaded
 * by the extension through IBVERBS_LIBRARY instead of libibverbs.so.1, it
 * offers one device, "null0", whose data path does nothing but what a
 * provider must do at least:
 *
 *   post_send / post_recv  walk the chain and read every WR and SGE;
 *   poll_cq                returns min(num_entries, K) successful
 *                          completions, where the CQ was created with
 *                          cqe = 1000000 + K (K = 0, any smaller cqe: the
 *                          CQ is always empty).
 *
 * With NULLVERBS_POST_RESULT=<int> in the environment when a device is
 * opened, its post_send / post_recv fail instead, returning that value
 * (tests/host/test_post_errors.py: siw and erdma return -ENOMEM).
 *
 * With NULLVERBS_COMPLETE_POSTS=1 when a device is opened, its CQs complete
 * what is posted instead: each signaled send WR adds one completion to its
 * QP's send CQ, and poll_cq returns those (wr_id 0, success), whatever the
 * CQ's size (bench/threads.py: a post and the poll of its completion).
 *
 * Threads: all that post and poll write is the QP's or the CQ's own (each
 * on cache lines of its own, so that threads driving different QPs and CQs
 * share none), a CQ's count of completions is atomic (posts and polls from
 * any threads), and the handle numbers and keys come from atomic counters;
 * no lock anywhere.
 *
 * So instruction counts measured through it (valgrind --tool=callgrind)
 * are the binding's own cost, with no device in the way.  Every other
 * symbol the extension requires is a stub that aborts; bench/host_micro.py
 * generates those from generated/loader.c.h into a second file
 * (nullverbs_stubs.c, which must not see verbs.h's prototypes).
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static struct ibv_device null_device = {
    .node_type = IBV_NODE_CA,
    .transport_type = IBV_TRANSPORT_IB,
    .name = "null0",
    .dev_name = "uverbs-null0",
};

/* Every QP and CQ starts a cache line and ends before the next one's
 * (see null_alloc): a thread's stores into its own never slow another's. */
#define CACHE_LINE 64

static void *null_alloc(size_t size)
{
    size_t rounded = (size + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
    void *p = aligned_alloc(CACHE_LINE, rounded);
    if (p)
        memset(p, 0, rounded);
    return p;
}

/* The caps a QP was created with, for ibv_query_qp (a failed post's
 * message names the queue's size); sink, where the posts leave what they
 * read (so that the compiler keeps the reads), per QP: a global one would
 * be a cache line every posting thread writes. */
struct null_qp {
    struct ibv_qp qp;
    struct ibv_qp_cap cap;
    int sq_sig_all;
    volatile uint64_t sink;
};

struct null_cq {
    struct ibv_cq cq;
    uint32_t pending;       /* NULLVERBS_COMPLETE_POSTS: completions not yet polled (atomic) */
};

/* What a provider must read of a chain of send WRs at least: every WR and
 * SGE (their sum, for the sink); into *signaled, how many are signaled
 * (inlined: a caller that ignores it pays nothing for it). */
static inline uint64_t read_send_chain(const struct ibv_send_wr *wr, int sig_all,
                                       uint32_t *signaled)
{
    uint64_t sum = 0;
    *signaled = 0;
    for (; wr; wr = wr->next) {
        sum += wr->wr_id + wr->opcode + wr->send_flags + wr->wr.rdma.remote_addr;
        for (int i = 0; i < wr->num_sge; i++)
            sum += wr->sg_list[i].addr + wr->sg_list[i].length;
        *signaled += sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    }
    return sum;
}

static int null_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    uint32_t signaled;
    ((struct null_qp *)qp)->sink = read_send_chain(wr, 0, &signaled);
    return 0;
}

static int null_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    uint64_t sum = 0;
    for (; wr; wr = wr->next) {
        sum += wr->wr_id;
        for (int i = 0; i < wr->num_sge; i++)
            sum += wr->sg_list[i].addr + wr->sg_list[i].length;
    }
    ((struct null_qp *)qp)->sink = sum;
    return 0;
}

static int post_result;     /* NULLVERBS_POST_RESULT */

static int failing_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    *bad = wr;
    return post_result;
}

static int failing_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    *bad = wr;
    return post_result;
}

static int null_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    int k = cq->cqe >= 1000000 ? cq->cqe - 1000000 : 0;
    int n = num < k ? num : k;
    for (int i = 0; i < n; i++) {
        memset(&wc[i], 0, sizeof(wc[i]));
        wc[i].wr_id = i;
        wc[i].opcode = IBV_WC_RDMA_WRITE;
        wc[i].qp_num = 1;
    }
    return n;
}

/* NULLVERBS_COMPLETE_POSTS: its own functions, as the failing ones, so
 * that the measured null_post_send and null_poll_cq stay as they are. */
static int completing_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                struct ibv_send_wr **bad)
{
    struct null_qp *nq = (struct null_qp *)qp;
    uint32_t signaled;
    nq->sink = read_send_chain(wr, nq->sq_sig_all, &signaled);
    if (signaled)
        __atomic_fetch_add(&((struct null_cq *)qp->send_cq)->pending, signaled, __ATOMIC_RELAXED);
    return 0;
}

static int completing_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    uint32_t *pending = &((struct null_cq *)cq)->pending;
    uint32_t have = __atomic_load_n(pending, __ATOMIC_RELAXED);
    uint32_t n;
    /* a compare-exchange, not a subtraction: two threads polling one CQ
     * must not take the same completion */
    do {
        n = num < 0 ? 0 : (uint32_t)num < have ? (uint32_t)num : have;
        if (n == 0)
            return 0;
    } while (!__atomic_compare_exchange_n(pending, &have, have - n, 1, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    for (uint32_t i = 0; i < n; i++) {
        memset(&wc[i], 0, sizeof(wc[i]));
        wc[i].opcode = IBV_WC_RDMA_WRITE;
        wc[i].qp_num = 1;
    }
    return n;
}

static int null_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    return 0;
}

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
    struct ibv_device **list = calloc(2, sizeof(*list));
    if (list == NULL)
        return NULL;
    list[0] = &null_device;
    if (num)
        *num = 1;
    return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }
EXPORT const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }
EXPORT __be64 ibv_get_device_guid(struct ibv_device *d) { return 0; }
EXPORT int ibv_get_device_index(struct ibv_device *d) { return 0; }

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    struct ibv_context *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return NULL;
    ctx->device = device;
    ctx->cmd_fd = -1;
    ctx->async_fd = -1;
    ctx->num_comp_vectors = 1;   /* the seed's create_cq checks comp_vector against it */
    ctx->ops.poll_cq = null_poll_cq;
    ctx->ops.post_send = null_post_send;
    ctx->ops.post_recv = null_post_recv;
    ctx->ops.req_notify_cq = null_req_notify_cq;
    const char *result = getenv("NULLVERBS_POST_RESULT");
    if (result != NULL) {
        /* its own functions: the measured ones stay as they are */
        post_result = atoi(result);
        ctx->ops.post_send = failing_post_send;
        ctx->ops.post_recv = failing_post_recv;
    }
    const char *complete = getenv("NULLVERBS_COMPLETE_POSTS");
    if (complete != NULL && strcmp(complete, "1") == 0) {
        ctx->ops.post_send = completing_post_send;
        ctx->ops.poll_cq = completing_poll_cq;
    }
    return ctx;
}

EXPORT int ibv_close_device(struct ibv_context *ctx) { free(ctx); return 0; }

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));
    if (pd)
        pd->context = ctx;
    return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) { free(pd); return 0; }

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
                                       uint64_t iova, unsigned int access)
{
    static uint32_t key = 0x100;
    struct ibv_mr *mr = calloc(1, sizeof(*mr));
    if (mr == NULL)
        return NULL;
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = addr;
    mr->length = length;
    mr->lkey = mr->rkey = __atomic_fetch_add(&key, 1, __ATOMIC_RELAXED);
    return mr;
}

EXPORT struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}

EXPORT struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length,
                                        uint64_t iova, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr) { free(mr); return 0; }

/* As libibverbs answers for a provider without rereg_mr (rxe): a code of
 * its own, not a negated errno (IBV_REREG_MR_ERR_CMD is -4, no -EINTR),
 * the error in errno. */
EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
                        size_t length, int access)
{
    errno = EOPNOTSUPP;
    return IBV_REREG_MR_ERR_CMD;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int comp_vector)
{
    struct null_cq *ncq = null_alloc(sizeof(*ncq));
    if (ncq == NULL)
        return NULL;
    struct ibv_cq *cq = &ncq->cq;
    cq->context = ctx;
    cq->channel = channel;
    cq->cq_context = cq_context;
    cq->cqe = cqe;
    return cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq) { free(cq); return 0; }

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    static uint32_t qpn = 0x11;
    struct null_qp *nq = null_alloc(sizeof(*nq));
    if (nq == NULL)
        return NULL;
    struct ibv_qp *qp = &nq->qp;
    qp->context = pd->context;
    qp->pd = pd;
    qp->send_cq = attr->send_cq;
    qp->recv_cq = attr->recv_cq;
    qp->srq = attr->srq;
    qp->qp_type = attr->qp_type;
    qp->qp_num = __atomic_fetch_add(&qpn, 1, __ATOMIC_RELAXED);
    qp->state = IBV_QPS_RESET;
    nq->cap = attr->cap;
    nq->sq_sig_all = attr->sq_sig_all;
    return qp;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
                        struct ibv_qp_init_attr *init_attr)
{
    const struct null_qp *nq = (const struct null_qp *)qp;
    memset(attr, 0, sizeof(*attr));
    memset(init_attr, 0, sizeof(*init_attr));
    attr->qp_state = attr->cur_qp_state = qp->state;
    attr->cap = init_attr->cap = nq->cap;
    init_attr->send_cq = qp->send_cq;
    init_attr->recv_cq = qp->recv_cq;
    init_attr->srq = qp->srq;
    init_attr->qp_type = qp->qp_type;
    return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp) { free(qp); return 0; }

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    return status == IBV_WC_SUCCESS ? "success" : "error";
}
