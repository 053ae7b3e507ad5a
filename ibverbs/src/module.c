/*
 * The _ibverbs extension module: loads libibverbs.so.1, registers the
 * generated classes and the hand-written data path.
 *
 * The generated C (the .c.h files of generated/, Argument Clinic style) is included
 * into this translation unit; nothing in generated/ is edited by hand.
 */
#include "common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "objects.h"
#include "loader.c.h"
#include "structs.c.h"
#include "handles.c.h"
#include "module.c.h"

/* The rdma_cm classes, compiled here like the verbs ones; their methods
 * are hand-written in cm.c and cm_id.c. */
#pragma GCC visibility push(hidden)
#include <rdma/rdma_cma.h>
#pragma GCC visibility pop
#include "rdmacm_objects.h"
#include "rdmacm_methods.c.h"

static void *libibverbs;
static int dmabuf_available;

/* By name: a symbol the headers lacked has no slot (older rdma-core). */
static int ibp_symbol_loaded(const char *name)
{
    for (const struct ibp_symbol *s = verbs_symbols; s->name; s++)
        if (strcmp(s->name, name) == 0)
            return *s->slot != NULL;
    return 0;
}

int ibp_load_library(void)
{
    static const struct ibp_library verbs = {
        "IBVERBS_LIBRARY", "libibverbs.so.1", 1, verbs_symbols,
        "ibverbs needs %s, which could not be loaded (%s). Install "
        "rdma-core's verbs library: libibverbs1 on Debian/Ubuntu, "
        "libibverbs (rdma-core) on RHEL/Fedora/SUSE.",
        "%s lacks %s, which ibverbs requires (rdma-core is too old)",
    };
    libibverbs = ibp_load_symbols(&verbs, PyExc_ImportError);
    if (libibverbs == NULL)
        return -1;
    dmabuf_available = ibp_symbol_loaded("ibv_reg_dmabuf_mr");
    return 0;
}

/* ---- hand-written module functions -------------------------------------- */

/* ibv_get_device_list with the GIL released (it reads sysfs), and with
 * guids, each device's GUID (a sysfs read too) into *guids, an array to
 * free(); NULL with errno set when it fails (ENOMEM: no room for *guids). */
static struct ibv_device **device_list(int *n, uint64_t **guids)
{
    struct ibv_device **list;
    int err;
    Py_BEGIN_ALLOW_THREADS
    ibp_test_pause_point();   /* IBVERBS_TEST_HOOKS */
    errno = 0;
    list = ibv_get_device_list(n);
    err = errno;
    if (list != NULL && guids != NULL) {
        /* As it comes (network order read as a host integer), like the
         * seed's Device.guid and DeviceAttr.node_guid (ibv_query_device). */
        *guids = malloc(sizeof(**guids) * (size_t)(*n > 0 ? *n : 1));
        for (int i = 0; *guids != NULL && i < *n; i++)
            (*guids)[i] = ibv_get_device_guid(list[i]);
        if (*guids == NULL) {
            ibv_free_device_list(list);
            list = NULL;
            err = ENOMEM;
        }
    }
    Py_END_ALLOW_THREADS
    errno = err;
    return list;
}

PyObject *ibp_hand_module__device_list(PyObject *module, PyObject *unused)
{
    int n = 0;
    uint64_t *guids = NULL;
    (void)module;
    (void)unused;
    struct ibv_device **list = device_list(&n, &guids);
    /* ENOSYS (no RDMA support in this kernel) too: VerbsError, as the seed
     * raised it; [] would hide why there is nothing to open. */
    if (list == NULL)
        return ibp_raise("ibv_get_device_list", ibp_error_code(0));
    PyObject *result = PyList_New(0);
    for (int i = 0; result != NULL && i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);
        int index = ibv_get_device_index(list[i]);
        PyObject *item = Py_BuildValue("(sKiiI)", name ? name : "", (unsigned long long)guids[i],
                                       index, (int)list[i]->node_type,
                                       (unsigned int)list[i]->transport_type);
        if (item == NULL || PyList_Append(result, item) < 0)
            Py_CLEAR(result);
        Py_XDECREF(item);
    }
    free(guids);
    ibv_free_device_list(list);
    return result;
}

PyObject *ibp_hand_module__open_device(PyObject *module, PyObject *arg)
{
    const char *name;
    int n = 0;
    (void)module;
    PyObject *name_bytes = ibp_conv_str(arg, "name", &name);
    if (name_bytes == NULL)
        return NULL;
    PyObject *result = NULL;
    int err;
    struct ibv_device **list = device_list(&n, NULL);
    if (list == NULL) {
        ibp_raise("ibv_get_device_list", ibp_error_code(0));
        goto done;
    }
    struct ibv_device *device = NULL;
    for (int i = 0; i < n && device == NULL; i++)
        if (strcmp(ibv_get_device_name(list[i]), name) == 0)
            device = list[i];
    if (device == NULL) {
        ibp_raise_detail("ibv_open_device", ENODEV,
                         "ibv_open_device failed: no RDMA device named '%s'", name);
    } else {
        struct ibv_context *ctx;
        /* it enters the kernel (opens the uverbs device): other threads run */
        Py_BEGIN_ALLOW_THREADS
        ibp_test_pause_point();   /* IBVERBS_TEST_HOOKS */
        errno = 0;
        ctx = ibv_open_device(device);
        err = errno;
        Py_END_ALLOW_THREADS
        if (ctx == NULL)
            ibp_raise("ibv_open_device", ibp_error_code(-err));
        else
            result = Context_wrap(ctx);
    }
    ibv_free_device_list(list);
done:
    Py_DECREF(name_bytes);
    return result;
}

