/*
 * Context.create_rwq_ind_table: the one extended verb of spec/ext.yaml whose
 * argument (an array of struct ibv_wq pointers) the generator does not
 * convert.  The rest of device memory, flows, counters and work queues is
 * generated.
 */
#include "common.h"
#include "objects.h"

PyObject *ibp_hand_Context_create_rwq_ind_table(PyObject *self, PyObject *arg)
{
    struct ibv_wq **table = NULL;
    PyObject *result = NULL;
    if (ibp_check_open(self) < 0)
        return NULL;
    PyObject *wqs = PySequence_Tuple(arg);
    if (wqs == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_Size(wqs);
    if (n < 1 || n > (1 << 16) || (n & (n - 1)) != 0) {
        PyErr_Format(PyExc_ValueError,
                     "create_rwq_ind_table: wqs must hold a power of two of WQs "
                     "(1 to 65536), got %zd", n);
        goto done;
    }
    table = PyMem_Calloc((size_t)n, sizeof(*table));
    if (table == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *wq = PyTuple_GetItem(wqs, i);
        if (!PyObject_TypeCheck(wq, WQ_Type)) {
            PyErr_Format(PyExc_TypeError, "create_rwq_ind_table: wqs[%zd] must be a WQ, not %s",
                         i, ibp_type_name(wq));
            goto done;
        }
        if (ibp_check_open(wq) < 0)
            goto done;
        table[i] = WQ_PTR(wq);
        if (table[i]->context != Context_PTR(self)) {
            PyErr_Format(PyExc_ValueError,
                         "create_rwq_ind_table: wqs[%zd] belongs to another context", i);
            goto done;
        }
    }
    struct ibv_rwq_ind_table_init_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.log_ind_tbl_size = (uint32_t)__builtin_ctzll((unsigned long long)n);
    attr.ind_tbl = table;
    errno = 0;
    struct ibv_rwq_ind_table *ptr = ibv_create_rwq_ind_table(Context_PTR(self), &attr);
    if (ptr == NULL) {
        ibp_raise("ibv_create_rwq_ind_table", ibp_error_code(0));
        goto done;
    }
    result = RWQIndTable_wrap(ptr, self);
    if (result != NULL) {
        /* the table refers to the WQs: they live as long as it does */
        ((struct RWQIndTableObject *)result)->wqs = wqs;
        wqs = NULL;
    }
done:
    PyMem_Free(table);
    Py_XDECREF(wqs);
    return result;
}
