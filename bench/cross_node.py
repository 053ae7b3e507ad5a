"""`make bench-cluster`: C and this package's plain API side by side between
the two nodes of tests/vm/run-cluster (separate kernels, one wire).

    python3 bench/cross_node.py [--rounds N]

Runs on the host (standard library only; take /tmp/ibverbs-vm.lock
around it).  Each round measures, back to back:

  pingpong  8-byte RC round trip: C `ibv_rc_pingpong -s 8` (its average)
            against `ibverbs ping -s 8` (its average), us
  write_bw  64 KiB RDMA WRITEs, 16 in flight: C `ib_write_bw` against
            tests/cluster/peer.py write-bw-client (plain API), MB/s

--wire-only measures the C round trip alone (ibv_rc_pingpong -s 8, busy
polling, and -e, sleeping on a completion channel), for comparing wires
and VM settings: --smp N and each --cluster-arg ARG go to run-cluster
(e.g. --cluster-arg=--idle-poll, --cluster-arg=--wire --cluster-arg=udp).

Otherwise it prints each value's median and the median of the per-round ratios
(higher is better for us: C time / ours, our rate / C's), as
"ratio <workload> plain/c=<x>" lines.  The host's load average goes with
them: under TCG every number moves with it.
"""
import argparse
import os
import re
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))

from cluster import PY, Cluster  # noqa: E402

N_PING = 500
N_WRITES, WRITE_SIZE, WINDOW = 2000, 65536, 16


def retry(cmd):
    """The client side: the server on the other node may not listen yet."""
    return "for i in $(seq 100); do %s && exit 0; sleep 0.3; done; exit 1" % cmd


def pingpong_c(c, port):
    s = c[1].spawn("ibv_rc_pingpong -d rxe0 -g 1 -s 8 -n %d -p %d" % (N_PING, port))
    r = c[2].run(retry("ibv_rc_pingpong -d rxe0 -g 1 -s 8 -n %d -p %d node1" % (N_PING, port)))
    s.wait().check()
    return float(re.search(r"([0-9.]+) usec/iter", r.out).group(1))


def pingpong_c_events(c, port):
    """The same, both sides sleeping on a completion channel (-e)."""
    s = c[1].spawn("ibv_rc_pingpong -e -d rxe0 -g 1 -s 8 -n %d -p %d" % (N_PING, port))
    r = c[2].run(retry("ibv_rc_pingpong -e -d rxe0 -g 1 -s 8 -n %d -p %d node1" % (N_PING, port)))
    s.wait().check()
    return float(re.search(r"([0-9.]+) usec/iter", r.out).group(1))


def wire_only(args):
    """Boot a cluster with the given settings; median C round trips."""
    with tempfile.TemporaryDirectory() as d:
        c = Cluster(d, smp=args.smp, extra=args.cluster_arg).start()
        print("cluster %s smp=%d booted in %.1f s (load %.1f)"
              % (" ".join(args.cluster_arg) or "(defaults)", args.smp, c.boot_secs,
                 os.getloadavg()[0]), flush=True)
        busy, events, port = [], [], 19000
        try:
            for r in range(args.rounds):
                busy.append(pingpong_c(c, port))
                events.append(pingpong_c_events(c, port + 1))
                port += 2
                print("round %d: busy %.0f us, events %.0f us (load %.1f)"
                      % (r, busy[-1], events[-1], os.getloadavg()[0]), flush=True)
        finally:
            c.stop()
    print("wire %s smp=%d: 8 B RC round trip, median of %d x %d: busy-poll %.0f us, events %.0f us"
          % (" ".join(args.cluster_arg) or "(defaults)", args.smp, args.rounds, N_PING,
             statistics.median(busy), statistics.median(events)))


def pingpong_py(c, port):
    s = c[1].spawn("%s -m ibverbs ping --listen -d rxe0 --port %d" % (PY, port))
    r = c[2].run(retry("%s -m ibverbs ping node1 -d rxe0 --port %d -s 8 -n %d --json"
                       % (PY, port, N_PING)))
    s.wait().check()
    import json
    return json.loads(r.out[r.out.index("{"):])["avg_us"]


def write_bw_c(c, port):
    args = "-d rxe0 -x 1 -s %d -n %d -t %d -p %d -F" % (WRITE_SIZE, N_WRITES, WINDOW, port)
    s = c[1].spawn("ib_write_bw %s" % args)
    r = c[2].run(retry("ib_write_bw %s node1" % args))
    s.wait().check()
    # the result line: bytes, iterations, BW peak, BW average [MB/sec], msg rate
    line = [ln for ln in r.out.splitlines() if ln.strip().startswith(str(WRITE_SIZE))][-1]
    return float(line.split()[3])


def write_bw_py(c, port):
    s = c[1].spawn("%s tests/cluster/peer.py sink-server --port %d --size %d --timeout 300"
                   % (PY, port, WRITE_SIZE))
    r = c[2].run("%s tests/cluster/peer.py write-bw-client --port %d --size %d --count %d "
                 "--wrs %d" % (PY, port, WRITE_SIZE, N_WRITES, WINDOW))
    s.wait().check()
    return r.json()["MBps"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", "3")))
    ap.add_argument("--wire-only", action="store_true")
    ap.add_argument("--smp", type=int, default=1)
    ap.add_argument("--cluster-arg", action="append", default=[])
    args = ap.parse_args()
    if args.wire_only:
        return wire_only(args)
    values = {k: [] for k in ("pingpong_c", "pingpong_py", "write_bw_c", "write_bw_py")}
    ratios = {"pingpong": [], "write_bw": []}
    loads = []
    with tempfile.TemporaryDirectory() as d:
        c = Cluster(d).start()
        print("cluster booted in %.1f s (load %.1f)" % (c.boot_secs, os.getloadavg()[0]))
        port = 19000
        try:
            for r in range(args.rounds):
                order = [("pingpong", pingpong_c, pingpong_py), ("write_bw", write_bw_c, write_bw_py)]
                for name, fc, fp in order:
                    port += 2
                    # alternate who goes first: the load drifts
                    if r % 2:
                        vp, vc = fp(c, port), fc(c, port + 1)
                    else:
                        vc, vp = fc(c, port), fp(c, port + 1)
                    values[name + "_c"].append(vc)
                    values[name + "_py"].append(vp)
                    ratios[name].append(vc / vp if name == "pingpong" else vp / vc)
                loads.append(os.getloadavg()[0])
                print("round %d: %s (load %.1f)" % (r, {k: round(v[-1], 1) for k, v in values.items()},
                                                     loads[-1]), flush=True)
        finally:
            c.stop()
    med = {k: statistics.median(v) for k, v in values.items()}
    print("cross-node, %d rounds, host load %.1f-%.1f:" % (args.rounds, min(loads), max(loads)))
    print("  pingpong 8 B round trip: C %.0f us, plain %.0f us" % (med["pingpong_c"], med["pingpong_py"]))
    print("  RDMA WRITE 64 KiB x16:  C %.1f MB/s, plain %.1f MB/s" % (med["write_bw_c"], med["write_bw_py"]))
    for name, rs in ratios.items():
        print("ratio cross_%s plain/c=%.2f" % (name, statistics.median(rs)))


if __name__ == "__main__":
    main()
