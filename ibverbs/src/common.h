/*
 * Shared declarations of the _ibverbs extension: the handle object header,
 * error raising and argument conversion.  Hand-written; the generated code
 * in generated/ and the hand-written data path both build on it.
 *
 * The extension is compiled for a target of spec/targets/targets.yaml
 * (generated/target.h: the Limited API at the 3.9 floor, or a free-threaded
 * CPython's full API) and never links libibverbs: every exported verb is
 * reached through the trampolines of generated/loader.c.h, filled by dlsym
 * at import.
 */
#ifndef IBVERBS_COMMON_H
#define IBVERBS_COMMON_H

#include "target.h"
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if IBP_FREE_THREADED && !defined(Py_GIL_DISABLED)
#error "target " IBP_TARGET_NAME " is for a free-threaded CPython: these headers are a GIL build's"
#endif
#if !IBP_FREE_THREADED && defined(Py_GIL_DISABLED)
#error "a free-threaded CPython builds the free-threaded target (setup.py picks it)"
#endif

#include <endian.h>
#include <errno.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Helpers the Limited API only gained after our 3.9 floor. */
#ifndef Py_NewRef
static inline PyObject *ibp_new_ref(PyObject *obj) { Py_INCREF(obj); return obj; }
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

/* ---- threads (CONTRIBUTING.md, "Threads") --------------------------------
 * On a free-threaded target (IBP_FREE_THREADED) no GIL puts the threads in
 * turn: every generated entry of a class runs in its object's critical
 * section (IBP_LOCKED: templates/_locked.c.j2), which the interpreter
 * suspends where the GIL would have been released; what other objects'
 * calls change is atomic; what is global is made at import or per thread.
 * On a GIL target each is what it was: a plain load, store or add. */
#if IBP_FREE_THREADED
#define IBP_LOCKED(f) f##__locked
#define IBP_THREAD_LOCAL _Thread_local __attribute__((tls_model("initial-exec")))  /* no ld.so */
typedef PyCriticalSection ibp_lock_t;
typedef PyCriticalSection2 ibp_lock2_t;
/* none where the interpreter holds the GIL after all (abi3t on a GIL build) */
#define ibp_lock(cs, obj) (IBP_NO_GIL ? PyCriticalSection_Begin((cs), (PyObject *)(obj)) : (void)0)
#define ibp_unlock(cs) (IBP_NO_GIL ? PyCriticalSection_End(cs) : (void)0)
#else
#define IBP_LOCKED(f) f
#define IBP_THREAD_LOCAL
typedef struct { char unused; } ibp_lock_t, ibp_lock2_t;
#define ibp_lock(cs, obj) ((void)(cs), (void)(obj))
#define ibp_unlock(cs) ((void)(cs))
#endif
/* The atomics (ibp_atomic_*, ibp_relaxed_*, ibp_acquire_load,
 * ibp_release_store), the mutex of global state (never held while Python
 * code runs) and the tables' references are the target's: generated/target.h. */
typedef IBP_MUTEX ibp_mutex_t;

/* convert.c: *slot = made (a new reference) unless another thread stored one
 * first: the slot's object (borrowed), NULL when made is; read it with
 * ibp_acquire_load.  ibp_memo_take: a one-entry int memo takes obj (1). */
IBP_HIDDEN PyObject *ibp_publish(PyObject **slot, PyObject *made);
/* free-threaded full API: obj immortal (never freed, its count never written) */
IBP_HIDDEN void ibp_keep_forever(PyObject *obj);
IBP_HIDDEN int ibp_memo_take(PyObject **slot, PyObject *obj);

/* METH_FASTCALL | METH_KEYWORDS for the data-path methods that take keywords
 * too (qp.post_send(wrs=...); spec `keywords: true`): METH_VARARGS builds a
 * tuple per call (~420 instructions more per post_send or empty poll).  In
 * the stable ABI from 3.10; 3.9 has the same value and convention, which
 * only its limited-API headers hide. */
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
 * closing       a close() is destroying it with the GIL released (ptr is
 *               NULL meanwhile, yet it is not closed until that returns):
 *               another close() waits for that one's outcome.
 */
typedef struct {
    PyObject_HEAD
    void *ptr;
    Py_ssize_t live_children;
    Py_ssize_t busy;
    int closing;
#if IBP_WEAK_TABLES
    PyObject *weakrefs;     /* a table's weak reference to it (tables.c) */
#endif
} IbvHandle;

#define IBP_HANDLE(o) ((IbvHandle *)(o))

/* ---- errors (errors.c) -------------------------------------------------- */

