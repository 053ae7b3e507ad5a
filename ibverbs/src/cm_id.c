/*
 * rdma_cm: the CMID's hand-written side.  The class itself is generated
 * (generated/rdmacm_methods.c.h, compiled in module.c: EventChannel and
 * CMID from spec/rdmacm/cm.yaml through templates/handle.c.h.j2, as every
 * verbs handle: layout, wrap, close, dealloc, GC, fork ownership, the
 * getters of struct rdma_cm_id's fields).
 *
 * Lifetimes, the same rules as the verbs classes (handles.c):
 * - a CMID is a child of its EventChannel: closing the channel with open
 *   CMIDs raises EBUSY;
 * - the QP made by CMID.create_qp is owned through the CMID: closing the
 *   CMID while the QP is open raises EBUSY (destroy_qp() or qp.close()
 *   first).  If the CMID is garbage collected first, the QP is detached
 *   (id->qp = NULL) and lives on as a plain QP.  The hooks below
 *   (spec: detach, before_destroy, before_close) keep that;
 * - cm_id.context is a *borrowed* Context: the ibv_context is librdmacm's,
 *   so closing or collecting that object never closes the device.
 * The methods run inside their generated wrappers (calls in flight: see
 * cm.c), which convert their arguments (spec `impl:`: addresses, handles,
 * ranges, private_data) before the _impl functions here get them.
 */
#include "common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "objects.h"

#pragma GCC visibility push(hidden)
#include <rdma/rdma_cma.h>
#pragma GCC visibility pop

#include "rdmacm_objects.h"

/* What a librdmacm call that returned rc (0 or -1 with errno) gives Python:
 * None, or VerbsError naming the verb. */
static PyObject *cm_result(const char *verb, int rc)
{
    if (rc != 0)
        return ibp_raise(verb, ibp_error_code(rc));
    Py_RETURN_NONE;
}

/* A Context object for librdmacm's ibv_context, marked borrowed so that
 * neither close() nor GC ever closes the device under librdmacm.  (Only if
 * allocating the object itself fails does Context_wrap give the context
 * back with ibv_close_device; an out-of-memory corner this cannot avoid
 * without a non-owning Context in the generated code.) */
static PyObject *Context_wrap_borrowed(struct ibv_context *verbs)
{
    PyObject *ctx = Context_wrap(verbs);
    if (ctx == NULL)
        return NULL;
    if (ibp_handle_borrow(ctx) < 0)
        return NULL;    /* leaked on purpose: freeing it would close the device */
    return ctx;
}

/* The class of the CMIDs made here: ibverbs.CMID, the Python subclass
 * with the seed's blocking API (ibverbs/_cmid.py), once it registered
 * itself; this C base before that. */
static PyTypeObject *cmid_class;

PyObject *ibp_cmid_new(struct rdma_cm_id *id, PyObject *channel)
{
    PyTypeObject *cls = ibp_acquire_load(&cmid_class);
    return CMID_wrap_type(cls ? cls : CMID_Type, id, channel);
}

PyObject *ibp_hand_module__set_cmid_class(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, CMID_Type)) {
        PyErr_SetString(PyExc_TypeError, "_set_cmid_class needs a subclass of the C CMID");
        return NULL;
    }
    Py_INCREF(cls);
#if IBP_FREE_THREADED
    /* Another thread may be making a CMID of the class replaced, read
     * without a reference: it is kept (ibverbs sets one class at import;
     * only tests set others). */
    ibp_release_store(&cmid_class, (PyTypeObject *)cls);
#else
    Py_XSETREF(cmid_class, (PyTypeObject *)cls);
#endif
    Py_RETURN_NONE;
}

/* ---- the QP of create_qp ---------------------------------------------------------- */

