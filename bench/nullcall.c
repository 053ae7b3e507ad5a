/*
 * The interpreter's floor for bench/host_micro.py: the call shapes of the
 * data path (a constructor with positional or keyword arguments, a method
 * with METH_FASTCALL | METH_KEYWORDS, a getset attribute) into C that does
 * nothing.  What an operation costs over its floor is the binding's own
 * work; what the floor costs no binding built the same way can skip.
 *
 *   Null(...)        a GC type like SGE and SendWR (tp_new, a tp_init that
 *                    ignores its arguments, one object slot cleared on
 *                    dealloc): allocation, the argument tuple and kwargs
 *                    dict the interpreter builds for a type call, dealloc
 *   n.nop(...)       a method like post_send and poll; returns None
 *   n.make(...)      the same, returning a new Null (like MR.sge)
 *   n.result(k)      the same, returning a list of k objects made once (as
 *                    poll returns its cached list), each item read with
 *                    PyList_GetItem on the way (k from 0 to 16, converted
 *                    once per int object, as poll's): the Limited API gives no
 *                    cheaper way to look at a list's items, and a list
 *                    handed back again must be looked at (its caller may
 *                    have changed it)
 *   a.attr           an attribute of a type whose tp_getattro returns an int
 *                    (WC's, which answers its hot fields before the generic
 *                    lookup)
 *
 * Built for the target the extension was built for, through its
 * generated/target.h (bench/host_micro.py passes its IBP_TARGET_* macro):
 * its Limited API (3.9's; cp314-abi3's, 3.9's plus 3.14's Py_tp_vectorcall;
 * or 3.15's abi3t with Py_TARGET_ABI3T), as the extension is.  Where the
 * target has vectorcall constructors (IBP_TYPE_VECTORCALL), Null is also
 * called through Py_tp_vectorcall, a do-nothing one (the allocation only),
 * as SGE and SendWR are there.  On abi3t the object head is padded as ours
 * (PyObject is opaque there) and the module is exported as PEP 793 slots.
 */
#include "target.h"
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x03090000
#endif
#include <Python.h>

#ifdef Py_TARGET_ABI3T
/* PyObject is opaque: the head of generated/target.h (IBP_OBJECT_HEAD_SIZE) */
#define NULL_HEAD                                                           \
    union {                                                                 \
        unsigned char bytes[32];                                            \
        void *align_pointer;                                                \
        long long align_integer;                                            \
        double align_double;                                                \
    } head;
#define NULL_ATTR_SIZE 0            /* object's own, inherited */
#else
#define NULL_HEAD PyObject_HEAD
#define NULL_ATTR_SIZE sizeof(PyObject)
#endif
#if IBP_TYPE_VECTORCALL
#define NULL_VECTORCALL 1
#endif

#ifndef METH_FASTCALL
#define METH_FASTCALL 0x0080   /* as ibverbs/src/common.h: hidden by 3.9's limited headers */
#endif

typedef struct {
    NULL_HEAD
    PyObject *slot;
} NullObject;

static PyTypeObject *Null_Type;

static int null_init(PyObject *self, PyObject *args, PyObject *kwargs)
{
    (void)self, (void)args, (void)kwargs;
    return 0;
}

static int null_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(((NullObject *)self)->slot);
    return 0;
}

static int null_clear(PyObject *self)
{
    Py_CLEAR(((NullObject *)self)->slot);
    return 0;
}

static void null_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    null_clear(self);
    ((freefunc)PyType_GetSlot(type, Py_tp_free))(self);
    Py_DECREF(type);
}

static PyObject *null_nop(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    (void)self, (void)args, (void)nargs, (void)kwnames;
    Py_RETURN_NONE;
}

static PyObject *null_make(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    (void)self, (void)args, (void)nargs, (void)kwnames;
    return PyType_GenericAlloc(Null_Type, 0);
}

#define RESULT_MAX 16
static PyObject *results[RESULT_MAX + 1];
static PyObject *last_arg;      /* k converted once per int object, as ours */
static Py_ssize_t last_k;

