/*
 * What the two halves of the recording provider share: recverbs.c (device,
 * objects, post_send/post_recv, CQs) and recqpex.c (the extended QP's
 * ibv_qp_ex builders).  One record format for both, so that Python reads
 * every record through one ctypes mirror (tests/recording/recording.py).
 */
#ifndef RECVERBS_H
#define RECVERBS_H

#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

enum { REC_SEND = 1, REC_RECV = 2, REC_SRQ_RECV = 3, REC_WOULD_DEADLOCK = 4, REC_QPEX = 5 };
#define REC_MAX_SGE 64
/* Inline bytes kept per record; inline_len says how many were handed. */
#define REC_MAX_INLINE 1024

/* Every field as 64 bits (signed ones sign-extended), so that the ctypes
 * mirror is a list of names.  `call`, `invalidate_rkey` and `inline_len`
 * are filled by qpex records only (zero elsewhere). */
#define REC_FIELDS(X)                                                          \
    X(kind) X(post) X(index) X(target) X(wr_id) X(num_sge) X(opcode)           \
    X(send_flags) X(imm_data) X(rdma_remote_addr) X(rdma_rkey)                 \
    X(atomic_remote_addr) X(atomic_compare_add) X(atomic_swap) X(atomic_rkey)  \
    X(ud_ah) X(ud_ah_handle) X(ud_remote_qpn) X(ud_remote_qkey)                \
    X(xrc_remote_srqn) X(bind_mw) X(bind_rkey) X(bind_mr) X(bind_mr_handle)    \
    X(bind_addr) X(bind_length) X(bind_access) X(tso_hdr) X(tso_hdr_sz)        \
    X(tso_mss) X(sg_list) X(sges_recorded) X(call) X(invalidate_rkey)          \
    X(inline_len)

struct rec_request {
#define REC_DECLARE(name) uint64_t name;
    REC_FIELDS(REC_DECLARE)
#undef REC_DECLARE
    struct ibv_sge sge[REC_MAX_SGE];
    uint8_t inline_data[REC_MAX_INLINE];
};

/* Every QP of this provider, plain or extended: ibv_qp_to_qp_ex can then
 * tell the two apart from the pointer alone, as libibverbs does with its
 * struct verbs_qp. */
struct rec_qp {
    struct ibv_qp_ex qpx;     /* first: qpx.qp_base is the struct ibv_qp handed out */
    int extended;             /* made by create_qp_ex with send_ops_flags */
    uint64_t batch;           /* the open wr_start batch's post number, 0 when none */
    uint64_t batch_calls;     /* builder calls recorded in that batch so far */
};

extern pthread_mutex_t rec_mutex;

/* The callers of these hold rec_mutex. */
struct rec_request *rec_append(void);
uint64_t rec_next_post(void);
int rec_post_fails(int count, int *bad_index);
uint32_t rec_ah_handle(const struct ibv_ah *ah);
uint32_t rec_mr_handle(const struct ibv_mr *mr);
void rec_sges(struct rec_request *r, const struct ibv_sge *sg_list, int num_sge);

/* Fills what every QP has and registers it (recverbs.c); NULL with errno
 * for a QP type this provider lacks. */
struct rec_qp *rec_qp_new(struct ibv_pd *pd, const struct ibv_qp_init_attr *attr);

/* The verbs_context's create_qp_ex (recqpex.c). */
struct ibv_qp *rec_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);

#endif
