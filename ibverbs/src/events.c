/* Completion events (CQ.req_notify, ack_events, CompChannel.get_cq_event)
 * and async events (AsyncEvent, Context.get_async_event). */
#include "common.h"

#include "objects.h"

#include "asyncevent.c.h"

/* The arguments of these methods are parsed by their generated wrappers
 * (generated/cq.c.h, compchannel.c.h, context.c.h; spec `impl:`). */
PyObject *ibp_hand_CQ_req_notify_impl(PyObject *self, int solicited_only)
{
    if (ibp_check_open(self) < 0)
        return NULL;
    int rc = ibv_req_notify_cq(CQ_PTR(self), solicited_only);
    if (rc != 0)
        return ibp_raise("ibv_req_notify_cq", ibp_error_code(rc));
    Py_RETURN_NONE;
}

/*
 * CQ events are acknowledged to libibverbs as soon as they are read, in
 * get_cq_event itself: ibv_destroy_cq waits for every event to be acked,
 * and a destroy (in close() or dealloc, under the GIL) waiting for a thread
 * that needs the GIL to ack would deadlock.  The CQ object returned is a
 * strong reference, which is what the ack protects in C.  ack_events()
 * keeps the verbs contract visible: it accounts for what was received.
 */
PyObject *ibp_hand_CQ_ack_events_impl(PyObject *self, uint32_t nevents)
{
    if (nevents == 0) {
        PyErr_SetString(PyExc_ValueError, "nevents must be positive");
        return NULL;
    }
    if (ibp_check_open(self) < 0)
        return NULL;
    struct CQObject *cq = (struct CQObject *)self;
    if (nevents > cq->events_received) {
        PyErr_Format(PyExc_ValueError,
                     "cannot ack %u: more CQ events than received (%u unacked)",
                     nevents, cq->events_received);
        return NULL;
    }
    cq->events_received -= nevents;
    Py_RETURN_NONE;
}

/*
 * wait(arg) with the GIL released, self in flight (its generated wrapper
 * holds it: a close() meanwhile refuses with EBUSY; spec `holds:`): 0, or
 * the errno it failed with (EIO when none).
 */
static int without_gil(PyObject *self, int (*wait)(void *), void *arg)
{
    int rc, err;
    (void)self;
    Py_BEGIN_ALLOW_THREADS
    ibp_test_pause_point();   /* IBVERBS_TEST_HOOKS */
    errno = 0;
    rc = wait(arg);
    err = errno;
    Py_END_ALLOW_THREADS
    return rc == 0 ? 0 : err ? err : EIO;
}

struct cq_event_wait {
    struct ibv_comp_channel *channel;
    struct ibv_cq *cq;
    void *cq_context;       /* the CQ's registry token (handles.c) */
};

static int read_cq_event(void *arg)
{
    struct cq_event_wait *w = arg;
    int rc = ibv_get_cq_event(w->channel, &w->cq, &w->cq_context);
    if (rc == 0)
        ibv_ack_cq_events(w->cq, 1);
    return rc;
}

PyObject *ibp_hand_CompChannel_get_cq_event_impl(PyObject *self)
{
    for (;;) {
        if (ibp_check_open(self) < 0)
            return NULL;
        struct cq_event_wait w = {CompChannel_PTR(self), NULL, NULL};
        int err = without_gil(self, read_cq_event, &w);
        if (err != 0)
            return ibp_raise("ibv_get_cq_event", err);
        /* By the CQ's token, not its address: another CQ may have that now. */
        PyObject *obj = ibp_registry_find(w.cq_context);
        if (obj != NULL && !PyObject_TypeCheck(obj, CQ_Type))
            Py_CLEAR(obj);   /* the registry holds QPs, SRQs, CM IDs too */
        if (obj == NULL)
            continue;   /* its CQ was destroyed meanwhile: wait for the next */
        ibp_lock_t cs;
        ibp_lock(&cs, obj);     /* the CQ's count: its ack_events holds it */
        ((struct CQObject *)obj)->events_received++;
        ibp_unlock(&cs);
        return obj;
    }
}

/* ==== async events ======================================================= */

static PyObject *ibp_AsyncEvent_get_event_type_str(PyObject *op, void *c)
{
    (void)c;
    return PyUnicode_FromString(ibv_event_type_str(((AsyncEventObject *)op)->event.event_type));
}

static PyObject *ibp_AsyncEvent_get_port_num(PyObject *op, void *c)
{
    const struct ibv_async_event *ev = &((AsyncEventObject *)op)->event;
    (void)c;
    switch (ev->event_type) {
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE:
        return PyLong_FromLong(ev->element.port_num);
    default:
        Py_RETURN_NONE;
    }
}

static PyObject *ibp_AsyncEvent_repr(PyObject *op)
{
    AsyncEventObject *self = (AsyncEventObject *)op;
    return PyUnicode_FromFormat("AsyncEvent(%s, element=%R)",
                                ibv_event_type_str(self->event.event_type),
                                self->element ? self->element : Py_None);
}

/* The registry token (handles.c) of the object an event names, read from
 * its user context field while the event is not yet acknowledged (so the
 * object is alive); NULL for none.  WQs are not registered. */
static void *event_token(const struct ibv_async_event *ev)
{
    switch (ev->event_type) {
    case IBV_EVENT_CQ_ERR:
        return ev->element.cq->cq_context;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        return ev->element.srq->srq_context;
    case IBV_EVENT_WQ_FATAL:
        return NULL;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        return ev->element.qp->qp_context;
    default:
        return NULL;
    }
}

/*
 * Like CQ events, async events are acked right after they are read, with
 * the GIL still released (ibv_destroy_qp waits for the ack); the
 * AsyncEvent holds a strong reference to the object it names instead.
 * ack_async_event() is therefore idempotent bookkeeping.
 */
struct async_event_wait {
    struct ibv_context *context;
    struct ibv_async_event event;
    void *token;
};

static int read_async_event(void *arg)
{
    struct async_event_wait *w = arg;
    int rc = ibv_get_async_event(w->context, &w->event);
    if (rc == 0) {
        w->token = event_token(&w->event);
        ibv_ack_async_event(&w->event);
    }
    return rc;
}

PyObject *ibp_hand_Context_get_async_event_impl(PyObject *self)
{
    if (ibp_check_open(self) < 0)
        return NULL;
    struct async_event_wait w = {.context = Context_PTR(self)};
    int err = without_gil(self, read_async_event, &w);
    if (err != 0)
        return ibp_raise("ibv_get_async_event", err);
    struct ibv_async_event event = w.event;
    PyObject *op = PyType_GenericAlloc(AsyncEvent_Type, 0);
    if (op == NULL)
        return NULL;
    AsyncEventObject *ev = (AsyncEventObject *)op;
    ev->event = event;
    /* By token: the address may name another object by now (handles.c). */
    ev->element = ibp_registry_find(w.token);
    ev->acked = 0;
    return op;
}

PyObject *ibp_hand_Context_ack_async_event_impl(PyObject *self, AsyncEventObject *ev)
{
    (void)self;
    ibp_lock_t cs;
    ibp_lock(&cs, ev);      /* the event's field, in self's (the Context's) call */
    ev->acked = 1;
    ibp_unlock(&cs);
    Py_RETURN_NONE;
}
