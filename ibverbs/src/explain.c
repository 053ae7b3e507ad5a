/*
 * Why a verb failed, in words: the explainers a method's spec `explain:`
 * names (generator/methods.py) and the post path's.  Each runs only after
 * the provider refused, re-reads what it needs from the device (a query:
 * nothing is cached, nothing costs on the way that succeeds), and writes the
 * cause into why[0..len) when it finds one, returning nonzero; zero leaves
 * the message the errno's own.
 */
#include "common.h"
#include "objects.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int say(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return 1;
}

static const char *state_name(enum ibv_qp_state state)
{
    static const char *const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
    return (unsigned)state < sizeof(names) / sizeof(names[0]) ? names[state] : "UNKNOWN";
}

int ibp_explain_access(char *why, size_t len, int access)
{
    if (access & IBV_ACCESS_LOCAL_WRITE)
        return 0;
    if (access & IBV_ACCESS_REMOTE_WRITE)
        return say(why, len, "access has REMOTE_WRITE without LOCAL_WRITE: "
                   "REMOTE_WRITE needs LOCAL_WRITE");
    if (access & IBV_ACCESS_REMOTE_ATOMIC)
        return say(why, len, "access has REMOTE_ATOMIC without LOCAL_WRITE: "
                   "REMOTE_ATOMIC needs LOCAL_WRITE");
    return 0;
}

int ibp_explain_port(char *why, size_t len, struct ibv_context *context, unsigned port)
{
    struct ibv_device_attr attr;
    if (ibv_query_device(context, &attr) != 0 || (port >= 1 && port <= attr.phys_port_cnt))
        return 0;
    return say(why, len, "port %u does not exist: the device has %u port%s (1..%u)",
               port, attr.phys_port_cnt, attr.phys_port_cnt == 1 ? "" : "s",
               attr.phys_port_cnt);
}

int ibp_explain_cq_size(char *why, size_t len, struct ibv_context *context, int cqe)
{
    struct ibv_device_attr attr;
    if (ibv_query_device(context, &attr) != 0 || cqe <= attr.max_cqe)
        return 0;
    return say(why, len, "cqe=%d is over the device's limit max_cqe=%d", cqe, attr.max_cqe);
}

static int over_limit(char *why, size_t len, const char *field, uint32_t value,
                      const char *limit, int max)
{
    if (max < 0 || value <= (uint32_t)max)
        return 0;
    return say(why, len, "%s=%u is over the device's limit %s=%d", field, value, limit, max);
}

int ibp_explain_qp_caps(char *why, size_t len, struct ibv_context *context,
                        const struct ibv_qp_init_attr *init)
{
    struct ibv_device_attr attr;
    if (ibv_query_device(context, &attr) != 0)
        return 0;
    const struct ibv_qp_cap *cap = &init->cap;
    return over_limit(why, len, "max_send_wr", cap->max_send_wr, "max_qp_wr", attr.max_qp_wr)
        || over_limit(why, len, "max_recv_wr", cap->max_recv_wr, "max_qp_wr", attr.max_qp_wr)
        || over_limit(why, len, "max_send_sge", cap->max_send_sge, "max_sge", attr.max_sge)
        || over_limit(why, len, "max_recv_sge", cap->max_recv_sge, "max_sge", attr.max_sge);
}

int ibp_explain_srq_size(char *why, size_t len, struct ibv_context *context,
                         const struct ibv_srq_init_attr *init)
{
    struct ibv_device_attr attr;
    if (ibv_query_device(context, &attr) != 0)
        return 0;
    return over_limit(why, len, "max_wr", init->attr.max_wr, "max_srq_wr", attr.max_srq_wr)
        || over_limit(why, len, "max_sge", init->attr.max_sge, "max_srq_sge", attr.max_srq_sge);
}

/* A GID index the port's table does not hold: past its end, or an empty
 * entry (all zeros: RoCE fills entries as addresses come and go). */
