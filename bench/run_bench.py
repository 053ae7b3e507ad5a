"""Runner of `make bench`, inside the Soft-RoCE VM (tests/vm/run-in-vm).

    /usr/bin/python3 bench/run_bench.py [--rounds N]

Runs the same workloads (see bench/c_bench.c) through
  C        build/bench/c_bench (libibverbs, linked normally)
  ibverbs  bench/py_bench.py fast   (PostList + WCBuffer/poll_into)
  plain    bench/py_bench.py plain  (SendWR objects + cq.poll -> WC objects)
  pyverbs  bench/pyverbs_bench.py, with /usr/bin/python3
each in its own process, set up once (devices, QPs, connections) and then
told what to measure: round after round (N rounds, default 5), every
workload is measured by every implementation in turn, the order rotated so
that none always goes first, and the medians are reported:
a table, then one machine-readable line per workload

    ratio <workload> ibverbs/c=<x> ibverbs/pyverbs=<y>

(rates: ours / theirs; times: theirs / ours, so higher is always better),
the same for the plain API as "ratio_plain ...", and the goals of issue 7.
Standard library only.
"""
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import rxe  # noqa: E402  (tests/rxe.py)

# Work per measurement (env overrides); each runs well under a second in C.
COUNTS = {
    "write1": int(os.environ.get("BENCH_WRITE_WRS", "8000")),
    "write32": int(os.environ.get("BENCH_WRITE_WRS", "8000")),
    "pingpong": int(os.environ.get("BENCH_PP_ITERS", "1000")),
    "poll_empty": int(os.environ.get("BENCH_POLL_ITERS", "50000")),
}
C_POLL_FACTOR = 10      # C polls are cheap: more of them for a readable time
TIMEOUT = 120

# workload: (unit, higher is better, description)
WORKLOADS = {
    "write1": ("WR/s", True, "8-byte RDMA_WRITE, RC loopback, 1 WR per post"),
    "write32": ("WR/s", True, "8-byte RDMA_WRITE, RC loopback, 32 WRs per post"),
    "pingpong": ("us", False, "8-byte SEND/RECV round trip, rxe0 <-> rxe1"),
    "poll_empty": ("ns", False, "empty poll of 16 (ibv_poll_cq / cq.poll(16) / poll_into)"),
}
# Goals of issue 7, as ibverbs/C ratios (higher is better), and vs pyverbs.
GOALS_C = {"write1": 0.8, "write32": 0.97, "pingpong": 0.65, "poll_empty": 0.1}
GOALS_PYVERBS = {"write1": 3.0}


def commands(gid0, gid1):
    args = [str(gid0), str(gid1)]
    venv_py = os.path.join(ROOT, ".venv", "bin", "python")
    return {
        "C": [os.path.join(ROOT, "build", "bench", "c_bench"), *args],
        "ibverbs": [venv_py, os.path.join(ROOT, "bench", "py_bench.py"), "fast", *args],
        "plain": [venv_py, os.path.join(ROOT, "bench", "py_bench.py"), "plain", *args],
        "pyverbs": ["/usr/bin/python3", os.path.join(ROOT, "bench", "pyverbs_bench.py"), *args],
    }


