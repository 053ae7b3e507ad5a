/*
 * SGE: one scatter/gather entry, and MR.sge().  Its accessors and type
 * shell are generated (generated/sge.c.h, from spec/datapath/records.yaml);
 * here are the constructor (an MR or an address, range checked) and repr.
 */
#include "common.h"

#include "objects.h"

#include "sge.c.h"

PyTypeObject *ibp_kept_sge_type;        /* common.h: struct ibp_sge_cache */

#if IBP_FREE_THREADED
IBP_THREAD_LOCAL uint64_t ibp_stamp, ibp_stamp_end;    /* common.h: ibp_next_stamp */
static uint64_t stamp_blocks;           /* the blocks handed out */

uint64_t ibp_stamp_new_block(void)
{
    uint64_t block = ibp_atomic_add(&stamp_blocks, 1);
    ibp_stamp = (block - 1) * IBP_STAMP_BLOCK + 1;  /* block 0 starts at 1: 0 is no stamp */
    ibp_stamp_end = block * IBP_STAMP_BLOCK;
    return ibp_stamp;
}
#else
uint64_t ibp_stamp;                     /* common.h: ibp_next_stamp */
#endif

/* Every setter, __init__ again and the collector's clear call it, after
 * they store: a new stamp, which no kept request holds (common.h's struct
 * ibp_sge_cache), so those holding the old one read their lists again.
 * Stored last, with release: a post that reads it without the SGE's lock
 * (ibp_kept_sge_matches) and finds the stamp it kept sends its own copy. */
static void ibp_SGE_changed(SGEObject *self)
{
    ibp_release_store(&self->stamp, ibp_next_stamp());
}

/* SGE(target, length, lkey, offset) into self (lkey_obj, offset_obj may be NULL). */
static int sge_set(SGEObject *self, PyObject *target, PyObject *length_obj,
                   PyObject *lkey_obj, PyObject *offset_obj)
{
    uint64_t length, lkey = 0, base, offset = 0;
    if (offset_obj != NULL) {
        int64_t off;
        if (ibp_conv_signed(offset_obj, "offset", INT64_MIN, INT64_MAX, &off) < 0)
            return -1;
        if (off < 0) {
            PyErr_Format(PyExc_ValueError, "offset must be non-negative, got %lld",
                         (long long)off);
            return -1;
        }
        offset = (uint64_t)off;
    }
    {
        int64_t len = -1;
        if (ibp_long_check(length_obj)) {
            /* an int of one digit at once (PyLong_AsSsize_t, as ibp_conv_u64) */
            Py_ssize_t quick = PyLong_AsSsize_t(length_obj);
            if (quick >= 0 && (size_t)quick <= UINT32_MAX) {
                len = quick;
            } else {
                if (quick == -1 && PyErr_Occurred())
                    PyErr_Clear();      /* OverflowError: said below */
                /* Any int from 2**32 on, however large, gets the message that says why. */
                int overflow = 0;
                long long v = PyLong_AsLongLongAndOverflow(length_obj, &overflow);
                if (overflow > 0 || (overflow == 0 && v > (long long)UINT32_MAX)) {
                    PyErr_SetString(PyExc_ValueError, "SGE length must be below 2**32; split it "
                                    "into several SGEs");
                    return -1;
                }
                if (v == -1 && PyErr_Occurred())
                    return -1;
                len = v;
            }
        }
        /* the range an SGE holds (uint32_t), also in a negative length's
         * message; an int in range is taken as read above (len is -1 for
         * anything else) */
        if (len < 0 &&
            ibp_conv_signed(length_obj, "length", 0, UINT32_MAX, &len) < 0)
            return -1;
        length = (uint64_t)len;
    }
    /* An address (an int) first: PyObject_TypeCheck of an int calls
     * PyType_IsSubtype, which walks int's MRO. */
    if (!PyLong_CheckExact(target) && PyObject_TypeCheck(target, MR_Type)) {
        /* held while it is read: no other thread deregisters it meanwhile */
        ibp_busy_hold(target);
        struct ibv_mr *mr = ibp_open_ptr(target);
        size_t mr_length = mr != NULL ? mr->length : 0;
        uint32_t mr_lkey = mr != NULL ? mr->lkey : 0;
        base = mr != NULL ? (uintptr_t)mr->addr : 0;
        ibp_busy_leave(target);
        if (mr == NULL)
            return -1;
        if (offset > mr_length || length > mr_length - offset) {
            PyErr_Format(PyExc_ValueError,
                         "SGE range [offset %llu, +%llu) exceeds the MR's %zu bytes",
                         (unsigned long long)offset, (unsigned long long)length,
                         mr_length);
            return -1;
        }
        lkey = lkey_obj != NULL && lkey_obj != Py_None ? 0 : mr_lkey;
        if (lkey_obj != NULL && lkey_obj != Py_None &&
            ibp_conv_unsigned(lkey_obj, "lkey", UINT32_MAX, &lkey) < 0)
            return -1;
        Py_INCREF(target);
        Py_XSETREF(self->owner, target);
    } else {
        if (ibp_conv_u64(target, "target", UINT64_MAX, &base) < 0)
            return -1;
        if (lkey_obj != NULL && ibp_conv_u64(lkey_obj, "lkey", UINT32_MAX, &lkey) < 0)
            return -1;
        if (offset > UINT64_MAX - base) {
            PyErr_SetString(PyExc_ValueError, "address + offset exceeds 64 bits");
            return -1;
        }
    }
    ibp_relaxed_store(&self->sge.addr, base + offset);
    ibp_relaxed_store(&self->sge.length, (uint32_t)length);
    ibp_relaxed_store(&self->sge.lkey, (uint32_t)lkey);
    ibp_SGE_changed(self);
    return 0;
}

