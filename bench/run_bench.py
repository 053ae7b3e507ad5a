"""Runner of `make bench`, inside the Soft-RoCE VM (tests/vm/run-in-vm).

    /usr/bin/python3 bench/run_bench.py [--rounds N] [--sweep-rounds M]

Environment: BENCH_ROUNDS (default 18), BENCH_SWEEP_ROUNDS (default 3; 0
skips the size sweep), BENCH_PROCS (default 6), BENCH_GIL=1 (one more column: the hot-loop API with
PostList(release_gil=True)).

Runs the workloads of bench/c_bench.c through
  C        build/bench/c_bench (libibverbs, linked normally)
  plain    bench/py_bench.py plain  (SendWR objects, post_send([wr]), cq.poll(n) -> WC)
  hot      bench/py_bench.py hot    (PostList + WCBuffer/poll_into)
  pyverbs  bench/pyverbs_bench.py, with /usr/bin/python3
each in BENCH_PROCS processes, set up once (devices, QPs, connections) and
then told what to measure, round r by process r % BENCH_PROCS (under TCG a
process's memory layout alone moves its timings by 10-20%, for the whole
run: several processes spread that luck): round after round, every workload is measured by
every implementation in turn, the order rotated so that none always goes
first.  Reported: the median of each value, and for each ratio the median
of its per-round ratios (the two measured back to back: on a busy host the
load drifts, and this cancels it): a table, then one line per workload

    ratio <workload> plain/c=<x> hot/c=<y> plain/pyverbs=<z>

(rates: ours / theirs; times: theirs / ours, so higher is always better;
poll_empty is C's time / ours), the goals of issue 17, and the message-size
sweep (RDMA_WRITE bandwidth, ping-pong latency) as a table and as
"sweep <bw|lat> <size> <impl>=<value> ..." lines that bench/report.py turns
into plots and BENCHMARKS.md.  Standard library only.
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

# workload: (work per measurement, unit, higher is better, description)
WORKLOADS = {
    "write_b1": (8000, "WR/s", True,
                 "8-byte RDMA_WRITE, RC loopback, 1 WR per post, signaled, poll(1) until it "
                 "completes (1 in flight)"),
    "write_b1_build": (8000, "WR/s", True,
                       "write_b1, the SGE and SendWR built for each message (C: ibv_sge and "
                       "ibv_send_wr filled on the stack)"),
    "write_b32": (9600, "WR/s", True,
                  "the same WRs in lists of 32 per post_send, the last signaled, wait for it"),
    "pingpong": (1000, "us", False,
                 "8-byte SEND/RECV round trip rxe0 <-> rxe1, 16 receives pre-posted per side, "
                 "poll(16), repost what was consumed"),
    "poll_empty": (100000, "ns", False, "poll(16) on an empty CQ"),
    "write_window": (12000, "WR/s", True,
                     "8-byte RDMA_WRITE, 1 WR per post, every one signaled, 128 in flight, "
                     "poll(16)"),
}
C_POLL_FACTOR = 10      # C polls are cheap: more of them for a readable time
SWEEP_SIZES = [8, 64, 512, 4096, 32768, 262144, 1 << 20]
# kind: (unit, higher is better, work per measurement for a size)
SWEEP = {
    "bw": ("MB/s", True, lambda size: max(32, min(4000, (16 << 20) // size))),
    "lat": ("us", False, lambda size: max(16, min(600, (4 << 20) // size))),
}
TIMEOUT = 300

# Goals of issue 17 (higher is better: poll_empty <= 5x C is C/ours >= 0.2).
GOALS = {
    "plain": {"write_b1": 0.85, "write_b32": 0.98, "pingpong": 0.75, "poll_empty": 1 / 5},
    "hot": {"write_b1": 0.95, "pingpong": 0.90, "poll_empty": 1 / 3},
}

LABELS = {
    "C": "C (libibverbs)",
    "plain": "ibverbs, plain API: SendWR/RecvWR objects, post_send([wr]), cq.poll(n) -> WC",
    "hot": "ibverbs, hot-loop API: PostList posted as is, cq.poll_into(WCBuffer)",
    "gil": "ibverbs hot-loop API with PostList(release_gil=True)",
    "pyverbs": "pyverbs (python3-pyverbs 44, /usr/bin/python3)",
}


def commands(gid0, gid1):
    args = [str(gid0), str(gid1)]
    venv_py = os.path.join(ROOT, ".venv", "bin", "python")
    py_bench = os.path.join(ROOT, "bench", "py_bench.py")
    return {
        "C": [os.path.join(ROOT, "build", "bench", "c_bench"), *args],
        "plain": [venv_py, py_bench, "plain", *args],
        "hot": [venv_py, py_bench, "hot", *args],
        "gil": [venv_py, py_bench, "hot-gil", *args],
        "pyverbs": ["/usr/bin/python3", os.path.join(ROOT, "bench", "pyverbs_bench.py"), *args],
    }


class Server:
    """One implementation, set up once, measuring on command."""

    def __init__(self, name, cmd):
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)

    def wait_ready(self):
        line = self.proc.stdout.readline().strip()
        if line != "READY":
            self.proc.kill()
            raise RuntimeError(f"{self.name} did not start (said {line!r}; its stderr is above)")

    def measure(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT)
        if not ready:
            self.proc.kill()
            raise RuntimeError(f"{self.name}: {command!r} gave no result within {TIMEOUT} s")
        line = self.proc.stdout.readline().split()
        if len(line) != 3 or line[:2] != ["RESULT", command.split()[0]]:
            raise RuntimeError(f"{self.name}: {command!r} failed (said {' '.join(line)!r})")
        # pingpong_post answers "<in post_send>:<whole round trip>"
        return tuple(map(float, line[2].split(":"))) if ":" in line[2] else float(line[2])

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
    if unit in ("us", "MB/s"):
        return f"{value:.1f}" if value < 1000 else f"{value:.0f}"
    return f"{value:.0f}"


def ratio(ours, theirs, higher_better):
    if ours is None or theirs is None or ours <= 0 or theirs <= 0:
        return None
    return ours / theirs if higher_better else theirs / ours


def paired(series, impl, ref, higher_better):
    """Median over the rounds of the ratio within each round (the two were
    measured back to back, so a change of the machine's load between
    rounds cancels out)."""
    a, b = series.get(impl), series.get(ref)
    if not a or not b:
        return None
    rs = [ratio(x, y, higher_better) for x, y in zip(a, b)]
    rs = [r for r in rs if r is not None]
    return statistics.median(rs) if rs else None


def rfmt(r):
    return "n/a" if r is None else f"{r:.2f}"


def measure_rounds(servers, items, rounds, t0, what):
    """items: [(key, {impl: command})] (an implementation without a command
    for a key is not asked); returns {key: {impl: [values]}}."""
    impls = list(servers)
    samples = {key: {impl: [] for impl in impls} for key, _ in items}
    for r in range(rounds):
        for k, (key, cmds) in enumerate(items):
            shift = (r + k) % len(impls)
            for impl in impls[shift:] + impls[:shift]:
                if impl not in cmds:
                    continue
                srv = servers[impl][r % len(servers[impl])]
                samples[key][impl].append(srv.measure(cmds[impl]))
        print(f"bench: {what} round {r + 1}/{rounds} done ({time.monotonic() - t0:.0f} s)",
              file=sys.stderr, flush=True)
    return samples


def main(argv):
    rounds = int(os.environ.get("BENCH_ROUNDS") or 18)
    sweep_rounds = int(os.environ.get("BENCH_SWEEP_ROUNDS") or 3)
    if "--rounds" in argv:
        rounds = int(argv[argv.index("--rounds") + 1])
    if "--sweep-rounds" in argv:
        sweep_rounds = int(argv[argv.index("--sweep-rounds") + 1])
    gid0 = rxe.roce_v2_ipv4_gid_index("rxe0")
    gid1 = rxe.roce_v2_ipv4_gid_index("rxe1")
    cmds = commands(gid0, gid1)
    if not os.environ.get("BENCH_GIL"):
        del cmds["gil"]
    if not os.path.exists("/usr/lib/python3/dist-packages/pyverbs"):
        print("bench: python3-pyverbs is not installed; pyverbs column skipped", file=sys.stderr)
        del cmds["pyverbs"]
    procs = int(os.environ.get("BENCH_PROCS") or 6)
    t0 = time.monotonic()
    servers = {impl: [Server(impl, cmd) for _ in range(procs)] for impl, cmd in cmds.items()}
    for group in servers.values():
        for srv in group:
            srv.wait_ready()
    print(f"bench: set up in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    impls = list(servers)
    items = [(w, {impl: f"{w} {n * (C_POLL_FACTOR if impl == 'C' and w == 'poll_empty' else 1)}"
                  for impl in impls}) for w, (n, *_) in WORKLOADS.items()]
    sweep_items = [((kind, size), {impl: f"{kind} {size} {SWEEP[kind][2](size)}" for impl in impls})
                   for size in SWEEP_SIZES for kind in SWEEP]
    try:
        samples = measure_rounds(servers, items, rounds, t0, "workloads")
        # What a one-argument builtin call costs in this VM (plain's interpreter):
        # the floor under any poll from a Python loop.
        floor = [servers["plain"][r % procs].measure(f"call_floor {WORKLOADS['poll_empty'][0]}")
                 for r in range(rounds)]
        # Where a ping-pong's time goes: inside the two post_send calls (rxe
        # runs the whole transfer in the doorbell system call) or around them.
        pp_cmd = f"pingpong_post {WORKLOADS['pingpong'][0]}"
        in_post = measure_rounds(servers, [("pingpong_post", {
            impl: pp_cmd for impl in ("C", "plain", "hot") if impl in impls})],
            rounds, t0, "pingpong_post")["pingpong_post"]
        sweep = measure_rounds(servers, sweep_items, sweep_rounds, t0, "sweep")
    finally:
        for group in servers.values():
            for srv in group:
                srv.close()
    for w, per_impl in samples.items():
        unit = WORKLOADS[w][1]
        print(f"bench: samples {w}: " + "; ".join(
            f"{impl} " + " ".join(fmt(v, unit) for v in vs) for impl, vs in per_impl.items()),
            file=sys.stderr)

    ours = [c for c in ("plain", "hot", "gil") if c in impls]
    med = {w: {impl: statistics.median(v) for impl, v in per.items() if v}
           for w, per in samples.items()}
    print()
    print(f"Soft-RoCE (rxe0/rxe1) in the test VM (QEMU TCG, {os.cpu_count()} vCPUs); "
          f"{rounds} rounds, each workload measured by each implementation in turn "
          f"({procs} processes each, taking turns)")
    for c in impls:
        print(f"  {c:<8} {LABELS[c]}")
    head = f"{'workload':<15} {'unit':<5}" + "".join(f" {c:>9}" for c in impls)
    for c in ours:
        head += f" {c + '/C':>9}"
    if "pyverbs" in impls:
        head += f" {'plain/pyv':>10}"
    print(head)
    print("-" * len(head))
    for w, (_, unit, hib, _) in WORKLOADS.items():
        line = f"{w:<15} {unit:<5}" + "".join(f" {fmt(med[w].get(c), unit):>9}" for c in impls)
        for c in ours:
            line += f" {rfmt(paired(samples[w], c, 'C', hib)):>9}"
        if "pyverbs" in impls:
            line += f" {rfmt(paired(samples[w], 'plain', 'pyverbs', hib)):>10}"
        print(line)
    print(f"{'call_floor':<15} {'ns':<5} {statistics.median(floor):>9.0f}   "
          f"(abs(16) from a Python loop: the cost of any one-argument call here)")
    c_poll = med["poll_empty"].get("C")
    if c_poll:
        print(f"{'poll floor':<15} {'x C':<5} {(statistics.median(floor) + c_poll) / c_poll:>9.1f}   "
              f"(call_floor + C's poll: an empty poll from a Python loop, before any binding code)")
    def split(impl, part):
        vals = in_post.get(impl)
        return fmt(statistics.median(v[part] for v in vals), "us") if vals else ""
    print(f"{'pp in post':<15} {'us':<5}" + "".join(f" {split(c, 0):>9}" for c in impls)
          + "   (of a ping-pong round trip: inside the two post_send calls, where rxe")
    print(f"{'pp whole':<15} {'us':<5}" + "".join(f" {split(c, 1):>9}" for c in impls)
          + "    runs the transfer; the whole round trip of the same timed loop)")
    print("values: medians; ratios: median of the per-round ratios, higher is better")
    print("(rates ours/theirs, times theirs/ours)")
    for w, (_, _, _, desc) in WORKLOADS.items():
        print(f"  {w}: {desc}")
    print()
    for w, (_, _, hib, _) in WORKLOADS.items():
        print(f"ratio {w} plain/c={rfmt(paired(samples[w], 'plain', 'C', hib))} "
              f"hot/c={rfmt(paired(samples[w], 'hot', 'C', hib))} "
              f"plain/pyverbs={rfmt(paired(samples[w], 'plain', 'pyverbs', hib))}")
    print()
    for impl, goals in GOALS.items():
        for w, goal in goals.items():
            r = paired(samples[w], impl, "C", WORKLOADS[w][2])
            if w == "poll_empty":
                shown = "n/a" if not r else f"{1 / r:.2f}x"
                text = f"{impl} poll_empty time <= {1 / goal:.0f}x C: {shown}"
            else:
                text = f"{impl} {w} {impl}/C >= {goal}: {rfmt(r)}"
            print(f"goal {text} {'met' if r is not None and r >= goal else 'NOT met'}")

    if sweep_rounds:
        print()
        print(f"message-size sweep: {sweep_rounds} rounds, medians; "
              f"bw: RDMA_WRITE loopback on rxe0, 16 in flight (MB/s); "
              f"lat: SEND/RECV ping-pong rxe0 <-> rxe1 (us per round trip)")
        head = f"{'kind':<4} {'size':>8}" + "".join(f" {c:>9}" for c in impls)
        print(head)
        print("-" * len(head))
        for (kind, size), per in sweep.items():
            unit = SWEEP[kind][0]
            print(f"{kind:<4} {size:>8}" + "".join(
                f" {fmt(statistics.median(per[c]), unit):>9}" for c in impls))
        for (kind, size), per in sweep.items():
            print(f"sweep {kind} {size} " + " ".join(
                f"{c}={statistics.median(per[c]):.3f}" for c in impls))
    try:
        load = " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        load = "?"
    print(f"bench: done in {time.monotonic() - t0:.0f} s (guest load {load})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