/* Raise ibverbs.VerbsError(operation, err); returns NULL. */
IBP_HIDDEN PyObject *ibp_raise(const char *operation, int err);
/* Same with a detail message (printf-style). */
IBP_HIDDEN PyObject *ibp_raise_detail(const char *operation, int err,
                                      const char *fmt, ...);
/* VerbsError(operation, err) whose message adds why (an explainer's,
 * explain.c), when why is not empty: "<op> failed: <strerror>: <why>". */
IBP_HIDDEN PyObject *ibp_raise_explained(const char *operation, int err, const char *why);
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
/* The type name for messages (valid until this thread's next call). */
IBP_HIDDEN const char *ibp_type_name(PyObject *obj);
/* getattr(import_module(module), name): a new reference, or NULL. */
IBP_HIDDEN PyObject *ibp_import_attr(const char *module, const char *name);

/* pymethods.c: a method written in Python (spec `python:`), imported once
 * into *cache and called with self first. */
IBP_HIDDEN PyObject *ibp_call_python(PyObject **cache, const char *module, const char *name,
                                     PyObject *self, PyObject *args, PyObject *kwargs);

/* Borrowed references to the Python-level classes, looked up at import. */
extern IBP_HIDDEN PyObject *ibp_VerbsError, *ibp_CompletionError, *ibp_GidClass;
IBP_HIDDEN int ibp_errors_init(void);

/* ---- why a verb failed (explain.c) --------------------------------------
 * Each writes the cause into why[0..len), nonzero when it finds one; a spec
 * `explain:` names them, the generated wrapper calls them after the verb failed. */
#define IBP_WHY_LEN 200
IBP_HIDDEN int ibp_explain_access(char *why, size_t len, int access);
IBP_HIDDEN int ibp_explain_port(char *why, size_t len, struct ibv_context *context, unsigned port);
IBP_HIDDEN int ibp_explain_cq_size(char *why, size_t len, struct ibv_context *context, int cqe);
IBP_HIDDEN int ibp_explain_qp_caps(char *why, size_t len, struct ibv_context *context,
                                   const struct ibv_qp_init_attr *init);
IBP_HIDDEN int ibp_explain_srq_size(char *why, size_t len, struct ibv_context *context,
                                    const struct ibv_srq_init_attr *init);
IBP_HIDDEN int ibp_explain_ah_attr(char *why, size_t len, struct ibv_context *context,
                                   const struct ibv_ah_attr *ah);
IBP_HIDDEN int ibp_explain_modify_qp(char *why, size_t len, struct ibv_qp *qp,
                                     const struct ibv_qp_attr *attr, int mask);
/* A post that failed with err: the QP's state, its queue's size. */
IBP_HIDDEN int ibp_explain_post(char *why, size_t len, PyObject *queue, int send, int err);

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
/* A sequence of open instances of type (`handles:WQ`): a new tuple of
 * them, or NULL with TypeError naming the item (EBADF for a closed one). */
IBP_HIDDEN PyObject *ibp_conv_handles(PyObject *obj, const char *name, PyTypeObject *type);

/* The items packed after a variable-length struct (`packed_items:`,
 * generator/rules.py: ibv_flow_attr's specs): 1 when, after head_size bytes,
 * exactly count items fill len bytes, each a 32-bit kind (at kind_offset)
 * and its own 16-bit size (at size_offset), at least its header, inside the
 * buffer, and at least its kind's struct (kind less kind_flags, in kinds);
 * 0 otherwise.  What the verb walks by the items' sizes, unbounded. */
struct ibp_packed_kind {
    uint32_t kind;
    size_t size;
};
IBP_HIDDEN int ibp_packed_items_ok(const char *data, Py_ssize_t len, size_t head_size,
                                   unsigned count, size_t kind_offset, size_t size_offset,
                                   const struct ibp_packed_kind *kinds, size_t nkinds,
                                   uint32_t kind_flags);

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

/* The verbs (or librdmacm) object of an open handle; NULL with EBADF when
 * closed. */
static inline void *ibp_open_ptr(PyObject *obj)
{
    return ibp_check_open(obj) < 0 ? NULL : IBP_HANDLE(obj)->ptr;
}

/* What a closed object's entry returns (spec entries, generator/entries.py:
 * the provider functions a short way calls); no provider returns it.  The
 * entry records the object in ibp_entry_closed, so that the short way can
 * take the long way without keeping the object across the call. */
#define IBP_ENTRY_CLOSED INT_MIN
extern IBP_HIDDEN IBP_THREAD_LOCAL PyObject *ibp_entry_closed;   /* borrowed; read right after */

