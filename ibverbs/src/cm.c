/*
 * rdma_cm: librdmacm itself, addresses, and the EventChannel's calls.
 *
 * librdmacm.so.1 is dlopen'ed on first use (create_event_channel), never at
 * import and never linked: without it `import ibverbs` works and only the
 * rdma_cm API raises RuntimeError.  The trampolines and the dlsym table are
 * generated (generated/rdmacm_loader.c.h; the loop is loader.c's); the EventChannel and CMID
 * classes too (generated/rdmacm_methods.c.h, from spec/rdmacm/cm.yaml
 * through the verbs handle templates), compiled in module.c; the CMID's
 * hand-written side.  Here:
 * - loading librdmacm, and the module functions that need it;
 * - EventChannel.create_id and get_cm_event, the blocking event loop: every
 *   event is copied and acknowledged inside get_cm_event, with the GIL
 *   released, so an unacknowledged event never blocks rdma_destroy_id
 *   (which waits for them).
 * Every method runs inside its generated wrapper, which holds the object in
 * flight (busy: close() raises EBUSY) until it returns; the wrapper of a
 * method with arguments also converts them (spec `impl:`) and calls its
 * ibp_hand_<Class>_<name>_impl with the C values.
 */
#include "common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#pragma GCC visibility push(hidden)
#include <rdma/rdma_cma.h>
#pragma GCC visibility pop

#include "objects.h"
#include "rdmacm_loader.c.h"
#include "rdmacm_objects.h"

/* ---- the library ------------------------------------------------------------ */

/* Loaded once, by the first thread to get the lock; the others find it
 * loaded (acquire: its slots filled), or fail each with its own error. */
static void *librdmacm;
static ibp_mutex_t librdmacm_lock;

static int rdmacm_load(void)
{
    /* Not RTLD_GLOBAL: nothing resolves against it but us.  It links
     * libibverbs.so.1, already loaded (module.c), so both share one
     * libibverbs and its contexts are ours to use. */
    static const struct ibp_library cm = {
        "IBVERBS_RDMACM_LIBRARY", "librdmacm.so.1", 0, rdmacm_symbols,
        "rdma_cm is unavailable: %s could not be loaded (%s). Install "
        "rdma-core's connection manager library: librdmacm1 on "
        "Debian/Ubuntu, librdmacm (rdma-core) on RHEL/Fedora/SUSE.",
        "rdma_cm is unavailable: %s lacks %s (rdma-core is too old)",
    };
    if (ibp_acquire_load(&librdmacm) != NULL)
        return 0;
    ibp_mutex_lock(&librdmacm_lock);
    void *handle = librdmacm;
    if (handle == NULL) {
        handle = ibp_load_symbols(&cm, PyExc_RuntimeError);     /* no Python code */
        ibp_release_store(&librdmacm, handle);
    }
    ibp_mutex_unlock(&librdmacm_lock);
    return handle != NULL ? 0 : -1;
}

/* ---- EventChannel --------------------------------------------------------------- */

PyObject *ibp_hand_EventChannel_repr(PyObject *op)
{
    if (IBP_HANDLE(op)->ptr == NULL)
        return PyUnicode_FromString("<ibverbs.EventChannel closed>");
    return PyUnicode_FromFormat("<ibverbs.EventChannel fd=%d>", EventChannel_PTR(op)->fd);
}

PyObject *ibp_hand_EventChannel_create_id_impl(PyObject *self, int ps)
{
    if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IPOIB && ps != RDMA_PS_IB)
        return PyErr_Format(PyExc_ValueError, "ps must be a PortSpace (TCP, UDP, IPOIB "
                            "or IB), got %d", ps);
    struct rdma_event_channel *channel = ibp_open_ptr(self);
    if (channel == NULL)
        return NULL;
    struct rdma_cm_id *id = NULL;
    errno = 0;
    int rc = rdma_create_id(channel, &id, NULL, (enum rdma_port_space)ps);
    if (rc != 0)
        return ibp_raise("rdma_create_id", ibp_error_code(rc));
    return ibp_cmid_new(id, self);
}

/* ibverbs._cmevents._make_event, looked up once (ibverbs imports this module,
 * so not at import time), by whichever thread first (ibp_publish). */
static PyObject *make_event;

