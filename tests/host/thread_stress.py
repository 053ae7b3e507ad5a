"""Thread stress of the binding on a host provider (tests/host/test_threads_host.py).

Run in a child interpreter whose ibverbs loaded a test provider through
IBVERBS_LIBRARY: the null provider (bench/nullverbs.c) or the recording
provider (tests/recording/recverbs.c), as each scenario says.  The same
code runs under the interpreter that runs pytest and under a free-threaded
one (3.14t), where nothing serialises the threads but the extension's own
locks:

    python tests/host/thread_stress.py SCENARIO [SCENARIO ...]

Each scenario starts THREADS threads racing over shared objects for
IBVERBS_THREAD_STRESS_SECONDS (default 1), checks what moved, closes
everything, and prints one JSON line: {"scenario", "gil_enabled", "counts",
"open"} ("open": every handle class's _open_count() at the end).  A failed
check raises (exit status 1 with its traceback); a crash is the child's
signal, seen by the caller.

What the providers give: the null provider's posts only read the requests
(no completion follows), and a CQ created with cqe = 1000000 + K returns K
successful completions, wr_id 0..K-1, on every poll; it has no
ibv_modify_qp (its stub aborts), and its MR keys and QP numbers come from
plain counters (duplicates possible under races: nothing here relies on
them).  The recording provider keeps a copy of every request posted
(behind its mutex), implements ibv_modify_qp, and its CQs return the
completions a test queued, in order.
"""
from __future__ import annotations

import ctypes
import errno
import faulthandler
import gc
import itertools
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List

import ibverbs as ib

THREADS = 4
SECONDS = float(os.environ.get("IBVERBS_THREAD_STRESS_SECONDS", "1"))
HANDLE_CLASSES = ("Context", "PD", "CQ", "CompChannel", "QP", "SRQ", "MR", "MW", "AH", "XRCD",
                  "DM", "Flow", "Counters", "WQ", "RWQIndTable", "TD")
# A null-provider CQ created with this many entries returns K completions per poll.
NULL_COMPLETIONS = 4
NULL_CQE = 1_000_000 + NULL_COMPLETIONS
ACCESS = ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.REMOTE_WRITE | ib.AccessFlags.REMOTE_READ
# How long a thread may take to stop once told: longer is a hang.
JOIN_TIMEOUT = 30.0


class Memory:
    """Host memory for MRs (ctypes: no numpy in the child)."""

    def __init__(self, size: int) -> None:
        self.raw = ctypes.create_string_buffer(size)
        self.addr = ctypes.addressof(self.raw)
        self.size = size


def closed_or_busy(exc: BaseException, *allowed: int) -> int:
    """exc's errno, which must be one of allowed (default EBADF, EBUSY);
    anything else is re-raised with the reason."""
    allowed = allowed or (errno.EBADF, errno.EBUSY)
    if isinstance(exc, ib.VerbsError) and exc.errno in allowed:
        return exc.errno
    raise AssertionError(f"expected VerbsError with errno in {allowed}, got {exc!r}") from exc


def race(bodies: List[Callable[[threading.Event], Any]], seconds: float = SECONDS,
         stop_when: Callable[[], bool] = lambda: False) -> List[Any]:
    """Run each body(stop) in its own thread, started together; after
    seconds (or once stop_when() holds, or all have returned) set stop and
    join them.  Their
    return values; the first exception of any is raised here."""
    stop = threading.Event()
    start = threading.Barrier(len(bodies))
    results: List[Any] = [None] * len(bodies)
    errors: List[BaseException] = []

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = bodies[i](stop)
        except BaseException as exc:        # reported by the caller
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(bodies))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + seconds
    while (not stop.is_set() and time.monotonic() < deadline and not stop_when()
           and any(t.is_alive() for t in threads)):
        time.sleep(0.005)
    stop.set()
    for i, t in enumerate(threads):
        t.join(JOIN_TIMEOUT)
        if t.is_alive():
            raise AssertionError(f"thread {i} still running {JOIN_TIMEOUT} s after it was told "
                                 "to stop: a hang")
    if errors:
        raise errors[0]
    return results