class Server:
    """One implementation, set up once, measuring on command."""

    def __init__(self, name, cmd):
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        line = self.proc.stdout.readline().strip()
        if line != "READY":
            self.proc.kill()
            raise RuntimeError(f"{name} did not start (said {line!r}; its stderr is above)")

    def measure(self, workload, n):
        self.proc.stdin.write(f"{workload} {n}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline().split()
        if len(line) != 3 or line[:2] != ["RESULT", workload]:
            raise RuntimeError(f"{self.name}: {workload} failed (said {' '.join(line)!r})")
        return float(line[2])

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def fmt(value, unit):
    if value is None:
        return "n/a"
    if unit == "WR/s":
        return f"{value / 1000:.1f}k"
    if unit == "us":
        return f"{value:.1f}"
    return f"{value:.0f}"


def ratio(ours, theirs, higher_better):
    if ours is None or theirs is None or ours <= 0 or theirs <= 0:
        return None
    return ours / theirs if higher_better else theirs / ours


def rfmt(r):
    return "n/a" if r is None else f"{r:.2f}"


def main(argv):
    rounds = 5
    if "--rounds" in argv:
        rounds = int(argv[argv.index("--rounds") + 1])
    gid0 = rxe.roce_v2_ipv4_gid_index("rxe0")
    gid1 = rxe.roce_v2_ipv4_gid_index("rxe1")
    cmds = commands(gid0, gid1)
    if not os.path.exists("/usr/lib/python3/dist-packages/pyverbs"):
        print("bench: python3-pyverbs is not installed; pyverbs column skipped", file=sys.stderr)
        del cmds["pyverbs"]
    t0 = time.monotonic()
    servers = {impl: Server(impl, cmd) for impl, cmd in cmds.items()}
    print(f"bench: set up in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    impls = list(servers)
    samples = {impl: {w: [] for w in WORKLOADS} for impl in impls}
    try:
        for r in range(rounds):
            for k, w in enumerate(WORKLOADS):
                shift = (r + k) % len(impls)
                for impl in impls[shift:] + impls[:shift]:
                    n = COUNTS[w] * (C_POLL_FACTOR if impl == "C" and w == "poll_empty" else 1)
                    samples[impl][w].append(servers[impl].measure(w, n))
            print(f"bench: round {r + 1}/{rounds} done ({time.monotonic() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    finally:
        for srv in servers.values():
            srv.close()
    for impl in impls:
        print(f"bench: samples {impl}: " + "; ".join(
            f"{w} " + " ".join(fmt(v, WORKLOADS[w][0]) for v in vs)
            for w, vs in samples[impl].items()), file=sys.stderr)

    med = {impl: {w: (statistics.median(v) if v else None) for w, v in ws.items()}
           for impl, ws in samples.items()}
    cols = ["C", "ibverbs", "plain", "pyverbs"]
    cols = [c for c in cols if c in med]
    print()
    print(f"Soft-RoCE (rxe) in the test VM (TCG), medians of {rounds} alternating rounds;"
          f" ibverbs = PostList + WCBuffer/poll_into, plain = SendWR list + cq.poll")
    head = f"{'workload':<11} {'unit':<5}" + "".join(f" {c:>9}" for c in cols) + \
        f" {'ibv/C':>6} {'ibv/pyv':>7} {'plain/C':>7} {'plain/pyv':>9}"
    print(head)
    print("-" * len(head))
    for w, (unit, hib, _) in WORKLOADS.items():
        line = f"{w:<11} {unit:<5}" + "".join(f" {fmt(med[c][w], unit):>9}" for c in cols)
        r_c = ratio(med["ibverbs"][w], med["C"][w], hib)
        r_p = ratio(med["ibverbs"][w], med.get("pyverbs", {}).get(w), hib)
        p_c = ratio(med["plain"][w], med["C"][w], hib)
        p_p = ratio(med["plain"][w], med.get("pyverbs", {}).get(w), hib)
        line += f" {rfmt(r_c):>6} {rfmt(r_p):>7} {rfmt(p_c):>7} {rfmt(p_p):>9}"
        print(line)
    print("(ratios: higher is better; rates ours/theirs, times theirs/ours)")
    for w, (_, _, desc) in WORKLOADS.items():
        print(f"  {w}: {desc}")
    print()
    for prefix, impl in (("ratio", "ibverbs"), ("ratio_plain", "plain")):
        for w, (_, hib, _) in WORKLOADS.items():
            r_c = ratio(med[impl][w], med["C"][w], hib)
            r_p = ratio(med[impl][w], med.get("pyverbs", {}).get(w), hib)
            print(f"{prefix} {w} ibverbs/c={rfmt(r_c)} ibverbs/pyverbs={rfmt(r_p)}")
    print()
    for w, goal in GOALS_C.items():
        r = ratio(med["ibverbs"][w], med["C"][w], WORKLOADS[w][1])
        what = "C/ibverbs (poll cost <= 10 x C)" if w == "poll_empty" else "ibverbs/C"
        print(f"goal {w} {what} >= {goal}: {rfmt(r)} "
              f"{'met' if r is not None and r >= goal else 'NOT met'}")
    for w, goal in GOALS_PYVERBS.items():
        r = ratio(med["ibverbs"][w], med.get("pyverbs", {}).get(w), WORKLOADS[w][1])
        print(f"goal {w} ibverbs/pyverbs >= {goal}: {rfmt(r)} "
              f"{'met' if r is not None and r >= goal else 'NOT met'}")
    print(f"bench: {rounds} rounds in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