static PyObject *make_result(PyObject *arg)
{
    Py_ssize_t k = PyLong_AsSsize_t(arg);
    if (k < 0 || k > RESULT_MAX) {
        PyErr_SetString(PyExc_ValueError, "result(k): k from 0 to 16");
        return NULL;
    }
    if (results[k] == NULL) {
        if ((results[k] = PyList_New(k)) == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < k; i++)
            PyList_SetItem(results[k], i, PyLong_FromLong(0));
    }
    Py_INCREF(arg);
    Py_XDECREF(last_arg);
    last_arg = arg;
    last_k = k;
    return results[k];
}

static PyObject *null_result(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    (void)self, (void)kwnames;
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "result(k)");
        return NULL;
    }
    PyObject *l = args[0] == last_arg ? results[last_k] : make_result(args[0]);
    if (l == NULL)
        return NULL;
    for (Py_ssize_t i = 0, k = Py_SIZE(l); i < k; i++)
        if (PyList_GetItem(l, i) == NULL)
            return NULL;
    Py_INCREF(l);
    return l;
}

static PyObject *zero;    /* made once, as WC's small ints are */

static PyObject *null_getattro(PyObject *self, PyObject *name)
{
    (void)self, (void)name;
    Py_INCREF(zero);
    return zero;
}

#ifdef NULL_VECTORCALL
static PyObject *null_vectorcall(PyObject *type, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames)
{
    (void)args, (void)nargsf, (void)kwnames;
    return PyType_GenericAlloc((PyTypeObject *)type, 0);
}
#endif

static PyMethodDef null_methods[] = {
    {"nop", (PyCFunction)(void (*)(void))null_nop, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"make", (PyCFunction)(void (*)(void))null_make, METH_FASTCALL | METH_KEYWORDS, NULL},
    {"result", (PyCFunction)(void (*)(void))null_result, METH_FASTCALL | METH_KEYWORDS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot null_slots[] = {
    {Py_tp_new, (void *)PyType_GenericNew},
    {Py_tp_init, (void *)null_init},
    {Py_tp_dealloc, (void *)null_dealloc},
    {Py_tp_traverse, (void *)null_traverse},
    {Py_tp_clear, (void *)null_clear},
    {Py_tp_methods, null_methods},
#ifdef NULL_VECTORCALL
    {Py_tp_vectorcall, (void *)null_vectorcall},
#endif
    {0, NULL},
};

static PyType_Slot attr_slots[] = {
    {Py_tp_getattro, (void *)null_getattro},
    {0, NULL},
};

static PyType_Spec attr_spec = {
    "_nullcall.NullAttr", NULL_ATTR_SIZE, 0, Py_TPFLAGS_DEFAULT, attr_slots,
};

static PyType_Spec null_spec = {
    "_nullcall.Null", sizeof(NullObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, null_slots,
};

static int nullcall_exec(PyObject *m)
{
    if (zero == NULL && (zero = PyLong_FromLong(0)) == NULL)
        return -1;
    Null_Type = (PyTypeObject *)PyType_FromSpec(&null_spec);
    Py_XINCREF((PyObject *)Null_Type);
    if (Null_Type == NULL || PyModule_AddObject(m, "Null", (PyObject *)Null_Type) < 0)
        return -1;
    PyObject *attr = PyType_FromSpec(&attr_spec);
    if (attr == NULL || PyModule_AddObject(m, "NullAttr", attr) < 0) {
        Py_XDECREF(attr);
        return -1;
    }
    return 0;
}

#ifdef Py_TARGET_ABI3T
PyMODEXPORT_FUNC PyModExport__nullcall(void);

PyMODEXPORT_FUNC PyModExport__nullcall(void)
{
    PyABIInfo_VAR(abi_info);
    static PySlot slots[] = {
        PySlot_DATA(Py_mod_abi, &abi_info),
        PySlot_DATA(Py_mod_name, "_nullcall"),
        PySlot_FUNC(Py_mod_exec, nullcall_exec),
        PySlot_DATA(Py_mod_gil, Py_MOD_GIL_NOT_USED),
        PySlot_END,
    };
    return slots;
}
#else
static struct PyModuleDef nullcall_module = {
    PyModuleDef_HEAD_INIT, "_nullcall", NULL, -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__nullcall(void)
{
    PyObject *m = PyModule_Create(&nullcall_module);
    if (m != NULL && nullcall_exec(m) < 0)
        Py_CLEAR(m);
    return m;
}
#endif