def closed_under_use(objects: List[Any], calls: List[Callable[[], Any]],
                     patience: float = 0.2) -> Dict[str, int]:
    """Each call(), in a thread of its own, repeated until it raises EBADF,
    while this thread closes objects in order once every call has run.  A
    close refused (EBUSY: a call in flight) is retried; after `patience`
    seconds of refusals the workers are told to pause, so that the close
    must then succeed (a close never wins against calls that never stop:
    that is the rule, not a fault).  Anything but EBADF or EBUSY fails."""
    used = [threading.Event() for _ in calls]
    pause = threading.Event()
    all_closed = threading.Event()

    def until_closed(k: int) -> Callable[[threading.Event], int]:
        def body(stop: threading.Event) -> int:
            done = 0
            while True:
                if pause.is_set():
                    assert all_closed.wait(JOIN_TIMEOUT), "the closer never finished"
                try:
                    calls[k]()
                except ib.VerbsError as exc:
                    if closed_or_busy(exc, errno.EBADF) == errno.EBADF:
                        return done
                done += 1
                used[k].set()
                if stop.is_set():
                    raise AssertionError(f"worker {k}: its object never closed")
        return body

    def closer(stop: threading.Event) -> int:
        for u in used:
            assert u.wait(10), "a worker never made its first call"
        refused = 0
        for obj in objects:
            deadline = time.monotonic() + patience
            while True:
                try:
                    obj.close()
                    break
                except ib.VerbsError as exc:
                    closed_or_busy(exc, errno.EBUSY)
                    refused += 1
                    if time.monotonic() > deadline + JOIN_TIMEOUT:
                        raise AssertionError(
                            f"{obj!r}: close() still refused {JOIN_TIMEOUT} s after every "
                            f"worker paused (no call in flight): {exc}") from exc
                    if time.monotonic() > deadline:
                        pause.set()
                    time.sleep(0)
            assert obj.closed
        all_closed.set()
        return refused

    *done, refused = race([until_closed(k) for k in range(len(calls))] + [closer],
                          seconds=JOIN_TIMEOUT)
    assert all(n >= 1 for n in done), done
    return {"calls": sum(done), "close_refused_ebusy": refused, "paused": int(pause.is_set())}


def open_counts() -> Dict[str, int]:
    gc.collect()
    return {name: getattr(ib, name)._open_count() for name in HANDLE_CLASSES}


def null_poll_is_whole(wcs: List[Any], asked: int) -> None:
    """What a null-provider CQ returns for poll(asked): min(asked, K)
    successful completions, wr_id 0, 1, ..."""
    expected = list(range(min(asked, NULL_COMPLETIONS)))
    got = [wc.wr_id for wc in wcs]
    assert got == expected, f"poll({asked}) gave wr_ids {got}, not {expected}"
    assert all(wc.is_success and wc.qp_num == 1 for wc in wcs), wcs


# ---- the scenarios ------------------------------------------------------------------


def null_posts_and_polls(ctx: Any) -> Dict[str, Any]:
    """Each thread posts (single requests, lists, a PostList, receives) on a
    QP shared by all and on its own QP, and polls a CQ shared by all and
    its own CQ (poll and poll_into): every poll returns exactly what the
    null provider hands back."""
    pd = ctx.alloc_pd()
    mem = Memory(THREADS * 4096)
    mr = pd.reg_mr(mem.addr, mem.size, ACCESS)
    shared_cq = ctx.create_cq(NULL_CQE)
    shared_qp = pd.create_qp(ib.QPInitAttr(shared_cq, shared_cq, max_send_wr=64, max_recv_wr=64))
    own = []
    for _ in range(THREADS):
        cq = ctx.create_cq(NULL_CQE)
        own.append((cq, pd.create_qp(ib.QPInitAttr(cq, cq, max_send_wr=64, max_recv_wr=64))))

    def worker(k: int) -> Callable[[threading.Event], Dict[str, int]]:
        def body(stop: threading.Event) -> Dict[str, int]:
            cq, qp = own[k]
            sge = mr.sge(1024, offset=k * 4096)
            send = ib.SendWR(wr_id=k, sg_list=[sge], opcode=ib.WROpcode.RDMA_WRITE,
                             remote_addr=0x1000, rkey=0x42)
            chain = [ib.SendWR(wr_id=k * 10 + i, sg_list=[sge]) for i in range(3)]
            postlist = ib.PostList(chain)
            recv = ib.RecvWR(wr_id=k, sg_list=[sge])
            wcs = ib.WCBuffer(8)
            posts = polls = 0
            for n in itertools.cycle(range(1, 7)):
                if stop.is_set():
                    break
                for target in (shared_qp, qp):
                    target.post_send(send)
                    target.post_send(chain)
                    target.post_send(postlist)
                    target.post_recv(recv)
                    posts += 4
                null_poll_is_whole(shared_cq.poll(n), n)
                assert cq.poll_into(wcs) == NULL_COMPLETIONS and len(wcs) == NULL_COMPLETIONS
                assert wcs.wr_ids() == list(range(NULL_COMPLETIONS)), wcs.wr_ids()
                polls += 2
            assert posts and polls, "stopped before its first round"
            return {"posts": posts, "polls": polls}
        return body

    done = race([worker(k) for k in range(THREADS)])
    for cq, qp in own:
        qp.close()
        cq.close()
    for obj in (shared_qp, shared_cq, mr, pd):
        obj.close()
    return {"posts": sum(d["posts"] for d in done), "polls": sum(d["polls"] for d in done),
            "per_thread_posts": [d["posts"] for d in done]}


