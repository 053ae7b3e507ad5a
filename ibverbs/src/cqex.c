/*
 * The polling loop of extended CQs (CQEx): start_poll / next_poll /
 * end_poll, and Context.query_rt_values_ex.  The readers (read_opcode,
 * wr_id, ...) are generated (spec/cqex.yaml); they run only while `current`
 * is set here, and only for the fields requested in wc_flags.
 *
 * A provider's start_poll takes the CQ's lock and holds it until end_poll
 * (rxe: a spinlock).  So, between a start_poll() that returned True and
 * end_poll():
 *   - the CQEx counts as busy: close() raises VerbsError EBUSY;
 *   - CQ.poll(), poll_into(), resize() and modify() of that CQ, and a
 *     second start_poll(), raise RuntimeError instead of deadlocking on
 *     the lock (ibp_cq_check_not_polling);
 *   - a CQEx garbage-collected mid-poll is ended first (before_dealloc).
 * start_poll() returning ENOENT (empty CQ) leaves nothing to end: False.
 */
#include "common.h"
#include "objects.h"

int ibp_cq_check_not_polling(PyObject *cq)
{
    /* Plain CQs first: the subtype check walks the MRO on every poll. */
    if (Py_IS_TYPE(cq, CQ_Type))
        return 0;
    if (CQEx_Type != NULL && PyObject_TypeCheck(cq, CQEx_Type) &&
        ibp_relaxed_load(&((struct CQExObject *)cq)->polling)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "this CQEx is between start_poll() and end_poll(): "
                        "call end_poll() first");
        return -1;
    }
    return 0;
}

PyObject *ibp_cq_locked(PyObject *const *cqs, int n)
{
    for (int i = 0; i < n; i++) {
        PyObject *cq = cqs[i];
        /* another object's flag (a QP's CQs): relaxed, set in its own calls */
        if (cq != NULL && !Py_IS_TYPE(cq, CQ_Type) && CQEx_Type != NULL &&
            PyObject_TypeCheck(cq, CQEx_Type) && ibp_relaxed_load(&((struct CQExObject *)cq)->polling))
            return cq;
    }
    return NULL;
}

int ibp_refuse_cq_locked(PyObject *obj, const char *verb, PyObject *const *cqs, int n)
{
    if (ibp_cq_locked(cqs, n) == NULL)
        return 0;
    ibp_raise_detail(verb, EBUSY,
                     "%s refused: a CQEx of this %s is between start_poll() and end_poll(), "
                     "and the provider takes that CQ's lock in %s (it would deadlock): "
                     "call end_poll() first", verb, ibp_type_name(obj), verb);
    return -1;
}

int ibp_qp_modify_to_reset(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    (void)qp;
    /* mlx5_modify_qp cleans the CQs of the QP's completions on RESET */
    return (mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET;
}

int ibp_wq_modify_takes_cq_lock(struct ibv_wq *wq, struct ibv_wq_attr *attr)
{
    /* mlx5_modify_wq cleans the CQ of the WQ's completions when it leaves
     * RESET for RDY; to RESET counts too (the recording provider's model,
     * tests/recording): refusing one more call is safe, a deadlock is not */
    if (!(attr->attr_mask & IBV_WQ_ATTR_STATE))
        return 0;
    enum ibv_wq_state current = (attr->attr_mask & IBV_WQ_ATTR_CURR_STATE)
                                ? attr->curr_wq_state : wq->state;
    return attr->wq_state == IBV_WQS_RESET ||
           (current == IBV_WQS_RESET && attr->wq_state == IBV_WQS_RDY);
}

static void stop_polling(struct CQExObject *cq)
{
    ibv_end_poll(cq->ex_ptr);
    ibp_relaxed_store(&cq->polling, 0);
    cq->current = 0;
    ibp_atomic_add(&IBP_HANDLE(cq)->busy, -1);    /* taken by start_poll() */
}

PyObject *ibp_hand_CQEx_start_poll(PyObject *self, PyObject *unused)
{
    struct CQExObject *cq = (struct CQExObject *)self;
    (void)unused;
    if (ibp_check_open(self) < 0)
        return NULL;
    if (ibp_cq_check_not_polling(self) < 0)
        return NULL;
    struct ibv_poll_cq_attr attr;
    memset(&attr, 0, sizeof(attr));
    int rc = ibv_start_poll(cq->ex_ptr, &attr);
    if (rc == ENOENT)
        Py_RETURN_FALSE;      /* empty, and not locked: no end_poll() */
    if (rc != 0)
        return ibp_raise("ibv_start_poll", ibp_error_code(rc));
    ibp_relaxed_store(&cq->polling, 1);
    cq->current = 1;
    ibp_atomic_add(&IBP_HANDLE(self)->busy, 1);  /* close() refuses until end_poll() */
    Py_RETURN_TRUE;
}

/* The CQEx of next_poll (ending 0) or end_poll (ending 1): open and
 * between start_poll() and end_poll(); else NULL with RuntimeError (or
 * EBADF).  Ending a poll that is not in progress would unlock a lock the
 * provider does not hold. */
static struct CQExObject *polling_cq(PyObject *self, int ending)
{
    if (ibp_check_open(self) < 0)
        return NULL;
    struct CQExObject *cq = (struct CQExObject *)self;
    if (!cq->polling) {
        PyErr_SetString(PyExc_RuntimeError,
                        ending ? "end_poll() without a start_poll() that returned True"
                               : "next_poll() needs a start_poll() that returned True first");
        return NULL;
    }
    return cq;
}

PyObject *ibp_hand_CQEx_next_poll(PyObject *self, PyObject *unused)
{
    (void)unused;
    struct CQExObject *cq = polling_cq(self, 0);
    if (cq == NULL)
        return NULL;
    int rc = ibv_next_poll(cq->ex_ptr);
    cq->current = rc == 0;
    if (rc == ENOENT)
        Py_RETURN_FALSE;      /* still locked: end_poll() remains due */
    if (rc != 0)
        return ibp_raise("ibv_next_poll", ibp_error_code(rc));
    Py_RETURN_TRUE;
}

PyObject *ibp_hand_CQEx_end_poll(PyObject *self, PyObject *unused)
{
    (void)unused;
    struct CQExObject *cq = polling_cq(self, 1);
    if (cq == NULL)
        return NULL;
    stop_polling(cq);
    Py_RETURN_NONE;
}

void ibp_cqex_before_dealloc(struct CQExObject *self)
{
    /* Dropped mid-poll: release the provider's lock before the CQ goes.
     * Not in a fork() child: end_poll would advance the consumer index of
     * the parent's CQ, whose queue is shared memory. */
    if (self->polling && !ibp_handle_foreign((PyObject *)self))
        stop_polling(self);
}

PyObject *ibp_hand_Context_query_rt_values_ex(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (ibp_check_open(self) < 0)
        return NULL;
    struct ibv_values_ex values;
    memset(&values, 0, sizeof(values));
    values.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
    errno = 0;
    int rc = ibv_query_rt_values_ex(Context_PTR(self), &values);
    if (rc != 0)
        return ibp_raise("ibv_query_rt_values_ex", ibp_error_code(rc));
    if (!(values.comp_mask & IBV_VALUES_MASK_RAW_CLOCK))
        return ibp_raise_detail("ibv_query_rt_values_ex", EOPNOTSUPP,
                                "ibv_query_rt_values_ex failed: the provider "
                                "returned no raw clock");
    return Py_BuildValue("(LL)", (long long)values.raw_clock.tv_sec,
                         (long long)values.raw_clock.tv_nsec);
}