/*
 * The QPs made by CMID.create_qp: QP object address -> CMID object address
 * (both alive while listed: the CMID holds the QP, and leaves the map
 * before it goes).  librdmacm reads and modifies id->qp in the CMID's calls
 * (rdma_connect, rdma_accept, rdma_disconnect, rdma_establish) and while it
 * processes events (rdma_get_cm_event moves the QP to RTR/RTS on
 * CONNECT_RESPONSE, to ERR on REJECTED).  So:
 * - a QP librdmacm may be using is never destroyed: qp.close() raises
 *   EBUSY while a call on its CMID runs with the GIL released (its
 *   generated wrapper holds the QP busy, and the channel: spec `holds:`
 *   in spec/rdmacm/cm.yaml, generator/hand_gil.py), and while any call on the
 *   CMID's channel is in flight (get_cm_event waiting); checked at close
 *   time, so a QP created on a CMID of the channel, or a CMID migrated
 *   onto it, during the wait counts as well;
 * - a destroyed QP leaves its rdma_cm_id only once ibv_destroy_qp has
 *   succeeded (cmid_sync_qp, run before every librdmacm call that reads
 *   id->qp: the CMID's own, and get_cm_event for each CMID of its
 *   channel); a destroy that fails (EBUSY: multicast groups still
 *   attached) leaves the QP on its ID, still driven by librdmacm.
 */
static PyObject *cm_qps;
/* Made on first use (ibp_publish).  On a free-threaded target each step
 * of more than one dict operation runs in the map's critical section
 * (cm_qps_find's callers), and the CMIDs are read through it: a CMID is in
 * the map until its dealloc takes it out, under that lock. */

static int cm_qps_add(PyObject *qp, PyObject *cmid)
{
    PyObject *map = ibp_acquire_load(&cm_qps);
    if (map == NULL && (map = ibp_publish(&cm_qps, PyDict_New())) == NULL)
        return -1;
    PyObject *key = PyLong_FromVoidPtr(qp), *value = ibp_table_entry(cmid);
    int rc = key && value ? PyDict_SetItem(map, key, value) : -1;
    Py_XDECREF(key);
    Py_XDECREF(value);
    return rc;
}

/* The CMID that made qp (a new reference), or NULL: none, or its dealloc
 * has begun.  The map's critical section held (cm_qps_lock); the reference
 * is dropped after it (a last one would run the dealloc, which takes it). */
static struct CMIDObject *cm_qps_find(PyObject *qp)
{
    if (cm_qps == NULL)
        return NULL;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *key = PyLong_FromVoidPtr(qp);
    PyObject *value = key ? PyDict_GetItem(cm_qps, key) : NULL;   /* borrowed */
    PyObject *cmid = value ? ibp_table_object(value) : NULL;
    Py_XDECREF(key);
    PyErr_Clear();
    PyErr_Restore(exc_type, exc_value, exc_tb);
    return (struct CMIDObject *)cmid;
}

/* The map, in its critical section (NULL when there is none yet). */
static PyObject *cm_qps_lock(ibp_lock_t *cs)
{
    PyObject *map = ibp_acquire_load(&cm_qps);
    if (map != NULL)
        ibp_lock(cs, map);
    return map;
}

static void cm_qps_unlock(PyObject *map, ibp_lock_t *cs)
{
    if (map != NULL)
        ibp_unlock(cs);
}

/* qp leaves the map, if it is there (its CMID's dealloc may be why: the
 * CMID is not looked at). */
static void cm_qps_drop(PyObject *qp)
{
    ibp_lock_t cs;
    PyObject *map = cm_qps_lock(&cs);
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *key = map ? PyLong_FromVoidPtr(qp) : NULL;
    if (key != NULL && PyDict_DelItem(map, key) < 0)
        PyErr_Clear();      /* not there */
    Py_XDECREF(key);
    PyErr_Clear();
    PyErr_Restore(exc_type, exc_value, exc_tb);
    cm_qps_unlock(map, &cs);
}

int ibp_rdmacm_qp_destroying(PyObject *qp)
{
    ibp_lock_t cs;
    PyObject *map = cm_qps_lock(&cs);
    struct CMIDObject *cmid = cm_qps_find(qp);
    int busy = cmid != NULL && cmid->channel != NULL &&
               ibp_atomic_load(&IBP_HANDLE(cmid->channel)->busy) > 0;
    cm_qps_unlock(map, &cs);
    Py_XDECREF((PyObject *)cmid);
    return busy ? EBUSY : 0;    /* librdmacm may be moving it in another thread */
}