def null_close_under_use(ctx: Any) -> Dict[str, Any]:
    """Rounds of: a fresh CQ, QP and MR used by four threads (posting a
    request, posting a PostList, polling, making SGEs) while another closes
    them (MR, then QP, then CQ; closed_under_use).  The PD the rounds share
    must close at the end: its count of live children came back to zero."""
    pd = ctx.alloc_pd()
    mem = Memory(4096)
    totals = {"rounds": 0, "calls": 0, "close_refused_ebusy": 0, "paused": 0}
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline or totals["rounds"] < 5:
        cq = ctx.create_cq(NULL_CQE)
        qp = pd.create_qp(ib.QPInitAttr(cq, cq, max_send_wr=64, max_recv_wr=64))
        mr = pd.reg_mr(mem.addr, mem.size, ACCESS)
        wr = ib.SendWR(wr_id=1, sg_list=[mr.sge(64)], opcode=ib.WROpcode.RDMA_WRITE,
                       remote_addr=0x1000, rkey=0x42)
        postlist = ib.PostList([wr, wr])
        got = closed_under_use([mr, qp, cq], [
            lambda: qp.post_send(wr), lambda: qp.post_send(postlist),
            lambda: null_poll_is_whole(cq.poll(3), 3), lambda: mr.sge(32)])
        for key, n in got.items():
            totals[key] += n
        totals["rounds"] += 1
    pd.close()
    return totals


def null_mr_churn(ctx: Any) -> Dict[str, Any]:
    """Threads register and deregister MRs on one PD; each MR goes into a
    shared pool, from which any thread closes one (two threads may close
    the same MR at once: one destroys it, the other finds it closed or
    busy).  Meanwhile the PD holds each thread's long-lived MR, so a
    close() of the PD must say EBUSY every time; at the end it closes."""
    pd = ctx.alloc_pd()
    mem = Memory(THREADS * 8192)
    keep = [pd.reg_mr(mem.addr + k * 8192, 8192, ACCESS) for k in range(THREADS)]
    pool: List[Any] = []

    def churner(k: int) -> Callable[[threading.Event], Dict[str, int]]:
        def body(stop: threading.Event) -> Dict[str, int]:
            registered = closed = 0
            offset = 0
            while not stop.is_set():
                offset = (offset + 64) % 4096
                addr = mem.addr + k * 8192 + offset
                mr = pd.reg_mr(addr, 128, ACCESS)
                assert (mr.addr, mr.length) == (addr, 128) and not mr.closed
                registered += 1
                pool.append(mr)
                try:
                    victim = pool.pop()
                except IndexError:          # another thread took the last one
                    continue
                try:
                    victim.close()
                    assert victim.closed
                    closed += 1
                except ib.VerbsError as exc:
                    closed_or_busy(exc)
            return {"registered": registered, "closed": closed}
        return body

    def pd_closer(stop: threading.Event) -> int:
        refused = 0
        while not stop.is_set():
            try:
                pd.close()
            except ib.VerbsError as exc:
                closed_or_busy(exc, errno.EBUSY)
                assert "open child resource" in str(exc), str(exc)
                refused += 1
            else:
                raise AssertionError("the PD closed while it still had MRs")
        return refused

    *churned, refused = race([churner(k) for k in range(THREADS)] + [pd_closer])
    for mr in pool + keep:
        mr.close()
    assert ib.MR._open_count() == 0, ib.MR._open_count()
    pd.close()
    return {"registered": sum(c["registered"] for c in churned),
            "closed_by_a_thread": sum(c["closed"] for c in churned),
            "pd_close_refused": refused}


