"""BENCHMARKS.md and the two sweep plots from the output of one `make bench`.

    .venv/bin/python bench/report.py RUN_OUTPUT LOAD_BEFORE LOAD_AFTER \
                                     [COUNTS [CROSS_NODE [THREADS]]]

RUN_OUTPUT is what bench/run_bench.py printed (its stdout); LOAD_BEFORE /
LOAD_AFTER the host's `uptime` around the VM run; COUNTS the instruction
counts table of bench/host_micro.py --table, whose --json beside it
(COUNTS with .json for .txt: CPython 3.11, the cp39-abi3 build; -314.json,
-315.json: 3.14 with cp314-abi3 and 3.15 with cp315-abi3t, `make
bench-counts-sid`) make the table of the interpreters side by side, each
with its floor (without the 3.11 JSON, the text table as it is); CROSS_NODE what
bench/cross_node.py printed (the two-node cluster's section); THREADS the
JSON of bench/threads.py (the thread scaling's section).  Writes
bench/plots/bandwidth.svg, bench/plots/latency.svg and BENCHMARKS.md.
Needs matplotlib (installed by `make bench` only: the wheel and the tests
do not use it).
"""
import json
import os
import platform
import subprocess
import sys

import host_micro  # host_cpu, BUDGETS, C_OF: the machine's name, the budgeted operations

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOTS = os.path.join(ROOT, "bench", "plots")
COUNTS_TEXT = """\
What each operation of the plain API costs, counted exactly (valgrind's
callgrind, through the null provider `bench/nullverbs.c`: no device, no VM;
`bench/host_micro.py`, {pythons}): instructions per operation, the bare
loop subtracted. **floor** is the same call shape into C that does nothing
(`bench/nullcall.c`, built at the same Limited API as the extension beside
it: a constructor's argument tuple, keyword dict,
allocation and dealloc; a method call; an attribute read; for a poll, a
method returning a list it made once, each item read with `PyList_GetItem`,
the least a poll handing its list back can do in the Limited API), which
no binding built this way can go below; **seed** is the seed release's count of the
same operation, **C** the C verbs' through the same provider, **floor+C**
the two together (the least any binding can spend on a verb call: the call
shape and the verb itself); **goal** the goal of issue 27, "below floor"
where the floor alone exceeds it, "below floor+C" where floor+C does;
**budget** what `tests/host/test_budgets.py` holds the count to (+10%).{by_python}"""

BY_PYTHON_TEXT = """

The interpreters side by side: CPython 3.11 with the cp39-abi3 build,
Debian sid's 3.14 with the cp314-abi3 build (vectorcall constructors) and
its 3.15 with the cp315-abi3t build (PEP 803; a GIL build), the last two
in the sid root of `tools/sid-root` (`make bench-counts-sid`), each beside
its own floor; seed, C, floor+C, goal and status are 3.11's, and budget
3.11's, with 3.14's after a slash where it has one."""

# The interpreters of the table, in order: (counts file's suffix, Python, build target)
PYTHONS = [("", "3.11", "cp39-abi3"), ("-314", "3.14", "cp314-abi3"),
           ("-315", "3.15", "cp315-abi3t")]


def load_counts(path):
    """host_micro.py --json's counts, or {"skipped": why} where there are none."""
    if not os.path.exists(path):
        where = os.path.relpath(path, ROOT)
        return {"skipped": f"not measured: no {path if where.startswith('..') else where}"}
    with open(path) as f:
        return json.load(f)


