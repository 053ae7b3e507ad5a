/*
 * The recording provider's extended QPs (the other half of recverbs.c,
 * read its comment first): ibv_create_qp_ex through the verbs_context,
 * ibv_qp_to_qp_ex, and a struct ibv_qp_ex whose builders record each call.
 *
 * A QP made with send_ops_flags gets the builders of exactly those
 * operations (the others stay NULL, as a provider leaves what was not
 * asked for), plus wr_start, wr_complete, wr_abort and every wr_set_*.
 * Without send_ops_flags it is a plain QP and ibv_qp_to_qp_ex gives NULL.
 *
 * One record of kind REC_QPEX per builder call, in call order: `call`
 * names the builder (rec_qpex_call_names()), `target` is the qp_num,
 * `post` the batch's number (wr_start takes the next post number, shared
 * with post_send/post_recv; 0 for a call outside any batch, which the
 * binding's guard should never let through) and `index` the call's place
 * in its batch (wr_start is 0).  The fields are those of ibv_send_wr that
 * the call stands for:
 *   an operation (wr_send ... wr_local_inv): wr_id and send_flags as
 *     qpx->wr_id and qpx->wr_flags read at that call, opcode (IBV_WR_*),
 *     and its arguments: imm_data (as handed: big endian), rdma_rkey /
 *     rdma_remote_addr, atomic_rkey / atomic_remote_addr /
 *     atomic_compare_add (compare, or add) / atomic_swap,
 *     invalidate_rkey, bind_*, tso_* (the header's bytes in inline_data),
 *     atomic_write's 8 bytes in inline_data;
 *   wr_set_sge, wr_set_sge_list: num_sge and the SGEs by value;
 *   wr_set_inline_data(_list): the bytes (concatenated, the first
 *     REC_MAX_INLINE) in inline_data, inline_len their total length, and
 *     each buffer as an SGE (addr, length, lkey 0);
 *   wr_set_ud_addr: ud_ah, ud_ah_handle, ud_remote_qpn, ud_remote_qkey;
 *   wr_set_xrc_srqn: xrc_remote_srqn;
 *   wr_complete, wr_abort: nothing more; either closes the batch.
 * wr_complete returns what rec_fail_next_post asked for, else 0.
 */
#include "recverbs.h"

#include <errno.h>
#include <string.h>

#define REC_QPEX_CALLS(X)                                                      \
    X(wr_start) X(wr_complete) X(wr_abort)                                     \
    X(wr_send) X(wr_send_imm) X(wr_send_inv) X(wr_send_tso)                    \
    X(wr_rdma_write) X(wr_rdma_write_imm) X(wr_rdma_read)                      \
    X(wr_atomic_cmp_swp) X(wr_atomic_fetch_add) X(wr_atomic_write)             \
    X(wr_bind_mw) X(wr_local_inv)                                              \
    X(wr_set_sge) X(wr_set_sge_list) X(wr_set_inline_data)                     \
    X(wr_set_inline_data_list) X(wr_set_ud_addr) X(wr_set_xrc_srqn)

/* Codes from 1, so that 0 (the other kinds) names no call. */
enum rec_qpex_call {
    REC_CALL_NONE,
#define REC_CALL_ENUM(name) REC_CALL_##name,
    REC_QPEX_CALLS(REC_CALL_ENUM)
#undef REC_CALL_ENUM
};

EXPORT const char *rec_qpex_call_names(void)
{
#define REC_CALL_NAME(name) #name ","
    return REC_QPEX_CALLS(REC_CALL_NAME);
#undef REC_CALL_NAME
}

static struct rec_qp *rec_qp_of_ex(struct ibv_qp_ex *qpx) { return (struct rec_qp *)qpx; }

/* Appends this call's record and returns it with rec_mutex held: the
 * caller fills it and calls rec_qpex_done. */
static struct rec_request *rec_qpex_record(struct ibv_qp_ex *qpx, enum rec_qpex_call call)
{
    struct rec_qp *rq = rec_qp_of_ex(qpx);
    pthread_mutex_lock(&rec_mutex);
    struct rec_request *r = rec_append();
    r->kind = REC_QPEX;
    r->call = call;
    r->target = qpx->qp_base.qp_num;
    r->post = rq->batch;
    r->index = rq->batch ? rq->batch_calls++ : 0;
    return r;
}

static void rec_qpex_done(void) { pthread_mutex_unlock(&rec_mutex); }

