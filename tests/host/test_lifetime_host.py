"""Handle lifetime on the host (no device needed): what the extension keeps
per handle object."""
import gc
import tracemalloc

import ibverbs as ib


def test_closed_handles_made_by_a_class_call_are_not_remembered():
    """A class call (ib.PD(), ib.QP(), the seed's way) makes a closed handle;
    nothing of it may stay behind once it is freed.  The fork() bookkeeping
    kept one entry per such object for ever (14 MB after 200,000)."""
    def make_and_drop(n):
        kept = [cls() for cls in (ib.PD, ib.QP, ib.CQ, ib.MR) for _ in range(n)]
        del kept

    make_and_drop(100)          # first-use allocations, out of the count
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        make_and_drop(5000)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 20_000, f"{grown} bytes stayed behind after 20,000 closed handles"
