/*
 * rdma_cm: EventChannel and CMID over librdmacm (<rdma/rdma_cma.h>).
 *
 * librdmacm.so.1 is dlopen'ed on first use (create_event_channel), never at
 * import and never linked: without it `import ibverbs` works and only the
 * rdma_cm API raises RuntimeError.  The trampolines and the dlsym table are
 * generated (generated/rdmacm_loader.c.h; the loop is loader.c's), and so are the docstrings and
 * method tables (generated/rdmacm_methods.c.h, from spec/rdmacm/cm.yaml).
 *
 * Lifetimes, the same rules as the verbs classes (handles.c):
 * - a CMID is a child of its EventChannel: closing the channel with open
 *   CMIDs raises EBUSY;
 * - the QP made by CMID.create_qp is owned through the CMID: closing the
 *   CMID while the QP is open raises EBUSY (destroy_qp() or qp.close()
 *   first).  If the CMID is garbage collected first, the QP is detached
 *   (id->qp = NULL) and lives on as a plain QP;
 * - every event is copied and acknowledged inside get_cm_event, so an
 *   unacknowledged event never blocks rdma_destroy_id (which waits for them);
 * - cm_id.context is a *borrowed* Context: the ibv_context is librdmacm's,
 *   so closing or collecting that object never closes the device.
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
#include "rdmacm_methods.c.h"

static PyTypeObject *EventChannel_Type;
static PyTypeObject *CMID_Type;
static Py_ssize_t EventChannel_open_count;
static Py_ssize_t CMID_open_count;

struct EventChannelObject {
    IbvHandle head;          /* head.ptr is the struct rdma_event_channel * */
};

struct CMIDObject {
    IbvHandle head;          /* head.ptr is the struct rdma_cm_id * */
    PyObject *channel;       /* parent EventChannel (counted) */
    PyObject *qp;            /* the QP of create_qp, or NULL */
    PyObject *context;       /* cached borrowed Context of id->verbs, or NULL */
};

#define CMID_PTR(o) ((struct rdma_cm_id *)IBP_HANDLE(o)->ptr)
#define CHANNEL_PTR(o) ((struct rdma_event_channel *)IBP_HANDLE(o)->ptr)

/* ---- the library ------------------------------------------------------------ */

static void *librdmacm;

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
    if (librdmacm != NULL)
        return 0;
    librdmacm = ibp_load_symbols(&cm, PyExc_RuntimeError);
    return librdmacm != NULL ? 0 : -1;
}

/* ---- addresses ---------------------------------------------------------------- */

/* (host, port), or host alone (port 0); host is a numeric IPv4/IPv6
 * address, '' for any.  None gives an all-zero (unset) address when
 * none_ok; returns 0 with *set = 0 then. */
