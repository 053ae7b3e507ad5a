/*
 * The data path, written by hand: work requests (sge.c, wr.c), posting
 * (post.c, postlist.c, postlist_entry.c), completions (wc.c, wcbuffer.c),
 * completion and async events (events.c).  This file adds their types to
 * the module; what they share is in common.h and convert.c.
 *
 * Work request objects hold C values, not Python attributes, so posting
 * converts them with plain loads; chains of up to STACK_WRS requests and
 * STACK_SGES scatter/gather entries are built on the stack (no malloc per
 * post).  For hot loops, a PostList is converted once and posted as is,
 * and a WCBuffer receives completions with no object per completion
 * (CQ.poll_into); WC objects of poll() come from a free list.  Blocking
 * calls (get_cq_event, get_async_event) release the GIL and mark their
 * object busy so that close() from another thread fails with EBUSY
 * instead of freeing what the blocked call still uses; non-blocking posts
 * and polls keep it (see ibp_hand_QP_post_send).
 */
#include "common.h"

#include "objects.h"

/* ==== registration ======================================================= */

/* ibp_none()'s pool (common.h).  Before 3.12 None's count is an ordinary
 * 64-bit one; from 3.12 on it is immortal and left alone.  Once per
 * process: None is one object for every interpreter and import of it. */
void ibp_none_pool(void)
{
    /* Not on a free-threaded target: it is 3.13 or newer (None immortal),
     * and `pooled` would be an unguarded flag; nor on a stable ABI of 3.12
     * or later (cp314-abi3, whatever its Limited API: IBP_STABLE_ABI),
     * which no CPython before 3.12 loads (and sscanf would be glibc 2.38's
     * __isoc23_sscanf, built on sid). */
#if SIZEOF_VOID_P >= 8 && !IBP_FREE_THREADED && \
    (!defined(Py_LIMITED_API) || Py_LIMITED_API + 0 < 0x030C0000) && \
    !(defined(IBP_STABLE_ABI) && IBP_STABLE_ABI >= 0x030C0000)
    static int pooled;
    int major = 0, minor = 0;
    if (pooled || sscanf(Py_GetVersion(), "%d.%d", &major, &minor) != 2)
        return;
    pooled = 1;
    if (major == 3 && minor < 12)
        Py_SET_REFCNT(Py_None, Py_REFCNT(Py_None) + ((Py_ssize_t)1 << 61));
#endif
}

int ibp_datapath_init(PyObject *module)
{
    ibp_none_pool();
    if (ibp_wc_init() < 0 || ibp_wc_test_hooks_init(module) < 0)
        return -1;
    if (SGE_type_init(module) < 0 || SendWR_type_init(module) < 0 ||
        RecvWR_type_init(module) < 0 || WC_type_init(module) < 0 ||
        WCBuffer_type_init(module) < 0 || PostList_type_init(module) < 0)
        return -1;
    if (PostListEntry_type_init(module) < 0 || AsyncEvent_type_init(module) < 0)
        return -1;
    return 0;
}