/* None for the short ways' returns, without counting the reference: 3.12+
 * never changes an immortal's count (PEP 683); on 3.9-3.11 ibp_none_pool()
 * gives None 2**61 references at import, each return draws one (73 years at
 * a billion a second).  Py_INCREF would cost more on 3.12+: the abi3 build's
 * adds 1 to all 64 bits, so None looks mortal to the interpreter's Py_DECREF
 * (post_recv 4 instructions more on 3.13, bench/host_micro.py). */
static inline PyObject *ibp_none(void)
{
#if SIZEOF_VOID_P >= 8
    return Py_None;
#else
    Py_INCREF(Py_None);     /* no pool: a 32-bit count has no room for one */
    return Py_None;
#endif
}
/* datapath.c: the pool of ibp_none() (module init; once per process). */
IBP_HIDDEN void ibp_none_pool(void);

/* cqex.c: RuntimeError (-1) when cq is a CQEx between start_poll() and
 * end_poll(), whose provider lock a poll/resize would deadlock on. */
IBP_HIDDEN int ibp_cq_check_not_polling(PyObject *cq);
/* Provider locks (spec cq_locks:, generator/cq_locks.py): the first of the
 * n CQs (NULL entries skipped) that is a CQEx mid-poll, whose lock a verb
 * taking it would deadlock on; NULL when none (no exception). */
IBP_HIDDEN PyObject *ibp_cq_locked(PyObject *const *cqs, int n);
/* -1 with VerbsError EBUSY naming the cause when ibp_cq_locked finds one. */
IBP_HIDDEN int ibp_refuse_cq_locked(PyObject *obj, const char *verb,
                                    PyObject *const *cqs, int n);
