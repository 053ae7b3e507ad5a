/*
 * The C reference of `make bench`: the workloads of bench/py_bench.py and
 * bench/pyverbs_bench.py, written directly against libibverbs (linked
 * normally, compiled against the same <infiniband/verbs.h>).
 *
 *   c_bench GID0 GID1
 *
 * GID0 / GID1: RoCE v2 GID index of rxe0 / rxe1 (tests/rxe.py finds them).
 * It sets everything up, prints READY, then reads commands from stdin (one
 * measurement each, so that bench/run_bench.py can interleave the
 * implementations workload by workload) and answers each with
 * "RESULT <workload> <value>":
 *   write_b1 N      8-byte RDMA_WRITE, RC loopback on rxe0: one WR per
 *                   post, signaled, polled (1 entry at a time) until it
 *                   completes before the next post: 1 in flight  (WR/s)
 *   write_b1_build N  write_b1, the SGE and WR filled on the stack for each
 *                   message (what a program that builds its requests does)
 *   write_b32 N     the same WRs in lists of 32 per post, the last signaled,
 *                   wait for its completion, repeat                 (WR/s)
 *   write_window N  one WR per post, every one signaled, up to WINDOW in
 *                   flight, polls of 16 retire them                 (WR/s)
 *   pingpong N      8-byte SEND/RECV round trip, rxe0 QP <-> rxe1 QP, one
 *                   thread driving both sides, PP_RECVS receives
 *                   pre-posted per side; each side polls 16 at a time and
 *                   reposts the receives it consumed                 (us)
 *   pingpong_post N the ping-pong, timed around each ibv_post_send: the
 *                   microseconds per round trip spent inside the two posts
 *                   (rxe runs the whole transfer in the post's doorbell
 *                   system call), then ":" and the whole round trip of
 *                   the same loop                                      (us)
 *   poll_empty N    ibv_poll_cq(cq, 16, wc) on an empty CQ            (ns)
 *   bw SIZE N       RDMA_WRITE of SIZE bytes, loopback, SWEEP_WINDOW in
 *                   flight, every WR signaled                      (MB/s)
 *   lat SIZE N      the ping-pong with SIZE-byte messages              (us)
 * N is the number of WRs (write*, bw), round trips (pingpong, lat) or polls.
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "c_common.h"

#define PORT 1
#define WINDOW 128        /* write_window: WRs in flight (and the send queue depth) */
#define SWEEP_WINDOW 16   /* bw: WRs in flight */
#define CQ_DEPTH 256
#define MSG 8
#define PP_RECVS 16       /* receives pre-posted per ping-pong side */
#define BIG (1 << 20)     /* largest message of the size sweep */
#define SMALL_LEN 4096

#define DIE(...) do { fprintf(stderr, "c_bench: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One device: a PD, a small buffer (8-byte workloads) and a big one (the
 * sweep: messages go from its first half to its second half). */
struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_mr *mr, *big_mr;
    char *buf, *big;
    int gid_index;
    union ibv_gid gid;
    enum ibv_mtu mtu;
};

static struct ibv_context *open_by_name(const char *name)
{
    struct ibv_context *ctx = open_device_named(name);
    if (ctx == NULL)
        DIE("cannot open %s", name);
    return ctx;
}

#define ACCESS RC_ACCESS

static void side_open(struct side *s, const char *name, int gid_index)
{
    struct ibv_port_attr pattr;
    s->ctx = open_by_name(name);
    s->pd = ibv_alloc_pd(s->ctx);
    if (posix_memalign((void **)&s->buf, 4096, SMALL_LEN) ||
        posix_memalign((void **)&s->big, 4096, 2 * BIG))
        DIE("posix_memalign");
    memset(s->buf, 0, SMALL_LEN);
    memset(s->big, 0, 2 * BIG);
    s->mr = ibv_reg_mr(s->pd, s->buf, SMALL_LEN, ACCESS);
    s->big_mr = ibv_reg_mr(s->pd, s->big, 2 * BIG, ACCESS);
    if (!s->pd || !s->mr || !s->big_mr)
        DIE("setup of %s failed", name);
    s->gid_index = gid_index;
    if (ibv_query_gid(s->ctx, PORT, gid_index, &s->gid) || ibv_query_port(s->ctx, PORT, &pattr))
        DIE("query of %s failed", name);
    s->mtu = pattr.active_mtu;
}

