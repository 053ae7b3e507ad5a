/*
 * rdma_cm: librdmacm itself, addresses, and the EventChannel's calls.
 *
 * librdmacm.so.1 is dlopen'ed on first use (create_event_channel), never at
 * import and never linked: without it `import ibverbs` works and only the
 * rdma_cm API raises RuntimeError.  The trampolines and the dlsym table are
 * generated (generated/rdmacm_loader.c.h); the EventChannel and CMID
 * classes too (generated/rdmacm_methods.c.h, from spec/rdmacm/cm.yaml
 * through the verbs handle templates), compiled in cm_id.c with the CMID's
 * hand-written side.  Here:
 * - loading librdmacm, and the module functions that need it;
 * - (host, port) <-> struct sockaddr, for bind_addr/resolve_addr and the
 *   generated CMID.local_addr/peer_addr getters;
 * - EventChannel.create_id and get_cm_event, the blocking event loop: every
 *   event is copied and acknowledged inside get_cm_event, with the GIL
 *   released, so an unacknowledged event never blocks rdma_destroy_id
 *   (which waits for them).
 * Every method runs inside its generated wrapper, which holds the object in
 * flight (busy: close() raises EBUSY) until it returns.
 */
#include "common.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

/* As in module.c: the oldest dlopen/dlsym/dlerror (see README, "manylinux floor"). */
#if defined(__x86_64__) && defined(__GLIBC__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
#elif defined(__aarch64__) && defined(__GLIBC__)   /* aarch64 glibc starts at 2.17 */
__asm__(".symver dlopen,dlopen@GLIBC_2.17");
__asm__(".symver dlsym,dlsym@GLIBC_2.17");
__asm__(".symver dlerror,dlerror@GLIBC_2.17");
__asm__(".symver dlclose,dlclose@GLIBC_2.17");
#endif

#pragma GCC visibility push(hidden)
#include <rdma/rdma_cma.h>
#pragma GCC visibility pop

#include "objects.h"
#include "rdmacm_loader.c.h"
#include "rdmacm_methods.c.h"

/* ---- the library ------------------------------------------------------------ */

static void *librdmacm;

static int rdmacm_load(void)
{
    if (librdmacm != NULL)
        return 0;
    const char *path = getenv("IBVERBS_RDMACM_LIBRARY");
    if (path == NULL || *path == '\0')
        path = "librdmacm.so.1";
    /* RTLD_GLOBAL is not needed: nothing resolves against it but us.  It
     * links libibverbs.so.1, already loaded (module.c), so both share one
     * libibverbs and its contexts are ours to use. */
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        PyErr_Format(PyExc_RuntimeError,
                     "rdma_cm is unavailable: %s could not be loaded (%s). Install "
                     "rdma-core's connection manager library: librdmacm1 on "
                     "Debian/Ubuntu, librdmacm (rdma-core) on RHEL/Fedora/SUSE.",
                     path, why ? why : "unknown error");
        return -1;
    }
    for (const struct rdmacm_symbol *s = rdmacm_symbols; s->name; s++) {
        *s->slot = dlsym(handle, s->name);
        if (*s->slot == NULL && s->since == NULL) {
            PyErr_Format(PyExc_RuntimeError,
                         "rdma_cm is unavailable: %s lacks %s (rdma-core is too old)",
                         path, s->name);
            for (const struct rdmacm_symbol *t = rdmacm_symbols; t->name; t++)
                *t->slot = NULL;
            dlclose(handle);
            return -1;
        }
    }
    librdmacm = handle;
    return 0;
}

/* ---- addresses ---------------------------------------------------------------- */

/* (host, port), or host alone (port 0); host is a numeric IPv4/IPv6
 * address, '' for any.  None gives an all-zero (unset) address when
 * none_ok; returns 0 with *set = 0 then. */
int ibp_cm_conv_addr(PyObject *obj, const char *name, struct sockaddr_storage *out,
                     int none_ok, int *set)
{
    memset(out, 0, sizeof(*out));
    *set = 0;
    if (obj == Py_None && none_ok)
        return 0;
    PyObject *host_obj = obj, *port_obj = NULL;
    if (PyTuple_Check(obj)) {
        if (PyTuple_Size(obj) != 2) {
            PyErr_Format(PyExc_ValueError, "%s must be (host, port) or host, got a "
                         "tuple of %zd", name, PyTuple_Size(obj));
            return -1;
        }
        host_obj = PyTuple_GetItem(obj, 0);
        port_obj = PyTuple_GetItem(obj, 1);
    }
    if (!PyUnicode_Check(host_obj)) {
        PyErr_Format(PyExc_TypeError, "%s: the host must be a str (a numeric IP "
                     "address), not %s", name, ibp_type_name(host_obj));
        return -1;
    }
    uint64_t port = 0;
    if (port_obj != NULL && ibp_conv_unsigned(port_obj, "port", UINT16_MAX, &port) < 0)
        return -1;
    const char *host;
    PyObject *host_bytes = ibp_conv_str(host_obj, name, &host);
    if (host_bytes == NULL)
        return -1;
    int rc = 0;
    struct sockaddr_in *in4 = (struct sockaddr_in *)out;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
    if (*host == '\0') {
        in4->sin_family = AF_INET;
        in4->sin_addr.s_addr = htonl(INADDR_ANY);
        in4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons((uint16_t)port);
    } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
    } else {
        PyErr_Format(PyExc_ValueError, "%s: %R is not a numeric IPv4 or IPv6 address",
                     name, host_obj);
        rc = -1;
    }
    Py_DECREF(host_bytes);
    if (rc == 0)
        *set = 1;
    return rc;
}