/* The `when` of cq_locks: the modifies that take the CQ lock (mlx5). */
IBP_HIDDEN int ibp_qp_modify_to_reset(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
IBP_HIDDEN int ibp_wq_modify_takes_cq_lock(struct ibv_wq *wq, struct ibv_wq_attr *attr);

/* A close() that destroys with the GIL released brackets it with these;
 * a close() of an object being closed waits (GIL released) until it ends,
 * so that it reports the real outcome, never success before the object is
 * closed (or while its destroy may still fail and leave it open). */
IBP_HIDDEN void ibp_close_begin(PyObject *obj);
IBP_HIDDEN void ibp_close_end(PyObject *obj);
IBP_HIDDEN void ibp_close_wait(PyObject *obj);
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

/* tables.c: what a table keeps of an object, not keeping it alive; the
 * object back (a new reference; NULL, no exception, once its dealloc began);
 * ibp_table_leave, first thing in the kept object's dealloc. */
IBP_HIDDEN PyObject *ibp_table_entry(PyObject *obj);
IBP_HIDDEN PyObject *ibp_table_object(PyObject *entry);
IBP_HIDDEN void ibp_table_leave(PyObject *obj);
#if IBP_WEAK_TABLES
extern IBP_HIDDEN PyMemberDef ibp_table_members[];
#endif

/* Verbs objects that events name (CQ, QP, SRQ, CM ID) -> their Python
 * objects (free-threaded, each step in its dict's critical section); an
 * object leaves it when destroyed (a dealloc begun: ibp_table_object
 * fails), so a lookup never returns a freed object.  An object is found
 * by the token add() writes into its verbs object's user context field
 * (cq_context, qp_context, srq_context, rdma_cm_id's context), which an
 * event reader copies before acknowledging the event: a new object at a
 * freed one's address never receives the freed one's events. */
IBP_HIDDEN int ibp_registry_add(void *ptr, PyObject *obj);
IBP_HIDDEN void ibp_registry_remove(void *ptr);
/* The object whose token is that context value: a new reference, or NULL
 * (no exception) when none is registered any more. */
IBP_HIDDEN PyObject *ibp_registry_find(const void *token);
/* A token for ptr before its object exists (GIL released allowed; the same
 * one again while reserved): ibp_registry_add(ptr) later registers the
 * object under it.  0 when out of memory. */
IBP_HIDDEN uint64_t ibp_registry_reserve(void *ptr);
/* Whether ptr has a reservation: its token, and whether an object took it
 * (it stays until that object leaves the registry). */
IBP_HIDDEN int ibp_registry_reservation(void *ptr, uint64_t *token, int *wrapped);
IBP_HIDDEN int ibp_handles_init(void);    /* handles.c's maps, made at import */
/* Adds the test hooks (_registry_alias, _test_pause) when IBVERBS_TEST_HOOKS=1. */
IBP_HIDDEN int ibp_test_hooks_init(PyObject *module);
/* Whether IBVERBS_TEST_HOOKS=1 was set at import (other files add hooks of their own). */
IBP_HIDDEN int ibp_test_hooks_enabled(void);

/* repr() and _asdict() of struct classes, from their field names. */
IBP_HIDDEN PyObject *ibp_repr_fields(PyObject *obj, const char *const *names);
IBP_HIDDEN PyObject *ibp_asdict_fields(PyObject *obj, const char *const *names);

/* Enter/leave a call on handle obj: busy, close() says EBUSY meanwhile.
 * ibp_busy_enter is for obj's own calls, in its critical section (its
 * entries'); ibp_busy_hold for another object, which it counts in that
 * object's critical section: so a close(), which checks the count in it,
 * either sees the hold or is over (ptr NULL) before the hold counts. */
static inline void ibp_busy_enter(PyObject *obj) { ibp_atomic_add(&IBP_HANDLE(obj)->busy, 1); }
static inline void ibp_busy_leave(PyObject *obj) { ibp_atomic_add(&IBP_HANDLE(obj)->busy, -1); }
static inline void ibp_busy_hold(PyObject *obj)
{
    ibp_lock_t cs;
    ibp_lock(&cs, obj);
    ibp_busy_enter(obj);
    ibp_unlock(&cs);
}

/* Mark a just-wrapped handle as borrowed: its verbs object belongs to
 * another library (librdmacm), so close() and GC never destroy it. */
IBP_HIDDEN int ibp_handle_borrow(PyObject *obj);
/* 1 when obj's verbs object is not this process's (made before fork(), or
 * borrowed): close() and GC forget it without destroying it. */
IBP_HIDDEN int ibp_handle_foreign(PyObject *obj);
/* obj was closed: forget where it was made. */
IBP_HIDDEN void ibp_handle_closed(PyObject *obj);
/* Calls in flight (see handles.c): a method call holds its object busy from
 * entry to return; -1 with VerbsError EBADF for a parent's object after fork(). */
extern IBP_HIDDEN int ibp_forked;    /* this process is a fork() child */
IBP_HIDDEN int ibp_call_enter_forked(PyObject *self);
/* Inline: every generated method and the data path's calls enter and leave. */
static inline int ibp_call_enter(PyObject *self)
{
    if (ibp_forked)
        return ibp_call_enter_forked(self);
    ibp_busy_enter(self);
    return 0;
}

static inline void ibp_call_leave(PyObject *self)
{
    ibp_busy_leave(self);
}
/* A generated verb's holds (generator/emit.py, from the spec): obj, when it
 * is an instance of type (any handle when type is NULL; NULL obj: none),
 * referenced and in flight until ibp_unhold(*held); *held stays NULL when
 * not held.  -1 with VerbsError EBADF for a parent's object after fork(). */
IBP_HIDDEN int ibp_hold(PyObject *obj, PyTypeObject *type, PyObject **held);
IBP_HIDDEN void ibp_unhold(PyObject *held);
/* The same for each handle of a tuple (ibp_conv_handles's), until
 * ibp_unhold_each(*held). */
IBP_HIDDEN int ibp_hold_each(PyObject *tuple, PyObject **held);
IBP_HIDDEN void ibp_unhold_each(PyObject *held);
/* Tests only (IBVERBS_TEST_HOOKS=1, handles.c): a call with the GIL
 * released stops here while a test says so (_test_pause). */
extern IBP_HIDDEN volatile int ibp_test_pausing;
IBP_HIDDEN void ibp_test_pause(void);
static inline void ibp_test_pause_point(void)
{
    if (ibp_relaxed_load(&ibp_test_pausing))
        ibp_test_pause();
}

/* ---- rdma_cm (cm.c, cm_id.c, cm_addr.c; librdmacm dlopen'ed on first use) */

struct rdma_cm_id;
struct sockaddr;
struct sockaddr_storage;
/* qp is about to be destroyed: 0, or EBUSY when a CMID made it and
 * librdmacm may be using it in another thread (a call on the CMID's
 * channel in flight).  The CMID lets go of it once the destroy succeeded. */
IBP_HIDDEN int ibp_rdmacm_qp_destroying(PyObject *qp);
/* A new CMID object for id on channel, of the registered Python class
 * (ibverbs.CMID) once there is one; destroys id on failure. */
IBP_HIDDEN PyObject *ibp_cmid_new(struct rdma_cm_id *id, PyObject *channel);
/* The CMIDs on channel let go of the QPs closed since (before librdmacm
 * reads their id->qp in rdma_get_cm_event): 0, or -1 with an exception. */
IBP_HIDDEN int ibp_cm_channel_sync(PyObject *channel);
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
/* An SGE object's struct ibv_sge (sge.c); -1 with TypeError if obj is
 * not an SGE. */
IBP_HIDDEN int ibp_sge_from_py(PyObject *obj, struct ibv_sge *out);
IBP_HIDDEN uint64_t ibp_sge_read(PyObject *sge, struct ibv_sge *out);   /* value, stamp */

/* ---- the data path (datapath.c, sge.c, wr.c, post.c, postlist.c, ---------
 * ----- postlist_entry.c, wc.c, wcbuffer.c, events.c) ----------------------- */

/* What the generated converters of generated/records.h call. */
/* A Python int in [0, max] for a setter (AttributeError for deletion;
 * convert.c).  Every data-path setter starts with it: link-time
 * optimisation inlines it there (setup.py). */
IBP_HIDDEN int ibp_conv_u64(PyObject *v, const char *name, uint64_t max, uint64_t *out);
/* A small int from a cache made once (counts, statuses, opcodes; wc.c). */
IBP_HIDDEN PyObject *ibp_count_result(long n);

/* A PostList's entries (its PostListObject, in records.h, points to them). */
enum { PL_SEND, PL_RECV };

struct pl_entry {
    int sge_room;        /* SGEs this entry has room for */
    PyObject *ah;        /* the AH of a UD send, or NULL */
    PyObject *owners;    /* tuple of what the SGEs keep alive, or NULL */
};

/*
 * A work request kept from its last post (SendWR and RecvWR keep one, wr.c): a post sends it as
 * it is while what it was built from is what the objects say now.  That is checked at each post,
 * never told: no mutation path has to invalidate anything.  A SendWR's own fields carry a stamp
 * (taken after every store), and the kept request the stamp it was built from; the list is
 * compared item by item: its length, and each item's stamp against the one kept.  Stamps come
 * from one counter (ibp_next_stamp), so equal stamps mean the same object in the same state (a
 * new object at a freed one's address has a new stamp), and an SGE's stamp stands for the whole
 * of its C value.  The list needs no identity: whichever list the request holds now, its items
 * are what is compared. n is at least 1 when something is kept (an empty list is not kept): 0, as
 * a new object has it, keeps nothing.  A fork() child keeps nothing and matches nothing (its
 * ibp_kept_sge_type is NULL), which is what lets post.c's short way skip the fork check.
 */
#define IBP_CACHED_SGES 4
struct ibp_sge_cache {
    Py_ssize_t n;                           /* the list's length when kept; 0: nothing kept */
    uint64_t stamp;                         /* SendWR: its stamp when kept */
    uint64_t sge_stamp[IBP_CACHED_SGES];    /* each SGE's stamp when kept */
    struct ibv_sge sge[IBP_CACHED_SGES];    /* their values: the kept request's SGEs */
};
/* SGE_Type once a request was kept, NULL in a fork() child (handles.c). */
extern IBP_HIDDEN PyTypeObject *ibp_kept_sge_type;
/* The last stamp taken; 0 is no object's (a new one has stamp 0 until its
 * first store, and nothing is kept from it).  On a free-threaded target
 * each thread takes its stamps from a block of its own, which it takes
 * from the one counter when it has used it up: stamps stay unique in the
 * process, and setters in parallel threads share no cache line. */
#if IBP_FREE_THREADED
#define IBP_STAMP_BLOCK 4096
extern IBP_HIDDEN IBP_THREAD_LOCAL uint64_t ibp_stamp, ibp_stamp_end;
IBP_HIDDEN uint64_t ibp_stamp_new_block(void);
static inline uint64_t ibp_next_stamp(void)
{
    if (__builtin_expect(ibp_stamp == ibp_stamp_end, 0))
        return ibp_stamp_new_block();
    return ++ibp_stamp;
}
#else
extern IBP_HIDDEN uint64_t ibp_stamp;
static inline uint64_t ibp_next_stamp(void)
{
    return ++ibp_stamp;
}
#endif

/* ---- enum members (convert.c) ---------------------------------------------
 * A getter of an enum or flag field (generator/enum_fields.py) returns a
 * member of its class (ibverbs.enums): below IBP_ENUM_TABLE_LEN the one made
 * first, from a table (no enum machinery on a completion loop), above made
 * each time; no member of an IntEnum (a newer status): a plain int.  Class
 * indexes (IBP_ENUM_<Class>) and names (IBP_ENUM_NAMES): records.h. */
#define IBP_ENUM_TABLE_LEN 64
struct ibp_enum_table {
    PyObject *cls;                                  /* NULL until first used */
    PyObject *members[IBP_ENUM_TABLE_LEN];
};
extern IBP_HIDDEN struct ibp_enum_table ibp_enum_tables[];
IBP_HIDDEN PyObject *ibp_enum_make(int which, unsigned long long bits, int is_signed);
static inline PyObject *ibp_enum_member(int which, unsigned long long bits, int is_signed)
{
    PyObject *member = bits < IBP_ENUM_TABLE_LEN ? ibp_acquire_load(&ibp_enum_tables[which].members[bits]) : NULL;
    return member != NULL ? Py_NewRef(member) : ibp_enum_make(which, bits, is_signed);
}
/* 0 when value may stand for a member of class which (an int, one of its
 * members); -1 with TypeError naming `what` for another enum's (WCOpcode.SEND). */
IBP_HIDDEN int ibp_enum_check(int which, PyObject *value, const char *what);

/* The runtime of the generated parsers (convert.c; generator/emit.py and
 * templates/record_type.c.h.j2 emit the structs): each argument by position
 * or keyword into out[] (NULL where not given), or TypeError with
 * PyArg_ParseTupleAndKeywords's messages.  A METH_FASTCALL parser takes a
 * call with its arguments by position inline and hands any other here. */
#define IBP_KWNAMES_MEMO 16     /* keywords of a call ibp_unpack_vector remembers */
struct ibp_parser {
    const char *fname;
    const char *const *names;   /* NULL-terminated */
    int nrequired;
    int nkwonly;                /* the last nkwonly names: by keyword only */
    int n;                      /* these two: set on first use */
    PyObject **interned;
#if IBP_TYPE_VECTORCALL && (!IBP_FREE_THREADED || IBP_OPAQUE_OBJECT)
    /* ibp_unpack_vector's memo (records.h) of the last call's keywords: a
     * call site's kwnames is one constant tuple, so a call that hands the
     * same one again finds each keyword's position here (kwpos[k]), without
     * reading the tuple.  The reference keeps the tuple, so its address
     * names it.  Only where the GIL is held (IBP_NO_GIL: abi3t reads it). */
    PyObject *kwnames;
    unsigned char kwpos[IBP_KWNAMES_MEMO];
#endif
};

/* The data-path objects (SGE, SendWR, RecvWR, PostList, PostListEntry, WC,
 * WCBuffer, AsyncEvent) and the converters of the C struct fields they
 * show, from spec/datapath/records.yaml; their accessors and type shells
 * are each type's generated/<type>.c.h, included by the type's file. */
#include "records.h"

#define PL_SEND_WR(pl, i) (&((struct ibv_send_wr *)(pl)->wrs)[i])
#define PL_RECV_WR(pl, i) (&((struct ibv_recv_wr *)(pl)->wrs)[i])

/* RuntimeError (-1) while a release_gil post of pl is in flight. */
static inline int ibp_pl_frozen(PostListObject *pl)
{
    if (pl->posting) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the PostList is being posted (release_gil=True); update it after");
        return -1;
    }
    return 0;
}