/* A QP closed through qp.close() (destroyed: its object's pointer is NULL)
 * leaves its rdma_cm_id here, before librdmacm can read id->qp again. */
static void cmid_sync_qp(struct CMIDObject *self)
{
    if (self->qp != NULL && IBP_HANDLE(self->qp)->ptr == NULL) {
        if (self->head.ptr != NULL)
            CMID_PTR(self)->qp = NULL;
        cm_qps_drop(self->qp);
        Py_CLEAR(self->qp);
    }
}

/* Whether cmid (of the map) is on channel with its QP closed: it is to
 * sync.  Free-threaded, the CMIDs are other objects, read in the map's
 * critical section: what this reads is checked again in their own. */
static int cmid_to_sync(struct CMIDObject *cmid, PyObject *channel)
{
    return cmid->channel == channel && cmid->qp != NULL && IBP_HANDLE(cmid->qp)->ptr == NULL;
}

/* The CMIDs to sync (references): the map is edited by the syncing. */
static PyObject *channel_closed_qps(PyObject *map, PyObject *channel)
{
    PyObject *closed = PyList_New(0);
    /* every CMID found: its reference is dropped after the lock (a last one
     * runs its dealloc, which edits the map) */
    PyObject *found = PyList_New(0);
    int failed = closed == NULL || found == NULL;
    PyObject *unlisted = NULL;      /* one found but not held by found */
    ibp_lock_t cs;
    ibp_lock(&cs, map);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (!failed && PyDict_Next(map, &pos, &key, &value)) {
        /* a CMID whose dealloc has begun (it waits for this lock to leave
         * the map) is not found: it lets go of its QP itself */
        PyObject *cmid = ibp_table_object(value);
        if (cmid == NULL)
            continue;
        if (PyList_Append(found, cmid) < 0) {
            unlisted = cmid;
            failed = 1;
            break;
        }
        Py_DECREF(cmid);        /* found holds it */
        if (cmid_to_sync((struct CMIDObject *)cmid, channel) && PyList_Append(closed, cmid) < 0)
            failed = 1;
    }
    ibp_unlock(&cs);
    Py_XDECREF(unlisted);
    Py_XDECREF(found);
    if (failed)
        Py_CLEAR(closed);
    return closed;
}

int ibp_cm_channel_sync(PyObject *channel)
{
    PyObject *map = ibp_acquire_load(&cm_qps);
    if (map == NULL)
        return 0;
    PyObject *closed = channel_closed_qps(map, channel);
    if (closed == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < PyList_Size(closed); i++) {
        struct CMIDObject *cmid = (struct CMIDObject *)PyList_GetItem(closed, i);
        ibp_lock_t cs;
        ibp_lock(&cs, cmid);    /* another object's QP: its own calls sync it too */
        if (cmid_to_sync(cmid, channel))
            cmid_sync_qp(cmid);
        ibp_unlock(&cs);
    }
    Py_DECREF(closed);
    return 0;
}

/* ---- lifetime hooks (spec/rdmacm/cm.yaml) ---------------------------------------- */

/* Once the CMID has let go of its rdma_cm_id (destroyed, fork-inherited,
 * or leaked by a dealloc whose destroy failed): the map must not outlive
 * this CMID.  Never before rdma_destroy_id, so that a destroy that fails
 * (a GC clear keeps the CMID then) leaves its QP in the map. */
void ibp_cmid_detach(struct CMIDObject *self)
{
    if (self->qp != NULL)
        cm_qps_drop(self->qp);
}

/* Only dealloc and GC get here with the QP open (close() refuses): the QP
 * outlives the ID as a plain QP, which its own object destroys
 * (rdma_destroy_id never touches id->qp, so it is left as it is: a destroy
 * that fails leaves the ID as it was). */