def counts_by_python(counts):
    """The budgeted operations' table, the interpreters side by side:
    counts is [(python, target, host_micro.py --json's dict or {"skipped":
    why})] with 3.11's first, whose seed, C, goal and status the table
    shows.  A column not measured is "-", and a line under the table says
    why."""
    first = counts[0][2]
    head = ["operation"]
    for python, target, _ in counts:
        head += [f"{python} {target}", "floor"]
    head += ["seed", "ours/seed", "C", "ours/C", "floor+C", "goal", "", "budget"]
    budgets_314 = host_micro.budgets_for((3, 14))
    rows = []
    for name, (label, goal, budget) in host_micro.BUDGETS.items():
        if name not in first.get("ours", {}):
            continue
        row = [label]
        for _, _, data in counts:
            ours, floor = data.get("ours", {}).get(name), data.get("floor", {}).get(name)
            row += [f"{ours:.0f}" if ours is not None else "-",
                    f"{floor:.0f}" if floor is not None else "-"]
        o, fl = first["ours"][name], first.get("floor", {}).get(name)
        sd = first.get("seed", {}).get(name)
        c = first.get("c", {}).get(host_micro.C_OF.get(name, ""))
        least = fl + c if fl is not None and c is not None else None
        status = ("met" if o <= goal else "below floor" if fl is not None and fl >= goal
                  else "below floor+C" if least is not None and least >= goal else "NOT met")
        budgets = str(budget) + (f" / {budgets_314[name][2]}" if name in budgets_314 else "")
        row += [f"{sd:.0f}" if sd is not None else "-", f"{o / sd:.2f}" if sd else "-",
                f"{c:.1f}" if c is not None else "-", f"{o / c:.1f}" if c else "-",
                f"{least:.0f}" if least is not None else "-", f"<= {goal}", status, budgets]
        rows.append(row)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in
                       enumerate(zip(r, widths))).rstrip() for r in [head, *rows]]
    lines.insert(1, "-" * len(lines[0]))
    lines.append("")
    for python, target, data in counts:
        lines.append(f"{python} {target}: " + (data["skipped"] if "skipped" in data else
                                               f"CPython {data.get('python', '?')}"))
    return "\n".join(lines)


def counts_section(counts):
    """The instruction counts' section: the interpreters side by side where
    3.11's JSON is there (COUNTS' .json), else the text table of COUNTS."""
    if counts is None or not os.path.exists(counts):
        return "(no counts: valgrind was not installed)"
    stem = os.path.splitext(counts)[0]
    measured = [(python, target, load_counts(stem + suffix + ".json"))
                for suffix, python, target in PYTHONS]
    if "skipped" in measured[0][2]:
        return section(COUNTS_TEXT.format(pythons=f"CPython {platform.python_version()}",
                                          by_python=""), counts, None)
    pythons = ", ".join(f"CPython {d['python']} ({d.get('target', t)})"
                        for _, t, d in measured if "python" in d)
    return (COUNTS_TEXT.format(pythons=pythons, by_python=BY_PYTHON_TEXT)
            + "\n\n```\n" + counts_by_python(measured) + "\n```")


CROSS_TEXT = """\
The same run then boots the two-node cluster of `tests/vm/run-cluster` (two
VMs, each its own kernel and rxe0 on a virtio-net NIC, one wire between
them) and measures, round by round and alternating who goes first, C and
the plain API between the nodes (`bench/cross_node.py`, also `make
bench-cluster`): the 8-byte RC round trip (`ibv_rc_pingpong -s 8` against
`ibverbs ping -s 8`) and 64 KiB RDMA WRITE bandwidth with 16 in flight
(`ib_write_bw` against `tests/cluster/peer.py write-bw-client`). A ratio
above 1 is ours faster; each is the median of the per-round ratios."""

THREADS_TEXT = """\
The message rate of one signaled RDMA WRITE posted and its completion
polled, one in flight per thread, each thread driving its own QP and CQ, at
1 and 2 threads (`bench/threads.py`, also `make bench-threads`): the
free-threaded build (cp314t) on a free-threaded CPython 3.14 with the GIL
off, the same with `-X gil=1`, and C with pthreads
(`bench/c_threads.c`) calling the same verbs through the same provider.
The Python loops (`bench/py_threads.py`) use the plain API (a SendWR kept
and posted again, `cq.poll(1)`) and the hot-loop API (a `PostList`,
`cq.poll_into(WCBuffer)`). On the host through the null provider
(`bench/nullverbs.c`, `NULLVERBS_COMPLETE_POSTS=1`: a post's completion is
there at the next poll), so the rate is the binding's and the
interpreter's alone; then on Soft-RoCE in the VM, each thread on an rxe
device of its own (wall-clock ratios there are noisy, and need a quiet
host: the VM's two vCPUs are two of its threads). A ratio is the median of per-round ratios, each pair measured
back to back; **cores** is the threads' CPU time over their wall time,
below the thread count where other work took the cores (see the load).
The goal of issue 37: with the GIL off, 2/1 >= 1.8, or C's own ratio
where that is lower; with the GIL, about 1 (not judged where C's own two
threads did not get two cores or scale: the machine was busy). Then the single-thread
instruction counts of the same calls on 3.14t, GIL off against
`-X gil=1`."""


