/*
 * Lifetime rules shared by every verbs handle object.
 *
 * A child holds strong references to its parents, so a parent is never
 * deallocated first; and a parent counts its open children, so close()
 * on it fails with EBUSY (leaving everything usable) instead of asking the
 * kernel to free a resource that is still in use.
 */
#include "common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "objects.h"

#pragma GCC visibility push(hidden)
#include <rdma/rdma_cma.h>
#pragma GCC visibility pop

#include "rdmacm_objects.h"

/* In obj's critical section (close() is a generated entry): a hold, which
 * counts itself in that critical section too, is either counted before
 * this reads busy or finds the object closed (common.h, "threads"). */
int ibp_check_closable(PyObject *obj, const char *verb)
{
    IbvHandle *h = IBP_HANDLE(obj);
    Py_ssize_t children = ibp_atomic_load(&h->live_children);
    if (children > 0) {
        /* The seed's words, which callers match on. */
        const char *name = ibp_type_name(obj);
        ibp_raise_detail(verb, EBUSY,
                         "%s failed: cannot close %s with %zd open child resource(s)",
                         verb, strcmp(name, "Context") == 0 ? "context" : name,
                         children);
        return -1;
    }
    if (ibp_atomic_load(&h->busy) > 0) {
        ibp_raise_detail(verb, EBUSY,
                         "%s failed: a call on this %s is in progress (in another "
                         "thread, or this is a callback of that call); retry "
                         "when it has returned", verb, ibp_type_name(obj));
        return -1;
    }
    return 0;
}

/* ---- one close at a time ------------------------------------------------ */

/* One condition for every object: closes that overlap are rare, and a
 * waiter rechecks its own object's flag when woken. */
static pthread_mutex_t close_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t close_ended = PTHREAD_COND_INITIALIZER;
static unsigned long closes_ended;

void ibp_close_begin(PyObject *obj)
{
    ibp_atomic_store(&IBP_HANDLE(obj)->closing, 1);
}

void ibp_close_end(PyObject *obj)
{
    /* GIL held, like the waiter's check: the flag and the count move
     * together as far as a waiter can tell. */
    ibp_atomic_store(&IBP_HANDLE(obj)->closing, 0);
    pthread_mutex_lock(&close_lock);
    closes_ended++;
    pthread_cond_broadcast(&close_ended);
    pthread_mutex_unlock(&close_lock);
}

void ibp_close_wait(PyObject *obj)
{
    while (ibp_atomic_load(&IBP_HANDLE(obj)->closing)) {
        pthread_mutex_lock(&close_lock);
        unsigned long seen = closes_ended;
        pthread_mutex_unlock(&close_lock);
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&close_lock);
        while (closes_ended == seen)
            pthread_cond_wait(&close_ended, &close_lock);
        pthread_mutex_unlock(&close_lock);
        Py_END_ALLOW_THREADS
    }
}

/* ---- fork(): whose verbs object is it? -------------------------------- */

/*
 * After fork() the child holds copies of every handle object, but the verbs
 * objects (and the file descriptors they live on) are shared with the
 * parent: a destroy from the child would destroy the parent's PD, MR or QP.
 * So each open handle records the process that created it; in a child,
 * handles inherited from the parent are "foreign": close() and garbage
 * collection forget them without destroying anything, and calling a verb on
 * them raises VerbsError.
 */
int ibp_forked;                 /* this process is a fork() child */
IBP_THREAD_LOCAL PyObject *ibp_entry_closed;     /* common.h: IBP_ENTRY_CLOSED */
static pid_t current_pid;          /* getpid(), refreshed in the child */
static PyObject *origins;          /* dict: object address -> creating pid (import) */
/* The handle classes seen (the test hooks' check); grown under its lock. */
static ibp_mutex_t handle_types_lock;
static PyTypeObject **handle_types;
static int nhandle_types, handle_types_room;

static void atfork_child(void)
{
    /* Async-signal-safe only: a flag, getpid() and stores.  No SGE
     * matches a kept one any more: that ends every kept request (post.c's
     * short way, which makes no fork check of its own: a child keeps none,
     * wr.c). */
    ibp_forked = 1;
    current_pid = getpid();
    ibp_kept_sge_type = NULL;
}

