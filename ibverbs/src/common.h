/*
 * Shared declarations of the _ibverbs extension: the handle object header,
 * error raising and argument conversion.  Hand-written; the generated code
 * in generated/ and the hand-written data path both build on it.
 *
 * The extension is compiled against the CPython Limited API (abi3, 3.9
 * floor) and never links libibverbs: every exported verb is reached through
 * the trampolines of generated/loader.c.h, filled by dlsym at import.
 */
#ifndef IBVERBS_COMMON_H
#define IBVERBS_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Helpers the Limited API only gained after our 3.9 floor. */
#ifndef Py_NewRef
static inline PyObject *ibp_new_ref(PyObject *obj)
{
    Py_INCREF(obj);
    return obj;
}
#define Py_NewRef(obj) ibp_new_ref((PyObject *)(obj))
#endif
#ifndef Py_XSETREF
#define Py_XSETREF(dst, src)                     \
    do {                                         \
        PyObject **_dst = (PyObject **)&(dst);   \
        PyObject *_old = *_dst;                  \
        *_dst = (PyObject *)(src);               \
        Py_XDECREF(_old);                        \
    } while (0)
#endif

/* In the stable ABI since 3.7, but 3.9's headers declare it only outside
 * the Limited API (cpython/pymem.h): without this, C takes it for a
 * function returning int and truncates the pointer it returns. */
#if !defined(Py_LIMITED_API) || Py_LIMITED_API + 0 < 0x030A0000
PyAPI_FUNC(void *) PyMem_Calloc(size_t nelem, size_t elsize);
#endif

/* Before the hidden block below: the pthread functions the header's inline
 * functions call (ibv_create_wq initialises a mutex) are libc's, not ours. */
#include <pthread.h>

/* Everything of rdma-core's header stays inside this shared object: the
 * trampolines carry the exported names, and must not be exported again. */
#pragma GCC visibility push(hidden)
#include <infiniband/verbs.h>
#pragma GCC visibility pop

#define IBP_HIDDEN __attribute__((visibility("hidden")))

/*
 * METH_FASTCALL | METH_KEYWORDS for the one-argument data-path methods
 * that take their argument by keyword too (the seed's qp.post_send(wrs=...),
 * cq.poll(num_entries=...)): METH_VARARGS would build a tuple per call,
 * measured at about 420 more instructions per post_send or empty poll.
 * The flag and its calling convention are in the stable ABI from 3.10
 * (PyMethodDef); CPython 3.7-3.9 have the same value and convention, only
 * the 3.9 limited-API headers do not show them.
 */
#ifndef METH_FASTCALL
#define METH_FASTCALL 0x0080
#endif

/*
 * Every verbs handle object (Context, PD, CQ, QP, ...) starts with this.
 *
 * ptr           the verbs object, NULL once closed.
 * live_children open objects created from this one (or using it, such as a
 *               QP using a CQ); close() refuses with EBUSY while non-zero.
 * busy          threads inside a call on this object with the GIL released;
 *               close() refuses with EBUSY while non-zero, so a blocked
 *               get_cq_event never wakes up on freed memory.
 */
typedef struct {
    PyObject_HEAD
    void *ptr;
    Py_ssize_t live_children;
    Py_ssize_t busy;
} IbvHandle;

#define IBP_HANDLE(o) ((IbvHandle *)(o))

/* ---- errors (errors.c) -------------------------------------------------- */

/* Raise ibverbs.VerbsError(operation, err); returns NULL. */
IBP_HIDDEN PyObject *ibp_raise(const char *operation, int err);
/* Same with a detail message (printf-style). */
IBP_HIDDEN PyObject *ibp_raise_detail(const char *operation, int err,
                                      const char *fmt, ...);
/* The errno of a failed verb: a positive return value wins, else errno,
 * else EIO (some providers fail without setting either). */
IBP_HIDDEN int ibp_error_code(long rc);
/* VerbsError(EBADF) for use after close. */
IBP_HIDDEN PyObject *ibp_raise_closed(PyObject *obj);
/* RuntimeError: the running libibverbs lacks a symbol. */
IBP_HIDDEN PyObject *ibp_raise_unavailable(const char *symbol,
                                           const char *since);
/* ibverbs.CompletionError(wc). */
IBP_HIDDEN PyObject *ibp_raise_completion(PyObject *wc);

