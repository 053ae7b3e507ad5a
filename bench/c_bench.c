/*
 * The C reference of `make bench`: the workloads of bench/py_bench.py and
 * bench/pyverbs_bench.py, written directly against libibverbs (linked
 * normally, compiled against the same <infiniband/verbs.h>).
 *
 *   c_bench GID0 GID1
 *
 * GID0 / GID1: RoCE v2 GID index of rxe0 / rxe1 (tests/rxe.py finds them).
 * It sets everything up, prints READY, then reads commands "<workload> N"
 * from stdin (one measurement each, so that bench/run_bench.py can
 * interleave the implementations workload by workload) and answers each
 * with "RESULT <workload> <value>":
 *   write1     8-byte RDMA_WRITE message rate, RC loopback on rxe0, one WR
 *              per ibv_post_send, every WR signaled          (WR/s)
 *   write32    the same with 32 WRs per ibv_post_send, the last signaled
 *   pingpong   8-byte SEND/RECV round trip, rxe0 QP <-> rxe1 QP (us)
 *   poll_empty ibv_poll_cq(cq, 16, wc) on an empty CQ                (ns)
 * N is the number of WRs (write*), round trips (pingpong) or polls.
 *
 * The message-rate loop keeps at most WINDOW work requests in flight: post
 * batches while there is room, then poll up to 16 completions, each of
 * which retires one batch.  The ping-pong loop runs both sides in this one
 * process: A posts a SEND, B polls its CQ until the RECV arrives, reposts
 * its receive and answers, A polls until the answer arrives and reposts.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PORT 1
#define WINDOW 128     /* WRs in flight (and the send queue depth) */
#define CQ_DEPTH 256
#define MSG 8

#define DIE(...) do { fprintf(stderr, "c_bench: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    char *buf;
    int gid_index;
    union ibv_gid gid;
    enum ibv_mtu mtu;
};

static struct ibv_context *open_by_name(const char *name)
{
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_context *ctx = NULL;
    if (list == NULL)
        DIE("ibv_get_device_list failed");
    for (int i = 0; i < n; i++)
        if (strcmp(ibv_get_device_name(list[i]), name) == 0)
            ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (ctx == NULL)
        DIE("cannot open %s", name);
    return ctx;
}

static void side_open(struct side *s, const char *name, int gid_index)
{
    struct ibv_port_attr pattr;
    s->ctx = open_by_name(name);
    s->pd = ibv_alloc_pd(s->ctx);
    s->cq = ibv_create_cq(s->ctx, CQ_DEPTH, NULL, NULL, 0);
    if (posix_memalign((void **)&s->buf, 4096, 4096))
        DIE("posix_memalign");
    memset(s->buf, 0, 4096);
    s->mr = ibv_reg_mr(s->pd, s->buf, 4096,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!s->pd || !s->cq || !s->mr)
        DIE("setup of %s failed", name);
    s->gid_index = gid_index;
    if (ibv_query_gid(s->ctx, PORT, gid_index, &s->gid) || ibv_query_port(s->ctx, PORT, &pattr))
        DIE("query of %s failed", name);
    s->mtu = pattr.active_mtu;
}

static struct ibv_qp *make_qp(struct side *s)
{
    struct ibv_qp_init_attr ia = {
        .send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = WINDOW, .max_recv_wr = 64, .max_send_sge = 1,
                .max_recv_sge = 1, .max_inline_data = 0},
    };
    struct ibv_qp *qp = ibv_create_qp(s->pd, &ia);
    if (qp == NULL)
        DIE("ibv_create_qp");
    return qp;
}

/* RESET -> INIT -> RTR -> RTS with the attributes ibverbs.connect_rc uses. */
static void connect_qp(struct ibv_qp *qp, struct side *local, struct ibv_qp *peer,
                       struct side *remote)
{
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = PORT,
        .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
    };
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        DIE("to INIT");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = local->mtu < remote->mtu ? local->mtu : remote->mtu;
    a.dest_qp_num = peer->qp_num;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = remote->gid;
    a.ah_attr.grh.sgid_index = local->gid_index;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = PORT;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        DIE("to RTR");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        DIE("to RTS");
}

/* WRs per second for total WRs posted `batch` per ibv_post_send. */
static double write_rate(struct ibv_qp *qp, struct ibv_cq *cq, struct side *s, int batch,
                         long total)
{
    struct ibv_sge sge[32];
    struct ibv_send_wr wr[32], *bad;
    struct ibv_wc wc[16];
    for (int i = 0; i < batch; i++) {
        sge[i] = (struct ibv_sge){(uintptr_t)s->buf, MSG, s->mr->lkey};
        memset(&wr[i], 0, sizeof(wr[i]));
        wr[i].wr_id = i;
        wr[i].sg_list = &sge[i];
        wr[i].num_sge = 1;
        wr[i].opcode = IBV_WR_RDMA_WRITE;
        wr[i].send_flags = i == batch - 1 ? IBV_SEND_SIGNALED : 0;
        wr[i].wr.rdma.remote_addr = (uintptr_t)s->buf + 2048;
        wr[i].wr.rdma.rkey = s->mr->rkey;
        wr[i].next = i + 1 < batch ? &wr[i + 1] : NULL;
    }
    long posted = 0, done = 0;
    double t0 = now();
    while (done < total) {
        while (posted < total && posted - done + batch <= WINDOW) {
            if (ibv_post_send(qp, wr, &bad))
                DIE("ibv_post_send");
            posted += batch;
        }
        int n = ibv_poll_cq(cq, 16, wc);
        if (n < 0)
            DIE("ibv_poll_cq");
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS)
                DIE("completion status %d", wc[i].status);
            done += batch;
        }
    }
    double rate = total / (now() - t0);
    if (ibv_poll_cq(cq, 16, wc) != 0)
        DIE("completions left over: the loop miscounted");
    return rate;
}