static struct ibv_cq *make_cq(struct side *s)
{
    struct ibv_cq *cq = ibv_create_cq(s->ctx, CQ_DEPTH, NULL, NULL, 0);
    if (cq == NULL)
        DIE("ibv_create_cq");
    return cq;
}

static struct ibv_qp *make_qp(struct side *s, struct ibv_cq *cq)
{
    struct ibv_qp_init_attr ia = {
        .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = WINDOW, .max_recv_wr = 64, .max_send_sge = 1,
                .max_recv_sge = 1, .max_inline_data = 0},
    };
    struct ibv_qp *qp = ibv_create_qp(s->pd, &ia);
    if (qp == NULL)
        DIE("ibv_create_qp");
    return qp;
}

static void connect_qp(struct ibv_qp *qp, struct side *local, struct ibv_qp *peer,
                       struct side *remote)
{
    const char *failed = rc_connect(qp, PORT, peer->qp_num, &remote->gid, local->gid_index,
                                    local->mtu < remote->mtu ? local->mtu : remote->mtu);
    if (failed)
        DIE("to %s", failed);
}

static void check(const struct ibv_wc *wc)
{
    if (wc->status != IBV_WC_SUCCESS)
        DIE("completion status %d", wc->status);
}

/* Busy-polls the one completion in flight, as the Python side's poll(1) loop. */
static void poll_one(struct ibv_cq *cq)
{
    struct ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
        ;
    if (n < 0)
        DIE("ibv_poll_cq");
    check(&wc);
}

/* Up to 32 RDMA_WRITEs of len bytes from addr to remote, chained when
 * chain, signaled as told. */
static void write_wrs(struct ibv_send_wr *wr, struct ibv_sge *sge, int n, int chain,
                      int signal_all, uint64_t addr, uint32_t len, uint32_t lkey,
                      uint64_t remote, uint32_t rkey)
{
    for (int i = 0; i < n; i++) {
        sge[i] = (struct ibv_sge){addr, len, lkey};
        memset(&wr[i], 0, sizeof(wr[i]));
        wr[i].wr_id = i;
        wr[i].sg_list = &sge[i];
        wr[i].num_sge = 1;
        wr[i].opcode = IBV_WR_RDMA_WRITE;
        wr[i].send_flags = signal_all || i == n - 1 ? IBV_SEND_SIGNALED : 0;
        wr[i].wr.rdma.remote_addr = remote;
        wr[i].wr.rdma.rkey = rkey;
        wr[i].next = chain && i + 1 < n ? &wr[i + 1] : NULL;
    }
}

/* write_b1 / write_b32: post `batch` WRs, wait for the last one's
 * completion, repeat: WRs per second. */
static double write_strict(struct ibv_qp *qp, struct ibv_cq *cq, struct side *s, int batch,
                           long total)
{
    struct ibv_sge sge[32];
    struct ibv_send_wr wr[32], *bad;
    write_wrs(wr, sge, batch, 1, 0, (uintptr_t)s->buf, MSG, s->mr->lkey,
              (uintptr_t)s->buf + 2048, s->mr->rkey);
    double t0 = now();
    for (long done = 0; done < total; done += batch) {
        if (ibv_post_send(qp, wr, &bad))
            DIE("ibv_post_send");
        poll_one(cq);
    }
    return total / (now() - t0);
}

/* write_b1_build: write_b1 with the request built for each message, on
 * the stack (the Python side builds an SGE and a SendWR each time). */
static double write_build(struct ibv_qp *qp, struct ibv_cq *cq, struct side *s, long total)
{
    double t0 = now();
    for (long i = 0; i < total; i++) {
        struct ibv_sge sge = {(uintptr_t)s->buf, MSG, s->mr->lkey};
        struct ibv_send_wr wr, *bad;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = (uintptr_t)s->buf + 2048;
        wr.wr.rdma.rkey = s->mr->rkey;
        if (ibv_post_send(qp, &wr, &bad))
            DIE("ibv_post_send");
        poll_one(cq);
    }
    return total / (now() - t0);
}

/* write_window / bw: one WR of len bytes per post, every WR signaled, up to
 * window in flight; polls of 16 retire them.  WRs per second. */