def null_shared_postlist_and_wcbuffer(ctx: Any) -> Dict[str, Any]:
    """One PostList posted by two threads at once (to two QPs) while a third
    rewrites its entries (wr_id in place, whole requests replaced), and one
    WCBuffer polled into by two threads at once while a third reads and
    clears it.  Each call either works or raises RuntimeError saying why;
    what the list and the buffer hold stays one of the states written."""
    pd = ctx.alloc_pd()
    mem = Memory(4096)
    mr = pd.reg_mr(mem.addr, mem.size, ACCESS)
    cqs = [ctx.create_cq(NULL_CQE) for _ in range(2)]
    qps = [pd.create_qp(ib.QPInitAttr(cq, cq, max_send_wr=64)) for cq in cqs]
    wr_ids = range(1000, 1064)
    postlist = ib.PostList([ib.SendWR(wr_id=1000, sg_list=[mr.sge(64)]) for _ in range(3)])
    wcbuf = ib.WCBuffer(NULL_COMPLETIONS)
    refusals: Dict[str, int] = {}

    def attempt(what: str, call: Callable[[], Any]) -> bool:
        try:
            call()
            return True
        except RuntimeError as exc:
            refusals[f"{what}: {exc}"] = refusals.get(f"{what}: {exc}", 0) + 1
            return False

    def poster(qp: Any) -> Callable[[threading.Event], int]:
        def body(stop: threading.Event) -> int:
            ok = 0
            while not stop.is_set():
                ok += attempt("post_send(PostList)", lambda: qp.post_send(postlist))
            return ok
        return body

    def rewriter(stop: threading.Event) -> int:
        done = 0
        for i in itertools.cycle(range(len(postlist))):
            if stop.is_set():
                break
            wr_id = wr_ids[done % len(wr_ids)]
            done += attempt("PostList entry wr_id", lambda: setattr(postlist[i], "wr_id", wr_id))
            done += attempt("PostList[i] = SendWR", lambda: postlist.__setitem__(
                i, ib.SendWR(wr_id=wr_id, sg_list=[mr.sge(32, offset=64)])))
            got = postlist[i].wr_id
            assert got in wr_ids, f"entry {i} reads wr_id {got}, never written"
        return done

    def poller(cq: Any) -> Callable[[threading.Event], int]:
        def body(stop: threading.Event) -> int:
            ok = 0
            while not stop.is_set():
                ok += attempt("poll_into", lambda: cq.poll_into(wcbuf))
            return ok
        return body

    def reader(stop: threading.Event) -> int:
        reads = 0
        while not stop.is_set():
            ids = wcbuf.wr_ids()
            # What a null-provider poll writes, whole, or nothing (cleared).
            assert ids in ([], list(range(NULL_COMPLETIONS))), ids
            assert len(wcbuf) in (0, NULL_COMPLETIONS), len(wcbuf)
            if reads % 3 == 0:
                attempt("WCBuffer.clear", wcbuf.clear)
            reads += 1
        return reads

    posted_a, posted_b, rewrites, polled_a, polled_b, reads = race(
        [poster(qps[0]), poster(qps[1]), rewriter, poller(cqs[0]), poller(cqs[1]), reader])
    assert posted_a + posted_b > 0 and polled_a + polled_b > 0 and rewrites > 0 and reads > 0
    # Whatever happened, the list still posts and the buffer still polls.
    qps[0].post_send(postlist)
    assert cqs[0].poll_into(wcbuf) == NULL_COMPLETIONS
    assert wcbuf.wr_ids() == list(range(NULL_COMPLETIONS))
    assert all(postlist[i].wr_id in wr_ids for i in range(len(postlist)))
    for obj in (*qps, *cqs, mr, pd):
        obj.close()
    return {"postlist_posts": posted_a + posted_b, "rewrites": rewrites,
            "poll_into": polled_a + polled_b, "reads": reads, "refused": refusals}


# ---- under the recording provider --------------------------------------------------


