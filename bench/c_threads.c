/*
 * The C reference of bench/threads.py: the message rate of one signaled
 * RDMA WRITE posted and its completion polled, one in flight, by N
 * pthreads, each driving its own QP and CQ (what bench/py_threads.py does
 * in Python).
 *
 *   c_threads null        the null provider (built against
 *                         build/bench/libnullverbs.so, run with
 *                         NULLVERBS_COMPLETE_POSTS=1: a post's completion is
 *                         there at the next poll)
 *   c_threads DEV:GID ... Soft-RoCE in the test VM: thread t's QP is on the
 *                         t-th device named (the last one for the threads
 *                         after it), connected to a second QP there (RC
 *                         loopback); GID: the RoCE v2 GID index
 *
 * Each thread has its own device context, PD, MR, CQ and QP.
 *
 * Sets up MAX_THREADS QPs and CQs, prints READY, then answers each command
 * "post_poll_<n> <seconds>" with "RESULT post_poll_<n> <rate>:<cores>": n
 * threads start together and each runs for <seconds> by its own clock; the
 * rate is the sum of the threads' own rates (messages per second), cores
 * the sum of their CPU time over their wall time (below n: the machine
 * did not give every thread a core all the time).
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "c_common.h"

#define MAX_THREADS 2
#define PORT 1
#define MSG 8
#define CHUNK 256         /* messages between two readings of the clock */
#define ACCESS RC_ACCESS

#define DIE(...) do { fprintf(stderr, "c_threads: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

static double clock_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now(void) { return clock_s(CLOCK_MONOTONIC); }

/* One thread's QP, CQ and request; aligned so that no two threads' share
 * a cache line (what one thread writes never slows the other). */
struct lane {
    struct ibv_cq *cq;
    struct ibv_qp *qp, *peer;
    struct ibv_mr *mr;
    char *buf;
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    double seconds, rate, cores;
    pthread_barrier_t *start;
} __attribute__((aligned(64)));

static struct lane lanes[MAX_THREADS];

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
    struct ibv_qp_init_attr ia = {
        .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
    };
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    if (qp == NULL)
        DIE("ibv_create_qp");
    return qp;
}

static struct ibv_context *open_by_name(const char *name)
{
    struct ibv_context *ctx = open_device_named(name);
    if (ctx == NULL)
        DIE("cannot open %s", name);
    return ctx;
}

/* Lane t on the device of spec t ("null", or "DEVICE:GID_INDEX": its QP
 * connected to a second QP there), the last spec for the lanes after it. */
static void setup(char **specs, int nspecs)
{
    for (int t = 0; t < MAX_THREADS; t++) {
        struct lane *l = &lanes[t];
        int s = t < nspecs ? t : nspecs - 1;
        char name[64];
        int gid_index = -1;
        if (strcmp(specs[s], "null") == 0)
            snprintf(name, sizeof(name), "null0");
        else if (sscanf(specs[s], "%63[^:]:%d", name, &gid_index) != 2)
            DIE("bad device %s (null, or DEVICE:GID_INDEX)", specs[s]);
        /* each lane its own context and PD: nothing of the provider's is shared */
        struct ibv_context *ctx = open_by_name(name);
        struct ibv_pd *pd = ibv_alloc_pd(ctx);
        if (pd == NULL)
            DIE("ibv_alloc_pd");
        /* a page of its own: rxe writes the message into it */
        if (posix_memalign((void **)&l->buf, 4096, 4096))
            DIE("posix_memalign");
        memset(l->buf, 0, 4096);
        l->mr = ibv_reg_mr(pd, l->buf, 4096, ACCESS);
        l->cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
        if (l->mr == NULL || l->cq == NULL)
            DIE("ibv_reg_mr / ibv_create_cq");
        l->qp = make_qp(pd, l->cq);
        if (gid_index >= 0) {
            union ibv_gid gid;
            struct ibv_port_attr pattr;
            if (ibv_query_gid(ctx, PORT, gid_index, &gid) || ibv_query_port(ctx, PORT, &pattr))
                DIE("query of %s failed", name);
            l->peer = make_qp(pd, l->cq);
            const char *failed = rc_connect(l->qp, PORT, l->peer->qp_num, &gid, gid_index,
                                            pattr.active_mtu);
            if (!failed)
                failed = rc_connect(l->peer, PORT, l->qp->qp_num, &gid, gid_index,
                                    pattr.active_mtu);
            if (failed)
                DIE("%s to %s", name, failed);
        }
        l->sge = (struct ibv_sge){(uintptr_t)l->buf, MSG, l->mr->lkey};
        l->wr = (struct ibv_send_wr){
            .wr_id = t, .sg_list = &l->sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
            .send_flags = IBV_SEND_SIGNALED,
            .wr.rdma = {.remote_addr = (uintptr_t)l->buf + 2048, .rkey = l->mr->rkey},
        };
    }
}

static void post_poll(struct lane *l)
{
    struct ibv_send_wr *bad;
    struct ibv_wc wc;
    int n;
    if (ibv_post_send(l->qp, &l->wr, &bad))
        DIE("ibv_post_send");
    while ((n = ibv_poll_cq(l->cq, 1, &wc)) == 0)
        ;
    if (n < 0 || wc.status != IBV_WC_SUCCESS)
        DIE("poll: %d, status %d", n, n > 0 ? (int)wc.status : -1);
}

static void *run(void *arg)
{
    struct lane *l = arg;
    long done = 0;
    pthread_barrier_wait(l->start);
    double t0 = now(), cpu0 = clock_s(CLOCK_THREAD_CPUTIME_ID), t;
    do {
        for (int i = 0; i < CHUNK; i++)
            post_poll(l);
        done += CHUNK;
    } while ((t = now()) - t0 < l->seconds);
    l->rate = done / (t - t0);
    l->cores = (clock_s(CLOCK_THREAD_CPUTIME_ID) - cpu0) / (t - t0);
    return NULL;
}

static double measure(int threads, double seconds, double *cores)
{
    pthread_t tid[MAX_THREADS];
    pthread_barrier_t start;
    double total = 0;
    *cores = 0;
    pthread_barrier_init(&start, NULL, threads);
    for (int t = 0; t < threads; t++) {
        lanes[t].seconds = seconds;
        lanes[t].start = &start;
        if (pthread_create(&tid[t], NULL, run, &lanes[t]))
            DIE("pthread_create");
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        total += lanes[t].rate;
        *cores += lanes[t].cores;
    }
    pthread_barrier_destroy(&start);
    return total;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        DIE("usage: c_threads null | c_threads DEVICE:GID_INDEX [DEVICE:GID_INDEX]");
    setup(argv + 1, argc - 1);
    for (int t = 0; t < MAX_THREADS; t++)       /* first touches, out of the timing */
        for (int i = 0; i < 64; i++)
            post_poll(&lanes[t]);
    printf("READY\n");
    fflush(stdout);
    char line[256], cmd[64];
    double seconds, rate, cores;
    int threads;
    while (fgets(line, sizeof(line), stdin)) {
        if (sscanf(line, "post_poll_%d %lf", &threads, &seconds) != 2 || threads < 1 ||
            threads > MAX_THREADS)
            DIE("unknown command %s", line);
        snprintf(cmd, sizeof(cmd), "post_poll_%d", threads);
        rate = measure(threads, seconds, &cores);
        printf("RESULT %s %.3f:%.3f\n", cmd, rate, cores);
        fflush(stdout);
    }
    return 0;
}