static inline const char *ibp_pl_what(const PostListObject *pl)
{
    return pl->kind == PL_SEND ? "SendWR" : "RecvWR";
}

/* The work requests of one post: a single request, or any iterable of them
 * (as the seed took).  An exact list or tuple is read in place, with
 * borrowed items: no Python code runs while a chain is built, so it cannot
 * change under us.  Anything else (subclasses, generators) is copied into a
 * tuple first, as it may run code when iterated.  Empty: n == 0. */
struct wr_seq {
    PyObject *one;      /* the single request, or NULL */
    PyObject *seq;      /* the list or tuple read, or NULL */
    PyObject *owned;    /* a tuple copy to release, or NULL */
    int is_list;
    Py_ssize_t n;
    Py_ssize_t nsge;    /* SGEs of all the requests */
};

enum post_target { POST_SEND, POST_RECV, POST_SRQ_RECV };

/* SGEs in an sg_list slot (NULL or a list). */
static inline Py_ssize_t ibp_sg_count(PyObject *list)
{
    return list != NULL ? PyList_Size(list) : 0;
}

static inline PyObject *ibp_wr_seq_item(const struct wr_seq *s, Py_ssize_t i)
{
    if (s->one != NULL)
        return s->one;
    return s->is_list ? PyList_GetItem(s->seq, i) : PyTuple_GetItem(s->seq, i);
}