def rec_posts_counted(rec: Any) -> Dict[str, Any]:
    """Threads post requests with unique wr_ids (single, lists, receives) on
    a QP shared by all and on their own QPs: the provider was handed each
    one exactly once, on the QP it was posted to.  Then completions queued
    on a shared CQ are polled by all threads at once (poll and poll_into):
    each is delivered exactly once, and each thread's in queue order."""
    ctx = rec.ctx
    pd = ctx.alloc_pd()
    mem = Memory(THREADS * 4096)
    mr = pd.reg_mr(mem.addr, mem.size, ACCESS)
    cq = ctx.create_cq(64)
    shared_qp = pd.create_qp(ib.QPInitAttr(cq, cq, max_send_wr=64, max_recv_wr=64))
    own_qps = [pd.create_qp(ib.QPInitAttr(cq, cq, max_send_wr=64, max_recv_wr=64))
               for _ in range(THREADS)]
    limit = 5000            # requests per thread: the records stay small

    def poster(k: int) -> Callable[[threading.Event], List[Any]]:
        def body(stop: threading.Event) -> List[Any]:
            sge = mr.sge(256, offset=k * 4096)
            posted = []
            ids = itertools.count(k << 32)
            while not stop.is_set() and len(posted) < limit:
                for qp in (shared_qp, own_qps[k]):
                    a, b, c, d = next(ids), next(ids), next(ids), next(ids)
                    qp.post_send(ib.SendWR(wr_id=a, sg_list=[sge]))
                    qp.post_send([ib.SendWR(wr_id=b, sg_list=[sge]),
                                  ib.SendWR(wr_id=c, sg_list=[sge])])
                    qp.post_recv(ib.RecvWR(wr_id=d, sg_list=[sge]))
                    posted += [("send", qp.qp_num, a), ("send", qp.qp_num, b),
                               ("send", qp.qp_num, c), ("recv", qp.qp_num, d)]
            return posted
        return body

    posted = [p for per_thread in race([poster(k) for k in range(THREADS)]) for p in per_thread]
    handed = [(r["kind"], r["target"], r["wr_id"]) for r in rec.requests()]
    assert len(handed) == len(posted) and sorted(handed) == sorted(posted), (
        f"{len(posted)} posted, {len(handed)} handed to the provider; "
        f"missing {sorted(set(posted) - set(handed))[:5]}, "
        f"unexpected {sorted(set(handed) - set(posted))[:5]}")

    # The provider's CQ ring holds 1024: completions are queued while polled.
    completions = 20_000
    taken: List[List[int]] = [[] for _ in range(THREADS)]

    def pusher(stop: threading.Event) -> int:
        wr_id = 0
        while wr_id < completions and not stop.is_set():
            if rec.lib.rec_cq_push(cq.handle, wr_id, 0, 0, 0) == 0:
                wr_id += 1
            else:                       # the ring is full: let the pollers take some
                time.sleep(0)
        return wr_id

    def poller(k: int) -> Callable[[threading.Event], int]:
        def body(stop: threading.Event) -> int:
            buf = ib.WCBuffer(7)
            polls = 0
            while not stop.is_set():
                before = len(taken[k])
                if polls % 2:
                    wcs = cq.poll(5)
                    assert all(wc.is_success for wc in wcs)
                    taken[k].extend(wc.wr_id for wc in wcs)
                else:
                    cq.poll_into(buf)
                    taken[k].extend(buf.wr_ids())
                polls += 1
                if len(taken[k]) == before:
                    # an empty CQ: let the pusher have the GIL (four pollers
                    # spinning on it once let 17,112 of 20,000 in 30 s)
                    time.sleep(0)
            return polls
        return body

    pushed, *_polls = race([pusher] + [poller(k) for k in range(THREADS)], seconds=2 * JOIN_TIMEOUT,
                           stop_when=lambda: sum(map(len, taken)) >= completions)
    assert pushed == completions, f"only {pushed} completions queued"
    every = sorted(itertools.chain.from_iterable(taken))
    assert every == list(range(completions)), (
        f"{len(every)} completions delivered for {completions} queued; duplicates "
        f"{len(every) - len(set(every))}")
    for k, ids in enumerate(taken):
        assert ids == sorted(ids), f"thread {k} got completions out of queue order"
    for obj in (shared_qp, *own_qps, cq, mr, pd):
        obj.close()
    return {"requests_handed": len(handed), "completions_polled": len(every),
            "polled_per_thread": [len(t) for t in taken]}