def threads_section(path):
    """The thread scaling's table, or why it is not there."""
    if path is None or not os.path.exists(path):
        return "(not measured: bench/threads.py did not run)"
    with open(path) as f:
        report = json.load(f)
    if report.get("skipped"):
        return f"(not measured: {report['skipped']})"
    return THREADS_TEXT + "\n\n```\n" + report["table"] + "\n```"


IMPLS = {   # column name in the run output: (legend, style)
    "C": ("C (libibverbs)", dict(color="black", marker="o")),
    "plain": ("ibverbs, plain API", dict(color="tab:blue", marker="s")),
    "hot": ("ibverbs, hot-loop API", dict(color="tab:green", marker="^")),
    "pyverbs": ("pyverbs", dict(color="tab:red", marker="x", linestyle="--")),
}


def parse(text):
    """(the main table's lines, the sweep table's lines, {kind: {size: {impl: value}}})."""
    lines = text.splitlines()
    sweep = {}
    for line in lines:
        if line.startswith("sweep "):
            _, kind, size, *pairs = line.split()
            sweep.setdefault(kind, {})[int(size)] = {
                k: float(v) for k, v in (p.split("=") for p in pairs)}
    start = next(i for i, line in enumerate(lines) if line.startswith("Soft-RoCE"))
    end = next((i for i, line in enumerate(lines) if line.startswith("message-size sweep")),
               len(lines))
    main = [line for line in lines[start:end] if line.strip()]
    sweep_table = [line for line in lines[end:] if line.strip() and not line.startswith("sweep ")]
    return main, sweep_table, sweep


def size_label(size):
    if size >= 1 << 20:
        return f"{size >> 20} MiB"
    if size >= 1 << 10:
        return f"{size >> 10} KiB"
    return f"{size} B"


def plot(series, ylabel, title, path, logy):
    import matplotlib       # here, not at import: the counts' table is tested without it
    matplotlib.use("svg")
    import matplotlib.pyplot as plt
    plt.rcParams["svg.hashsalt"] = "ibverbs-bench"     # stable ids: diffs show data changes
    plt.rcParams["svg.fonttype"] = "none"              # text stays text: small, greppable
    fig, ax = plt.subplots(figsize=(7, 4.2))
    sizes = sorted(series)
    for impl, (label, style) in IMPLS.items():
        ys = [series[s].get(impl) for s in sizes]
        if any(y is not None for y in ys):
            ax.plot(sizes, ys, label=label, **style)
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([size_label(s) for s in sizes])
    ax.set_xlabel("message size")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


def section(text, path, missing):
    """text and the output kept in path as a code block; missing without it."""
    if path is None or not os.path.exists(path):
        return missing
    with open(path) as f:
        return text + "\n\n```\n" + f.read().rstrip() + "\n```"