/* PyLong_Check, without a call for an exact int: the Limited API's asks
 * PyType_GetFlags every time (some 10 instructions per field converted). */
static inline int ibp_long_check(PyObject *v)
{
    return PyLong_CheckExact(v) || PyLong_Check(v);
}

/* tp_dealloc of an object without references to drop (or after dropping them). */
static inline void ibp_generic_dealloc(PyObject *op)
{
    PyTypeObject *type = Py_TYPE(op);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(op);
    Py_DECREF(type);
}

IBP_HIDDEN int ibp_unpack_fastcall(struct ibp_parser *p, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames, PyObject **out);

IBP_HIDDEN int ibp_unpack_tuple(struct ibp_parser *p, PyObject *args, PyObject *kwargs,
                                PyObject **out);

/* An int in 1..INT32_MAX (poll's num_entries, spec `convert: positive_int`).
 * A polling loop passes the same int object every time: the last exact int
 * converted is remembered (anything else, IntEnum or __index__, takes the
 * general conversion, which words the errors), with its value, which
 * CQ.poll's short way (wc.c) takes when given that object. */
IBP_HIDDEN int ibp_conv_positive_int(PyObject *arg, const char *name, int *out);
struct ibp_int_memo {
    PyObject *obj;
    int value;
};
extern IBP_HIDDEN IBP_THREAD_LOCAL struct ibp_int_memo ibp_positive_int_memo;   /* per thread: ibp_memo_take */

