"""Runner of `make bench`, inside the Soft-RoCE VM (tests/vm/run-in-vm).

    /usr/bin/python3 bench/run_bench.py [--rounds N]

Environment: BENCH_ROUNDS (default 21), BENCH_WRITE_WRS, BENCH_PP_ITERS,
BENCH_POLL_ITERS (work per measurement), BENCH_GIL=1 (one more column:
the hot-loop API with PostList(release_gil=True)).

Runs the same workloads (see bench/c_bench.c) through
  C        build/bench/c_bench (libibverbs, linked normally)
  ibverbs  bench/py_bench.py fast   (PostList + WCBuffer/poll_into)
  plain    bench/py_bench.py plain  (SendWR objects + cq.poll -> WC objects)
  pyverbs  bench/pyverbs_bench.py, with /usr/bin/python3
each in its own process, set up once (devices, QPs, connections) and then
told what to measure: round after round (N rounds, default 21), every
workload is measured by every implementation in turn, the order rotated so
that none always goes first.  Reported: the median of each value, and for
each ratio the median of its per-round ratios (the two measured back to
back: on a busy host the load drifts, and this cancels it):
a table, then one machine-readable line per workload

    ratio <workload> ibverbs/c=<x> ibverbs/pyverbs=<y>

(rates: ours / theirs; times: theirs / ours, so higher is always better),
the same for the plain API as "ratio_plain ...", and the goals of issue 7.
Standard library only.
"""
import os
import select
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import rxe  # noqa: E402  (tests/rxe.py)

# Work per measurement (env overrides); each runs well under a second in C.
COUNTS = {
    "write1": int(os.environ.get("BENCH_WRITE_WRS", "4000")),
    "write32": int(os.environ.get("BENCH_WRITE_WRS", "4000")),
    "pingpong": int(os.environ.get("BENCH_PP_ITERS", "500")),
    "poll_empty": int(os.environ.get("BENCH_POLL_ITERS", "40000")),
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
        "gil": [venv_py, os.path.join(ROOT, "bench", "py_bench.py"), "fast-gil", *args],
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
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT)
        if not ready:
            self.proc.kill()
            raise RuntimeError(f"{self.name}: {workload} {n} gave no result within {TIMEOUT} s")
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


def paired(samples, impl, ref, w):
    """Median over the rounds of the ratio within each round (the two were
    measured back to back, so a change of the machine's load between
    rounds cancels out)."""
    a, b = samples.get(impl, {}).get(w), samples.get(ref, {}).get(w)
    if not a or not b:
        return None
    rs = [ratio(x, y, WORKLOADS[w][1]) for x, y in zip(a, b)]
    rs = [r for r in rs if r is not None]
    return statistics.median(rs) if rs else None


def rfmt(r):
    return "n/a" if r is None else f"{r:.2f}"


LABELS = {
    "C": "C (libibverbs)",
    "ibverbs": "ibverbs, hot-loop API: PostList posted as is, cq.poll_into(WCBuffer)",
    "plain": "ibverbs, plain API: SendWR/RecvWR objects, cq.poll(16) -> WC objects",
    "gil": "ibverbs hot-loop API with PostList(release_gil=True)",
    "pyverbs": "pyverbs (python3-pyverbs 44, /usr/bin/python3)",
}


def main(argv):
    rounds = int(os.environ.get("BENCH_ROUNDS") or 21)
    if "--rounds" in argv:
        rounds = int(argv[argv.index("--rounds") + 1])
    gid0 = rxe.roce_v2_ipv4_gid_index("rxe0")
    gid1 = rxe.roce_v2_ipv4_gid_index("rxe1")
    cmds = commands(gid0, gid1)
    if not os.environ.get("BENCH_GIL"):
        del cmds["gil"]
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
    ours = [c for c in ("ibverbs", "plain", "gil") if c in med]
    print()
    print(f"Soft-RoCE (rxe0/rxe1) in the test VM (QEMU TCG, {os.cpu_count()} vCPUs); "
          f"{rounds} rounds, each workload measured by each implementation in turn")
    for c in impls:
        print(f"  {c:<8} {LABELS[c]}")
    head = f"{'workload':<11} {'unit':<5}" + "".join(f" {c:>9}" for c in impls)
    for c in ours:
        head += f" {c + '/C':>11}" + (f" {c + '/pyv':>11}" if "pyverbs" in med else "")
    print(head)
    print("-" * len(head))
    for w, (unit, hib, _) in WORKLOADS.items():
        line = f"{w:<11} {unit:<5}" + "".join(f" {fmt(med[c][w], unit):>9}" for c in impls)
        for c in ours:
            line += f" {rfmt(paired(samples, c, 'C', w)):>11}"
            if "pyverbs" in med:
                line += f" {rfmt(paired(samples, c, 'pyverbs', w)):>11}"
        print(line)
    print("values: medians; ratios: median of the per-round ratios, higher is better")
    print("(rates ours/theirs, times theirs/ours)")
    for w, (_, _, desc) in WORKLOADS.items():
        print(f"  {w}: {desc}")
    print()
    for prefix, impl in (("ratio", "ibverbs"), ("ratio_plain", "plain")):
        for w in WORKLOADS:
            print(f"{prefix} {w} ibverbs/c={rfmt(paired(samples, impl, 'C', w))} "
                  f"ibverbs/pyverbs={rfmt(paired(samples, impl, 'pyverbs', w))}")
    print()
    for w, goal in GOALS_C.items():
        if w == "poll_empty":
            # The goal names cq.poll(16) itself: the plain API's poll.
            r = paired(samples, "plain", "C", w)
            what = "C/ibverbs for cq.poll(16) (an empty poll costs <= 10 x C)"
            rf = paired(samples, "ibverbs", "C", w)
            what2 = f" (poll_into: {rfmt(rf)})"
        else:
            r = paired(samples, "ibverbs", "C", w)
            what, what2 = "ibverbs/C", ""
        print(f"goal {w} {what} >= {goal}: {rfmt(r)} "
              f"{'met' if r is not None and r >= goal else 'NOT met'}{what2}")
    for w, goal in GOALS_PYVERBS.items():
        r = paired(samples, "ibverbs", "pyverbs", w)
        print(f"goal {w} ibverbs/pyverbs >= {goal}: {rfmt(r)} "
              f"{'met' if r is not None and r >= goal else 'NOT met'}")
    try:
        load = " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        load = "?"
    print(f"bench: {rounds} rounds in {time.monotonic() - t0:.0f} s (guest load {load})",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