static int is_conn_event(enum rdma_cm_event_type type)
{
    return type == RDMA_CM_EVENT_CONNECT_REQUEST || type == RDMA_CM_EVENT_CONNECT_RESPONSE ||
           type == RDMA_CM_EVENT_ESTABLISHED;
}

/*
 * A CONNECT_REQUEST's new rdma_cm_id starts with the listener's context
 * (librdmacm copies it), so an event for the new ID that another thread
 * reads before that changes would name the listener.  The reader of the
 * request reserves the new ID's token at once, GIL released (handles.c);
 * the reservation lives as long as the ID's CMID.  An event whose token
 * names the object of another rdma_cm_id was copied so: it finds the new ID
 * by its reservation.  Whichever thread handles an event of the new ID
 * first makes its CMID, under the reserved token.  No reservation (the
 * request's reader has not made it yet, or the ID is gone): None, never a
 * guess at an ID that may have been freed.
 */
static PyObject *event_cmid(enum rdma_cm_event_type type, struct rdma_cm_id *id, void *token,
                            PyObject *channel)
{
    PyObject *obj = ibp_registry_find(token);
    if (obj != NULL && IBP_HANDLE(obj)->ptr == id)
        return obj;
    int copied = obj != NULL;        /* the listener's, for a new ID */
    Py_XDECREF(obj);
    uint64_t reserved = 0;
    int wrapped = 0;
    if (!ibp_registry_reservation(id, &reserved, &wrapped))
        return type == RDMA_CM_EVENT_CONNECT_REQUEST ? ibp_cmid_new(id, channel)   /* none: out of memory */
                                                     : Py_NewRef(Py_None);
    if (!copied && reserved != (uint64_t)(uintptr_t)token)
        return Py_NewRef(Py_None);   /* a token of an object gone */
    if (!wrapped)
        return ibp_cmid_new(id, channel);   /* registered under the reserved token */
    obj = ibp_registry_find((void *)(uintptr_t)reserved);
    return obj ? obj : Py_NewRef(Py_None);
}