def rec_modify_under_use(rec: Any) -> Dict[str, Any]:
    """Rounds of: two threads move one QP between states (modify to RESET,
    to_init) while two post to it and query it, and another closes it
    (closed_under_use).  Every state read back is one of those set."""
    ctx = rec.ctx
    pd = ctx.alloc_pd()
    mem = Memory(4096)
    mr = pd.reg_mr(mem.addr, mem.size, ACCESS)
    cq = ctx.create_cq(64)
    states = {ib.QPState.RESET, ib.QPState.INIT}
    totals = {"rounds": 0, "calls": 0, "close_refused_ebusy": 0, "paused": 0}
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline or totals["rounds"] < 5:
        qp = pd.create_qp(ib.QPInitAttr(cq, cq, max_send_wr=64, max_recv_wr=64))
        wr = ib.SendWR(wr_id=7, sg_list=[mr.sge(64)])

        def to_reset() -> None:
            qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.RESET)
            assert qp.state in states, qp.state

        def to_init() -> None:
            qp.to_init(1, ACCESS)
            assert qp.state in states, qp.state

        def query() -> None:
            attr, _cap = qp.query()
            assert attr["qp_state"] in states, attr

        got = closed_under_use([qp], [to_reset, to_init, lambda: qp.post_send(wr), query])
        for key, n in got.items():
            totals[key] += n
        totals["rounds"] += 1
    for obj in (cq, mr, pd):
        obj.close()
    return totals


def rec_requests_rewritten_while_posted(rec: Any) -> Dict[str, Any]:
    """One SendWR and its SGEs rewritten by two threads (wr_id, sg_list
    replaced by lists of 1 to 4 SGEs, an SGE's length) while two others
    post it: every request the provider was handed is one the Python
    objects held at some moment - a wr_id written, num_sge SGEs each one
    of those built - never a torn or freed one.  A post may instead raise
    RuntimeError (its sg_list changed while it was converted)."""
    ctx = rec.ctx
    pd = ctx.alloc_pd()
    mem = Memory(4096)
    mr = pd.reg_mr(mem.addr, mem.size, ACCESS)
    cq = ctx.create_cq(64)
    qps = [pd.create_qp(ib.QPInitAttr(cq, cq, max_send_wr=64, max_send_sge=4)) for _ in range(2)]
    lengths = (16, 32, 48)
    sges = [mr.sge(16, offset=64 * i) for i in range(8)]
    mutable_sge = sges[0]
    lists = [sges[i:i + n] for n in range(1, 5) for i in range(0, 8 - n, 3)]
    wr = ib.SendWR(wr_id=0, sg_list=lists[0])
    wr_ids = range(100, 164)
    valid_sges = {(s.addr, length, s.lkey) for s in sges for length in (16, *lengths)}
    refused: Dict[str, int] = {}
    limit = 20_000

    def rewriter(which: int) -> Callable[[threading.Event], int]:
        def body(stop: threading.Event) -> int:
            n = 0
            while not stop.is_set():
                wr.wr_id = wr_ids[n % len(wr_ids)]
                wr.sg_list = lists[(n + which) % len(lists)]
                mutable_sge.length = lengths[n % len(lengths)]
                n += 1
            return n
        return body

    def poster(qp: Any) -> Callable[[threading.Event], int]:
        def body(stop: threading.Event) -> int:
            n = 0
            while not stop.is_set() and n < limit:
                try:
                    qp.post_send(wr if n % 2 else [wr, wr])
                except RuntimeError as exc:
                    refused[str(exc)] = refused.get(str(exc), 0) + 1
                n += 1
            return n
        return body

    rewrites_a, rewrites_b, posts_a, posts_b = race(
        [rewriter(0), rewriter(1), poster(qps[0]), poster(qps[1])])
    handed = [r for r in rec.requests() if r["kind"] == "send"]
    assert handed and rewrites_a and rewrites_b
    for r in handed:
        assert r["wr_id"] == 0 or r["wr_id"] in wr_ids, f"wr_id {r['wr_id']} never written"
        assert 1 <= r["num_sge"] <= 4 and len(r["sges"]) == r["num_sge"], r
        for sge in r["sges"]:
            assert sge in valid_sges, f"SGE {sge} is none of those built"
    for obj in (*qps, cq, mr, pd):
        obj.close()
    return {"requests_handed": len(handed), "rewrites": rewrites_a + rewrites_b,
            "posts": posts_a + posts_b, "refused": refused}