int ibp_cmid_before_destroy(struct CMIDObject *self)
{
    cmid_sync_qp(self);
    return 0;
}

int ibp_cmid_before_close(struct CMIDObject *self)
{
    cmid_sync_qp(self);
    if (self->qp != NULL) {
        ibp_raise_detail("rdma_destroy_id", EBUSY,
                         "rdma_destroy_id failed: this CMID still has its QP "
                         "open; destroy_qp() (or qp.close()) first");
        return -1;
    }
    return 0;
}

/* ---- attributes ------------------------------------------------------------------ */

/* The CMID's QP, or None (borrowed); NULL with EBADF when closed. */
static PyObject *cmid_current_qp(PyObject *op)
{
    struct CMIDObject *self = (struct CMIDObject *)op;
    if (ibp_check_open(op) < 0)
        return NULL;
    cmid_sync_qp(self);
    return self->qp ? self->qp : Py_None;
}

PyObject *ibp_hand_CMID_get_qp(PyObject *op, void *closure)
{
    (void)closure;
    PyObject *qp = cmid_current_qp(op);
    return qp ? Py_NewRef(qp) : NULL;
}

PyObject *ibp_hand_CMID_get_pd(PyObject *op, void *closure)
{
    (void)closure;
    PyObject *qp = cmid_current_qp(op);
    if (qp == NULL || qp == Py_None)
        return qp ? Py_NewRef(Py_None) : NULL;
    return PyObject_GetAttrString(qp, "pd");
}

PyObject *ibp_hand_CMID_get_context(PyObject *op, void *closure)
{
    struct CMIDObject *self = (struct CMIDObject *)op;
    (void)closure;
    if (ibp_check_open(op) < 0)
        return NULL;
    struct ibv_context *verbs = CMID_PTR(op)->verbs;
    if (verbs == NULL)
        Py_RETURN_NONE;     /* not bound to a device yet */
    if (self->context != NULL && IBP_HANDLE(self->context)->ptr == verbs)
        return Py_NewRef(self->context);
    /* librdmacm's context, wrapped as a borrowed Context: usable like any
     * other (alloc_pd, create_cq, ...), never closed by us. */
    PyObject *ctx = Context_wrap_borrowed(verbs);
    if (ctx == NULL)
        return NULL;
    Py_XSETREF(self->context, Py_NewRef(ctx));
    return ctx;
}

/* ---- methods --------------------------------------------------------------------- */

/* The bytes of private_data (NULL: none) as librdmacm takes them; the
 * generated parser bounded its size (spec/rdmacm/cm.yaml). */
static const void *private_bytes(PyObject *data, uint8_t *len)
{
    *len = data ? (uint8_t)PyBytes_Size(data) : 0;
    return data ? PyBytes_AsString(data) : NULL;
}

/* A call that may move the ID's QP, with the GIL released: fn(id)
 * (rdma_disconnect, rdma_establish) or fn_conn(id, param) (rdma_connect,
 * rdma_accept).  Its generated wrapper holds the QP and the channel
 * (spec `holds:`); a QP closed before now leaves the ID first. */
static PyObject *cmid_call(PyObject *op, const char *verb, int (*fn)(struct rdma_cm_id *),
                           int (*fn_conn)(struct rdma_cm_id *, struct rdma_conn_param *),
                           struct rdma_conn_param *param)
{
    struct rdma_cm_id *id = ibp_open_ptr(op);
    if (id == NULL)
        return NULL;
    if (id->verbs == NULL)      /* librdmacm dereferences id->verbs: a crash */
        return ibp_raise_detail(verb, EINVAL, "%s failed: this CMID has no device yet "
                                "(resolve_addr or bind_addr first)", verb);
    cmid_sync_qp((struct CMIDObject *)op);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    ibp_test_pause_point();   /* IBVERBS_TEST_HOOKS */
    errno = 0;
    rc = fn ? fn(id) : fn_conn(id, param);
    Py_END_ALLOW_THREADS
    return cm_result(verb, rc);
}