/* The data-path types (generated/records.h), made at import (datapath.c). */
IBP_HIDDEN int ibp_datapath_init(PyObject *module);
/* Make a class from spec (deriving from base when not NULL) into *out, add it
 * to the module as name (module.c; every generated and hand-written class). */
IBP_HIDDEN int ibp_add_type(PyObject *module, const char *name, PyType_Spec *spec,
                            PyTypeObject *base, PyTypeObject **out);
/* What each file prepares at import before its types are made. */
IBP_HIDDEN int ibp_wc_init(void);
/* wc.c's test hooks (_poll_fault), with IBVERBS_TEST_HOOKS=1 only. */
IBP_HIDDEN int ibp_wc_test_hooks_init(PyObject *module);

/* wr.c: work requests into C, for a post or a PostList. */
IBP_HIDDEN int ibp_wr_seq_init(struct wr_seq *s, PyObject *arg, PyTypeObject *type,
                               const char *what);
IBP_HIDDEN void ibp_wr_seq_done(struct wr_seq *s);
/* TypeError "item <i> must be a <what>, not <type>"; -1. */
IBP_HIDDEN int ibp_bad_wr_item(Py_ssize_t i, const char *what, PyObject *item);
IBP_HIDDEN int ibp_check_inline_sges(const struct ibv_send_wr *wr);
/* A BIND_MW's bind_info copied in its critical section with its MR (new
 * reference or NULL), the one its post holds whatever is set there since. */
struct ibp_bind_snapshot { PyObject *info, *mr; struct ibv_mw_bind_info c; };
IBP_HIDDEN int ibp_bind_snapshot_take(PyObject *info, struct ibp_bind_snapshot *b);
/* A request into *wr, its SGEs into wr->sg_list (room for `room`), a BIND_MW's
 * bind_info from *bind: 0, 1 when the SGEs do not fit (nothing raised), -1. */
IBP_HIDDEN int ibp_send_wr_fill(SendWRObject *w, PyObject *sg_list, struct ibv_send_wr *wr,
                                Py_ssize_t room, struct ibp_bind_snapshot *bind);
IBP_HIDDEN int ibp_recv_wr_fill(RecvWRObject *w, PyObject *sg_list,
                                struct ibv_recv_wr *wr, Py_ssize_t room);

/* Item i of list (a list, i in range), read in place: PyList_GetItem is a
 * call and a type check, per SGE per post.  Only where something is kept:
 * nothing is unless wr.c's list_layout_checked() found the item array
 * where this reads it, in this interpreter. */
static inline PyObject *ibp_list_item(PyObject *list, Py_ssize_t i)
{
    return (*(PyObject ***)((char *)list + IBP_VAR_HEAD_SIZE))[i];
}

/* Whether list holds what c kept: as many items, each an SGE with the
 * stamp kept.  Only called where c->epoch is current (something kept: the
 * list layout was checked then). */
static inline int ibp_kept_sge_matches(PyObject *item, uint64_t stamp)
{
    /* read without the SGE's lock: its setters store the stamp last, with
     * release (ibp_SGE_changed), and a kept value is never the SGE's own */
    return Py_TYPE(item) == ibp_relaxed_load(&ibp_kept_sge_type)
           && ibp_acquire_load(&((SGEObject *)item)->stamp) == stamp;
}

/* Whether list holds what c kept: as many items, each an SGE with the
 * stamp kept. */