def rec_ah_closed_while_posted(rec: Any) -> Dict[str, Any]:
    """Rounds of: threads post UD requests naming one AH (one request, a
    list of two, a list too long for the stack's chain) while another
    thread closes that AH (closed_under_use); the provider reads each
    request 200 us into its post.  It is never handed a request whose AH
    was destroyed (it names an AH it no longer has with handle
    0xFFFFFFFF): a close during a post is refused (EBUSY)."""
    ctx, pd = rec.ctx, rec.pd
    mem = Memory(4096)
    mr = pd.reg_mr(mem.addr, mem.size, ACCESS)
    qp = rec.qp(qp_type=ib.QPType.UD, max_send_wr=1024)
    sge = mr.sge(64)
    totals = {"rounds": 0, "calls": 0, "close_refused_ebusy": 0, "paused": 0}
    rec.lib.rec_set_post_delay(200)     # the provider reads the AH 200 us into each post
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline or totals["rounds"] < 3:
        rec.clear()
        ah = pd.create_ah(ib.AHAttr(dlid=1, is_global=0))

        def request(i: int) -> Any:
            return ib.SendWR(wr_id=i, sg_list=[sge], ah=ah, remote_qpn=1, remote_qkey=1)

        one, two, many = request(1), [request(2), request(3)], [request(i) for i in range(40)]
        counts = closed_under_use([ah], [lambda: qp.post_send(one), lambda: qp.post_send(two),
                                         lambda: qp.post_send(many)], patience=0.05)
        for key, value in counts.items():
            totals[key] += value
        totals["rounds"] += 1
        stale = [r for r in rec.requests() if r["kind"] == "send" and r["ud_ah_handle"] == 0xFFFFFFFF]
        assert not stale, f"{len(stale)} request(s) handed to the provider after their AH was " \
                          f"destroyed (round {totals['rounds']})"
    rec.lib.rec_set_post_delay(0)
    for obj in (qp, mr):
        obj.close()
    return totals


def rec_bind_info_rewritten_while_posted(rec: Any) -> Dict[str, Any]:
    """Threads post BIND_MW requests naming one MWBindInfo (one request, a
    list of two, a list too long for the stack's chain) while another
    points that bind_info at a fresh MR and back, then deregisters the
    fresh one (retried while a post holds it: EBUSY).  The provider reads
    each request 100 us into its post.  It is never handed a bind_info
    whose MR is deregistered (bind_mr_handle 0xFFFFFFFF), nor one whose
    fields are none the bind_info held: a post binds the MR it holds."""
    ctx, pd = rec.ctx, rec.pd
    mem = Memory(1 << 16)
    home = pd.reg_mr(mem.addr, mem.size, ACCESS)
    mw = pd.alloc_mw(ib.MWType.TYPE_2)
    qp = rec.qp(max_send_wr=4096)
    info = ib.MWBindInfo(home, home.addr, 4096, ib.AccessFlags.REMOTE_WRITE)
    made: Dict[int, int] = {home.handle: home.addr}     # every MR's handle: its addr
    pending: List[Any] = []
    totals = {"rewrites": 0, "close_refused_ebusy": 0}
    rec.lib.rec_set_post_delay(100)

    def bind(wr_id: int) -> Any:
        return ib.SendWR(wr_id=wr_id, opcode=ib.WROpcode.BIND_MW, mw=mw, rkey=ib.inc_rkey(mw.rkey),
                         bind_info=info)

    def poster(request: Any) -> Callable[[threading.Event], int]:
        def body(stop: threading.Event) -> int:
            n = 0
            while not stop.is_set():
                qp.post_send(request)
                n += 1
            return n
        return body

    def rewriter(stop: threading.Event) -> int:
        offset = 0
        while not stop.is_set() or pending:
            if not stop.is_set():
                offset = (offset + 4096) % mem.size
                fresh = pd.reg_mr(mem.addr + offset, 4096, ACCESS)
                made[fresh.handle] = fresh.addr
                info.mr, info.addr = fresh, fresh.addr
                info.mr, info.addr = home, home.addr
                pending.append(fresh)
                totals["rewrites"] += 1
            for mr in list(pending):
                try:
                    mr.close()
                    pending.remove(mr)
                except ib.VerbsError as exc:
                    closed_or_busy(exc, errno.EBUSY)
                    totals["close_refused_ebusy"] += 1
        return 0

    *posts, _ = race([poster(bind(1)), poster([bind(2), bind(3)]),
                      poster([bind(i) for i in range(100, 140)]), rewriter])
    rec.lib.rec_set_post_delay(0)
    handed = [r for r in rec.requests() if r["kind"] == "send"]
    assert handed and all(posts) and totals["rewrites"], (len(handed), posts, totals)
    dead = [r for r in handed if r["bind_mr_handle"] == 0xFFFFFFFF]
    assert not dead, f"{len(dead)} request(s) bound an MR deregistered during their post"
    for r in handed:
        assert r["bind_mr_handle"] in made, r
        assert r["bind_length"] == 4096 and r["bind_rkey"] == ib.inc_rkey(mw.rkey), r
    for obj in (qp, mw, home):
        obj.close()
    return dict(totals, requests_handed=len(handed), posts=sum(posts))