def main(argv):
    run_output, load_before, load_after = argv[:3]
    counts = argv[3] if len(argv) > 3 else None
    cross_node = argv[4] if len(argv) > 4 else None
    threads = argv[5] if len(argv) > 5 else None
    with open(run_output) as f:
        main_table, sweep_table, sweep = parse(f.read())
    loads = []
    for path in (load_before, load_after):
        with open(path) as f:
            loads.append(f.read().strip())
    os.makedirs(PLOTS, exist_ok=True)
    plot(sweep["bw"], "MB/s (higher is better)",
         "RDMA_WRITE bandwidth, 16 in flight (Soft-RoCE loopback)",
         os.path.join(PLOTS, "bandwidth.svg"), logy=True)
    plot(sweep["lat"], "us per round trip (lower is better)",
         "SEND/RECV ping-pong latency, rxe0 <-> rxe1",
         os.path.join(PLOTS, "latency.svg"), logy=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or "?"
    # This file and the plots are the run's own output, not local changes.
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":!BENCHMARKS.md", ":!bench/plots"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    counts_text = counts_section(counts)
    cross_section = section(CROSS_TEXT, cross_node,
                            "(not measured: bench/cross_node.py did not run)")
    threads_text = threads_section(threads)
    md = f"""# Benchmarks

Made by `make bench` (commit {commit}{' plus local changes' if dirty else ''}); every
figure below comes from one run of it, in one boot of the test VM. The
command rewrites this file and the two plots.

Machine: {host_micro.host_cpu()}, {os.cpu_count()} cores, shared with other work;
Soft-RoCE (`rdma_rxe`, rxe0 and rxe1) inside the QEMU VM of `tests/vm/`
(TCG, no KVM, 2 vCPUs). Host load before and after the run:

    {loads[0]}
    {loads[1]}

Under TCG everything runs 10-20 times slower than on the host, the kernel's
rxe included, so only the ratios mean something: each implementation is a
separate process set up once, every workload is measured by each in turn
(the order rotated round by round), and a ratio is the median of the
per-round ratios of two measurements taken back to back.

Even so a ratio moves by a few hundredths from one run to the next: under
TCG a process's memory layout alone sets its speed for its whole life, C's
as much as Python's (one boot measured four C processes at 62k and 71k
one-in-flight writes/s), which is why each implementation runs in several
processes taking turns. Read a goal met or missed by 0.01-0.02 as a tie.

Implementations:

- **C**: `bench/c_bench.c`, libibverbs linked normally.
- **plain**: the seed's API as users write it: `SendWR`/`RecvWR`/`SGE`
  objects built once, `qp.post_send(wr)` or a list of them,
  `cq.poll(n)` returning `WC` objects (`bench/py_bench.py plain`).
- **hot**: the hot-loop API: a `PostList` built once and posted as is,
  `cq.poll_into(WCBuffer)` (`bench/py_bench.py hot`).
- **pyverbs**: Debian's python3-pyverbs 44 (`bench/pyverbs_bench.py`).

## Message rate, latency, empty poll

```
{chr(10).join(main_table)}
```

### Where the rest of the time goes

Two lines of the table measure what no binding can take away here:

- **poll floor**: `call_floor` (a one-argument builtin called from a Python
  loop, `abs(16)`) plus C's own empty poll, as a multiple of C's poll: what
  an empty poll from a Python loop costs before any binding code runs. The
  hot-loop `poll_into` adds a few tens of instructions of its own to it
  (`bench/host_micro.py`), so a goal at or below this floor cannot be met
  on this machine by any Python binding.
- **pp in post** and **pp whole**: a ping-pong loop timed around each
  `post_send` call, in C and in Python alike: the time per round trip
  inside the two calls, and the whole round trip of that loop. rxe runs
  the whole transfer (requester, loopback, responder, the completions) in
  the doorbell system call of the post, so this is mostly the kernel's
  work, the same verb on the same path, yet under TCG it takes longer when
  the process around it is a Python interpreter. The likeliest cause, not
  proven: the interpreter's emulated code evicts the kernel's from QEMU's
  translation caches between the calls. Most of the ping-pong's gap to C is
  here, not in the binding's own code, which costs a few hundred
  instructions per post (`bench/host_micro.py`).

## Message-size sweep

![RDMA_WRITE bandwidth by message size](bench/plots/bandwidth.svg)

![ping-pong latency by message size](bench/plots/latency.svg)

```
{chr(10).join(sweep_table)}
```

Above a few KiB the provider's copy and the emulated CPU set the pace and
all four meet; the binding's own cost shows at small sizes.

## Between two nodes

{cross_section}

## Instructions per operation

{counts_text}

## Threads: free-threaded CPython

{threads_text}

## Host-side numbers

`make bench BENCH_HOST=1` adds `bench/host_micro.py`: instructions per
operation counted with callgrind through a null provider
(`bench/nullverbs.c`), `import ibverbs` against `python -c pass`, and the
time to regenerate `generated/`.
"""
    with open(os.path.join(ROOT, "BENCHMARKS.md"), "w") as f:
        f.write(md)
    print("bench: wrote BENCHMARKS.md, bench/plots/bandwidth.svg, bench/plots/latency.svg")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