/* An operation starts a work request: what it reads from qpx is what the
 * binding stored there before calling it. */
static struct rec_request *rec_qpex_operation(struct ibv_qp_ex *qpx, enum rec_qpex_call call,
                                              enum ibv_wr_opcode opcode)
{
    struct rec_request *r = rec_qpex_record(qpx, call);
    r->wr_id = qpx->wr_id;
    r->send_flags = qpx->wr_flags;
    r->opcode = opcode;
    return r;
}

/* Appends to the bytes kept so far: a list's buffers end up concatenated. */
static void rec_inline_bytes(struct rec_request *r, const void *addr, size_t length)
{
    size_t offset = r->inline_len < REC_MAX_INLINE ? (size_t)r->inline_len : REC_MAX_INLINE;
    size_t kept = length < REC_MAX_INLINE - offset ? length : REC_MAX_INLINE - offset;
    if (addr != NULL && kept > 0)
        memcpy(r->inline_data + offset, addr, kept);
    r->inline_len += length;
}

/* ---- batch ------------------------------------------------------------------ */

static void rec_wr_start(struct ibv_qp_ex *qpx)
{
    struct rec_qp *rq = rec_qp_of_ex(qpx);
    pthread_mutex_lock(&rec_mutex);
    rq->batch = rec_next_post();
    rq->batch_calls = 0;
    pthread_mutex_unlock(&rec_mutex);
    rec_qpex_record(qpx, REC_CALL_wr_start);
    rec_qpex_done();
}

static int rec_wr_complete(struct ibv_qp_ex *qpx)
{
    rec_qpex_record(qpx, REC_CALL_wr_complete);
    int unused_bad_index, rc = rec_post_fails(1, &unused_bad_index);
    rec_qp_of_ex(qpx)->batch = 0;
    rec_qpex_done();
    return rc;
}

static void rec_wr_abort(struct ibv_qp_ex *qpx)
{
    rec_qpex_record(qpx, REC_CALL_wr_abort);
    rec_qp_of_ex(qpx)->batch = 0;
    rec_qpex_done();
}

/* ---- operations ------------------------------------------------------------- */

static void rec_wr_send(struct ibv_qp_ex *qpx)
{
    rec_qpex_operation(qpx, REC_CALL_wr_send, IBV_WR_SEND);
    rec_qpex_done();
}

static void rec_wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm_data)
{
    rec_qpex_operation(qpx, REC_CALL_wr_send_imm, IBV_WR_SEND_WITH_IMM)->imm_data = imm_data;
    rec_qpex_done();
}

static void rec_wr_send_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
    rec_qpex_operation(qpx, REC_CALL_wr_send_inv, IBV_WR_SEND_WITH_INV)->invalidate_rkey =
        invalidate_rkey;
    rec_qpex_done();
}

static void rec_wr_send_tso(struct ibv_qp_ex *qpx, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
    struct rec_request *r = rec_qpex_operation(qpx, REC_CALL_wr_send_tso, IBV_WR_TSO);
    r->tso_hdr = (uintptr_t)hdr;
    r->tso_hdr_sz = hdr_sz;
    r->tso_mss = mss;
    rec_inline_bytes(r, hdr, hdr_sz);
    rec_qpex_done();
}

static void rec_rdma(struct ibv_qp_ex *qpx, enum rec_qpex_call call, enum ibv_wr_opcode opcode,
                     uint32_t rkey, uint64_t remote_addr, __be32 imm_data)
{
    struct rec_request *r = rec_qpex_operation(qpx, call, opcode);
    r->rdma_rkey = rkey;
    r->rdma_remote_addr = remote_addr;
    r->imm_data = imm_data;
    rec_qpex_done();
}

static void rec_wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr)
{
    rec_rdma(qpx, REC_CALL_wr_rdma_write, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0);
}

static void rec_wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
                                  __be32 imm_data)
{
    rec_rdma(qpx, REC_CALL_wr_rdma_write_imm, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr,
             imm_data);
}

static void rec_wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr)
{
    rec_rdma(qpx, REC_CALL_wr_rdma_read, IBV_WR_RDMA_READ, rkey, remote_addr, 0);
}

static struct rec_request *rec_atomic(struct ibv_qp_ex *qpx, enum rec_qpex_call call,
                                      enum ibv_wr_opcode opcode, uint32_t rkey,
                                      uint64_t remote_addr)
{
    struct rec_request *r = rec_qpex_operation(qpx, call, opcode);
    r->atomic_rkey = rkey;
    r->atomic_remote_addr = remote_addr;
    return r;
}

