/*
 * The extended QP post API around the generated QPEx methods (spec/qpex.yaml):
 * the guard every wr_* method passes first, the two methods that take a
 * list (wr_set_sge_list, wr_set_inline_data_list), the wr_id / wr_flags
 * attributes, and what QP close() and post_send do about an open batch.
 *
 * Why a guard: the ibv_wr_* functions of verbs.h call the provider's
 * function pointers in struct ibv_qp_ex without any check.  A pointer is
 * NULL for an operation the QP was not created for (send_ops_flags), and
 * providers keep the send queue locked between wr_start and wr_complete
 * (rxe takes its spinlock in wr_start): a second wr_start, or a post_send
 * or bind_mw on the same QP in between, would spin for ever with the GIL
 * held.  So the order is enforced here and misuse is a VerbsError.
 */
#include "common.h"

#include "objects.h"

static PyObject *raise_order(const char *name, const char *why)
{
    return ibp_raise_detail(name, EINVAL, "%s: %s", name, why);
}

/* The struct ibv_qp_ex, found once; NULL with VerbsError when the QP was
 * created without the extended post API. */
static struct ibv_qp_ex *qpex_of(PyObject *self, const char *name)
{
    struct QPExObject *q = (struct QPExObject *)self;
    if (q->qpx == NULL && q->has_send_ops)
        q->qpx = ibv_qp_to_qp_ex(QP_PTR(self));
    if (q->qpx == NULL)
        ibp_raise_detail(name, EOPNOTSUPP,
                         "%s: this QP has no extended post API (create it with "
                         "PD.create_qp_ex(..., send_ops_flags=...))", name);
    return q->qpx;
}

int ibp_qpex_guard(PyObject *self, size_t op_offset, const char *name,
                   enum ibp_qpex_step step)
{
    struct QPExObject *q = (struct QPExObject *)self;
    /* The arguments were converted since the method checked: their
     * __index__ may have closed the QP. */
    if (ibp_check_open(self) < 0)
        return -1;
    struct ibv_qp_ex *qpx = qpex_of(self, name);
    if (qpx == NULL)
        return -1;
    int ud = QP_PTR(self)->qp_type == IBV_QPT_UD;
    void *op;
    memcpy(&op, (char *)qpx + op_offset, sizeof(op));
    if (op == NULL) {
        ibp_raise_detail(name, EOPNOTSUPP,
                         "%s: not available on this QP (its operation is not in the "
                         "send_ops_flags it was created with, or the provider lacks it)",
                         name);
        return -1;
    }
    switch (step) {
    case IBP_QPEX_START:
        if (q->in_batch) {
            ibp_raise_detail(name, EBUSY, "%s: a batch is already open: wr_complete() "
                             "or wr_abort() it first", name);
            return -1;
        }
        q->in_batch = 1;
        q->wr_open = 0;
        q->ud_addr_due = 0;
        return 0;
    case IBP_QPEX_END:
        if (!q->in_batch) {
            raise_order(name, "no batch is open: call wr_start() first");
            return -1;
        }
        q->in_batch = 0;     /* over, whatever the provider says */
        q->wr_open = 0;
        if (q->ud_addr_due && op_offset == IBP_QPEX_OP(wr_complete)) {
            q->ud_addr_due = 0;
            ibv_wr_abort(qpx);
            raise_order(name, "the last UD work request has no destination "
                        "(wr_set_ud_addr); the batch was aborted, nothing posted");
            return -1;
        }
        q->ud_addr_due = 0;
        return 0;
    case IBP_QPEX_OP_NEW:
        if (!q->in_batch) {
            raise_order(name, "no batch is open: call wr_start() first");
            return -1;
        }
        if (q->ud_addr_due) {
            raise_order(name, "the previous UD work request has no destination: "
                        "call wr_set_ud_addr() first");
            return -1;
        }
        q->wr_open = 1;
        q->ud_addr_due = ud;
        return 0;
    case IBP_QPEX_SETTER:
        if (!q->in_batch) {
            raise_order(name, "no batch is open: call wr_start() first");
            return -1;
        }
        if (!q->wr_open) {
            raise_order(name, "no work request to set: call an operation "
                        "(wr_send, wr_rdma_write, ...) first");
            return -1;
        }
        if (op_offset == IBP_QPEX_OP(wr_set_ud_addr)) {
            if (!ud) {
                raise_order(name, "only a UD QP takes an address handle");
                return -1;
            }
            q->ud_addr_due = 0;
        }
        return 0;
    }
    return 0;
}

int ibp_qp_send_idle(PyObject *self, const char *what)
{
    /* On every post_send: a plain QP leaves at the first test. */
    if (Py_IS_TYPE(self, QP_Type) || QPEx_Type == NULL || !PyObject_TypeCheck(self, QPEx_Type) ||
        !((struct QPExObject *)self)->in_batch)
        return 0;
    ibp_raise_detail(what, EBUSY, "%s: a wr_start() batch is open on this QP: "
                     "wr_complete() or wr_abort() it first", what);
    return -1;
}

/* QP close() or garbage collection with a batch open: drop the batch, so
 * that the provider releases its send queue before the QP is destroyed.
 * Not while librdmacm may be moving a CM QP (EBUSY, cm_id.c). */