static int conv_addr(PyObject *obj, const char *name, struct sockaddr_storage *out,
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
static PyObject *addr_to_py(const struct sockaddr *sa)
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

/* ---- calls in flight ------------------------------------------------------------ */

/* Open and not inherited across fork(); counted busy until cm_leave. */
static void *cm_enter(PyObject *self)
{
    if (ibp_check_open(self) < 0 || ibp_call_enter(self) < 0)
        return NULL;
    return IBP_HANDLE(self)->ptr;
}

static void cm_leave(PyObject *self)
{
    ibp_call_leave(self);
}

/* ---- CMID ------------------------------------------------------------------------ */

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

static PyObject *CMID_wrap(struct rdma_cm_id *id, PyObject *channel)
{
    PyObject *parents[] = {channel};
    PyObject *slots[1];
    PyObject *op = ibp_handle_new(cmid_class ? cmid_class : CMID_Type, id, slots, parents, 1);
    if (op == NULL) {
        rdma_destroy_id(id);    /* not wrapped, so not leaked either */
        return NULL;
    }
    struct CMIDObject *self = (struct CMIDObject *)op;
    self->channel = slots[0];
    self->qp = NULL;
    self->context = NULL;
    CMID_open_count++;
    /* Events name the rdma_cm_id; they are mapped back to this object. */
    if (ibp_registry_add(id, op) < 0) {
        Py_DECREF(op);
        return NULL;
    }
    return op;
}

/*
 * The QPs made by CMID.create_qp: QP object address -> CMID object address
 * (both alive while listed: the CMID holds the QP, and leaves the map
 * before it goes).  librdmacm reads and modifies id->qp while it processes
 * events (rdma_get_cm_event moves the QP to RTR/RTS on CONNECT_RESPONSE,
 * to ERR on REJECTED), so a QP destroyed by qp.close() must leave its ID
 * at once, not at the CMID's next call.
 */
static PyObject *cm_qps;

static int cm_qps_add(PyObject *qp, PyObject *cmid)
{
    if (cm_qps == NULL && (cm_qps = PyDict_New()) == NULL)
        return -1;
    PyObject *key = PyLong_FromVoidPtr(qp), *value = PyLong_FromVoidPtr(cmid);
    int rc = key && value ? PyDict_SetItem(cm_qps, key, value) : -1;
    Py_XDECREF(key);
    Py_XDECREF(value);
    return rc;
}

/* The CMID that made qp (borrowed), or NULL; removed from the map if drop. */
static struct CMIDObject *cm_qps_find(PyObject *qp, int drop)
{
    if (cm_qps == NULL)
        return NULL;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    struct CMIDObject *cmid = NULL;
    PyObject *key = PyLong_FromVoidPtr(qp);
    PyObject *value = key ? PyDict_GetItem(cm_qps, key) : NULL;   /* borrowed */
    if (value != NULL) {
        cmid = PyLong_AsVoidPtr(value);
        if (drop)
            PyDict_DelItem(cm_qps, key);
    }
    Py_XDECREF(key);
    PyErr_Clear();
    PyErr_Restore(exc_type, exc_value, exc_tb);
    return cmid;
}

void ibp_rdmacm_qp_destroying(PyObject *qp)
{
    struct CMIDObject *cmid = cm_qps_find(qp, 1);
    if (cmid != NULL && cmid->head.ptr != NULL)
        CMID_PTR(cmid)->qp = NULL;      /* what rdma_destroy_qp does after ibv_destroy_qp */
}

/* A QP closed through qp.close() left its rdma_cm_id then: forget it here. */
static void cmid_sync_qp(struct CMIDObject *self)
{
    if (self->qp != NULL && IBP_HANDLE(self->qp)->ptr == NULL) {
        if (self->head.ptr != NULL)
            CMID_PTR(self)->qp = NULL;
        cm_qps_find(self->qp, 1);
        Py_CLEAR(self->qp);
    }
}

/* The open QPs of the CMIDs on channel, held busy (a new list to pass to
 * cm_qps_release): qp.close() says EBUSY while librdmacm may modify them
 * in a call with the GIL released. */
static PyObject *cm_qps_hold(PyObject *channel)
{
    PyObject *held = PyList_New(0);
    if (held == NULL || cm_qps == NULL)
        return held;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(cm_qps, &pos, &key, &value)) {
        struct CMIDObject *cmid = PyLong_AsVoidPtr(value);
        PyObject *qp = cmid->qp;
        if (cmid->channel != channel || qp == NULL || IBP_HANDLE(qp)->ptr == NULL)
            continue;
        if (PyList_Append(held, qp) < 0) {
            Py_DECREF(held);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < PyList_Size(held); i++)
        IBP_HANDLE(PyList_GetItem(held, i))->busy++;
    return held;
}

static void cm_qps_release(PyObject *held)
{
    for (Py_ssize_t i = 0; i < PyList_Size(held); i++)
        IBP_HANDLE(PyList_GetItem(held, i))->busy--;
    Py_DECREF(held);
}

/* Destroy the rdma_cm_id; 0 or an errno value. */
static int CMID_destroy(struct CMIDObject *self)
{
    struct rdma_cm_id *id = CMID_PTR(self);
    if (self->qp != NULL)
        cm_qps_find(self->qp, 1);   /* on every path: the map must not outlive this CMID */
    if (ibp_handle_foreign((PyObject *)self))
        goto forget;    /* the parent process's (fork): forget it */
    cmid_sync_qp(self);
    /* Only dealloc gets here with the QP open (close() refuses): the QP
     * outlives the ID as a plain QP, which its own object destroys. */
    id->qp = NULL;
    errno = 0;
    int rc = rdma_destroy_id(id);
    if (rc != 0)
        return ibp_error_code(rc);
forget:
    ibp_registry_remove(id);
    self->head.ptr = NULL;
    CMID_open_count--;
    ibp_handle_closed((PyObject *)self);
    PyObject *parents[] = {self->channel};
    ibp_handle_release_parents(parents, 1);
    return 0;
}

static PyObject *CMID_close(PyObject *op, PyObject *unused)
{
    struct CMIDObject *self = (struct CMIDObject *)op;
    (void)unused;
    if (self->head.ptr == NULL)
        Py_RETURN_NONE;
    cmid_sync_qp(self);
    if (self->qp != NULL)
        return ibp_raise_detail("rdma_destroy_id", EBUSY,
                                "rdma_destroy_id failed: this CMID still has its QP "
                                "open; destroy_qp() (or qp.close()) first");
    if (ibp_check_closable(op, "rdma_destroy_id") < 0)
        return NULL;
    int err = CMID_destroy(self);
    if (err != 0)
        return ibp_raise("rdma_destroy_id", err);
    Py_CLEAR(self->context);
    Py_RETURN_NONE;
}

static void CMID_dealloc(PyObject *op)
{
    struct CMIDObject *self = (struct CMIDObject *)op;
    PyTypeObject *type = Py_TYPE(op);
    if (self->head.ptr != NULL) {
        int err = CMID_destroy(self);
        if (err != 0) {
            ibp_registry_remove(self->head.ptr);
            ibp_handle_closed(op);
            ibp_report_unraisable(op, "rdma_destroy_id", err);
        }
    }
    Py_CLEAR(self->channel);
    Py_CLEAR(self->qp);
    Py_CLEAR(self->context);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(op);
    Py_DECREF(type);
}

/* Parse the rdma_conn_param keywords of connect/accept. */
static int conn_param_from_args(const char *method, PyObject *args, PyObject *kwargs,
                                struct rdma_conn_param *param, PyObject **data)
{
    static char *keywords[] = {"private_data", "responder_resources", "initiator_depth",
                               "flow_control", "retry_count", "rnr_retry_count", NULL};
    PyObject *private_data = NULL;
    int values[5] = {1, 1, 1, 7, 7};
    static const char *names[5] = {"responder_resources", "initiator_depth",
                                   "flow_control", "retry_count", "rnr_retry_count"};
    static const int maxima[5] = {255, 255, 1, 7, 7};
    char format[32];
    snprintf(format, sizeof(format), "|Oiiiii:%s", method);
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, format, keywords, &private_data,
                                     &values[0], &values[1], &values[2], &values[3],
                                     &values[4]))
        return -1;
    for (int i = 0; i < 5; i++) {
        if (values[i] < 0 || values[i] > maxima[i]) {
            PyErr_Format(PyExc_ValueError, "%s must be in [0, %d], got %d",
                         names[i], maxima[i], values[i]);
            return -1;
        }
    }
    memset(param, 0, sizeof(*param));
    *data = NULL;
    if (private_data != NULL && private_data != Py_None) {
        *data = PyBytes_FromObject(private_data);
        if (*data == NULL)
            return -1;
        if (PyBytes_Size(*data) > 255) {
            PyErr_Format(PyExc_ValueError, "private_data is at most 255 bytes (the "
                         "transport allows less: 56 for connect, 196 for accept on "
                         "InfiniBand/RoCE), got %zd", PyBytes_Size(*data));
            Py_CLEAR(*data);
            return -1;
        }
        param->private_data = PyBytes_AsString(*data);
        param->private_data_len = (uint8_t)PyBytes_Size(*data);
    }
    param->responder_resources = (uint8_t)values[0];
    param->initiator_depth = (uint8_t)values[1];
    param->flow_control = (uint8_t)values[2];
    param->retry_count = (uint8_t)values[3];
    param->rnr_retry_count = (uint8_t)values[4];
    return 0;
}