/* (host, port), or None for an unset address. */
PyObject *ibp_sockaddr_to_py(const struct sockaddr *sa)
{
    char text[INET6_ADDRSTRLEN];
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in4 = (const struct sockaddr_in *)sa;
        if (inet_ntop(AF_INET, &in4->sin_addr, text, sizeof(text)) == NULL)
            return ibp_raise("inet_ntop", errno);
        return Py_BuildValue("(si)", text, (int)ntohs(in4->sin_port));
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text)) == NULL)
            return ibp_raise("inet_ntop", errno);
        return Py_BuildValue("(si)", text, (int)ntohs(in6->sin6_port));
    }
    Py_RETURN_NONE;
}

/* ---- EventChannel --------------------------------------------------------------- */

/* The librdmacm object of an open handle; NULL with EBADF when closed. */
static void *cm_ptr(PyObject *self)
{
    return ibp_check_open(self) < 0 ? NULL : IBP_HANDLE(self)->ptr;
}

PyObject *ibp_hand_EventChannel_repr(PyObject *op)
{
    if (IBP_HANDLE(op)->ptr == NULL)
        return PyUnicode_FromString("<ibverbs.EventChannel closed>");
    return PyUnicode_FromFormat("<ibverbs.EventChannel fd=%d>", EventChannel_PTR(op)->fd);
}

PyObject *ibp_hand_EventChannel_create_id(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"ps", NULL};
    int ps = RDMA_PS_TCP;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|i:create_id", keywords, &ps))
        return NULL;
    if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP && ps != RDMA_PS_IPOIB && ps != RDMA_PS_IB)
        return PyErr_Format(PyExc_ValueError, "ps must be a PortSpace (TCP, UDP, IPOIB "
                            "or IB), got %d", ps);
    struct rdma_event_channel *channel = cm_ptr(self);
    if (channel == NULL)
        return NULL;
    struct rdma_cm_id *id = NULL;
    errno = 0;
    int rc = rdma_create_id(channel, &id, NULL, (enum rdma_port_space)ps);
    if (rc != 0)
        return ibp_raise("rdma_create_id", ibp_error_code(rc));
    return ibp_cmid_new(id, self);
}

/* ibverbs.cm._make_event, looked up once (ibverbs.cm imports this module,
 * so not at import time). */
static PyObject *make_event;

static int is_conn_event(enum rdma_cm_event_type type)
{
    return type == RDMA_CM_EVENT_CONNECT_REQUEST || type == RDMA_CM_EVENT_CONNECT_RESPONSE ||
           type == RDMA_CM_EVENT_ESTABLISHED;
}

PyObject *ibp_hand_EventChannel_get_cm_event(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (make_event == NULL) {
        PyObject *cm = PyImport_ImportModule("ibverbs.cm");
        if (cm == NULL)
            return NULL;
        make_event = PyObject_GetAttrString(cm, "_make_event");
        Py_DECREF(cm);
        if (make_event == NULL)
            return NULL;
    }
    struct rdma_event_channel *channel = cm_ptr(self);
    if (channel == NULL)
        return NULL;
    PyObject *held_qps = ibp_cm_qps_hold(self);
    if (held_qps == NULL)
        return NULL;
    /* Everything the event says is copied out and the event acknowledged
     * before the GIL is taken back: a thread closing a CMID (rdma_destroy_id
     * waits for its events to be acknowledged, GIL held) can then never
     * deadlock against this one. */
    struct rdma_cm_event *event = NULL;
    enum rdma_cm_event_type type = 0;
    int status = 0, rc, ack_rc = 0, err = 0;
    struct rdma_cm_id *id = NULL, *listen_id = NULL;
    enum rdma_port_space ps = RDMA_PS_TCP;
    struct rdma_conn_param conn;
    struct rdma_ud_param ud;
    unsigned char data[256];
    int data_len = -1;
    memset(&conn, 0, sizeof(conn));
    memset(&ud, 0, sizeof(ud));
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = rdma_get_cm_event(channel, &event);
    err = errno;
    if (rc == 0) {
        type = event->event;
        status = event->status;
        id = event->id;
        listen_id = event->listen_id;
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
    ibp_cm_qps_release(held_qps);
    if (rc != 0)
        return ibp_raise("rdma_get_cm_event", ibp_error_code(err ? err : rc));
    PyObject *id_obj = NULL, *listen_obj = NULL, *data_obj = NULL, *param = NULL;
    PyObject *result = NULL;
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        /* A new ID for the incoming connection, on the listener's channel. */
        id_obj = ibp_cmid_new(id, self);
    } else {
        id_obj = ibp_registry_get(id);
        if (id_obj == NULL)
            id_obj = Py_NewRef(Py_None);
    }
    if (id_obj == NULL)
        goto done;
    listen_obj = listen_id ? ibp_registry_get(listen_id) : NULL;
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
    result = PyObject_CallFunction(make_event, "iiOOOO", (int)type, status, id_obj,
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