/* Once, when the first handle is made (not at import: a child forked
 * before any is made has nothing to refuse), by whichever thread. */
static pthread_mutex_t atfork_lock = PTHREAD_MUTEX_INITIALIZER;
static int atfork_state;        /* 0: not yet, 1: registered, -1: failed */

/* Not pthread_once: before glibc 2.34 it is libpthread's, and the wheel
 * needs no more than glibc 2.17 with libc alone. */
static int register_atfork(void)
{
    int state = ibp_acquire_load(&atfork_state);
    if (state == 0) {
        pthread_mutex_lock(&atfork_lock);
        if (atfork_state == 0) {
            current_pid = getpid();
            ibp_release_store(&atfork_state, pthread_atfork(NULL, NULL, atfork_child) == 0 ? 1 : -1);
        }
        state = atfork_state;
        pthread_mutex_unlock(&atfork_lock);
    }
    return state;
}

static int track_origin(PyObject *obj)
{
    if (register_atfork() < 0) {
        PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed");
        return -1;
    }
    if (origins == NULL)
        return -1;      /* not imported: cannot happen */
    PyObject *key = PyLong_FromVoidPtr(obj);
    PyObject *value = PyLong_FromLong((long)current_pid);
    int rc = (key && value) ? PyDict_SetItem(origins, key, value) : -1;
    Py_XDECREF(key);
    Py_XDECREF(value);
    return rc;
}

/*
 * Borrowed handles: objects wrapping a verbs object that another library
 * owns (the ibv_context librdmacm opened for a CM ID).  They are recorded
 * with the negated pid of the process that made them: close() and garbage
 * collection forget them without destroying anything, in every process;
 * but only the one that made them may call on them, as for any handle (a
 * fork() child's librdmacm opens contexts of its own, which it can use).
 */
static int any_borrowed;

int ibp_handle_borrow(PyObject *obj)
{
    if (track_origin(obj) < 0)
        return -1;
    PyObject *key = PyLong_FromVoidPtr(obj);
    PyObject *value = PyLong_FromLong(-(long)current_pid);
    int rc = (key && value) ? PyDict_SetItem(origins, key, value) : -1;
    Py_XDECREF(key);
    Py_XDECREF(value);
    if (rc == 0)
        ibp_relaxed_store(&any_borrowed, 1);    /* only ever set: no order needed */
    return rc;
}

/* The recorded origin of obj (negative: borrowed), 0 when none. */
static long origin_of(PyObject *obj)
{
    if (origins == NULL)
        return 0;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    long origin = 0;
    PyObject *key = PyLong_FromVoidPtr(obj);
    ibp_lock_t cs;
    ibp_lock(&cs, origins);     /* the borrowed value stays while it is read */
    PyObject *pid = key ? PyDict_GetItem(origins, key) : NULL;   /* borrowed */
    if (pid != NULL)
        origin = PyLong_AsLong(pid);
    ibp_unlock(&cs);
    Py_XDECREF(key);
    PyErr_Clear();
    PyErr_Restore(exc_type, exc_value, exc_tb);
    return origin;
}

/* Made by another process (the parent, before fork()): not ours to call. */
static int inherited(PyObject *obj)
{
    if (!ibp_forked)
        return 0;
    long origin = origin_of(obj);
    return origin != 0 && labs(origin) != (long)current_pid;
}

int ibp_handle_foreign(PyObject *obj)
{
    if (!ibp_forked && !ibp_relaxed_load(&any_borrowed))
        return 0;
    long origin = origin_of(obj);
    return origin < 0 || (ibp_forked && origin != 0 && labs(origin) != (long)current_pid);
}

/* Delete ptr's key from map (origins, registry) if it is there, keeping the
 * exception being raised: the callers run on error paths too (a failed
 * wrap, whose pointer was never added: nothing to undo then). */
static void forget_pointer(PyObject *map, void *ptr)
{
    if (map == NULL)
        return;
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    PyObject *key = PyLong_FromVoidPtr(ptr);
    if (key == NULL || PyDict_DelItem(map, key) < 0)
        PyErr_Clear();
    Py_XDECREF(key);
    PyErr_Restore(exc_type, exc_value, exc_tb);
}