/* connect/accept: rdma_connect / rdma_accept with the GIL released. */
static PyObject *cmid_conn(PyObject *op, PyObject *args, PyObject *kwargs, int accept)
{
    const char *verb = accept ? "rdma_accept" : "rdma_connect";
    struct rdma_conn_param param;
    PyObject *data = NULL;
    if (conn_param_from_args(accept ? "accept" : "connect", args, kwargs, &param, &data) < 0)
        return NULL;
    struct rdma_cm_id *id = cm_enter(op);
    if (id == NULL) {
        Py_XDECREF(data);
        return NULL;
    }
    cmid_sync_qp((struct CMIDObject *)op);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = accept ? rdma_accept(id, &param) : rdma_connect(id, &param);
    Py_END_ALLOW_THREADS
    cm_leave(op);
    Py_XDECREF(data);
    if (rc != 0)
        return ibp_raise(verb, ibp_error_code(rc));
    Py_RETURN_NONE;
}

PyObject *ibp_hand_CMID_connect(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return cmid_conn(self, args, kwargs, 0);
}

PyObject *ibp_hand_CMID_accept(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return cmid_conn(self, args, kwargs, 1);
}

PyObject *ibp_hand_CMID_reject(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"private_data", NULL};
    PyObject *private_data = NULL, *data = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:reject", keywords, &private_data))
        return NULL;
    if (private_data != NULL && private_data != Py_None) {
        data = PyBytes_FromObject(private_data);
        if (data == NULL)
            return NULL;
        if (PyBytes_Size(data) > 255) {
            Py_DECREF(data);
            return PyErr_Format(PyExc_ValueError, "private_data is at most 255 bytes");
        }
    }
    struct rdma_cm_id *id = cm_enter(self);
    if (id == NULL) {
        Py_XDECREF(data);
        return NULL;
    }
    const void *bytes = data ? PyBytes_AsString(data) : NULL;
    uint8_t len = data ? (uint8_t)PyBytes_Size(data) : 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = rdma_reject(id, bytes, len);
    Py_END_ALLOW_THREADS
    cm_leave(self);
    Py_XDECREF(data);
    if (rc != 0)
        return ibp_raise("rdma_reject", ibp_error_code(rc));
    Py_RETURN_NONE;
}