static double write_windowed(struct ibv_qp *qp, struct ibv_cq *cq, uint64_t addr, uint32_t len,
                             uint32_t lkey, uint64_t remote, uint32_t rkey, int window,
                             long total)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad;
    struct ibv_wc wc[16];
    write_wrs(&wr, &sge, 1, 0, 1, addr, len, lkey, remote, rkey);
    long posted = 0, done = 0;
    double t0 = now();
    while (done < total) {
        while (posted < total && posted - done < window) {
            if (ibv_post_send(qp, &wr, &bad))
                DIE("ibv_post_send");
            posted++;
        }
        int n = ibv_poll_cq(cq, 16, wc);
        if (n < 0)
            DIE("ibv_poll_cq");
        for (int i = 0; i < n; i++)
            check(&wc[i]);
        done += n;
    }
    double rate = total / (now() - t0);
    if (ibv_poll_cq(cq, 16, wc) != 0)
        DIE("completions left over: the loop miscounted");
    return rate;
}

/* One side of a ping-pong: its QP, CQ, and the SEND and RECV it posts. */
struct pp_end {
    struct ibv_qp *qp;
    struct ibv_cq *cq;
    struct ibv_sge send_sge, recv_sge;
    struct ibv_send_wr send;
    struct ibv_recv_wr recv;
};