def rec_sg_list_swapped_while_a_hold_waits(rec: Any) -> Dict[str, Any]:
    """Threads post UD requests (one request from two threads, a list of
    two) while two
    others keep their AH's lock busy (repr, .pd), so that a post's hold of
    the AH waits and suspends the request's critical section, and another
    gives the request a new list and rewrites it again and again.  A post
    reads only the list it locked: every SGE the provider is handed is one
    of those lists' (length 16 or 32, the MR's lkey), never a freed list's
    or one past a list's end (a crash, before the fix)."""
    ctx, pd = rec.ctx, rec.pd
    mem = Memory(4096)
    mr = pd.reg_mr(mem.addr, mem.size, ACCESS)
    qp = rec.qp(qp_type=ib.QPType.UD, max_send_wr=1 << 20)
    ah = pd.create_ah(ib.AHAttr(dlid=1, is_global=0))

    def request(wr_id: int) -> Any:
        return ib.SendWR(wr_id=wr_id, sg_list=[mr.sge(16)], ah=ah, remote_qpn=1, remote_qkey=1)

    one, two = request(1), [request(2), request(3)]
    swaps, changed, handed = [0], [0], [0]

    def check_and_clear() -> None:
        for r in rec.requests():
            if r["kind"] == "send":
                assert 0 <= r["num_sge"] <= 60, r
                assert all(n in (16, 32) and lkey == mr.lkey for _, n, lkey in r["sges"]), r
                handed[0] += 1
        rec.clear()

    def poster(wrs: Any, checks: bool) -> Callable[[threading.Event], int]:
        def body(stop: threading.Event) -> int:
            n = 0
            while not stop.is_set():
                try:
                    qp.post_send(wrs)
                    n += 1
                except RuntimeError as exc:
                    # a chain too long for the stack counts its SGEs before
                    # it fills them: a list grown in between is refused
                    assert str(exc) == "sg_list changed while it was converted", exc
                    changed[0] += 1
                    continue
                if checks and n % 2000 == 0:
                    check_and_clear()
            return n
        return body

    def hammer(stop: threading.Event) -> int:
        n = 0
        while not stop.is_set():
            repr(ah)
            ah.pd
            n += 1
        return n

    def swapper(stop: threading.Event) -> int:
        while not stop.is_set():
            for w in (one, *two) if swaps[0] % 10 == 0 else (one,):
                fresh = [mr.sge(32) for _ in range(60)]
                w.sg_list = fresh
                for _ in range(20):
                    fresh.clear()
                    fresh.extend(mr.sge(16) for _ in range(60))
            swaps[0] += 1
        return 0

    # 3 s: the window (a hold waiting while the list is replaced) is narrow
    posts = race([poster(one, True), poster(one, False), poster(two, False), hammer, hammer,
                  swapper], seconds=3 * SECONDS)[:3]
    check_and_clear()
    assert all(posts) and swaps[0] and handed[0], (posts, swaps, handed)
    for obj in (qp, ah, mr):
        obj.close()
    return {"posts": sum(posts), "swaps": swaps[0], "requests_handed": handed[0],
            "changed_while_converted": changed[0]}


SCENARIOS: Dict[str, Callable[[Any], Dict[str, Any]]] = {
    f.__name__: f for f in (null_posts_and_polls, null_close_under_use, null_mr_churn,
                            null_shared_postlist_and_wcbuffer, rec_posts_counted,
                            rec_modify_under_use, rec_requests_rewritten_while_posted,
                            rec_ah_closed_while_posted, rec_bind_info_rewritten_while_posted,
                            rec_sg_list_swapped_while_a_hold_waits)}


def main(names: List[str]) -> None:
    faulthandler.enable()       # a crash prints every thread's Python stack
    # A hang, too, before the parent's 120 s timeout kills this child mutely.
    faulthandler.dump_traceback_later(100, exit=True)
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    for name in names:
        if name.startswith("rec_"):
            # The recording provider's Recorder (tests/recording/recording.py):
            # its context, PD and CQ, and what the provider was handed.
            import recording
            rec = recording.Recorder()
            counts = SCENARIOS[name](rec)
            for obj in (rec.cq, rec.pd, rec.ctx):
                obj.close()
        else:
            ctx = ib.get_device_list()[0].open()
            counts = SCENARIOS[name](ctx)
            ctx.close()
        print(json.dumps({"scenario": name, "gil_enabled": gil, "counts": counts,
                          "open": open_counts()}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