/* A call taking only the ID: rdma_disconnect, rdma_establish. */
static PyObject *cmid_simple(PyObject *op, int (*fn)(struct rdma_cm_id *), const char *verb)
{
    struct rdma_cm_id *id = cm_enter(op);
    if (id == NULL)
        return NULL;
    cmid_sync_qp((struct CMIDObject *)op);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = fn(id);
    Py_END_ALLOW_THREADS
    cm_leave(op);
    if (rc != 0)
        return ibp_raise(verb, ibp_error_code(rc));
    Py_RETURN_NONE;
}

PyObject *ibp_hand_CMID_disconnect(PyObject *self, PyObject *unused)
{
    (void)unused;
    return cmid_simple(self, rdma_disconnect, "rdma_disconnect");
}

PyObject *ibp_hand_CMID_establish(PyObject *self, PyObject *unused)
{
    (void)unused;
    return cmid_simple(self, rdma_establish, "rdma_establish");
}

PyObject *ibp_hand_CMID_bind_addr(PyObject *self, PyObject *arg)
{
    struct sockaddr_storage addr;
    int set;
    if (conv_addr(arg, "addr", &addr, 0, &set) < 0)
        return NULL;
    struct rdma_cm_id *id = cm_enter(self);
    if (id == NULL)
        return NULL;
    errno = 0;
    int rc = rdma_bind_addr(id, (struct sockaddr *)&addr);
    cm_leave(self);
    if (rc != 0)
        return ibp_raise("rdma_bind_addr", ibp_error_code(rc));
    Py_RETURN_NONE;
}

static int conv_timeout(int timeout_ms)
{
    if (timeout_ms <= 0) {
        PyErr_Format(PyExc_ValueError, "timeout_ms must be positive, got %d", timeout_ms);
        return -1;
    }
    return 0;
}

PyObject *ibp_hand_CMID_resolve_addr(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"dst", "src", "timeout_ms", NULL};
    PyObject *dst_obj, *src_obj = Py_None;
    int timeout_ms = 2000;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|Oi:resolve_addr", keywords,
                                     &dst_obj, &src_obj, &timeout_ms))
        return NULL;
    struct sockaddr_storage dst, src;
    int dst_set, src_set;
    if (conv_timeout(timeout_ms) < 0 || conv_addr(dst_obj, "dst", &dst, 0, &dst_set) < 0 ||
        conv_addr(src_obj, "src", &src, 1, &src_set) < 0)
        return NULL;
    struct rdma_cm_id *id = cm_enter(self);
    if (id == NULL)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = rdma_resolve_addr(id, src_set ? (struct sockaddr *)&src : NULL,
                           (struct sockaddr *)&dst, timeout_ms);
    Py_END_ALLOW_THREADS
    cm_leave(self);
    if (rc != 0)
        return ibp_raise("rdma_resolve_addr", ibp_error_code(rc));
    Py_RETURN_NONE;
}