static void pp_end_init(struct pp_end *e, struct ibv_qp *qp, struct ibv_cq *cq, uint64_t send_addr,
                        uint64_t recv_addr, uint32_t len, uint32_t recv_len, uint32_t lkey)
{
    memset(e, 0, sizeof(*e));
    e->qp = qp;
    e->cq = cq;
    e->send_sge = (struct ibv_sge){send_addr, len, lkey};
    e->recv_sge = (struct ibv_sge){recv_addr, recv_len, lkey};
    e->send = (struct ibv_send_wr){.wr_id = 1, .sg_list = &e->send_sge, .num_sge = 1,
                                   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
    e->recv = (struct ibv_recv_wr){.wr_id = 2, .sg_list = &e->recv_sge, .num_sge = 1};
}

static void pp_repost(struct pp_end *e, int n)
{
    struct ibv_recv_wr *bad;
    for (int i = 0; i < n; i++)
        if (ibv_post_recv(e->qp, &e->recv, &bad))
            DIE("ibv_post_recv");
}

/* Poll 16 at a time until a RECV completion arrives (send completions
 * pass by); how many receives were consumed. */
static int pp_wait(struct pp_end *e)
{
    struct ibv_wc wc[16];
    int got = 0;
    while (!got) {
        int n = ibv_poll_cq(e->cq, 16, wc);
        if (n < 0)
            DIE("ibv_poll_cq");
        for (int i = 0; i < n; i++) {
            check(&wc[i]);
            if (wc[i].opcode == IBV_WC_RECV)
                got++;
        }
    }
    return got;
}

static void pp_post_send(struct pp_end *e, double *in_post)
{
    struct ibv_send_wr *bad;
    double t0 = now();
    if (ibv_post_send(e->qp, &e->send, &bad))
        DIE("ibv_post_send");
    *in_post += now() - t0;
}

/* Microseconds per round trip spent inside ibv_post_send; *total gets
 * the whole round trip. */
static double pingpong_post(struct pp_end *a, struct pp_end *b, long iters, double *total)
{
    double in_post = 0, t0 = now();
    for (long i = 0; i < iters; i++) {
        pp_post_send(a, &in_post);
        pp_repost(b, pp_wait(b));
        pp_post_send(b, &in_post);
        pp_repost(a, pp_wait(a));
    }
    *total = (now() - t0) / iters * 1e6;
    return in_post / iters * 1e6;
}

/* Microseconds per round trip. */
static double pingpong(struct pp_end *a, struct pp_end *b, long iters)
{
    struct ibv_send_wr *bad;
    double t0 = now();
    for (long i = 0; i < iters; i++) {
        if (ibv_post_send(a->qp, &a->send, &bad))
            DIE("ibv_post_send");
        pp_repost(b, pp_wait(b));
        if (ibv_post_send(b->qp, &b->send, &bad))
            DIE("ibv_post_send");
        pp_repost(a, pp_wait(a));
    }
    return (now() - t0) / iters * 1e6;
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
    struct ibv_cq *wcq = make_cq(&s0), *empty_cq = make_cq(&s0);
    struct ibv_qp *qa = make_qp(&s0, wcq), *qb = make_qp(&s0, wcq);
    connect_qp(qa, &s0, qb, &s0);
    connect_qp(qb, &s0, qa, &s0);

    /* rxe0 <-> rxe1: 8-byte pair and sweep pair (receives of BIG bytes) */
    struct ibv_cq *pcq0 = make_cq(&s0), *pcq1 = make_cq(&s1);
    struct ibv_qp *pa = make_qp(&s0, pcq0), *pb = make_qp(&s1, pcq1);
    struct ibv_qp *sa = make_qp(&s0, pcq0), *sb = make_qp(&s1, pcq1);
    connect_qp(pa, &s0, pb, &s1);
    connect_qp(pb, &s1, pa, &s0);
    connect_qp(sa, &s0, sb, &s1);
    connect_qp(sb, &s1, sa, &s0);
    struct pp_end ea, eb, xa, xb;
    pp_end_init(&ea, pa, pcq0, (uintptr_t)s0.buf, (uintptr_t)s0.buf + 1024, MSG, MSG, s0.mr->lkey);
    pp_end_init(&eb, pb, pcq1, (uintptr_t)s1.buf, (uintptr_t)s1.buf + 1024, MSG, MSG, s1.mr->lkey);
    pp_end_init(&xa, sa, pcq0, (uintptr_t)s0.big, (uintptr_t)s0.big + BIG, MSG, BIG,
                s0.big_mr->lkey);
    pp_end_init(&xb, sb, pcq1, (uintptr_t)s1.big, (uintptr_t)s1.big + BIG, MSG, BIG,
                s1.big_mr->lkey);
    pp_repost(&ea, PP_RECVS);
    pp_repost(&eb, PP_RECVS);
    pp_repost(&xa, PP_RECVS);
    pp_repost(&xb, PP_RECVS);

    write_strict(qa, wcq, &s0, 1, 256);                     /* warm-up */
    pingpong(&ea, &eb, 20);
    printf("READY\n");
    fflush(stdout);

    char line[128], cmd[64];
    long a1, a2;
    while (fgets(line, sizeof(line), stdin) != NULL) {
        int nargs = sscanf(line, "%63s %ld %ld", cmd, &a1, &a2);
        if (nargs < 2)
            break;
        long n = nargs == 3 ? a2 : a1, size = nargs == 3 ? a1 : MSG;
        if (size < 1 || size > BIG)
            DIE("size %ld out of range", size);
        if (strcmp(cmd, "write_b1") == 0) {
            printf("RESULT %s %.1f\n", cmd, write_strict(qa, wcq, &s0, 1, n));
        } else if (strcmp(cmd, "write_b1_build") == 0) {
            printf("RESULT %s %.1f\n", cmd, write_build(qa, wcq, &s0, n));
        } else if (strcmp(cmd, "write_b32") == 0) {
            printf("RESULT %s %.1f\n", cmd, write_strict(qa, wcq, &s0, 32, n));
        } else if (strcmp(cmd, "write_window") == 0) {
            printf("RESULT %s %.1f\n", cmd,
                   write_windowed(qa, wcq, (uintptr_t)s0.buf, MSG, s0.mr->lkey,
                                  (uintptr_t)s0.buf + 2048, s0.mr->rkey, WINDOW, n));
        } else if (strcmp(cmd, "pingpong") == 0) {
            printf("RESULT %s %.3f\n", cmd, pingpong(&ea, &eb, n));
        } else if (strcmp(cmd, "pingpong_post") == 0) {
            double total, in_post = pingpong_post(&ea, &eb, n, &total);
            printf("RESULT %s %.3f:%.3f\n", cmd, in_post, total);
        } else if (strcmp(cmd, "poll_empty") == 0) {
            struct ibv_wc wc[16];
            double t0 = now();
            for (long i = 0; i < n; i++)
                if (ibv_poll_cq(empty_cq, 16, wc) != 0)
                    DIE("CQ not empty");
            printf("RESULT %s %.2f\n", cmd, (now() - t0) / n * 1e9);
        } else if (strcmp(cmd, "bw") == 0) {
            double rate = write_windowed(qa, wcq, (uintptr_t)s0.big, size, s0.big_mr->lkey,
                                         (uintptr_t)s0.big + BIG, s0.big_mr->rkey,
                                         SWEEP_WINDOW, n);
            printf("RESULT %s %.3f\n", cmd, rate * size / 1e6);
        } else if (strcmp(cmd, "lat") == 0) {
            xa.send_sge.length = xb.send_sge.length = size;
            printf("RESULT %s %.3f\n", cmd, pingpong(&xa, &xb, n));
        } else {
            DIE("unknown command %s", cmd);
        }
        fflush(stdout);
    }
    return 0;
}
