"""The extension's process-wide state used from many threads at once
(CONTRIBUTING.md, "Threads"), through the null provider: on a
free-threaded CPython (GIL off) the threads really run together; on a GIL
build a short switch interval interleaves them.  What each thread gets
must be its own: its poll results, its enum members, its error messages
(one type-name buffer per thread), its memo of num_entries."""
from __future__ import annotations

import json

STRESS = """
import json, sys, threading
import ibverbs as ib
sys.setswitchinterval(1e-6)
ctx = ib.get_device_list()[0].open()
N, ROUNDS = 8, 400
shared = ib.WCBuffer(capacity=16)
barrier = threading.Barrier(N)
failures = []

def work(k):
    try:
        mine = type(f"Mine{k}", (), {})
        want = k % 5 + 1
        barrier.wait()
        # the first calls at once: parsers interned, enum classes looked up
        buf = ib.WCBuffer(capacity=8, raise_on_error=False)
        for r in range(ROUNDS):
            # the null provider's CQ of 1000000 + w entries returns w a poll
            cq = ctx.create_cq(1000000 + want)
            for n in (1, 4, 16, 17, 250 + k, 100000 + k):
                wcs = cq.poll(n)
                assert len(wcs) == min(n, want), (n, len(wcs))
                for i, wc in enumerate(wcs):
                    assert wc.wr_id == i and wc.status is ib.WCStatus.SUCCESS, wc
                    assert wc.opcode is ib.WCOpcode.RDMA_WRITE, wc
            assert cq.poll_into(buf) == want
            assert buf.count_opcode(ib.WCOpcode.RDMA_WRITE) == want
            assert buf.count_opcode(300 + k) == 0
            got = cq.poll_into(shared)
            assert got == want and 1 <= len(shared) <= 5
            try:
                cq.poll(mine())
            except TypeError as e:
                assert str(e) == f"num_entries must be an int, not Mine{k}", str(e)
            else:
                raise AssertionError("poll(object) passed")
            try:
                ib.SendWR(opcode=ib.WCOpcode.SEND)
            except TypeError as e:
                assert "must be WROpcode or an int" in str(e), str(e)
            cq.close()
    except BaseException as e:
        failures.append(f"thread {k}: {e!r}")

threads = [threading.Thread(target=work, args=(k,)) for k in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join()
json.dump(failures, sys.stdout)
"""


def test_threads_share_the_global_state(on_null_provider):
    out = on_null_provider(STRESS)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_enum_members_and_classes_are_immortal_where_the_gil_is_off(ib):
    """On a free-threaded build every thread's completions hand out the same
    members (WCStatus.SUCCESS): their reference counts, written by all the
    threads, kept two threads polling at 1.35x one.  The extension makes
    the members it keeps immortal there; a GIL build leaves them as they are."""
    import sys
    member = ib.WC().status
    assert member is ib.WCStatus.SUCCESS
    # the cp314t build, -X gil or not (abi3t has no call for it: mortal there)
    free_threaded = ib._ibverbs._target == "cp314t"
    if not hasattr(sys, "_is_immortal"):        # before 3.14: no free-threaded build either
        assert not free_threaded
        return
    assert sys._is_immortal(member) == free_threaded
    # and the classes whose instances come and go per message (their counts
    # too were one line that both threads' allocations wrote)
    assert all(sys._is_immortal(cls) == free_threaded for cls in (ib.WC, ib.SendWR, ib.SGE, ib.QP))


def test_the_ways_without_the_gil_are_taken_only_where_threads_run_without_it(ib):
    """abi3t loads on GIL and free-threaded builds of 3.15 alike: on a GIL
    build it takes a GIL target's ways (no critical sections, the WC free
    list and result cache, chains that take kept requests), read from
    sys.abiflags at import; cp314t always takes the others."""
    import sys
    free_build = "t" in getattr(sys, "abiflags", "")
    assert bool(ib._ibverbs._no_gil) == (bool(ib._ibverbs._free_threaded) and free_build)
    if ib._ibverbs._target == "cp314t":
        assert ib._ibverbs._no_gil



def test_the_event_tables_hold_their_objects_weakly_on_a_free_threaded_target(ib, on_null_provider):
    """The registry that maps events back to their CQ, QP, SRQ or CMID keeps
    a weak reference on a free-threaded target (ibverbs/src/tables.c): a
    lookup racing the object's last reference then finds nothing, never a
    freed object.  The objects it keeps are weakly referenceable there, and
    a dropped one is gone (no table keeps it alive); elsewhere the table
    keeps the address, and nothing changes for them."""
    out = on_null_provider(WEAK)
    assert out.returncode == 0, out.stderr
    weak, gone = json.loads(out.stdout)
    assert weak == bool(ib._ibverbs._free_threaded)
    assert gone in (True, None)


WEAK = """
import json, weakref, ibverbs as ib
ctx = ib.get_device_list()[0].open()
cq = ctx.create_cq(16)
try:
    ref = weakref.ref(cq)
except TypeError:
    print(json.dumps([False, None]))
else:
    del cq
    print(json.dumps([True, ref() is None]))
"""
