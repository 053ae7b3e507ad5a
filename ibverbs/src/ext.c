/*
 * Context.create_rwq_ind_table: the one extended verb of spec/ext.yaml whose
 * argument (a power of two of struct ibv_wq pointers, as an array) the
 * generated verb wrappers do not build.  Its generated wrapper converts the
 * WQs (`handles:WQ`: a tuple of open WQs) and holds each of them busy
 * (spec `holds:`), as ibv_create_rwq_ind_table runs with the GIL released
 * (it enters the kernel, spec/gil.yaml).  The rest of device memory, flows,
 * counters and work queues is generated.
 */
#include "common.h"
#include "objects.h"

PyObject *ibp_hand_Context_create_rwq_ind_table_impl(PyObject *self, PyObject *wqs)
{
    struct ibv_wq **table = NULL;
    PyObject *result = NULL;
    struct ibv_context *context = Context_PTR(self);
    Py_ssize_t n = PyTuple_Size(wqs);
    if (n < 1 || n > (1 << 16) || (n & (n - 1)) != 0) {
        PyErr_Format(PyExc_ValueError,
                     "create_rwq_ind_table: wqs must hold a power of two of WQs "
                     "(1 to 65536), got %zd", n);
        return NULL;
    }
    table = PyMem_Calloc((size_t)n, sizeof(*table));
    if (table == NULL)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        table[i] = WQ_PTR(PyTuple_GetItem(wqs, i));
        if (table[i]->context != context) {
            PyErr_Format(PyExc_ValueError,
                         "create_rwq_ind_table: wqs[%zd] belongs to another context", i);
            goto done;
        }
    }
    struct ibv_rwq_ind_table_init_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.log_ind_tbl_size = (uint32_t)__builtin_ctzll((unsigned long long)n);
    attr.ind_tbl = table;
    struct ibv_rwq_ind_table *ptr;
    int err;
    Py_BEGIN_ALLOW_THREADS
    ibp_test_pause_point();   /* IBVERBS_TEST_HOOKS */
    errno = 0;
    ptr = ibv_create_rwq_ind_table(context, &attr);
    err = errno;
    Py_END_ALLOW_THREADS
    if (ptr == NULL) {
        errno = err;
        ibp_raise("ibv_create_rwq_ind_table", ibp_error_code(0));
        goto done;
    }
    result = RWQIndTable_wrap(ptr, self);
    if (result != NULL)     /* the table refers to the WQs: they live as long as it does */
        ((struct RWQIndTableObject *)result)->wqs = Py_NewRef(wqs);
done:
    PyMem_Free(table);
    return result;
}