/* connect/accept: the generated parser checked each field's range
 * (spec/rdmacm/cm.yaml). */
static PyObject *cmid_conn(PyObject *op, int accept, PyObject *data, int responder_resources,
                           int initiator_depth, int flow_control, int retry_count,
                           int rnr_retry_count)
{
    struct rdma_conn_param param;
    memset(&param, 0, sizeof(param));
    param.private_data = private_bytes(data, &param.private_data_len);
    param.responder_resources = (uint8_t)responder_resources;
    param.initiator_depth = (uint8_t)initiator_depth;
    param.flow_control = (uint8_t)flow_control;
    param.retry_count = (uint8_t)retry_count;
    param.rnr_retry_count = (uint8_t)rnr_retry_count;
    return cmid_call(op, accept ? "rdma_accept" : "rdma_connect", NULL,
                     accept ? rdma_accept : rdma_connect, &param);
}

PyObject *ibp_hand_CMID_connect_impl(PyObject *self, PyObject *private_data,
                                     int responder_resources, int initiator_depth,
                                     int flow_control, int retry_count, int rnr_retry_count)
{
    return cmid_conn(self, 0, private_data, responder_resources, initiator_depth,
                     flow_control, retry_count, rnr_retry_count);
}

PyObject *ibp_hand_CMID_accept_impl(PyObject *self, PyObject *private_data,
                                    int responder_resources, int initiator_depth,
                                    int flow_control, int retry_count, int rnr_retry_count)
{
    return cmid_conn(self, 1, private_data, responder_resources, initiator_depth,
                     flow_control, retry_count, rnr_retry_count);
}

PyObject *ibp_hand_CMID_reject_impl(PyObject *self, PyObject *private_data)
{
    struct rdma_cm_id *id = ibp_open_ptr(self);
    if (id == NULL)
        return NULL;
    uint8_t len;
    const void *bytes = private_bytes(private_data, &len);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    ibp_test_pause_point();   /* IBVERBS_TEST_HOOKS */
    errno = 0;
    rc = rdma_reject(id, bytes, len);
    Py_END_ALLOW_THREADS
    return cm_result("rdma_reject", rc);
}

PyObject *ibp_hand_CMID_disconnect_impl(PyObject *self)
{
    return cmid_call(self, "rdma_disconnect", rdma_disconnect, NULL, NULL);
}

PyObject *ibp_hand_CMID_establish_impl(PyObject *self)
{
    return cmid_call(self, "rdma_establish", rdma_establish, NULL, NULL);
}

PyObject *ibp_hand_CMID_bind_addr_impl(PyObject *self, struct sockaddr *addr)
{
    struct rdma_cm_id *id = ibp_open_ptr(self);
    if (id == NULL)
        return NULL;
    errno = 0;
    int rc = rdma_bind_addr(id, addr);
    return cm_result("rdma_bind_addr", rc);
}

/* resolve_addr (dst given) or resolve_route: with the GIL released, as
 * both wait up to timeout_ms in the kernel. */
static PyObject *cm_resolve(PyObject *self, struct sockaddr *dst, struct sockaddr *src,
                            int timeout_ms)
{
    struct rdma_cm_id *id = ibp_open_ptr(self);
    if (id == NULL)
        return NULL;
    if (dst == NULL && id->verbs == NULL)   /* librdmacm dereferences id->verbs: a crash */
        return ibp_raise_detail("rdma_resolve_route", EINVAL, "rdma_resolve_route failed: "
                                "this CMID has no address yet (resolve_addr first)");
    int rc;
    Py_BEGIN_ALLOW_THREADS
    ibp_test_pause_point();   /* IBVERBS_TEST_HOOKS */
    errno = 0;
    rc = dst ? rdma_resolve_addr(id, src, dst, timeout_ms) : rdma_resolve_route(id, timeout_ms);
    Py_END_ALLOW_THREADS
    return cm_result(dst ? "rdma_resolve_addr" : "rdma_resolve_route", rc);
}