static int explain_gid_index(char *why, size_t len, struct ibv_context *context,
                             unsigned port, unsigned index)
{
    struct ibv_port_attr port_attr;
    if (ibv_query_port(context, (uint8_t)port, &port_attr) != 0)
        return 0;
    union ibv_gid gid;
    static const union ibv_gid empty;
    if (index < (unsigned)port_attr.gid_tbl_len
            && ibv_query_gid(context, (uint8_t)port, (int)index, &gid) == 0
            && memcmp(&gid, &empty, sizeof(gid)) != 0)
        return 0;
    if (index >= (unsigned)port_attr.gid_tbl_len)
        return say(why, len, "GID index %u is not in port %u's GID table (%d entries)",
                   index, port, port_attr.gid_tbl_len);
    return say(why, len, "GID index %u is not in port %u's GID table (entry %u of %d is "
               "empty)", index, port, index, port_attr.gid_tbl_len);
}

int ibp_explain_ah_attr(char *why, size_t len, struct ibv_context *context,
                        const struct ibv_ah_attr *ah)
{
    if (ibp_explain_port(why, len, context, ah->port_num))
        return 1;
    return ah->is_global && explain_gid_index(why, len, context, ah->port_num,
                                              ah->grh.sgid_index);
}

/* The states a transition to `to` may start from (ibv_modify_qp(3)). */
static int may_move(enum ibv_qp_state from, enum ibv_qp_state to)
{
    switch (to) {
    case IBV_QPS_INIT: return from == IBV_QPS_RESET || from == IBV_QPS_INIT;
    case IBV_QPS_RTR:  return from == IBV_QPS_INIT;
    case IBV_QPS_RTS:  return from == IBV_QPS_RTR || from == IBV_QPS_RTS
                              || from == IBV_QPS_SQD || from == IBV_QPS_SQE;
    default:           return 1;
    }
}

int ibp_explain_modify_qp(char *why, size_t len, struct ibv_qp *qp,
                          const struct ibv_qp_attr *attr, int mask)
{
    struct ibv_qp_attr now;
    struct ibv_qp_init_attr init;
    if ((mask & IBV_QP_STATE) && ibv_query_qp(qp, &now, IBV_QP_STATE | IBV_QP_PORT, &init) == 0
            && !may_move(now.qp_state, attr->qp_state))
        return say(why, len, "the QP is in state %s: %s -> %s is not a transition "
                   "(RESET -> INIT -> RTR -> RTS)", state_name(now.qp_state),
                   state_name(now.qp_state), state_name(attr->qp_state));
    if ((mask & IBV_QP_PORT) && ibp_explain_port(why, len, qp->context, attr->port_num))
        return 1;
    if (mask & IBV_QP_AV)
        return ibp_explain_ah_attr(why, len, qp->context, &attr->ah_attr);
    return 0;
}

/* post_send / post_recv: the QP's state (EINVAL) or its queue's size
 * (ENOMEM), read back from the provider. */
int ibp_explain_post(char *why, size_t len, PyObject *queue, int send, int err)
{
    const char *verb = send ? "post_send" : "post_recv";
    if (!PyObject_TypeCheck(queue, QP_Type))
        return 0;
    struct ibv_qp_attr attr;
    struct ibv_qp_init_attr init;
    if (ibv_query_qp(QP_PTR(queue), &attr, IBV_QP_STATE | IBV_QP_CAP, &init) != 0)
        return 0;
    enum ibv_qp_state state = attr.qp_state;
    int too_early = send ? state < IBV_QPS_RTS : state < IBV_QPS_INIT;
    if (err == EINVAL && (too_early || state == IBV_QPS_ERR))
        return say(why, len, "%s on a QP in state %s: the QP must be RTS to send "
                   "(INIT or later to receive)", verb, state_name(state));
    if (err == ENOMEM && send)
        return say(why, len, "send queue full (max_send_wr=%u)", attr.cap.max_send_wr);
    if (err == ENOMEM)
        return say(why, len, "receive queue full (max_recv_wr=%u)", attr.cap.max_recv_wr);
    return 0;
}