static void rec_wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
                                  uint64_t compare, uint64_t swap)
{
    struct rec_request *r = rec_atomic(qpx, REC_CALL_wr_atomic_cmp_swp,
                                       IBV_WR_ATOMIC_CMP_AND_SWP, rkey, remote_addr);
    r->atomic_compare_add = compare;
    r->atomic_swap = swap;
    rec_qpex_done();
}

static void rec_wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
                                    uint64_t add)
{
    rec_atomic(qpx, REC_CALL_wr_atomic_fetch_add, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey,
               remote_addr)->atomic_compare_add = add;
    rec_qpex_done();
}

static void rec_wr_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t remote_addr,
                                const void *atomic_wr)
{
    /* 8 bytes, by the verb's definition. */
    rec_inline_bytes(rec_atomic(qpx, REC_CALL_wr_atomic_write, IBV_WR_ATOMIC_WRITE, rkey,
                                remote_addr),
                     atomic_wr, 8);
    rec_qpex_done();
}

static void rec_wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey,
                           const struct ibv_mw_bind_info *bind_info)
{
    struct rec_request *r = rec_qpex_operation(qpx, REC_CALL_wr_bind_mw, IBV_WR_BIND_MW);
    r->bind_mw = (uintptr_t)mw;
    r->bind_rkey = rkey;
    r->bind_mr = (uintptr_t)bind_info->mr;
    r->bind_mr_handle = rec_mr_handle(bind_info->mr);
    r->bind_addr = bind_info->addr;
    r->bind_length = bind_info->length;
    r->bind_access = bind_info->mw_access_flags;
    rec_qpex_done();
}

static void rec_wr_local_inv(struct ibv_qp_ex *qpx, uint32_t invalidate_rkey)
{
    rec_qpex_operation(qpx, REC_CALL_wr_local_inv, IBV_WR_LOCAL_INV)->invalidate_rkey =
        invalidate_rkey;
    rec_qpex_done();
}

/* ---- setters ---------------------------------------------------------------- */

static void rec_wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
    struct ibv_sge sge = {.addr = addr, .length = length, .lkey = lkey};
    struct rec_request *r = rec_qpex_record(qpx, REC_CALL_wr_set_sge);
    rec_sges(r, &sge, 1);
    r->sg_list = 0;           /* the binding's stack: its address says nothing */
    rec_qpex_done();
}

static void rec_wr_set_sge_list(struct ibv_qp_ex *qpx, size_t num_sge,
                                const struct ibv_sge *sg_list)
{
    struct rec_request *r = rec_qpex_record(qpx, REC_CALL_wr_set_sge_list);
    rec_sges(r, sg_list, num_sge > INT32_MAX ? INT32_MAX : (int)num_sge);
    rec_qpex_done();
}

static void rec_wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
    struct ibv_sge buffer = {.addr = (uintptr_t)addr, .length = (uint32_t)length};
    struct rec_request *r = rec_qpex_record(qpx, REC_CALL_wr_set_inline_data);
    rec_sges(r, &buffer, 1);
    r->sg_list = 0;
    rec_inline_bytes(r, addr, length);
    rec_qpex_done();
}

static void rec_wr_set_inline_data_list(struct ibv_qp_ex *qpx, size_t num_buf,
                                        const struct ibv_data_buf *buf_list)
{
    struct rec_request *r = rec_qpex_record(qpx, REC_CALL_wr_set_inline_data_list);
    r->sg_list = (uintptr_t)buf_list;
    r->num_sge = num_buf;
    for (size_t i = 0; i < num_buf; i++) {
        if (i < REC_MAX_SGE)
            r->sge[i] = (struct ibv_sge){.addr = (uintptr_t)buf_list[i].addr,
                                         .length = (uint32_t)buf_list[i].length};
        rec_inline_bytes(r, buf_list[i].addr, buf_list[i].length);
    }
    r->sges_recorded = num_buf < REC_MAX_SGE ? num_buf : REC_MAX_SGE;
    rec_qpex_done();
}

static void rec_wr_set_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t remote_qpn,
                               uint32_t remote_qkey)
{
    struct rec_request *r = rec_qpex_record(qpx, REC_CALL_wr_set_ud_addr);
    r->ud_ah = (uintptr_t)ah;
    r->ud_ah_handle = rec_ah_handle(ah);
    r->ud_remote_qpn = remote_qpn;
    r->ud_remote_qkey = remote_qkey;
    rec_qpex_done();
}