PyObject *ibp_hand_CMID_resolve_addr_impl(PyObject *self, struct sockaddr *dst,
                                          struct sockaddr *src, int timeout_ms)
{
    return cm_resolve(self, dst, src, timeout_ms);
}

PyObject *ibp_hand_CMID_resolve_route_impl(PyObject *self, int timeout_ms)
{
    return cm_resolve(self, NULL, NULL, timeout_ms);
}

PyObject *ibp_hand_CMID_listen_impl(PyObject *self, int backlog)
{
    struct rdma_cm_id *id = ibp_open_ptr(self);
    if (id == NULL)
        return NULL;
    errno = 0;
    int rc = rdma_listen(id, backlog);
    return cm_result("rdma_listen", rc);
}

/* A verbs handle argument that must live on the CM ID's device context. */
static int same_context(PyObject *obj, const char *name, struct ibv_context *mine,
                        struct ibv_context *theirs)
{
    if (obj != NULL && theirs != mine) {
        PyErr_Format(PyExc_ValueError, "create_qp: %s belongs to another context "
                     "(create it from cm_id.context)", name);
        return -1;
    }
    return 0;
}

/* rdma_create_qp keeps the GIL, but on a free-threaded target other threads
 * run meanwhile: the generated wrapper holds the PD (spec holds:) and what
 * init_attr names, then prepares init_attr in its critical section, where
 * this runs (struct_instance:, generator/converters/impl_args.py), as a
 * generated verb's struct argument is. */
PyObject *ibp_hand_CMID_create_qp_impl(PyObject *op, PyObject *pd,
                                       struct QPInitAttrObject *attr)
{
    struct CMIDObject *self = (struct CMIDObject *)op;
    if (attr->ref_send_cq == NULL || attr->ref_recv_cq == NULL) {
        /* placeholders the caller never filled (QPInitAttr(None, None)) */
        PyErr_SetString(PyExc_TypeError, "CMID.create_qp: init_attr.send_cq and recv_cq must be CQs, not None");
        return NULL;
    }
    struct rdma_cm_id *id = ibp_open_ptr(op);
    if (id == NULL)
        return NULL;
    PyObject *result = NULL;
    cmid_sync_qp(self);
    if (id->verbs == NULL) {
        ibp_raise_detail("rdma_create_qp", EINVAL, "rdma_create_qp failed: this CMID "
                         "has no device yet (resolve_addr or bind_addr to an RDMA "
                         "address first)");
        goto done;
    }
    if (self->qp != NULL) {
        ibp_raise_detail("rdma_create_qp", EEXIST, "rdma_create_qp failed: this CMID "
                         "already has a QP");
        goto done;
    }
    struct ibv_qp_init_attr c = attr->c;
    if (same_context(pd, "pd", id->verbs, PD_PTR(pd)->context) < 0 ||
        same_context(attr->ref_send_cq, "send_cq", id->verbs,
                     c.send_cq ? c.send_cq->context : NULL) < 0 ||
        same_context(attr->ref_recv_cq, "recv_cq", id->verbs,
                     c.recv_cq ? c.recv_cq->context : NULL) < 0 ||
        same_context(attr->ref_srq, "srq", id->verbs,
                     c.srq ? c.srq->context : NULL) < 0)
        goto done;
    if (c.send_cq == NULL || c.recv_cq == NULL) {
        PyErr_SetString(PyExc_ValueError, "create_qp: init_attr needs send_cq and recv_cq");
        goto done;
    }
    errno = 0;
    int rc = rdma_create_qp(id, PD_PTR(pd), &c);
    if (rc != 0) {
        ibp_raise("rdma_create_qp", ibp_error_code(rc));
        goto done;
    }
    result = QP_wrap(id->qp, pd, attr->ref_send_cq, attr->ref_recv_cq, attr->ref_srq);
    if (result == NULL) {
        id->qp = NULL;      /* QP_wrap destroyed it */
        goto done;
    }
    if (cm_qps_add(result, op) < 0) {
        id->qp = NULL;
        Py_CLEAR(result);       /* its dealloc destroys the QP */
        goto done;
    }
    self->qp = Py_NewRef(result);
done:
    return result;
}