void ibp_handle_closed(PyObject *obj)
{
    forget_pointer(origins, obj);
}

static PyObject *raise_foreign(PyObject *obj)
{
    const char *name = ibp_type_name(obj);
    return ibp_raise_detail(name, EBADF,
                            "this %s was created by the parent process before "
                            "fork(); a child process cannot use its parent's "
                            "verbs objects (open the device again in the child)",
                            name);
}

/* ---- calls in flight ------------------------------------------------------ */

/*
 * The rule: every method call on a handle counts as in flight on it (busy)
 * from entry to return, whatever it does in between: release the GIL
 * around a blocking verb, or run Python code (an argument's __index__ or
 * __iter__, a finalizer run by the garbage collector) during which another
 * thread - or that very code - may call close().  close() of a busy object
 * raises VerbsError EBUSY and changes nothing, so no call ever resumes on
 * a freed verbs object.  Handles passed as arguments (a CompChannel to
 * create_cq, an MW to bind_mw) are held busy the same way.
 */
/* handle_types_lock held */
static int is_handle_type_locked(PyTypeObject *type)
{
    for (int i = 0; i < nhandle_types; i++)
        if (handle_types[i] == type)
            return 1;
    return 0;
}

static int is_handle_type(PyTypeObject *type)
{
    ibp_mutex_lock(&handle_types_lock);
    int found = is_handle_type_locked(type);
    ibp_mutex_unlock(&handle_types_lock);
    return found;
}

/* type among the handle classes: 0, or -1 when out of memory (nothing
 * raised: the lock is held in here). */
static int add_handle_type(PyTypeObject *type)
{
    int rc = 0;
    ibp_mutex_lock(&handle_types_lock);
    if (!is_handle_type_locked(type)) {
        if (nhandle_types == handle_types_room) {
            int room = handle_types_room ? 2 * handle_types_room : 32;
            PyTypeObject **grown = PyMem_Realloc(handle_types, room * sizeof(*grown));
            if (grown == NULL) {
                rc = -1;
                goto done;
            }
            handle_types = grown;
            handle_types_room = room;
        }
        handle_types[nhandle_types++] = type;
    }
done:
    ibp_mutex_unlock(&handle_types_lock);
    return rc;
}

/* ibp_call_enter (common.h) in a fork() child. */
int ibp_call_enter_forked(PyObject *self)
{
    if (IBP_HANDLE(self)->ptr != NULL && inherited(self)) {
        raise_foreign(self);
        return -1;
    }
    ibp_busy_enter(self);
    return 0;
}

int ibp_hold(PyObject *obj, PyTypeObject *type, PyObject **held)
{
    /* Not one of type: not held, and its conversion raises TypeError. */
    if (obj == NULL || (type != NULL && !PyObject_TypeCheck(obj, type)))
        return 0;
    if (ibp_forked && IBP_HANDLE(obj)->ptr != NULL && inherited(obj)) {
        raise_foreign(obj);
        return -1;
    }
    Py_INCREF(obj);
    ibp_busy_hold(obj);
    *held = obj;
    return 0;
}

void ibp_unhold(PyObject *held)
{
    if (held != NULL) {
        ibp_busy_leave(held);
        Py_DECREF(held);
    }
}