int ibp_qp_before_destroy(struct QPObject *self)
{
    PyObject *op = (PyObject *)self;
    int busy = ibp_rdmacm_qp_destroying(op);
    if (busy != 0)
        return busy;
    if (QPEx_Type != NULL && PyObject_TypeCheck(op, QPEx_Type)) {
        struct QPExObject *q = (struct QPExObject *)op;
        if (q->in_batch && q->qpx != NULL)
            ibv_wr_abort(q->qpx);
        q->in_batch = q->wr_open = 0;
    }
    return 0;
}

/* The items of a list or tuple (a new reference to a tuple or list). */
static PyObject *as_sequence(PyObject *arg, const char *what)
{
    if (PyList_Check(arg) || PyTuple_Check(arg))
        return PySequence_Tuple(arg);    /* a copy: no Python code changes it */
    PyErr_Format(PyExc_TypeError, "%s must be a list or tuple, not %s", what,
                 ibp_type_name(arg));
    return NULL;
}

PyObject *ibp_hand_QPEx_wr_set_sge_list(PyObject *self, PyObject *arg)
{
    PyObject *items = NULL, *result = NULL;
    struct ibv_sge *sges = NULL;
    if (ibp_check_open(self) < 0)
        return NULL;
    if ((items = as_sequence(arg, "sg_list")) == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_Size(items);
    sges = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*sges));
    if (sges == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (ibp_sge_from_py(PyTuple_GetItem(items, i), &sges[i]) < 0)
            goto done;
    if (ibp_qpex_guard(self, IBP_QPEX_OP(wr_set_sge_list), "wr_set_sge_list",
                       IBP_QPEX_SETTER) < 0)
        goto done;
    ibv_wr_set_sge_list(IBP_QPEX(self), (size_t)n, sges);
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(sges);
    Py_DECREF(items);
    return result;
}

PyObject *ibp_hand_QPEx_wr_set_inline_data_list(PyObject *self, PyObject *arg)
{
    PyObject *items = NULL, *copies = NULL, *result = NULL;
    struct ibv_data_buf *bufs = NULL;
    if (ibp_check_open(self) < 0)
        return NULL;
    if ((items = as_sequence(arg, "buffers")) == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_Size(items);
    /* bytes copies: the Limited API of 3.9 has no buffer protocol, and the
     * provider copies the data into the work request at once anyway. */
    copies = PyTuple_New(n);
    bufs = PyMem_Calloc(n ? (size_t)n : 1, sizeof(*bufs));
    if (copies == NULL || bufs == NULL) {
        if (bufs == NULL)
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PyBytes_FromObject(PyTuple_GetItem(items, i));
        if (b == NULL)
            goto done;
        PyTuple_SetItem(copies, i, b);
        bufs[i].addr = PyBytes_AsString(b);
        bufs[i].length = (size_t)PyBytes_Size(b);
    }
    if (ibp_qpex_guard(self, IBP_QPEX_OP(wr_set_inline_data_list),
                       "wr_set_inline_data_list", IBP_QPEX_SETTER) < 0)
        goto done;
    ibv_wr_set_inline_data_list(IBP_QPEX(self), (size_t)n, bufs);
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(bufs);
    Py_XDECREF(copies);
    Py_DECREF(items);
    return result;
}

/* wr_id and wr_flags: fields of struct ibv_qp_ex that the next operation
 * reads (converted by generated/records.h, spec/datapath/records.yaml).
 * Written out once per field, as the generated accessors are: a uint64_t
 * and an unsigned int, each with its own converter. */
static struct ibv_qp_ex *open_qpex(PyObject *self, const char *name)
{
    return ibp_check_open(self) < 0 ? NULL : qpex_of(self, name);
}

PyObject *ibp_hand_QPEx_get_wr_id(PyObject *self, void *closure)
{
    (void)closure;
    struct ibv_qp_ex *qpx = open_qpex(self, "wr_id");
    return qpx ? ibp_qp_ex_wr_id_to_py(qpx->wr_id) : NULL;
}

int ibp_hand_QPEx_set_wr_id(PyObject *self, PyObject *value, void *closure)
{
    uint64_t v;
    struct ibv_qp_ex *qpx;
    (void)closure;
    /* Converted first: the value's __index__ may close the QP. */
    if (ibp_qp_ex_wr_id_from_py(value, &v) < 0 || (qpx = open_qpex(self, "wr_id")) == NULL)
        return -1;
    qpx->wr_id = v;
    return 0;
}

PyObject *ibp_hand_QPEx_get_wr_flags(PyObject *self, void *closure)
{
    (void)closure;
    struct ibv_qp_ex *qpx = open_qpex(self, "wr_flags");
    return qpx ? ibp_qp_ex_wr_flags_to_py(qpx->wr_flags) : NULL;
}

int ibp_hand_QPEx_set_wr_flags(PyObject *self, PyObject *value, void *closure)
{
    unsigned int v;
    struct ibv_qp_ex *qpx;
    (void)closure;
    if (ibp_qp_ex_wr_flags_from_py(value, &v) < 0 || (qpx = open_qpex(self, "wr_flags")) == NULL)
        return -1;
    qpx->wr_flags = v;
    return 0;
}