/* pymethods.c: a method written in Python (spec `python:`), imported once
 * into *cache and called with self first. */
IBP_HIDDEN PyObject *ibp_call_python(PyObject **cache, const char *module, const char *name,
                                     PyObject *self, PyObject *args, PyObject *kwargs);

/* Borrowed references to the Python-level classes, looked up at import. */
extern IBP_HIDDEN PyObject *ibp_VerbsError;
extern IBP_HIDDEN PyObject *ibp_CompletionError;
extern IBP_HIDDEN PyObject *ibp_GidClass;
IBP_HIDDEN int ibp_errors_init(void);

/* ---- argument conversion (convert.c) ------------------------------------ */

/* A Python int in [0, max] (ValueError outside, TypeError for non-int). */
IBP_HIDDEN int ibp_conv_unsigned(PyObject *obj, const char *name,
                                 uint64_t max, uint64_t *out);
/* A Python int in [min, max]. */
IBP_HIDDEN int ibp_conv_signed(PyObject *obj, const char *name,
                               int64_t min, int64_t max, int64_t *out);
/* A str, returned as a new UTF-8 bytes object (keep it while using *out). */
IBP_HIDDEN PyObject *ibp_conv_str(PyObject *obj, const char *name,
                                  const char **out);
/* 0 when [addr, addr+length) can be read by this process; else ValueError
 * naming what (a raw address a provider would dereference: inline data). */
IBP_HIDDEN int ibp_check_readable(uint64_t addr, uint64_t length, const char *what);
/* A GID: Gid, or 16 bytes-like (bytes, bytearray). */
IBP_HIDDEN int ibp_conv_gid(PyObject *obj, const char *name, union ibv_gid *out);
IBP_HIDDEN PyObject *ibp_gid_to_py(const union ibv_gid *gid);
/* A NUL-terminated char array field as str. */
IBP_HIDDEN PyObject *ibp_chars_to_py(const char *chars, size_t size);
/* Bytes of a fixed-size array field. */
IBP_HIDDEN PyObject *ibp_array_to_py(const void *data, size_t size);
/* An instance of type (exactly or a subclass), not closed; NULL with an
 * exception otherwise.  none_ok allows None (then *out is NULL). */
IBP_HIDDEN int ibp_conv_handle(PyObject *obj, const char *name,
                               PyTypeObject *type, int none_ok,
                               PyObject **out);

/* ---- handle bookkeeping (handles.c) ------------------------------------- */

/* Is it open? Raise VerbsError(EBADF) if not. */
static inline int ibp_check_open(PyObject *obj)
{
    if (IBP_HANDLE(obj)->ptr == NULL) {
        ibp_raise_closed(obj);
        return -1;
    }
    return 0;
}

/* cqex.c: RuntimeError (-1) when cq is a CQEx between start_poll() and
 * end_poll(), whose provider lock a poll/resize would deadlock on. */
IBP_HIDDEN int ibp_cq_check_not_polling(PyObject *cq);

/* close() may go ahead: no live children, no call in flight. */
IBP_HIDDEN int ibp_check_closable(PyObject *obj, const char *verb);
/* A new handle object of type with its parents (NULL entries skipped):
 * takes references to them and counts itself among their children. */
IBP_HIDDEN PyObject *ibp_handle_new(PyTypeObject *type, void *ptr,
                                    PyObject **parent_slots,
                                    PyObject *const *parents, int nparents);
/* The child is gone: uncount it from its parents (references are kept
 * until dealloc so that attributes such as mr.pd keep working). */
IBP_HIDDEN void ibp_handle_release_parents(PyObject *const *parents,
                                           int nparents);
/* Report a failure that cannot be raised (dealloc). */
IBP_HIDDEN void ibp_report_unraisable(PyObject *obj, const char *verb, int err);
/* The type name for messages. */
IBP_HIDDEN const char *ibp_type_name(PyObject *obj);

/* Verbs objects that events name (CQ, QP, SRQ) -> their Python objects.
 * Only touched with the GIL held; an object leaves it when destroyed, so a
 * lookup never returns a freed object. */
IBP_HIDDEN int ibp_registry_add(void *ptr, PyObject *obj);
IBP_HIDDEN void ibp_registry_remove(void *ptr);
/* New reference, or NULL (no exception) when not registered. */
IBP_HIDDEN PyObject *ibp_registry_get(void *ptr);