PyObject *ibp_hand_CMID_destroy_qp(PyObject *op, PyObject *unused)
{
    struct CMIDObject *self = (struct CMIDObject *)op;
    (void)unused;
    if (ibp_check_open(op) < 0)
        return NULL;
    cmid_sync_qp(self);
    if (self->qp == NULL)
        Py_RETURN_NONE;
    /* What rdma_destroy_qp does (ibv_destroy_qp, then id->qp = NULL), through
     * the QP object so that its own bookkeeping (parents, EBUSY) applies. */
    PyObject *r = PyObject_CallMethod(self->qp, "close", NULL);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    cmid_sync_qp(self);
    Py_RETURN_NONE;
}

PyObject *ibp_hand_CMID_migrate_impl(PyObject *op, PyObject *channel)
{
    struct CMIDObject *self = (struct CMIDObject *)op;
    struct rdma_cm_id *id = ibp_open_ptr(op);
    if (id == NULL)
        return NULL;
    /* Its generated wrapper holds the target channel too while the GIL is
     * released (its close() from another thread says EBUSY), and the QP,
     * whose events may start arriving on it before self->channel says so. */
    cmid_sync_qp(self);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    ibp_test_pause_point();   /* IBVERBS_TEST_HOOKS */
    errno = 0;
    rc = rdma_migrate_id(id, EventChannel_PTR(channel));
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return ibp_raise("rdma_migrate_id", ibp_error_code(rc));
    if (channel != self->channel) {
        ibp_atomic_add(&IBP_HANDLE(channel)->live_children, 1);
        ibp_atomic_add(&IBP_HANDLE(self->channel)->live_children, -1);
        Py_INCREF(channel);
        Py_XSETREF(self->channel, channel);
    }
    Py_RETURN_NONE;
}

PyObject *ibp_hand_CMID_set_option_impl(PyObject *self, int optname, PyObject *value_obj)
{
    /* Each option has its own C type (rdma_cma.h): a uint8_t or an int.
     * The IB path record option (level RDMA_OPTION_IB) takes structs and is
     * not offered. */
    uint8_t u8;
    int i32;
    void *optval;
    size_t optlen;
    int64_t v;
    switch (optname) {
    case RDMA_OPTION_ID_TOS:
    case RDMA_OPTION_ID_ACK_TIMEOUT:
        if (ibp_conv_signed(value_obj, "value", 0,
                            optname == RDMA_OPTION_ID_TOS ? UINT8_MAX : 31, &v) < 0)
            return NULL;
        u8 = (uint8_t)v;
        optval = &u8;
        optlen = sizeof(u8);
        break;
    case RDMA_OPTION_ID_REUSEADDR:
    case RDMA_OPTION_ID_AFONLY: {
        int truth = PyObject_IsTrue(value_obj);
        if (truth < 0)
            return NULL;
        i32 = truth;
        optval = &i32;
        optlen = sizeof(i32);
        break;
    }
    default:
        return PyErr_Format(PyExc_ValueError, "optname must be a CMIDOption (TOS, REUSEADDR, "
                            "AFONLY, ACK_TIMEOUT), got %d", optname);
    }
    struct rdma_cm_id *id = ibp_open_ptr(self);
    if (id == NULL)
        return NULL;
    errno = 0;
    int rc = rdma_set_option(id, RDMA_OPTION_ID, optname, optval, optlen);
    return cm_result("rdma_set_option", rc);
}

PyObject *ibp_hand_CMID__ports(PyObject *self, PyObject *unused)
{
    (void)unused;
    struct rdma_cm_id *id = ibp_open_ptr(self);
    if (id == NULL)
        return NULL;
    /* Both return the port in network order (0 when unset). */
    unsigned int src = ntohs(rdma_get_src_port(id));
    unsigned int dst = ntohs(rdma_get_dst_port(id));
    return Py_BuildValue("(II)", src, dst);
}