PyObject *ibp_hand_module__linked(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(libibverbs != NULL);
}

PyObject *ibp_hand_module__has_dmabuf(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    return PyBool_FromLong(dmabuf_available);
}

PyObject *ibp_hand_module__missing_symbols(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    PyObject *list = PyList_New(0);
    for (const struct ibp_symbol *s = verbs_symbols; list && s->name; s++) {
        if (*s->slot != NULL)
            continue;
        PyObject *name = PyUnicode_FromString(s->name);
        if (name == NULL || PyList_Append(list, name) < 0)
            Py_CLEAR(list);
        Py_XDECREF(name);
    }
    return list;
}

/* Names the seed's extension module had that live in Python modules here,
 * which import this one (so they cannot be imported while it initialises):
 * looked up on first use (PEP 562). */
static const char *const python_names[][2] = {
    {"Device", "ibverbs._device"},
    {"get_device_list", "ibverbs._device"},
    {NULL, NULL},
};

static PyObject *module_getattr(PyObject *module, PyObject *name)
{
    (void)module;
    for (int i = 0; PyUnicode_Check(name) && python_names[i][0] != NULL; i++) {
        if (PyUnicode_CompareWithASCIIString(name, python_names[i][0]) != 0)
            continue;
        PyObject *source = PyImport_ImportModule(python_names[i][1]);
        if (source == NULL)
            return NULL;
        PyObject *value = PyObject_GetAttr(source, name);
        Py_DECREF(source);
        return value;
    }
    PyErr_Format(PyExc_AttributeError, "module 'ibverbs._ibverbs' has no attribute '%U'", name);
    return NULL;
}

/* __all__: every public name, the looked-up ones included, so that
 * `from ibverbs._ibverbs import *` gives what the seed's did and more. */
static int module_set_all(PyObject *module)
{
    PyObject *all = PyList_New(0);
    PyObject *names = all ? PyDict_Keys(PyModule_GetDict(module)) : NULL;
    int rc = names == NULL ? -1 : 0;
    for (Py_ssize_t i = 0; rc == 0 && i < PyList_Size(names); i++) {
        PyObject *key = PyList_GetItem(names, i);
        if (PyUnicode_Check(key) && PyUnicode_GetLength(key) > 0 &&
            PyUnicode_ReadChar(key, 0) != '_')
            rc = PyList_Append(all, key);
    }
    for (int i = 0; rc == 0 && python_names[i][0] != NULL; i++) {
        PyObject *key = PyUnicode_FromString(python_names[i][0]);
        rc = key == NULL ? -1 : PyList_Append(all, key);
        Py_XDECREF(key);
    }
    if (rc == 0)
        rc = PyList_Sort(all);
    if (rc == 0)
        rc = PyModule_AddObject(module, "__all__", all);
    if (rc < 0)
        Py_XDECREF(all);
    Py_XDECREF(names);
    return rc;
}

int ibp_add_type(PyObject *module, const char *name, PyType_Spec *spec, PyTypeObject *base,
                 PyTypeObject **out)
{
    PyObject *type;
    if (base != NULL) {
        PyObject *bases = PyTuple_Pack(1, (PyObject *)base);
        if (bases == NULL)
            return -1;
        type = PyType_FromSpecWithBases(spec, bases);
        Py_DECREF(bases);
    } else {
        type = PyType_FromSpec(spec);
    }
    if (type == NULL)
        return -1;
    *out = (PyTypeObject *)type;
    ibp_keep_forever(type);
    Py_INCREF(type);  /* one for the module, one for the C global */
    if (PyModule_AddObject(module, name, type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

/* PyModule_AddObjectRef joined the Limited API in 3.10. */
static int add_ref(PyObject *module, const char *name, PyObject *value)
{
    Py_INCREF(value);
    if (PyModule_AddObject(module, name, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    return 0;
}

static PyMethodDef module_functions[] = {
    {"__getattr__", module_getattr, METH_O,
     "__getattr__($module, name, /)\n--\n\nDevice and get_device_list, from ibverbs._device."},
    {NULL, NULL, 0, NULL},
};

/* The module's body; generated/module.c.h exports it for the target. */
static int ibp_module_exec(PyObject *module)
{
    if (ibp_load_library() < 0)
        return -1;
    if (PyModule_AddFunctions(module, module_functions) < 0 ||
        PyModule_AddFunctions(module, ibp_generated_functions) < 0 ||
        ibp_errors_init() < 0 ||
        ibp_handles_init() < 0 ||
        ibp_register_generated_types(module) < 0 ||
        ibp_datapath_init(module) < 0 ||
        ibp_rdmacm_init(module) < 0 ||
        ibp_test_hooks_init(module) < 0 ||
        add_ref(module, "VerbsError", ibp_VerbsError) < 0 ||
        add_ref(module, "CompletionError", ibp_CompletionError) < 0 ||
        add_ref(module, "Gid", ibp_GidClass) < 0 ||
        /* which build target (spec/targets/targets.yaml) this module is */
        PyModule_AddStringConstant(module, "_target", IBP_TARGET_NAME) < 0 ||
        /* whether it is built to run without the GIL (cp314t, abi3t on either build) */
        PyModule_AddIntConstant(module, "_free_threaded", IBP_FREE_THREADED) < 0 ||
        /* whether it takes the ways of threads without the GIL: cp314t, and
         * abi3t on a free-threaded build (IBP_NO_GIL) */
        PyModule_AddIntConstant(module, "_no_gil", IBP_NO_GIL) < 0 ||
        module_set_all(module) < 0)
        return -1;
    return 0;
}