static void rec_wr_set_xrc_srqn(struct ibv_qp_ex *qpx, uint32_t remote_srqn)
{
    rec_qpex_record(qpx, REC_CALL_wr_set_xrc_srqn)->xrc_remote_srqn = remote_srqn;
    rec_qpex_done();
}

/* ---- creation ----------------------------------------------------------------- */

/* The send_ops_flags this provider has a builder for (no wr_flush). */
static const uint64_t rec_send_ops =
    IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
    IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
    IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV |
    IBV_QP_EX_WITH_TSO | IBV_QP_EX_WITH_ATOMIC_WRITE;

static void rec_qpex_builders(struct ibv_qp_ex *qpx, uint64_t ops)
{
    qpx->wr_start = rec_wr_start;
    qpx->wr_complete = rec_wr_complete;
    qpx->wr_abort = rec_wr_abort;
    qpx->wr_set_sge = rec_wr_set_sge;
    qpx->wr_set_sge_list = rec_wr_set_sge_list;
    qpx->wr_set_inline_data = rec_wr_set_inline_data;
    qpx->wr_set_inline_data_list = rec_wr_set_inline_data_list;
    qpx->wr_set_ud_addr = rec_wr_set_ud_addr;
    qpx->wr_set_xrc_srqn = rec_wr_set_xrc_srqn;
#define REC_IF_ASKED(flag, member, builder)                                    \
    if (ops & (flag))                                                          \
        qpx->member = builder;
    REC_IF_ASKED(IBV_QP_EX_WITH_RDMA_WRITE, wr_rdma_write, rec_wr_rdma_write)
    REC_IF_ASKED(IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, wr_rdma_write_imm, rec_wr_rdma_write_imm)
    REC_IF_ASKED(IBV_QP_EX_WITH_SEND, wr_send, rec_wr_send)
    REC_IF_ASKED(IBV_QP_EX_WITH_SEND_WITH_IMM, wr_send_imm, rec_wr_send_imm)
    REC_IF_ASKED(IBV_QP_EX_WITH_RDMA_READ, wr_rdma_read, rec_wr_rdma_read)
    REC_IF_ASKED(IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, wr_atomic_cmp_swp, rec_wr_atomic_cmp_swp)
    REC_IF_ASKED(IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, wr_atomic_fetch_add, rec_wr_atomic_fetch_add)
    REC_IF_ASKED(IBV_QP_EX_WITH_LOCAL_INV, wr_local_inv, rec_wr_local_inv)
    REC_IF_ASKED(IBV_QP_EX_WITH_BIND_MW, wr_bind_mw, rec_wr_bind_mw)
    REC_IF_ASKED(IBV_QP_EX_WITH_SEND_WITH_INV, wr_send_inv, rec_wr_send_inv)
    REC_IF_ASKED(IBV_QP_EX_WITH_TSO, wr_send_tso, rec_wr_send_tso)
    REC_IF_ASKED(IBV_QP_EX_WITH_ATOMIC_WRITE, wr_atomic_write, rec_wr_atomic_write)
#undef REC_IF_ASKED
}

struct ibv_qp *rec_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr)
{
    const uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                           IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_MAX_TSO_HEADER;
    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || attr->pd == NULL ||
        (attr->comp_mask & ~known)) {
        errno = EINVAL;
        return NULL;
    }
    int extended = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
    uint64_t ops = extended ? attr->send_ops_flags : 0;
    if (ops & ~rec_send_ops) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    struct ibv_qp_init_attr plain = {
        .qp_context = attr->qp_context,
        .send_cq = attr->send_cq,
        .recv_cq = attr->recv_cq,
        .srq = attr->srq,
        .cap = attr->cap,
        .qp_type = attr->qp_type,
        .sq_sig_all = attr->sq_sig_all,
    };
    struct rec_qp *rq = rec_qp_new(attr->pd, &plain);
    if (rq == NULL)
        return NULL;
    if (extended) {
        rq->extended = 1;
        rec_qpex_builders(&rq->qpx, ops);
    }
    return &rq->qpx.qp_base;
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
    struct rec_qp *rq = (struct rec_qp *)qp;   /* every QP here is one: rec_qp_new */
    return rq->extended ? &rq->qpx : NULL;
}
