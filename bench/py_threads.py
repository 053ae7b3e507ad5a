"""The Python side of bench/threads.py: the message rate of one signaled
RDMA WRITE posted and its completion polled, one in flight, by N threads,
each driving its own QP and CQ (bench/c_threads.c in C).

    python bench/py_threads.py null                      (then commands on stdin)
    python bench/py_threads.py DEVICE:GID_INDEX [DEVICE:GID_INDEX]

null: the null provider (bench/nullverbs.c as IBVERBS_LIBRARY, with
NULLVERBS_COMPLETE_POSTS=1: a post's completion is there at the next
poll); DEVICE:GID_INDEX: Soft-RoCE in the test VM, thread t's QP on the
t-th device named (the last one for the threads after it), connected to
a second QP there (RC loopback; GID_INDEX: the RoCE v2 GID).  Each thread
has its own device context, PD, MR, CQ and QP.  Run by a free-threaded
CPython, with the GIL off or on (-X gil=1): the loops are the same.

Speaks c_threads' protocol: READY, then each command "<api>_<n> <seconds>"
is answered with "RESULT <api>_<n> <rate>:<cores>" (n threads start
together, each runs for <seconds> by its own clock; rate: the sum of the
threads' own rates, messages per second; cores: the sum of their CPU time
over their wall time).  <api>:
  plain  a SendWR built once, qp.post_send(wr) (the kept request: posted
         again unchanged, nothing converted), cq.poll(1) -> [WC]
  hot    the hot-loop API: a PostList built once, cq.poll_into(WCBuffer)
"""
import ctypes
import mmap
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ibverbs as ib  # noqa: E402

MAX_THREADS = 2
PORT = 1
MSG = 8
RDMA_WRITE = 0                  # WROpcode
SIGNALED = 2                    # SendFlags
ACCESS = 1 | 2 | 4              # LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ
CHUNK = 64                      # messages between two readings of the clock


class Lane:
    """One thread's QP, CQ and requests, all its own: in the loop a thread
    touches no object another thread uses (a shared object's reference
    count would be written by both, and that alone limits the scaling)."""

    def __init__(self, spec):
        name, _, gid_index = ("null0", "", "") if spec == "null" else spec.partition(":")
        self.ctx = next(d for d in ib.get_device_list() if d.name == name).open()
        pd = self.ctx.alloc_pd()
        self.mem = mmap.mmap(-1, 4096)      # a page of its own: rxe writes the message into it
        addr = ctypes.addressof(ctypes.c_char.from_buffer(self.mem))
        self.mr = pd.reg_mr(addr, 4096, ACCESS)
        self.cq = self.ctx.create_cq(64)
        self.qp, self.peer = (pd.create_qp(ib.QPInitAttr(self.cq, self.cq, qp_type=ib.QPType.RC,
                                                         max_send_wr=16, max_recv_wr=16))
                              for _ in range(2))
        if gid_index:
            port_attr = self.ctx.query_port(PORT)
            gid = self.ctx.query_gid(PORT, int(gid_index))
            for qp, other in ((self.qp, self.peer), (self.peer, self.qp)):
                info = ib.local_qp_info(other, port_attr, gid, port=PORT, psn=0)
                ib.connect_rc(qp, info, port=PORT, sgid_index=int(gid_index), access=ACCESS,
                              local_psn=0)
        self.wr = ib.SendWR(wr_id=1, sg_list=[ib.SGE(self.mr, MSG)], opcode=RDMA_WRITE,
                            send_flags=SIGNALED, remote_addr=addr + 2048, rkey=self.mr.rkey)
        self.plist = ib.PostList([self.wr])
        self.wcbuf = ib.WCBuffer(1, raise_on_error=True)   # poll_into checks every status


def plain(lane, seconds):
    """(messages/s, CPU s per wall s) of this thread's plain-API loop."""
    post, poll, wr = lane.qp.post_send, lane.cq.poll, lane.wr
    chunk, clock, cpu = range(CHUNK), time.perf_counter, time.thread_time
    done = 0
    t0, c0 = clock(), cpu()
    while True:
        for _ in chunk:
            post(wr)
            while not (wcs := poll(1)):
                pass
            if wcs[0].status:
                raise RuntimeError(f"completion status {wcs[0].status}")
        done += CHUNK
        if (t := clock()) - t0 >= seconds:
            return done / (t - t0), (cpu() - c0) / (t - t0)


def hot(lane, seconds):
    """(messages/s, CPU s per wall s) of this thread's hot-loop-API loop."""
    post, poll_into, plist, buf = lane.qp.post_send, lane.cq.poll_into, lane.plist, lane.wcbuf
    chunk, clock, cpu = range(CHUNK), time.perf_counter, time.thread_time
    done = 0
    t0, c0 = clock(), cpu()
    while True:
        for _ in chunk:
            post(plist)
            while not poll_into(buf):
                pass
        done += CHUNK
        if (t := clock()) - t0 >= seconds:
            return done / (t - t0), (cpu() - c0) / (t - t0)


LOOPS = {"plain": plain, "hot": hot}


def measure(loop, lanes, seconds):
    """(total messages/s, cores): the threads start together."""
    start = threading.Barrier(len(lanes))
    results = [None] * len(lanes)
    errors = []

    def run(i):
        try:
            start.wait()
            results[i] = loop(lanes[i], seconds)
        except BaseException as e:  # reported by the main thread, not lost with this one
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(lanes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(r[0] for r in results), sum(r[1] for r in results)


def made_in_threads(specs):
    """A Lane per spec, each made in a thread of its own, as a program whose
    threads each set up their own QP would.  On 3.14t an object comes from
    its making thread's heap, and is that thread's to count references to
    without atomics: made one after another by one thread, two lanes'
    objects sit side by side, one cache line can hold the end of one and
    the lock of the other, and the two threads then take turns on that line
    (seen: the hot loop at 1.1 times one thread's rate, against 1.9 with
    the lanes made in their threads)."""
    lanes = [None] * len(specs)
    errors = []

    def make(i):
        try:
            lanes[i] = Lane(specs[i])
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    for t in [threading.Thread(target=make, args=(i,)) for i in range(len(specs))]:
        t.start()
        t.join()
    if errors:
        raise errors[0]
    return lanes


def main(specs):
    if not specs:
        raise SystemExit("usage: py_threads.py null | py_threads.py DEVICE:GID_INDEX ...")
    lanes = made_in_threads([specs[min(t, len(specs) - 1)] for t in range(MAX_THREADS)])
    for loop in LOOPS.values():         # the loops' first runs (specialization), untimed
        for lane in lanes:
            loop(lane, 0)
    print("READY", flush=True)
    for line in sys.stdin:
        key, seconds = line.split()
        api, _, n = key.rpartition("_")
        if api not in LOOPS or not 1 <= int(n) <= MAX_THREADS:
            raise SystemExit(f"py_threads: unknown command {line.strip()!r}")
        rate, cores = measure(LOOPS[api], lanes[:int(n)], float(seconds))
        print(f"RESULT {key} {rate:.3f}:{cores:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
