/*
 * What the C references of the benchmarks (bench/c_bench.c,
 * bench/c_threads.c) set up alike: a device opened by name, and an RC QP
 * connected as ibverbs.connect_rc connects one, so that C and Python run
 * on the same connection.
 */
#ifndef IBVERBS_BENCH_C_COMMON_H
#define IBVERBS_BENCH_C_COMMON_H

#include <infiniband/verbs.h>
#include <string.h>

/* The device called name, opened; NULL if there is none. */
static struct ibv_context *open_device_named(const char *name)
{
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    struct ibv_context *ctx = NULL;
    if (list == NULL)
        return NULL;
    for (int i = 0; i < n && ctx == NULL; i++)
        if (strcmp(ibv_get_device_name(list[i]), name) == 0)
            ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    return ctx;
}

#define RC_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* RESET -> INIT -> RTR -> RTS with the attributes ibverbs.connect_rc uses.
 * Returns NULL, or the state it could not reach. */
static const char *rc_connect(struct ibv_qp *qp, uint8_t port, uint32_t dest_qpn,
                              const union ibv_gid *dgid, int sgid_index, enum ibv_mtu mtu)
{
    struct ibv_qp_attr a = {
        .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = port,
        .qp_access_flags = RC_ACCESS,
    };
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        return "INIT";
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = *dgid;
    a.ah_attr.grh.sgid_index = sgid_index;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = port;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return "RTR";
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        return "RTS";
    return NULL;
}

#endif