/* repr() and _asdict() of struct classes, from their field names. */
IBP_HIDDEN PyObject *ibp_repr_fields(PyObject *obj, const char *const *names);
IBP_HIDDEN PyObject *ibp_asdict_fields(PyObject *obj, const char *const *names);

/* Enter/leave a call that releases the GIL on handle obj. */
static inline void ibp_busy_enter(PyObject *obj) { IBP_HANDLE(obj)->busy++; }
static inline void ibp_busy_leave(PyObject *obj) { IBP_HANDLE(obj)->busy--; }

/* Mark a just-wrapped handle as borrowed: its verbs object belongs to
 * another library (librdmacm), so close() and GC never destroy it. */
IBP_HIDDEN int ibp_handle_borrow(PyObject *obj);

/* ---- rdma_cm (cm.c, cm_id.c; librdmacm is dlopen'ed on first use) ------- */

struct rdma_cm_id;
struct sockaddr;
struct sockaddr_storage;
/* Add EventChannel, CMID and the rdma_cm functions to the module. */
IBP_HIDDEN int ibp_rdmacm_init(PyObject *module);
/* qp is about to be destroyed: if a CMID made it, clear that rdma_cm_id's
 * qp (librdmacm modifies id->qp on connection events). */
IBP_HIDDEN void ibp_rdmacm_qp_destroying(PyObject *qp);
/* A new CMID object for id on channel, of the registered Python class
 * (ibverbs.CMID) once there is one; destroys id on failure. */
IBP_HIDDEN PyObject *ibp_cmid_new(struct rdma_cm_id *id, PyObject *channel);
/* The open QPs of the CMIDs on channel, held busy while librdmacm may
 * modify them (a new list), and their release. */
IBP_HIDDEN PyObject *ibp_cm_qps_hold(PyObject *channel);
IBP_HIDDEN void ibp_cm_qps_release(PyObject *held);
/* (host, port) or host -> *out; None gives an unset address (*set = 0)
 * when none_ok.  0, or -1 with an exception. */
IBP_HIDDEN int ibp_cm_conv_addr(PyObject *obj, const char *name, struct sockaddr_storage *out,
                                int none_ok, int *set);
/* (host, port), or None for an unset address (the CMID address getters). */
IBP_HIDDEN PyObject *ibp_sockaddr_to_py(const struct sockaddr *sa);

/* ---- the extended QP post API (qpex.c) ---------------------------------- */

/* The struct ibv_qp_ex of a QPEx object (set by ibp_qpex_guard). */
#define IBP_QPEX(self) (((struct QPExObject *)(self))->qpx)
/* Which provider function pointer a wr_* method calls. */
#define IBP_QPEX_OP(member) offsetof(struct ibv_qp_ex, member)
/* What a wr_* method is, for the order ibp_qpex_guard enforces. */
enum ibp_qpex_step {
    IBP_QPEX_START,     /* wr_start: no batch open */
    IBP_QPEX_END,       /* wr_complete, wr_abort: a batch open */
    IBP_QPEX_OP_NEW,    /* wr_send, wr_rdma_write, ...: a batch open */
    IBP_QPEX_SETTER,    /* wr_set_*: after an operation of this batch */
};
/* 0 when the wr_* method `name` may call the provider's op at op_offset
 * of the QPEx's struct ibv_qp_ex now (and records the step); -1 with
 * VerbsError otherwise. */
IBP_HIDDEN int ibp_qpex_guard(PyObject *self, size_t op_offset, const char *name,
                              enum ibp_qpex_step step);
/* 0 unless self is a QPEx with a batch open (its send queue is taken until
 * wr_complete/wr_abort): then VerbsError EBUSY naming `what`. */
IBP_HIDDEN int ibp_qp_send_idle(PyObject *self, const char *what);
/* An SGE object's struct ibv_sge (datapath.c); -1 with TypeError if obj is
 * not an SGE. */
IBP_HIDDEN int ibp_sge_from_py(PyObject *obj, struct ibv_sge *out);

/* ---- the loaded library (generated/loader.c.h, module.c) ---------------- */

/* dlopen libibverbs.so.1 and fill the slots; ImportError on failure. */
IBP_HIDDEN int ibp_load_library(void);

#endif /* IBVERBS_COMMON_H */