PyObject *ibp_hand_CMID_resolve_route(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"timeout_ms", NULL};
    int timeout_ms = 2000;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|i:resolve_route", keywords, &timeout_ms) ||
        conv_timeout(timeout_ms) < 0)
        return NULL;
    struct rdma_cm_id *id = cm_enter(self);
    if (id == NULL)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = rdma_resolve_route(id, timeout_ms);
    Py_END_ALLOW_THREADS
    cm_leave(self);
    if (rc != 0)
        return ibp_raise("rdma_resolve_route", ibp_error_code(rc));
    Py_RETURN_NONE;
}

PyObject *ibp_hand_CMID_listen(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"backlog", NULL};
    int backlog = 16;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|i:listen", keywords, &backlog))
        return NULL;
    if (backlog < 0)
        return PyErr_Format(PyExc_ValueError, "backlog must be non-negative, got %d", backlog);
    struct rdma_cm_id *id = cm_enter(self);
    if (id == NULL)
        return NULL;
    errno = 0;
    int rc = rdma_listen(id, backlog);
    cm_leave(self);
    if (rc != 0)
        return ibp_raise("rdma_listen", ibp_error_code(rc));
    Py_RETURN_NONE;
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

PyObject *ibp_hand_CMID_create_qp(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"pd", "init_attr", NULL};
    struct CMIDObject *self = (struct CMIDObject *)op;
    PyObject *pd_arg, *attr_arg, *pd;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:create_qp", keywords, &pd_arg, &attr_arg))
        return NULL;
    if (ibp_conv_handle(pd_arg, "pd", PD_Type, 0, &pd) < 0)
        return NULL;
    if (!PyObject_TypeCheck(attr_arg, QPInitAttr_Type))
        return PyErr_Format(PyExc_TypeError, "init_attr must be a QPInitAttr, not %s",
                            ibp_type_name(attr_arg));
    struct QPInitAttrObject *attr = (struct QPInitAttrObject *)attr_arg;
    if (QPInitAttr_prepare(attr) < 0)
        return NULL;
    if (attr->ref_send_cq == NULL || attr->ref_recv_cq == NULL) {
        /* placeholders the caller never filled (QPInitAttr(None, None)) */
        PyErr_SetString(PyExc_TypeError, "CMID.create_qp: init_attr.send_cq and recv_cq must be CQs, not None");
        return NULL;
    }
    struct rdma_cm_id *id = cm_enter(op);
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
    cm_leave(op);
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

PyObject *ibp_hand_CMID_migrate(PyObject *op, PyObject *arg)
{
    struct CMIDObject *self = (struct CMIDObject *)op;
    PyObject *channel;
    if (ibp_conv_handle(arg, "channel", EventChannel_Type, 0, &channel) < 0)
        return NULL;
    struct rdma_cm_id *id = cm_enter(op);
    if (id == NULL)
        return NULL;
    /* The target channel is in use too while the GIL is released: its
     * close() from another thread must wait (EBUSY). */
    ibp_busy_enter(channel);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    errno = 0;
    rc = rdma_migrate_id(id, CHANNEL_PTR(channel));
    Py_END_ALLOW_THREADS
    ibp_busy_leave(channel);
    cm_leave(op);
    if (rc != 0)
        return ibp_raise("rdma_migrate_id", ibp_error_code(rc));
    if (channel != self->channel) {
        IBP_HANDLE(channel)->live_children++;
        IBP_HANDLE(self->channel)->live_children--;
        Py_INCREF(channel);
        Py_XSETREF(self->channel, channel);
    }
    Py_RETURN_NONE;
}

PyObject *ibp_hand_CMID_set_option(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"optname", "value", NULL};
    int optname;
    PyObject *value_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iO:set_option", keywords, &optname,
                                     &value_obj))
        return NULL;
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
    struct rdma_cm_id *id = cm_enter(self);
    if (id == NULL)
        return NULL;
    errno = 0;
    int rc = rdma_set_option(id, RDMA_OPTION_ID, optname, optval, optlen);
    cm_leave(self);
    if (rc != 0)
        return ibp_raise("rdma_set_option", ibp_error_code(rc));
    Py_RETURN_NONE;
}