static inline int ibp_kept_list_matches(const struct ibp_sge_cache *c, PyObject *list)
{
    if (list == NULL)
        return 0;
    /* one SGE, the common request, without a loop */
    if (__builtin_expect(c->n == 1, 1))
        return Py_SIZE(list) == 1 && ibp_kept_sge_matches(ibp_list_item(list, 0), c->sge_stamp[0]);
    if (c->n < 2 || Py_SIZE(list) != c->n)
        return 0;
    for (Py_ssize_t i = 0; i < c->n; i++)
        if (!ibp_kept_sge_matches(ibp_list_item(list, i), c->sge_stamp[i]))
            return 0;
    return 1;
}

/* Whether a request's own C request is what a post of it sends now: kept
 * by a post, built from the request's fields as they are (SendWR: its
 * stamp) and from SGEs that are its list's now. */
static inline int ibp_send_wr_kept(const SendWRObject *w)
{
    return w->sges.stamp == w->stamp && ibp_kept_list_matches(&w->sges, w->sg_list);
}

static inline int ibp_recv_wr_kept(const RecvWRObject *w)
{
    return ibp_kept_list_matches(&w->sges, w->sg_list);
}

/* A request read for a post in one critical section with its SGE list (wr.c;
 * free-threaded target only); SGEs are then read by their stamps (sge.c). */
struct ibp_wr_lock {
    ibp_lock_t request;     /* a request without a list */
    ibp_lock2_t both;       /* a request with its list */
    PyObject *sg_list;      /* the list locked (a reference), or NULL */
};
#if IBP_FREE_THREADED
IBP_HIDDEN void ibp_wr_lock(struct ibp_wr_lock *l, PyObject *w);
IBP_HIDDEN void ibp_wr_unlock(struct ibp_wr_lock *l);
#else
#define ibp_wr_lock(l, w) ((void)(l), (void)(w))
#define ibp_wr_unlock(l) ((void)(l))
#endif
/* wr.c: post.c's send_wr_lock_hold with other threads; a request's SGE count, in its lock */
IBP_HIDDEN int ibp_send_wr_lock_hold_threads(struct ibp_wr_lock *l, SendWRObject *w, PyObject **held,
                                             struct ibp_bind_snapshot *bind);
IBP_HIDDEN Py_ssize_t ibp_wr_sg_count(PyObject *w);

/* A kept SendWR into *wr: the request it keeps, its wr_id; not next. */
IBP_HIDDEN void ibp_send_wr_copy_kept(const SendWRObject *w, struct ibv_send_wr *wr);

/* VerbsError(rc) of a failed post to queue (a QP, SRQ or WQ), naming the
 * request and, where the provider's answer allows, the cause. */
IBP_HIDDEN PyObject *ibp_post_failed(PyObject *queue, const char *verb, int rc, Py_ssize_t index,
                                     uint64_t wr_id);
IBP_HIDDEN int ibp_check_ah_fits_qp(PyObject *qp, PyObject *ah, Py_ssize_t index);

/* postlist.c */
IBP_HIDDEN PyObject *ibp_postlist_post(PyObject *self, PyObject *list, enum post_target target);

/* wc.c: a WC's struct ibv_wc; -1 with TypeError if obj is not a WC. */
IBP_HIDDEN int ibp_wc_to_c(PyObject *obj, struct ibv_wc *out);
/* A WC object holding a copy of *wc (from the free list when it can). */
IBP_HIDDEN PyObject *ibp_wc_new(const struct ibv_wc *wc);

/* ---- the dlopen'ed libraries (loader.c, module.c, cm.c) ----------------- */

/* A generated symbol table's entry (loader.c.h, rdmacm_loader.c.h): the slot its trampoline calls. */
struct ibp_symbol {
    const char *name;
    void **slot;
    const char *since;   /* NULL: required */
};

/* A library to load: where, how, and the words of its two failures (printf
 * formats: the path, then dlerror()'s text or the required symbol it lacks). */
struct ibp_library {
    const char *env;          /* environment variable naming another path */
    const char *soname;       /* the default */
    int global;               /* RTLD_GLOBAL, else RTLD_LOCAL */
    const struct ibp_symbol *symbols;
    const char *cannot_load;
    const char *lacks;
};

/* dlopen lib and fill its slots: the handle, or NULL with `error` raised, no slot filled. */
IBP_HIDDEN void *ibp_load_symbols(const struct ibp_library *lib, PyObject *error);
/* dlopen libibverbs.so.1 and fill the slots; ImportError on failure. */
IBP_HIDDEN int ibp_load_library(void);

#endif /* IBVERBS_COMMON_H */