/* Posts read SGEs without their locks (so that reading one never waits
 * while the request and its list are locked): each field is stored and
 * read whole, and the stamp, stored after the fields (release), is read
 * before them (acquire): a value read is at least as new as the stamp
 * read, so a request kept under that stamp is read again once the SGE
 * has changed (ibp_kept_sge_matches). */
uint64_t ibp_sge_read(PyObject *obj, struct ibv_sge *out)
{
    SGEObject *sge = (SGEObject *)obj;
    uint64_t stamp = ibp_acquire_load(&sge->stamp);
    out->addr = ibp_relaxed_load(&sge->sge.addr);
    out->length = ibp_relaxed_load(&sge->sge.length);
    out->lkey = ibp_relaxed_load(&sge->sge.lkey);
    return stamp;
}

/* SGE(target, length, lkey=0, offset=0): generated/sge.c.h parses the
 * arguments (lkey, offset NULL when not given). */
static int ibp_hand_SGE_init_impl(SGEObject *self, PyObject *target, PyObject *length,
                                  PyObject *lkey, PyObject *offset)
{
    return sge_set(self, target, length, lkey, offset);
}

static PyObject *ibp_SGE_keepalive(PyObject *op, PyObject *owner)
{
    Py_INCREF(owner);
    Py_XSETREF(((SGEObject *)op)->owner, owner == Py_None ? (Py_DECREF(owner), NULL) : owner);
    return Py_NewRef(op);
}

static PyObject *ibp_SGE_repr(PyObject *op)
{
    SGEObject *self = (SGEObject *)op;
    char buf[96];
    snprintf(buf, sizeof(buf), "SGE(addr=0x%llx, length=%u, lkey=0x%x)",
             (unsigned long long)self->sge.addr, self->sge.length, self->sge.lkey);
    return PyUnicode_FromString(buf);
}

int ibp_sge_from_py(PyObject *obj, struct ibv_sge *out)
{
    if (!PyObject_TypeCheck(obj, SGE_Type)) {
        PyErr_Format(PyExc_TypeError, "expected an SGE, not %s", ibp_type_name(obj));
        return -1;
    }
    ibp_sge_read(obj, out);
    return 0;
}

/* MR.sge(length=None, offset=0): SGE(mr, length, None, offset), made
 * directly (no argument tuple, no type call); generated/mr.c.h parses the
 * arguments (NULL when not given). */
PyObject *ibp_hand_MR_sge_impl(PyObject *self, PyObject *length, PyObject *offset)
{
    if (length == NULL)
        length = Py_None;
    if (ibp_check_open(self) < 0)
        return NULL;
    if (length != Py_None) {
        /* sge_set converts both (offset NULL: 0) and checks the MR again
         * after them (an __index__ may close it) */
        PyObject *sge = PyType_GenericAlloc(SGE_Type, 0);
        if (sge != NULL && sge_set((SGEObject *)sge, self, length, Py_None, offset) < 0)
            Py_CLEAR(sge);
        return sge;
    }
    PyObject *offset_obj = offset ? Py_NewRef(offset) : PyLong_FromLong(0);
    if (offset_obj == NULL)
        return NULL;
    PyObject *length_obj;
    if (length == Py_None) {
        int64_t off;
        /* the offset's __index__ may have closed the MR */
        if (ibp_conv_signed(offset_obj, "offset", INT64_MIN, INT64_MAX, &off) < 0 ||
            ibp_check_open(self) < 0) {
            Py_DECREF(offset_obj);
            return NULL;
        }
        size_t total = MR_PTR(self)->length;
        length_obj = PyLong_FromLongLong(off >= 0 && (uint64_t)off <= total
                                         ? (long long)(total - (uint64_t)off) : 0);
    } else {
        length_obj = Py_NewRef(length);
    }
    PyObject *sge = length_obj ? PyType_GenericAlloc(SGE_Type, 0) : NULL;
    if (sge != NULL && sge_set((SGEObject *)sge, self, length_obj, Py_None, offset_obj) < 0)
        Py_CLEAR(sge);
    Py_XDECREF(length_obj);
    Py_DECREF(offset_obj);
    return sge;
}