PyObject *ibp_hand_CMID__ports(PyObject *self, PyObject *unused)
{
    (void)unused;
    struct rdma_cm_id *id = cm_enter(self);
    if (id == NULL)
        return NULL;
    /* Both return the port in network order (0 when unset). */
    unsigned int src = ntohs(rdma_get_src_port(id));
    unsigned int dst = ntohs(rdma_get_dst_port(id));
    cm_leave(self);
    return Py_BuildValue("(II)", src, dst);
}

static PyObject *CMID_get_closed(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(IBP_HANDLE(op)->ptr == NULL);
}

static PyObject *CMID_get_channel(PyObject *op, void *closure)
{
    (void)closure;
    PyObject *channel = ((struct CMIDObject *)op)->channel;
    return Py_NewRef(channel ? channel : Py_None);
}

static PyObject *CMID_get_qp(PyObject *op, void *closure)
{
    struct CMIDObject *self = (struct CMIDObject *)op;
    (void)closure;
    if (ibp_check_open(op) < 0)
        return NULL;
    cmid_sync_qp(self);
    return Py_NewRef(self->qp ? self->qp : Py_None);
}

static PyObject *CMID_get_pd(PyObject *op, void *closure)
{
    struct CMIDObject *self = (struct CMIDObject *)op;
    (void)closure;
    if (ibp_check_open(op) < 0)
        return NULL;
    cmid_sync_qp(self);
    if (self->qp == NULL)
        Py_RETURN_NONE;
    return PyObject_GetAttrString(self->qp, "pd");
}

static PyObject *CMID_get_context(PyObject *op, void *closure)
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

static PyObject *CMID_get_port_num(PyObject *op, void *closure)
{
    (void)closure;
    if (ibp_check_open(op) < 0)
        return NULL;
    return PyLong_FromLong(CMID_PTR(op)->port_num);
}

static PyObject *CMID_get_ps(PyObject *op, void *closure)
{
    (void)closure;
    if (ibp_check_open(op) < 0)
        return NULL;
    return PyLong_FromLong((long)CMID_PTR(op)->ps);
}

static PyObject *CMID_get_local_addr(PyObject *op, void *closure)
{
    (void)closure;
    if (ibp_check_open(op) < 0)
        return NULL;
    return addr_to_py(rdma_get_local_addr(CMID_PTR(op)));
}

static PyObject *CMID_get_peer_addr(PyObject *op, void *closure)
{
    (void)closure;
    if (ibp_check_open(op) < 0)
        return NULL;
    return addr_to_py(rdma_get_peer_addr(CMID_PTR(op)));
}

