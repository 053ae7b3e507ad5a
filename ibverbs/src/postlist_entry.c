/*
 * PostListEntry: a live view of one entry of a PostList (postlist.c).
 * Its accessors and type shell are generated (generated/postlistentry.c.h,
 * from spec/datapath/records.yaml); here is how a view reaches the C
 * request it shows, and the checks around a store.
 */
#include "common.h"

#include "objects.h"

#include "postlistentry.c.h"

#define ENTRY_PL(op) ((PostListObject *)((PostListEntryObject *)(op))->list)
#define ENTRY_I(op) (((PostListEntryObject *)(op))->index)

static PyObject *ibp_PostListEntry_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyErr_SetString(PyExc_TypeError, "PostListEntry objects come from PostList[i]");
    return NULL;
}

/* Whether a view's list is of `kind` (PL_SEND, PL_RECV); if not, 0 with
 * AttributeError naming the field, unless name is NULL. */
static inline int entry_is(PyObject *op, int kind, const char *name)
{
    if (ENTRY_PL(op)->kind == kind)
        return 1;
    if (name != NULL)
        PyErr_Format(PyExc_AttributeError, "a %s has no %s",
                     kind == PL_SEND ? "RecvWR" : "SendWR", name);
    return 0;
}

/* The send request of a view; NULL for a receive list (see entry_is). */
static inline struct ibv_send_wr *ibp_entry_send(PyObject *op, const char *name)
{
    return entry_is(op, PL_SEND, name) ? PL_SEND_WR(ENTRY_PL(op), ENTRY_I(op)) : NULL;
}

/* The receive request of a view; NULL for a send list (see entry_is). */
static inline struct ibv_recv_wr *ibp_entry_recv(PyObject *op, const char *name)
{
    return entry_is(op, PL_RECV, name) ? PL_RECV_WR(ENTRY_PL(op), ENTRY_I(op)) : NULL;
}

/* The first SGE of a view's request, or NULL with AttributeError. */
static inline struct ibv_sge *ibp_entry_sge(PyObject *op, const char *name)
{
    PostListObject *pl = ENTRY_PL(op);
    Py_ssize_t i = ENTRY_I(op);
    int num = pl->kind == PL_SEND ? PL_SEND_WR(pl, i)->num_sge : PL_RECV_WR(pl, i)->num_sge;
    (void)name;
    if (num < 1) {
        PyErr_SetString(PyExc_AttributeError, "this work request has no SGE");
        return NULL;
    }
    return pl->kind == PL_SEND ? PL_SEND_WR(pl, i)->sg_list : PL_RECV_WR(pl, i)->sg_list;
}

/* After a value's conversion (which may run code): the list must not be
 * in a release_gil post. */
static inline int ibp_entry_writable(PyObject *op)
{
    return ibp_pl_frozen(ENTRY_PL(op));
}

/* Which member of a union of the send request the entry uses, by the
 * rules of spec/datapath/records.yaml (generated/records.h), if it is one
 * of `members`; else -1 with AttributeError.  The AH is the entry's: the
 * request's own place for it shares memory with remote_addr. */
static inline int ibp_entry_member(PyObject *op, int members, const char *name)
{
    PostListObject *pl = ENTRY_PL(op);
    return ibp_send_wr_member_used(PL_SEND_WR(pl, ENTRY_I(op)),
                                   pl->entries[ENTRY_I(op)].ah != NULL, members, name);
}

/* An inline send entry must keep pointing at readable memory. */
static int ibp_entry_inline_check(PyObject *op)
{
    PostListObject *pl = ENTRY_PL(op);
    return pl->kind == PL_SEND ? ibp_check_inline_sges(PL_SEND_WR(pl, ENTRY_I(op))) : 0;
}

static PyObject *ibp_PostListEntry_get_index(PyObject *op, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(ENTRY_I(op));
}

static PyObject *ibp_PostListEntry_get_list(PyObject *op, void *c)
{
    (void)c;
    return Py_NewRef(((PostListEntryObject *)op)->list);
}

static PyObject *ibp_PostListEntry_repr(PyObject *op)
{
    PostListObject *pl = ENTRY_PL(op);
    Py_ssize_t i = ENTRY_I(op);
    if (pl->kind == PL_RECV) {
        struct ibv_recv_wr *wr = PL_RECV_WR(pl, i);
        return PyUnicode_FromFormat("PostListEntry(%zd, RecvWR, wr_id=%llu, num_sge=%d)", i,
                                    (unsigned long long)wr->wr_id, wr->num_sge);
    }
    struct ibv_send_wr *wr = PL_SEND_WR(pl, i);
    return PyUnicode_FromFormat("PostListEntry(%zd, SendWR, wr_id=%llu, opcode=%d, "
                                "send_flags=%u, num_sge=%d)", i, (unsigned long long)wr->wr_id,
                                (int)wr->opcode, wr->send_flags, wr->num_sge);
}