static void post_recv1(struct ibv_qp *qp, struct side *s)
{
    struct ibv_sge sge = {(uintptr_t)s->buf + 1024, MSG, s->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(qp, &wr, &bad))
        DIE("ibv_post_recv");
}

static void post_send1(struct ibv_qp *qp, struct side *s)
{
    struct ibv_sge sge = {(uintptr_t)s->buf, MSG, s->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED}, *bad;
    if (ibv_post_send(qp, &wr, &bad))
        DIE("ibv_post_send");
}

/* Poll until a RECV completion arrives (send completions pass by). */
static void wait_recv(struct ibv_cq *cq)
{
    struct ibv_wc wc[16];
    for (;;) {
        int n = ibv_poll_cq(cq, 16, wc);
        if (n < 0)
            DIE("ibv_poll_cq");
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS)
                DIE("completion status %d", wc[i].status);
            if (wc[i].opcode == IBV_WC_RECV)
                return;
        }
    }
}

/* Microseconds per round trip. */
static double pingpong(struct ibv_qp *qa, struct side *a, struct ibv_qp *qb, struct side *b,
                       long iters)
{
    double t0 = now();
    for (long i = 0; i < iters; i++) {
        post_send1(qa, a);
        wait_recv(b->cq);
        post_recv1(qb, b);
        post_send1(qb, b);
        wait_recv(a->cq);
        post_recv1(qa, a);
    }
    return (now() - t0) / iters * 1e6;
}

static void drain(struct ibv_cq *cq)
{
    struct ibv_wc wc[16];
    double t0 = now();
    while (now() - t0 < 0.2)
        if (ibv_poll_cq(cq, 16, wc) < 0)
            DIE("ibv_poll_cq");
}

int main(int argc, char **argv)
{
    if (argc != 3)
        DIE("usage: c_bench GID0 GID1 (then commands on stdin)");
    int gid0 = atoi(argv[1]), gid1 = atoi(argv[2]);
    struct side s0, s1;
    side_open(&s0, "rxe0", gid0);
    side_open(&s1, "rxe1", gid1);

    /* RC loopback on rxe0 */
    struct ibv_qp *qa = make_qp(&s0), *qb = make_qp(&s0);
    connect_qp(qa, &s0, qb, &s0);
    connect_qp(qb, &s0, qa, &s0);
    write_rate(qa, s0.cq, &s0, 1, 256);                     /* warm-up */

    /* rxe0 <-> rxe1 */
    struct ibv_qp *pa = make_qp(&s0), *pb = make_qp(&s1);
    connect_qp(pa, &s0, pb, &s1);
    connect_qp(pb, &s1, pa, &s0);
    post_recv1(pa, &s0);
    post_recv1(pb, &s1);
    pingpong(pa, &s0, pb, &s1, 20);                         /* warm-up */
    drain(s0.cq);
    drain(s1.cq);
    printf("READY\n");
    fflush(stdout);

    char line[128], cmd[64];
    long n;
    while (fgets(line, sizeof(line), stdin) != NULL) {
        if (sscanf(line, "%63s %ld", cmd, &n) != 2)
            break;
        if (strcmp(cmd, "write1") == 0) {
            printf("RESULT write1 %.1f\n", write_rate(qa, s0.cq, &s0, 1, n));
        } else if (strcmp(cmd, "write32") == 0) {
            printf("RESULT write32 %.1f\n", write_rate(qa, s0.cq, &s0, 32, n));
        } else if (strcmp(cmd, "pingpong") == 0) {
            printf("RESULT pingpong %.3f\n", pingpong(pa, &s0, pb, &s1, n));
            /* the last send completions arrive after the last RECV */
            drain(s0.cq);
            drain(s1.cq);
        } else if (strcmp(cmd, "poll_empty") == 0) {
            struct ibv_wc wc[16];
            double t0 = now();
            for (long i = 0; i < n; i++)
                if (ibv_poll_cq(s0.cq, 16, wc) != 0)
                    DIE("CQ not empty");
            printf("RESULT poll_empty %.2f\n", (now() - t0) / n * 1e9);
        } else {
            DIE("unknown command %s", cmd);
        }
        fflush(stdout);
    }
    return 0;
}