static PyGetSetDef CMID_getset[] = {
    {"closed", CMID_get_closed, NULL, "True once close() has run.", NULL},
    {"channel", CMID_get_channel, NULL, "The EventChannel its events arrive on.", NULL},
    {"qp", CMID_get_qp, NULL, "The QP made by create_qp (None when there is none).", NULL},
    {"pd", CMID_get_pd, NULL, "The PD of that QP (None when there is none).", NULL},
    {"context", CMID_get_context, NULL,
     "The device Context librdmacm uses for this ID (cm_id->verbs), borrowed (closing it "
     "never closes the device); None before the ID is bound to a device.", NULL},
    {"port_num", CMID_get_port_num, NULL, "The device port (0 before binding).", NULL},
    {"ps", CMID_get_ps, NULL, "The port space (PortSpace value).", NULL},
    {"local_addr", CMID_get_local_addr, NULL, "(host, port) of the local end, or None.", NULL},
    {"peer_addr", CMID_get_peer_addr, NULL, "(host, port) of the remote end, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *CMID_open_count_get(PyObject *cls, PyObject *unused)
{
    (void)cls;
    (void)unused;
    return PyLong_FromSsize_t(CMID_open_count);
}

static PyObject *cm_handle_enter(PyObject *op, PyObject *unused)
{
    (void)unused;
    if (ibp_check_open(op) < 0)
        return NULL;
    return Py_NewRef(op);
}

static PyObject *CMID_exit(PyObject *op, PyObject *args)
{
    (void)args;
    return CMID_close(op, NULL);
}

static PyMethodDef CMID_methods[] = {
    {"close", CMID_close, METH_NOARGS,
     "close($self, /)\n--\n\nDestroy the rdma_cm_id (rdma_destroy_id); EBUSY while its QP "
     "is open; harmless when already closed."},
    {"__enter__", cm_handle_enter, METH_NOARGS, NULL},
    {"__exit__", CMID_exit, METH_VARARGS, NULL},
    {"_open_count", CMID_open_count_get, METH_NOARGS | METH_CLASS,
     "_open_count($cls, /)\n--\n\nHow many CMID objects of this process are open (leak checks)."},
    CMID_GENERATED_METHODS
    {NULL, NULL, 0, NULL},
};

static PyObject *cm_no_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    (void)type;
    (void)args;
    (void)kwargs;
    PyErr_SetString(PyExc_TypeError, "rdma_cm objects come from create_event_channel() "
                    "and EventChannel.create_id(), not from the class");
    return NULL;
}

static PyObject *CMID_repr(PyObject *op)
{
    if (IBP_HANDLE(op)->ptr == NULL)
        return PyUnicode_FromString("<ibverbs.CMID closed>");
    return PyUnicode_FromFormat("<ibverbs.CMID at %p>", IBP_HANDLE(op)->ptr);
}

static PyType_Slot CMID_slots[] = {
    {Py_tp_doc, (void *)"An rdma_cm identifier (rdma_create_id), the connection manager's "
                        "analogue of a socket."},
    {Py_tp_dealloc, (void *)CMID_dealloc},
    {Py_tp_repr, (void *)CMID_repr},
    {Py_tp_getset, CMID_getset},
    {Py_tp_methods, CMID_methods},
    {Py_tp_new, (void *)cm_no_new},
    {0, NULL},
};

static PyType_Spec CMID_spec = {
    "ibverbs.CMID", sizeof(struct CMIDObject), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, CMID_slots,
};

/* ---- EventChannel ------------------------------------------------------------------ */

static PyObject *EventChannel_wrap(struct rdma_event_channel *channel)
{
    PyObject *op = ibp_handle_new(EventChannel_Type, channel, NULL, NULL, 0);
    if (op == NULL) {
        rdma_destroy_event_channel(channel);
        return NULL;
    }
    EventChannel_open_count++;
    return op;
}

static void EventChannel_destroy(PyObject *op)
{
    if (!ibp_handle_foreign(op))
        rdma_destroy_event_channel(CHANNEL_PTR(op));   /* returns nothing */
    IBP_HANDLE(op)->ptr = NULL;
    EventChannel_open_count--;
    ibp_handle_closed(op);
}

static PyObject *EventChannel_close(PyObject *op, PyObject *unused)
{
    (void)unused;
    if (IBP_HANDLE(op)->ptr == NULL)
        Py_RETURN_NONE;
    if (ibp_check_closable(op, "rdma_destroy_event_channel") < 0)
        return NULL;
    EventChannel_destroy(op);
    Py_RETURN_NONE;
}

static void EventChannel_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    /* Its CMIDs hold references to it, so none is open. */
    if (IBP_HANDLE(op)->ptr != NULL)
        EventChannel_destroy(op);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(op);
    Py_DECREF(type);
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
    struct rdma_event_channel *channel = cm_enter(self);
    if (channel == NULL)
        return NULL;
    struct rdma_cm_id *id = NULL;
    errno = 0;
    int rc = rdma_create_id(channel, &id, NULL, (enum rdma_port_space)ps);
    cm_leave(self);
    if (rc != 0)
        return ibp_raise("rdma_create_id", ibp_error_code(rc));
    return CMID_wrap(id, self);
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
    PyObject *held_qps = cm_qps_hold(self);
    if (held_qps == NULL)
        return NULL;
    struct rdma_event_channel *channel = cm_enter(self);
    if (channel == NULL) {
        cm_qps_release(held_qps);
        return NULL;
    }
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
    cm_leave(self);
    cm_qps_release(held_qps);
    if (rc != 0)
        return ibp_raise("rdma_get_cm_event", ibp_error_code(err ? err : rc));
    PyObject *id_obj = NULL, *listen_obj = NULL, *data_obj = NULL, *param = NULL;
    PyObject *result = NULL;
    if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
        /* A new ID for the incoming connection, on the listener's channel. */
        id_obj = CMID_wrap(id, self);
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

static PyObject *EventChannel_get_closed(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(IBP_HANDLE(op)->ptr == NULL);
}

static PyObject *EventChannel_get_fd(PyObject *op, void *closure)
{
    (void)closure;
    if (ibp_check_open(op) < 0)
        return NULL;
    return PyLong_FromLong(CHANNEL_PTR(op)->fd);
}

static PyGetSetDef EventChannel_getset[] = {
    {"closed", EventChannel_get_closed, NULL, "True once close() has run.", NULL},
    {"fd", EventChannel_get_fd, NULL,
     "The channel's file descriptor, readable when an event is pending (select, "
     "asyncio's add_reader); set it non-blocking for EAGAIN instead of waiting.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyObject *EventChannel_open_count_get(PyObject *cls, PyObject *unused)
{
    (void)cls;
    (void)unused;
    return PyLong_FromSsize_t(EventChannel_open_count);
}

static PyObject *EventChannel_exit(PyObject *op, PyObject *args)
{
    (void)args;
    return EventChannel_close(op, NULL);
}

static PyMethodDef EventChannel_methods[] = {
    {"close", EventChannel_close, METH_NOARGS,
     "close($self, /)\n--\n\nDestroy the channel (rdma_destroy_event_channel); EBUSY while "
     "CMIDs use it; harmless when already closed."},
    {"__enter__", cm_handle_enter, METH_NOARGS, NULL},
    {"__exit__", EventChannel_exit, METH_VARARGS, NULL},
    {"_open_count", EventChannel_open_count_get, METH_NOARGS | METH_CLASS,
     "_open_count($cls, /)\n--\n\nHow many EventChannel objects of this process are open."},
    EVENTCHANNEL_GENERATED_METHODS
    {NULL, NULL, 0, NULL},
};

static PyObject *EventChannel_repr(PyObject *op)
{
    if (IBP_HANDLE(op)->ptr == NULL)
        return PyUnicode_FromString("<ibverbs.EventChannel closed>");
    return PyUnicode_FromFormat("<ibverbs.EventChannel fd=%d>", CHANNEL_PTR(op)->fd);
}

static PyType_Slot EventChannel_slots[] = {
    {Py_tp_doc, (void *)"An rdma_cm event channel (rdma_create_event_channel)."},
    {Py_tp_dealloc, (void *)EventChannel_dealloc},
    {Py_tp_repr, (void *)EventChannel_repr},
    {Py_tp_getset, EventChannel_getset},
    {Py_tp_methods, EventChannel_methods},
    {Py_tp_new, (void *)cm_no_new},
    {0, NULL},
};

static PyType_Spec EventChannel_spec = {
    "ibverbs.EventChannel", sizeof(struct EventChannelObject), 0, Py_TPFLAGS_DEFAULT,
    EventChannel_slots,
};

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

static PyObject *module_set_cmid_class(PyObject *module, PyObject *cls)
{
    (void)module;
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, CMID_Type)) {
        PyErr_SetString(PyExc_TypeError, "_set_cmid_class needs a subclass of the C CMID");
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(cmid_class, (PyTypeObject *)cls);
    Py_RETURN_NONE;
}

static PyMethodDef rdmacm_functions[] = {
    {"_set_cmid_class", module_set_cmid_class, METH_O,
     "_set_cmid_class($module, cls, /)\n--\n\nThe class of the CMIDs made from now on (ibverbs.CMID)."},
    {"_has_rdmacm", ibp_hand_module__rdmacm_available, METH_NOARGS,
     "_has_rdmacm($module, /)\n--\n\nWhether librdmacm.so.1 can be loaded (it is, on first use)."},
    RDMACM_GENERATED_FUNCTIONS
    {NULL, NULL, 0, NULL},
};

int ibp_rdmacm_init(PyObject *module)
{
    struct { PyTypeObject **type; PyType_Spec *spec; const char *name; } types[] = {
        {&EventChannel_Type, &EventChannel_spec, "EventChannel"},
        {&CMID_Type, &CMID_spec, "CMID"},
    };
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        PyObject *type = PyType_FromSpec(types[i].spec);
        if (type == NULL)
            return -1;
        *types[i].type = (PyTypeObject *)type;
        Py_INCREF(type);  /* one for the module, one for the C global */
        if (PyModule_AddObject(module, types[i].name, type) < 0) {
            Py_DECREF(type);
            return -1;
        }
    }
    return PyModule_AddFunctions(module, rdmacm_functions);
}