int ibp_hold_each(PyObject *tuple, PyObject **held)
{
    Py_ssize_t n = PyTuple_Size(tuple);
    for (Py_ssize_t i = 0; ibp_forked && i < n; i++) {
        PyObject *obj = PyTuple_GetItem(tuple, i);
        if (IBP_HANDLE(obj)->ptr != NULL && inherited(obj)) {
            raise_foreign(obj);
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++)
        ibp_busy_hold(PyTuple_GetItem(tuple, i));
    *held = Py_NewRef(tuple);
    return 0;
}

void ibp_unhold_each(PyObject *held)
{
    if (held == NULL)
        return;
    for (Py_ssize_t i = 0; i < PyTuple_Size(held); i++)
        ibp_busy_leave(PyTuple_GetItem(held, i));
    Py_DECREF(held);
}

/* ---- creation --------------------------------------------------------------- */

PyObject *ibp_handle_new(PyTypeObject *type, void *ptr, PyObject **parent_slots,
                         PyObject *const *parents, int nparents)
{
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    PyObject *obj = alloc(type, 0);
    if (obj == NULL)
        return NULL;
    if (add_handle_type(type) < 0) {
        Py_DECREF(obj);
        return PyErr_NoMemory();
    }
    /* Only an open one has an origin to record: a closed one (a class
     * call, ptr NULL) would never be forgotten, since only closing or
     * freeing an open one forgets its entry. */
    if (ptr != NULL && track_origin(obj) < 0) {
        Py_DECREF(obj);     /* ptr not set yet: its dealloc destroys nothing */
        return NULL;
    }
    IbvHandle *h = IBP_HANDLE(obj);
    h->ptr = ptr;
    h->live_children = 0;
    h->busy = 0;
    h->closing = 0;
    for (int i = 0; i < nparents; i++) {
        PyObject *parent = parents[i];
        if (parent != NULL) {
            Py_INCREF(parent);
            ibp_atomic_add(&IBP_HANDLE(parent)->live_children, 1);
        }
        parent_slots[i] = parent;
    }
    return obj;
}

void ibp_handle_release_parents(PyObject *const *parents, int nparents)
{
    for (int i = 0; i < nparents; i++)
        if (parents[i] != NULL)
            ibp_atomic_add(&IBP_HANDLE(parents[i])->live_children, -1);
}

void ibp_report_unraisable(PyObject *obj, const char *verb, int err)
{
    /* A failed destroy in dealloc cannot raise; say so on stderr, the way
     * CPython reports exceptions in __del__.  Named by its type, not by
     * obj: in dealloc obj has no references left, and handing it to
     * PyErr_WriteUnraisable (which takes and drops one) would deallocate it
     * again, recursively. */
    PyObject *exc_type, *exc_value, *exc_tb;
    PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
    const char *name = ibp_type_name(obj);
    ibp_raise_detail(verb, err, "%s failed: %s (while freeing an unreachable %s; "
                     "the verbs object is leaked)", verb, strerror(err), name);
    PyErr_WriteUnraisable((PyObject *)Py_TYPE(obj));
    PyErr_Restore(exc_type, exc_value, exc_tb);
}

/* ---- registry: verbs object -> Python object, by identity ---------------- */

/*
 * Events name a verbs object by its address, read with the GIL released;
 * by the time the GIL is back, another thread may have destroyed that
 * object and made a new one of the same type at the same address.  So an
 * object is found by a token instead: a number given to it when it is
 * registered, never given again, and written into the verbs object's
 * user context field (cq_context, qp_context, srq_context, the
 * rdma_cm_id's context: we pass NULL for each, and no Python API shows
 * them).  The event readers copy that field before they acknowledge the
 * event, which the object's destroy waits for, so the token read is the
 * object's own, whatever the address holds later.
 */
static PyObject *registry;   /* dict: int(pointer) -> int(token) */
static PyObject *by_token;   /* dict: int(token) -> the object's ibp_table_entry */
static uint64_t last_token;
/* Both dicts are made at import (ibp_handles_init).  On a free-threaded
 * target each step that reads or changes them (both at once, a lookup and
 * the reference it takes) runs in by_token's critical section: no step
 * calls Python code (int keys; int values, or weak references without a
 * callback), so none is interrupted. */

int ibp_handles_init(void)
{
    origins = PyDict_New();
    registry = PyDict_New();
    by_token = PyDict_New();
    return origins && registry && by_token ? 0 : -1;
}

/* The user context field events copy, of a verbs object of a type
 * registered (spec `registered: true`). */
static void **context_field(void *ptr, PyObject *obj)
{
    if (PyObject_TypeCheck(obj, CQ_Type))       /* CQEx too: ptr is its ibv_cq */
        return &((struct ibv_cq *)ptr)->cq_context;
    if (PyObject_TypeCheck(obj, QP_Type))
        return &((struct ibv_qp *)ptr)->qp_context;
    if (PyObject_TypeCheck(obj, SRQ_Type))
        return &((struct ibv_srq *)ptr)->srq_context;
    if (CMID_Type != NULL && PyObject_TypeCheck(obj, CMID_Type))
        return &((struct rdma_cm_id *)ptr)->context;
    return NULL;
}

/* registry[ptr] = token, by_token[token] = obj. */
static int registry_set(void *ptr, uint64_t token, PyObject *obj)
{
    PyObject *key = PyLong_FromVoidPtr(ptr);
    PyObject *tok = PyLong_FromUnsignedLongLong(token);
    PyObject *addr = ibp_table_entry(obj);
    ibp_lock_t cs;
    ibp_lock(&cs, by_token);
    int rc = (key && tok && addr && PyDict_SetItem(registry, key, tok) == 0 &&
              PyDict_SetItem(by_token, tok, addr) == 0) ? 0 : -1;
    ibp_unlock(&cs);
    Py_XDECREF(key);
    Py_XDECREF(tok);
    Py_XDECREF(addr);
    return rc;
}

/*
 * Reserved tokens: a verbs object that events may name before it has a
 * Python object (the new rdma_cm_id of a CONNECT_REQUEST, whose context
 * librdmacm copies from the listener) gets its token at once, with the GIL
 * released; the object registered for it later takes that token.  A pthread
 * mutex, not the GIL, guards them; tokens are taken atomically for that.
 * An entry stays (marked wrapped) until its object leaves the registry, so
 * an event still carrying the copied context finds that object, and a
 * second one is never made.
 */
struct reservation { void *ptr; uint64_t token; int wrapped; };
static pthread_mutex_t reserve_lock = PTHREAD_MUTEX_INITIALIZER;
static struct reservation *reservations;
static size_t nreservations, reservations_room;

static uint64_t next_token(void)
{
    return __atomic_add_fetch(&last_token, 1, __ATOMIC_RELAXED);
}

/* The reservation of ptr (reserve_lock held), NULL if none. */
static struct reservation *reservation_of(void *ptr)
{
    for (size_t i = 0; i < nreservations; i++)
        if (reservations[i].ptr == ptr)
            return &reservations[i];
    return NULL;
}

uint64_t ibp_registry_reserve(void *ptr)
{
    uint64_t token = 0;
    pthread_mutex_lock(&reserve_lock);
    struct reservation *r = reservation_of(ptr);
    if (r != NULL) {
        token = r->token;
        goto done;
    }
    if (nreservations == reservations_room) {
        size_t room = reservations_room ? 2 * reservations_room : 8;
        struct reservation *grown = realloc(reservations, room * sizeof(*grown));
        if (grown == NULL)
            goto done;      /* 0: its events name no object until it is wrapped */
        reservations = grown;
        reservations_room = room;
    }
    token = next_token();
    reservations[nreservations] = (struct reservation){ ptr, token, 0 };
    __atomic_store_n(&nreservations, nreservations + 1, __ATOMIC_RELEASE);   /* read unlocked */
done:
    pthread_mutex_unlock(&reserve_lock);
    return token;
}

int ibp_registry_reservation(void *ptr, uint64_t *token, int *wrapped)
{
    pthread_mutex_lock(&reserve_lock);
    struct reservation *r = reservation_of(ptr);
    if (r != NULL) {
        *token = r->token;
        *wrapped = r->wrapped;
    }
    pthread_mutex_unlock(&reserve_lock);
    return r != NULL;
}

static void release_reservation(void *ptr)
{
    pthread_mutex_lock(&reserve_lock);
    struct reservation *r = reservation_of(ptr);
    if (r != NULL) {
        *r = reservations[nreservations - 1];
        __atomic_store_n(&nreservations, nreservations - 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&reserve_lock);
}

/* The reserved token of ptr, now taken by its object; 0 when none. */
static uint64_t use_reservation(void *ptr)
{
    uint64_t token = 0;
    pthread_mutex_lock(&reserve_lock);
    struct reservation *r = reservation_of(ptr);
    if (r != NULL && !r->wrapped) {
        token = r->token;
        r->wrapped = 1;
    }
    pthread_mutex_unlock(&reserve_lock);
    return token;
}

int ibp_registry_add(void *ptr, PyObject *obj)
{
    void **field = context_field(ptr, obj);
    if (field == NULL) {
        PyErr_Format(PyExc_SystemError, "%s is not a type events name", ibp_type_name(obj));
        return -1;
    }
    uint64_t token = __atomic_load_n(&nreservations, __ATOMIC_ACQUIRE) ? use_reservation(ptr) : 0;
    if (token == 0)
        token = next_token();
    if (registry_set(ptr, token, obj) < 0)
        return -1;
    *field = (void *)(uintptr_t)token;
    return 0;
}

/* The token registered for ptr, 0 if none (no exception either way);
 * by_token's critical section held. */
static uint64_t registry_token(void *ptr)
{
    if (registry == NULL)
        return 0;
    PyObject *key = PyLong_FromVoidPtr(ptr);
    PyObject *tok = key ? PyDict_GetItem(registry, key) : NULL;   /* borrowed */
    Py_XDECREF(key);
    uint64_t token = tok ? PyLong_AsUnsignedLongLong(tok) : 0;
    PyErr_Clear();
    return token == (uint64_t)-1 ? 0 : token;
}

void ibp_registry_remove(void *ptr)
{
    if (__atomic_load_n(&nreservations, __ATOMIC_ACQUIRE))
        release_reservation(ptr);      /* its object is gone: the address is free */
    ibp_lock_t cs;
    ibp_lock(&cs, by_token);
    uint64_t token = registry_token(ptr);
    forget_pointer(registry, ptr);
    if (token != 0 && by_token != NULL) {
        PyObject *exc_type, *exc_value, *exc_tb;
        PyErr_Fetch(&exc_type, &exc_value, &exc_tb);
        PyObject *tok = PyLong_FromUnsignedLongLong(token);
        if (tok == NULL || PyDict_DelItem(by_token, tok) < 0)
            PyErr_Clear();
        Py_XDECREF(tok);
        PyErr_Restore(exc_type, exc_value, exc_tb);
    }
    ibp_unlock(&cs);
}

PyObject *ibp_registry_find(const void *token)
{
    if (by_token == NULL || token == NULL)
        return NULL;
    PyObject *tok = PyLong_FromUnsignedLongLong((uint64_t)(uintptr_t)token);
    if (tok == NULL) {
        PyErr_Clear();
        return NULL;
    }
    ibp_lock_t cs;
    ibp_lock(&cs, by_token);
    PyObject *value = PyDict_GetItem(by_token, tok);   /* borrowed */
    /* An object whose last reference went in another thread is still here
     * until its dealloc gets this lock; it is not found. */
    PyObject *obj = value != NULL ? ibp_table_object(value) : NULL;
    ibp_unlock(&cs);
    Py_DECREF(tok);
    return obj;
}

/* ---- fault injection for the tests ------------------------------------------ */

/* _registry_alias(obj, other): the registry says from now on that obj's
 * verbs pointer is other's, as if obj's memory had been freed and reused
 * for other (an address-keyed lookup would hand obj's events to other;
 * the tokens do not).  Only the device tests call it, and it is only
 * there with IBVERBS_TEST_HOOKS=1 in the environment at import: a program
 * that calls it can make the registry lie. */
static PyObject *registry_alias(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *obj, *other;
    if (!PyArg_ParseTuple(args, "OO:_registry_alias", &obj, &other))
        return NULL;
    if (!is_handle_type(Py_TYPE(obj)) || !is_handle_type(Py_TYPE(other))) {
        PyErr_SetString(PyExc_TypeError, "_registry_alias takes two verbs objects");
        return NULL;
    }
    if (ibp_check_open(obj) < 0 || ibp_check_open(other) < 0)
        return NULL;
    void **field = context_field(IBP_HANDLE(other)->ptr, other);
    uint64_t token = field ? (uint64_t)(uintptr_t)*field : 0;     /* other's own */
    if (token == 0) {
        PyErr_SetString(PyExc_TypeError, "_registry_alias: other is not a registered object");
        return NULL;
    }
    if (registry_set(IBP_HANDLE(obj)->ptr, token, other) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* _test_copy_context(obj, other): obj's verbs object gets other's user
 * context, as librdmacm gives a CONNECT_REQUEST's new ID its listener's
 * (cm.c: its events must still reach obj). */
static PyObject *copy_context(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *obj, *other;
    if (!PyArg_ParseTuple(args, "OO:_test_copy_context", &obj, &other))
        return NULL;
    if (ibp_check_open(obj) < 0 || ibp_check_open(other) < 0)
        return NULL;
    void **to = context_field(IBP_HANDLE(obj)->ptr, obj);
    void **from = context_field(IBP_HANDLE(other)->ptr, other);
    if (to == NULL || from == NULL) {
        PyErr_SetString(PyExc_TypeError, "_test_copy_context takes two registered objects");
        return NULL;
    }
    *to = *from;
    Py_RETURN_NONE;
}

/* _test_pause(on) and _test_paused(timeout): once on, the next call that
 * releases the GIL (generated, hand-written ones the spec lists, close() of
 * a class whose destroy does, a PostList post with release_gil) stops
 * inside its released section,
 * holding what it holds, until _test_pause(False); calls after it pass.
 * _test_paused waits for it to stop.  A close() from another thread during
 * such a call is then deterministic (tests/device/test_gil.py). */
static pthread_mutex_t pause_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pause_changed = PTHREAD_COND_INITIALIZER;
volatile int ibp_test_pausing;
static int npaused;

void ibp_test_pause(void)
{
    /* GIL released: pthread calls only */
    pthread_mutex_lock(&pause_lock);
    if (ibp_test_pausing) {
        ibp_relaxed_store(&ibp_test_pausing, 0);    /* read unlocked by ibp_test_pause_point */
        npaused = 1;
        pthread_cond_broadcast(&pause_changed);
        while (npaused)
            pthread_cond_wait(&pause_changed, &pause_lock);
    }
    pthread_mutex_unlock(&pause_lock);
}

static PyObject *test_pause(PyObject *module, PyObject *on)
{
    (void)module;
    int truth = PyObject_IsTrue(on);
    if (truth < 0)
        return NULL;
    pthread_mutex_lock(&pause_lock);
    ibp_relaxed_store(&ibp_test_pausing, truth);
    if (!truth)
        npaused = 0;
    pthread_cond_broadcast(&pause_changed);
    pthread_mutex_unlock(&pause_lock);
    Py_RETURN_NONE;
}

static PyObject *test_paused(PyObject *module, PyObject *timeout)
{
    (void)module;
    double seconds = PyFloat_AsDouble(timeout);
    if (seconds == -1.0 && PyErr_Occurred())
        return NULL;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)seconds;
    until.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    int n;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&pause_lock);
    while (npaused == 0 && pthread_cond_timedwait(&pause_changed, &pause_lock, &until) == 0)
        ;
    n = npaused;
    pthread_mutex_unlock(&pause_lock);
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(n);
}

static PyMethodDef test_hook_functions[] = {
    {"_registry_alias", registry_alias, METH_VARARGS,
     "_registry_alias($module, obj, other, /)\n--\n\n"
     "Test hook: map events naming obj to other (IBVERBS_TEST_HOOKS=1 only)."},
    {"_test_copy_context", copy_context, METH_VARARGS,
     "_test_copy_context($module, obj, other, /)\n--\n\n"
     "Test hook: give obj's verbs object other's user context (IBVERBS_TEST_HOOKS=1 only)."},
    {"_test_pause", test_pause, METH_O,
     "_test_pause($module, on, /)\n--\n\n"
     "Test hook: stop calls in their GIL-released section while on (IBVERBS_TEST_HOOKS=1 only)."},
    {"_test_paused", test_paused, METH_O,
     "_test_paused($module, timeout, /)\n--\n\n"
     "Test hook: wait up to timeout seconds for a stopped call; how many are (IBVERBS_TEST_HOOKS=1 only)."},
    {NULL, NULL, 0, NULL},
};

int ibp_test_hooks_enabled(void)
{
    const char *on = getenv("IBVERBS_TEST_HOOKS");
    return on != NULL && strcmp(on, "1") == 0;
}

int ibp_test_hooks_init(PyObject *module)
{
    return ibp_test_hooks_enabled() ? PyModule_AddFunctions(module, test_hook_functions) : 0;
}
