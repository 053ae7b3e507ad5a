/*
 * What a table of objects keeps of an object that it must not keep alive
 * (the event registry, handles.c; rdma_cm's QP map, cm_id.c), and the object
 * back from it.  The object leaves the table in its dealloc, but a lookup in
 * another thread may meet it after its last reference went and before its
 * dealloc reaches the table: the lookup must then not find it.
 *
 * - A GIL target: a dealloc runs to its end once begun, so an object met
 *   with a count of 0 is one whose dealloc is under way in this very thread
 *   (a lookup from code it runs).  The table keeps the address.
 * - A free-threaded target (IBP_WEAK_TABLES): the table keeps a weak
 *   reference, and PyWeakref_GetRef fails once the dealloc began.  (cp314t
 *   has PyUnstable_TryIncRef for this, abi3t does not: one way for both,
 *   and cp314t's tiers test abi3t's under free threads, which no 3.15 here
 *   has.)  The types kept are weakly referenceable there
 *   (ibp_table_members) and clear their weak references first thing in
 *   their dealloc (ibp_table_leave).
 */
#include "common.h"

#if IBP_WEAK_TABLES
/* Py_tp_members of the types the tables keep: where the weak references
 * to an object are listed (its handle head's own field). */
PyMemberDef ibp_table_members[] = {
    {"__weaklistoffset__", Py_T_PYSSIZET, offsetof(IbvHandle, weakrefs), Py_READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};
#endif

PyObject *ibp_table_entry(PyObject *obj)
{
#if IBP_WEAK_TABLES
    return PyWeakref_NewRef(obj, NULL);
#else
    return PyLong_FromVoidPtr(obj);
#endif
}

PyObject *ibp_table_object(PyObject *entry)
{
#if IBP_WEAK_TABLES
    PyObject *obj = NULL;
    if (PyWeakref_GetRef(entry, &obj) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return obj;
#else
    PyObject *obj = PyLong_AsVoidPtr(entry);
    if (obj == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (Py_REFCNT(obj) <= 0)
        return NULL;
    Py_INCREF(obj);
    return obj;
#endif
}

void ibp_table_leave(PyObject *obj)
{
#if IBP_WEAK_TABLES
    PyObject_ClearWeakRefs(obj);
#else
    (void)obj;
#endif
}