PyObject *ibp_hand_EventChannel_get_cm_event(PyObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *make = ibp_acquire_load(&make_event);
    if (make == NULL &&
        (make = ibp_publish(&make_event, ibp_import_attr("ibverbs._cmevents", "_make_event"))) == NULL)
        return NULL;
    struct rdma_event_channel *channel = ibp_open_ptr(self);
    if (channel == NULL)
        return NULL;
    /* While this waits, the channel is busy (its wrapper holds it): the
     * close of a QP of any CMID on it is refused (cm_id.c), whenever that
     * QP was made.  Those closed before now leave their IDs first. */
    if (ibp_cm_channel_sync(self) < 0)
        return NULL;
    /* Everything the event says is copied out and the event acknowledged
     * before the GIL is taken back: a thread closing a CMID (rdma_destroy_id
     * waits for its events to be acknowledged, GIL held) can then never
     * deadlock against this one. */
    struct rdma_cm_event *event = NULL;
    enum rdma_cm_event_type type = 0;
    int status = 0, rc, ack_rc = 0, err = 0;
    struct rdma_cm_id *id = NULL;
    void *id_token = NULL, *listen_token = NULL;     /* registry tokens (handles.c) */
    enum rdma_port_space ps = RDMA_PS_TCP;
    struct rdma_conn_param conn;
    struct rdma_ud_param ud;
    unsigned char data[256];
    int data_len = -1;
    memset(&conn, 0, sizeof(conn));
    memset(&ud, 0, sizeof(ud));
    Py_BEGIN_ALLOW_THREADS
    ibp_test_pause_point();   /* IBVERBS_TEST_HOOKS */
    errno = 0;
    rc = rdma_get_cm_event(channel, &event);
    err = errno;
    if (rc == 0 && event->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        uint64_t token = ibp_registry_reserve(event->id);
        if (token != 0)
            event->id->context = (void *)(uintptr_t)token;
    }
    if (rc == 0) {
        type = event->event;
        status = event->status;
        id = event->id;
        /* Read before the ack, while both IDs are alive: the addresses may
         * name other IDs by the time the GIL is back. */
        id_token = id->context;
        listen_token = event->listen_id ? event->listen_id->context : NULL;
        ps = id->ps;
        if (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) {
            ud = event->param.ud;
            if (ud.private_data != NULL) {
                data_len = ud.private_data_len;
                memcpy(data, ud.private_data, ud.private_data_len);
            }
        } else {
            conn = event->param.conn;
            if (conn.private_data != NULL) {
                data_len = conn.private_data_len;
                memcpy(data, conn.private_data, conn.private_data_len);
            }
        }
        conn.private_data = ud.private_data = NULL;
        errno = 0;
        ack_rc = rdma_ack_cm_event(event);
        err = errno;
    }
    Py_END_ALLOW_THREADS
    if (rc != 0)
        return ibp_raise("rdma_get_cm_event", ibp_error_code(err ? err : rc));
    PyObject *id_obj = NULL, *listen_obj = NULL, *data_obj = NULL, *param = NULL;
    PyObject *result = NULL;
    /* A CONNECT_REQUEST's ID is new, for the incoming connection, on the
     * listener's channel: made here, or by the thread that handled one of
     * its later events first. */
    id_obj = event_cmid(type, id, id_token, self);
    if (id_obj == NULL)
        goto done;
    listen_obj = ibp_registry_find(listen_token);
    if (listen_obj == NULL)
        listen_obj = Py_NewRef(Py_None);
    if (data_len >= 0)
        data_obj = PyBytes_FromStringAndSize((const char *)data, data_len);
    else
        data_obj = Py_NewRef(Py_None);
    if (data_obj == NULL)
        goto done;
    if (ps == RDMA_PS_UDP || ps == RDMA_PS_IPOIB) {
        if (ud.qp_num != 0 || type == RDMA_CM_EVENT_ESTABLISHED) {
            PyObject *ah = AHAttr_from_c(&ud.ah_attr);
            if (ah == NULL)
                goto done;
            param = Py_BuildValue("{s:N,s:I,s:I}", "ah_attr", ah,
                                  "qp_num", (unsigned int)ud.qp_num,
                                  "qkey", (unsigned int)ud.qkey);
        }
    } else if (is_conn_event(type) && (type == RDMA_CM_EVENT_CONNECT_REQUEST || data_len >= 0)) {
        /* The passive side's ESTABLISHED carries no parameters: None. */
        param = Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:I}",
                              "responder_resources", conn.responder_resources,
                              "initiator_depth", conn.initiator_depth,
                              "flow_control", conn.flow_control,
                              "retry_count", conn.retry_count,
                              "rnr_retry_count", conn.rnr_retry_count,
                              "srq", conn.srq, "qp_num", (unsigned int)conn.qp_num);
    }
    if (param == NULL && PyErr_Occurred())
        goto done;
    result = PyObject_CallFunction(make, "iiOOOO", (int)type, status, id_obj,
                                   listen_obj, data_obj, param ? param : Py_None);
    if (result != NULL && ack_rc != 0) {
        Py_CLEAR(result);
        ibp_raise("rdma_ack_cm_event", ibp_error_code(err ? err : ack_rc));
    }
done:
    Py_XDECREF(id_obj);
    Py_XDECREF(listen_obj);
    Py_XDECREF(data_obj);
    Py_XDECREF(param);
    return result;
}

/* ---- module functions ---------------------------------------------------------------- */

PyObject *ibp_hand_module_create_event_channel(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (rdmacm_load() < 0)
        return NULL;
    errno = 0;
    struct rdma_event_channel *channel = rdma_create_event_channel();
    if (channel == NULL)
        return ibp_raise("rdma_create_event_channel", ibp_error_code(0));
    return EventChannel_wrap(channel);
}

PyObject *ibp_hand_module_cm_event_str(PyObject *module, PyObject *arg)
{
    (void)module;
    int64_t value;
    if (ibp_conv_signed(arg, "event", INT32_MIN, INT32_MAX, &value) < 0 || rdmacm_load() < 0)
        return NULL;
    const char *text = rdma_event_str((enum rdma_cm_event_type)value);
    return PyUnicode_FromString(text ? text : "");
}

PyObject *ibp_hand_module__rdmacm_available(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    if (rdmacm_load() < 0) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

/* The seed's name of the same question. */
PyObject *ibp_hand_module__has_rdmacm(PyObject *module, PyObject *unused)
{
    return ibp_hand_module__rdmacm_available(module, unused);
}
