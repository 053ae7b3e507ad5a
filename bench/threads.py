"""Thread scaling of the data path on a free-threaded CPython (`make
bench-threads`; issue 37).

    .venv/bin/python bench/threads.py [--seconds S] [--rounds R] [--vm-seconds S]
                                      [--vm-rounds R] [--vm-devices rxe0,rxe1]
                                      [--no-host] [--no-vm] [--no-ir]
                                      [--json FILE] [--table FILE]

The message rate of one signaled RDMA WRITE posted and its completion
polled, one in flight per thread, each thread driving its own QP and CQ,
at 1 and 2 threads, and the ratio of the two, by
  GIL off    the free-threaded build (cp314t) on CPython 3.14t
  gil=1      the same interpreter and build with -X gil=1
  C          pthreads calling the same verbs (bench/c_threads.c)
through two APIs: plain (a SendWR kept and posted again, cq.poll(1)) and
hot (a PostList, cq.poll_into(WCBuffer)); bench/py_threads.py.  Where:
  host  the null provider (bench/nullverbs.c with NULLVERBS_COMPLETE_POSTS=1:
        each post's completion is there at the next poll), so the rate is
        the binding's and the interpreter's alone
  VM    Soft-RoCE in the test VM (tests/vm/run-in-vm, TCG, 2 vCPUs), thread
        t on the t-th of VM_DEVICES (RC loopback): one boot, the three side
        by side; wall-clock ratios there are noisy
Each measurement runs S seconds; R rounds, the implementations' order
rotated round by round and each one's 1- and 2-thread runs back to back; a
ratio is the median of the per-round ratios.  "cores" is the threads' CPU
time over their wall time: below the thread count, the machine did not
give each thread a core all the time (other work: see the load).

Then the single-thread instruction counts of the same operations on 3.14t
(callgrind through the null provider, bench/host_micro.py): GIL off
against -X gil=1, and the abi3 build on this checkout's .venv CPython for
reference.

Prints the tables and writes them (--table, default build/bench/threads.txt)
and the numbers (--json, default build/bench/threads.json: what
bench/report.py puts into BENCHMARKS.md).  Skips, saying what is missing
and how to get it, without the free-threaded CPython (IBVERBS_FT_PYTHON, or
FT_PYTHON below) or its build of the extension (make build-ft).  Boots the
VM: run it under the VM lock.  Never fails on a slow number: these are
measurements, not tests.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
sys.path.insert(0, BENCH)

import host_micro  # noqa: E402
import run_bench   # noqa: E402  (its Server speaks the protocol of bench/*_threads.*)

BUILD = host_micro.BUILD
# Where `make ft-python` installs it (the Makefile's FT_HOME)
FT_PYTHON = os.path.join(
    os.environ.get("IBVERBS_FT_CACHE")
    or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                    "ibverbs-ft"), "3.14t", "bin", "python3.14t")
FT_HOWTO = ("set IBVERBS_FT_PYTHON, or run make ft-python IBVERBS_FT_SOURCE=<a CPython 3.14 "
            "source tree>; CONTRIBUTING.md, Threads")
THREADS = (1, 2)
IMPLS = {   # name: label
    "ft": "3.14t, GIL off",
    "gil": "3.14t, -X gil=1",
    "C": "C, pthreads",
}
APIS = {    # name: label; C has one loop, shown on both rows
    "plain": "plain: SendWR kept, post_send(wr), poll(1)",
    "hot": "hot: PostList, poll_into(WCBuffer)",
}
# The VM's devices, thread t on the t-th: each thread its own rxe, so that
# the threads share nothing of the provider's, the kernel's per-device
# state included (rxe0 alone: --vm-devices rxe0).
VM_DEVICES = "rxe0,rxe1"
GOAL_FT = 1.8       # issue 37: GIL off, 2 threads over 1, where C's own ratio allows
BUSY_CORES = 1.9    # C's 2 threads had fewer cores than this: the machine was busy
C_SCALED = 1.5      # or C's own 2/1 was below this
# What free-threading adds to a call, by instructions: the critical sections
# (CPython's functions that take and leave them, and our wrappers that call
# them).  Its atomics add none: a lock-prefixed add is one instruction, as
# the plain add it replaces (what they cost is cycles, in the scaling).
LOCKS = re.compile(r"CriticalSection|PyMutex|ParkingLot|__locked$")
# Instruction counts: host_micro's operation: label.
COUNTED = {
    "post_send_1": "qp.post_send(wr)",
    "poll_empty": "cq.poll(16), empty",
    "postlist_post_1": "qp.post_send(PostList of 1)",
    "poll_into_empty": "cq.poll_into(WCBuffer), empty",
}


class Worker(run_bench.Server):
    """run_bench's Server with an environment of its own (the null
    provider's variables must not reach anything else, the VM least)."""

    def __init__(self, name, cmd, env):   # not Server's: it would start cmd with ours
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True, bufsize=1)


def ft_python():
    """(path, None) of the free-threaded CPython, or (None, why not)."""
    path = os.environ.get("IBVERBS_FT_PYTHON") or FT_PYTHON
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return None, f"no free-threaded CPython at {path}: {FT_HOWTO}"
    probe = subprocess.run([path, "-c", "import sysconfig; "
                            "print(sysconfig.get_config_var('Py_GIL_DISABLED'))"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "1":
        return None, f"{path} is not a free-threaded CPython (Py_GIL_DISABLED unset): {FT_HOWTO}"
    return path, None


def ft_extension(ft):
    """None when the cp314t extension is built in place (make build-ft),
    else what to do."""
    suffix = subprocess.run([ft, "-c", "import sysconfig; "
                             "print(sysconfig.get_config_var('EXT_SUFFIX'))"],
                            check=True, capture_output=True, text=True).stdout.strip()
    ext = os.path.join(ROOT, "ibverbs", "_ibverbs" + suffix)
    if not os.path.exists(ext):
        return (f"the free-threaded extension {os.path.relpath(ext, ROOT)} is not built: "
                "make build-ft")
    return None


def build_c(null_lib):
    """build/bench/c_threads_null (linked to the null provider) and
    build/bench/c_threads (libibverbs, for the VM), as host_micro builds
    c_null and the Makefile c_bench."""
    src = os.path.join(BENCH, "c_threads.c")
    inc44 = subprocess.run([os.path.join(ROOT, "tools", "rdma-core"), "44.0"], check=True,
                           capture_output=True, text=True).stdout.strip()
    flags = ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread"]
    host_micro.sh([*flags, f"-I{inc44}/usr/include", src, "-o",
                   os.path.join(BUILD, "c_threads_null"), null_lib, f"-Wl,-rpath,{BUILD}"])
    host_micro.sh([*flags, "-I" + os.path.join(ROOT, "third_party", "rdma-core", "include"), src,
                   "-o", os.path.join(BUILD, "c_threads"), "-libverbs"])


def load():
    try:
        with open("/proc/loadavg") as f:
            return "load average " + ", ".join(f.read().split()[:3])
    except OSError:
        return "load average ?"


def run_workers(commands, seconds, rounds, what):
    """commands: {impl: (argv, env)}.  Returns {impl: {api: {"rate_<n>",
    "cores_<n>", "ratio"}}}: medians over the rounds; ratio, the median of
    the per-round 2/1 ratios (each pair measured back to back, so that the
    load's drift between rounds cancels).  A worker that dies (the build
    measured crashed) is started again and the rest goes on: what it was
    measuring becomes {"crashed": what and how}, not measured again."""
    workers = {}

    def start(impl):
        workers[impl] = Worker(impl, *commands[impl])
        workers[impl].wait_ready()

    units = [(impl, api) for impl in commands
             for api in (APIS if impl != "C" else ["post_poll"])]
    samples = {u: {n: [] for n in THREADS} for u in units}
    crashed = {}
    t0 = time.monotonic()
    try:
        for impl in commands:
            start(impl)
        for r in range(rounds):
            shift = r % len(units)
            for impl, api in units[shift:] + units[:shift]:
                for n in THREADS if r % 2 == 0 else THREADS[::-1]:
                    if (impl, api) in crashed:
                        break
                    try:
                        value = workers[impl].measure(f"{api}_{n} {seconds}")
                    except RuntimeError:
                        workers[impl].close()
                        crashed[impl, api] = (f"crashed in {api}_{n} (exit status "
                                              f"{workers[impl].proc.returncode}; its stderr above)")
                        start(impl)
                        break
                    samples[impl, api][n].append(value)
            print(f"threads: {what} round {r + 1}/{rounds} ({time.monotonic() - t0:.0f} s)",
                  file=sys.stderr, flush=True)
    finally:
        for w in workers.values():
            w.close()
    results = {}
    for (impl, api), per_n in samples.items():
        row = {"crashed": crashed[impl, api]} if (impl, api) in crashed else {
            "ratio": statistics.median(b[0] / a[0] for a, b in zip(per_n[1], per_n[2])),
            **{f"{key}_{n}": statistics.median(v[i] for v in per_n[n])
               for n in THREADS for i, key in enumerate(("rate", "cores"))}}
        results.setdefault(impl, {})[api] = row
    return results


def python_commands(ft, specs, env):
    py = os.path.join(BENCH, "py_threads.py")
    # PYTHON_GIL=0: an import that would turn the GIL back on fails instead
    # of measuring a GIL build under the GIL-off label
    return {"ft": ([ft, py, *specs], dict(env, PYTHON_GIL="0")),
            "gil": ([ft, "-X", "gil=1", py, *specs], env)}


def host_part(ft, lib, seconds, rounds):
    env = dict(os.environ, IBVERBS_LIBRARY=lib, NULLVERBS_COMPLETE_POSTS="1")
    commands = python_commands(ft, ["null"], env)
    commands["C"] = ([os.path.join(BUILD, "c_threads_null"), "null"], env)
    before = load()
    results = run_workers(commands, seconds, rounds, "host")
    return {"where": "host, the null provider (bench/nullverbs.c)", "cpu": host_micro.host_cpu(),
            "cores": os.cpu_count(), "seconds": seconds, "rounds": rounds,
            "load_before": before, "load_after": load(), "results": results}


def inside_vm(ft, seconds, rounds, devices):
    """The VM part, run in the guest: prints the part as one JSON line."""
    import rxe  # noqa: E402  (tests/rxe.py, on the path run_bench set)
    specs = [f"{dev}:{rxe.roce_v2_ipv4_gid_index(dev)}" for dev in devices]
    env = {k: v for k, v in os.environ.items()
           if k not in ("IBVERBS_LIBRARY", "NULLVERBS_COMPLETE_POSTS")}
    commands = python_commands(ft, specs, env)
    commands["C"] = ([os.path.join(BUILD, "c_threads"), *specs], env)
    before = load()
    results = run_workers(commands, seconds, rounds, "VM")
    part = {"where": f"Soft-RoCE in the test VM (QEMU TCG), thread t on the t-th of "
                     f"{', '.join(devices)}",
            "cpu": "QEMU TCG vCPU",
            "cores": os.cpu_count(), "seconds": seconds, "rounds": rounds,
            "load_before": "guest " + before, "load_after": "guest " + load(),
            "results": results}
    print("THREADS-VM " + json.dumps(part), flush=True)


def vm_part(ft, seconds, rounds, devices):
    host_before = load()
    cmd = [os.path.join(ROOT, "tests", "vm", "run-in-vm"), "--timeout", "1500", sys.executable,
           os.path.abspath(__file__), "--inside-vm", "--vm-seconds", str(seconds), "--vm-rounds",
           str(rounds), "--vm-devices", devices]
    env = dict(os.environ, IBVERBS_FT_PYTHON=ft)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    part = next((json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
                 if line.startswith("THREADS-VM ")), None)
    if part is None:
        return {"where": "Soft-RoCE in the test VM",
                "skipped": f"the VM run failed (tests/vm/run-in-vm exited {proc.returncode}; "
                           "its output is above)"}
    part["host_load"] = f"host {host_before} before, {load()} after"
    return part


def instructions(ft, lib):
    """{op: {"label", "gil_off", "gil_on", "abi3"}} (or {"skipped": why})."""
    if not shutil.which("valgrind"):
        return {"skipped": "valgrind is not installed (apt-get install valgrind)"}
    env = host_micro.our_env(lib, ROOT)
    names = list(COUNTED)
    off = host_micro.measure(env, names, python=ft, attribute=LOCKS)
    on = host_micro.measure(dict(env, PYTHON_GIL="1"), names, python=ft)
    abi3 = host_micro.measure(env, names)
    return {"python": subprocess.run([host_micro.PY, "-c", "import platform; "
                                      "print(platform.python_version())"],
                                     capture_output=True, text=True).stdout.strip(),
            "ops": {n: {"label": COUNTED[n], "gil_off": off[n][0], "locks": off[n][1],
                        "gil_on": on[n], "abi3": abi3[n]} for n in names}}


# ---- tables ----------------------------------------------------------

def rate(v):
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k"


def grid(head, rows, left=1):
    """Aligned columns, the first `left` of them text (left-aligned)."""
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in
                       enumerate(zip(r, widths))).rstrip() for r in [head, *rows]]
    lines.insert(1, "-" * len(lines[0]))
    return lines


def row_of(results, impl, api):
    """C has one loop, the reference of both APIs."""
    return results.get(impl, {}).get("post_poll" if impl == "C" else api)


def ratio_of(row):
    return row["ratio"] if row and "ratio" in row else None


def part_table(part):
    """One place's rates: a row per API and implementation, C's last; then
    what crashed."""
    if "skipped" in part:
        return [f"{part.get('where', 'VM')}: not measured: {part['skipped']}"]
    res = part["results"]
    lines = [f"{part['where']}: {part['cpu']}, {part['cores']} cores; {part['rounds']} rounds of "
             f"{part['seconds']:g} s per measurement",
             f"  {part['load_before']} before, {part['load_after']} after"
             + (f"; {part['host_load']}" if "host_load" in part else "")]
    head = ["API", "implementation", "1 thread", "2 threads", "2/1", "cores 1 / 2"]
    rows = [(api, impl) for api in APIS for impl in IMPLS if impl != "C"] + [("verbs", "C")]
    cells, crashes = [], []
    for api, impl in rows:
        r = row_of(res, impl, api)
        if r is None:
            continue
        if "crashed" in r:
            cells.append([api, IMPLS[impl], "crashed", "-", "-", "-"])
            crashes.append(f"  {api}, {IMPLS[impl]}: {r['crashed']}")
            continue
        cells.append([api, IMPLS[impl], rate(r["rate_1"]), rate(r["rate_2"]),
                      f"{r['ratio']:.2f}", f"{r['cores_1']:.2f} / {r['cores_2']:.2f}"])
    return lines + grid(head, cells, left=2) + crashes


def ratio_table(parts):
    """The 2/1 ratios of every place and API side by side."""
    head = ["2/1: messages/s, 2 threads over 1", *IMPLS.values(), "GIL off / C"]
    rows = []
    for name, part in parts.items():
        if "skipped" in part:
            continue
        for api in APIS:
            r = {impl: ratio_of(row_of(part["results"], impl, api)) for impl in IMPLS}
            cells = [f"{r[i]:.2f}" if r[i] else "-" for i in IMPLS]
            rel = f"{r['ft'] / r['C']:.2f}" if r["ft"] and r["C"] else "-"
            rows.append([f"{name}, {api}", *cells, rel])
    return grid(head, rows) if rows else []


def goal_lines(parts):
    """Issue 37's goal: GIL off 2/1 >= GOAL_FT, or C's own ratio where that
    is lower (no binding scales past the verbs it calls); with the GIL,
    about 1."""
    lines = []
    for name, part in parts.items():
        if "skipped" in part:
            continue
        c_row = row_of(part["results"], "C", "plain")
        c = ratio_of(c_row)
        for api in APIS:
            ft, gil = (ratio_of(row_of(part["results"], i, api)) for i in ("ft", "gil"))
            if ft is None or c is None:
                lines.append(f"goal {name} {api}: not measured")
                continue
            # C's threads never wait for each other: where they had less than
            # BUSY_CORES cores, or scaled less than C_SCALED (the VM's vCPUs
            # show a core each whatever the host gives them), other work had
            # the machine, and no ratio of this place says much
            if c_row["cores_2"] < BUSY_CORES or c < C_SCALED:
                lines.append(f"goal {name} {api}: not judged, the machine was busy (C's 2 "
                             f"threads: 2/1 {c:.2f}, {c_row['cores_2']:.2f} cores): "
                             f"GIL off {ft:.2f}")
                continue
            # within 0.02: a tie, as run_bench reads its ratios
            met = "met" if ft >= min(GOAL_FT, c) - 0.02 else "NOT met"
            lines.append(f"goal {name} {api}: GIL off 2/1 >= {GOAL_FT:g} (or C's own, {c:.2f}, "
                         f"where lower): {ft:.2f} {met}; -X gil=1 about 1: "
                         + (f"{gil:.2f}" if gil is not None else "not measured"))
    return lines


def ir_table(ir, ft_version):
    if "skipped" in ir:
        return [f"instruction counts not measured: {ir['skipped']}"]
    head = ["operation", "GIL off", "-X gil=1", "GIL off vs gil=1", "critical sections",
            "without them", f"abi3 on {ir['python']}"]
    rows = [[v["label"], f"{v['gil_off']:.0f}", f"{v['gil_on']:.0f}",
             f"{(v['gil_off'] - v['gil_on']) / v['gil_on'] * 100:+.1f}%",
             f"{v['locks']:.0f} ({v['locks'] / v['gil_off'] * 100:.0f}%)",
             f"{v['gil_off'] - v['locks']:.0f} (+{v['locks'] / (v['gil_off'] - v['locks']) * 100:.0f}%)",
             f"{v['abi3']:.0f}"]
            for v in ir["ops"].values()]
    return [f"instructions per operation, one thread, CPython {ft_version} (callgrind, null "
            "provider, loop subtracted; \"critical sections\": the instructions spent taking and "
            "leaving them, which the same build spends with -X gil=1 too; atomics add none; the "
            "abi3 build on the GIL CPython for reference)",
            *grid(head, rows)]


def render(report):
    if report.get("skipped"):
        return f"thread scaling not measured: {report['skipped']}"
    parts = {k: report[k] for k in ("host", "VM") if k in report}
    out = [f"thread scaling: one signaled RDMA WRITE posted and its completion polled, one in "
           f"flight per thread, each thread its own QP and CQ (CPython {report['ft_version']}, "
           f"{report['ft_python']})", ""]
    for part in parts.values():
        out += part_table(part) + [""]
    ratios = ratio_table(parts)
    if ratios:
        out += ratios + [""] + goal_lines(parts) + [""]
    if "instructions" in report:
        out += ir_table(report["instructions"], report["ft_version"])
    return "\n".join(out).rstrip()


def arg(argv, name, default, kind=float):
    return kind(argv[argv.index(name) + 1]) if name in argv else default


def main(argv):
    seconds = arg(argv, "--seconds", 1.0)
    rounds = arg(argv, "--rounds", 7, int)
    vm_seconds = arg(argv, "--vm-seconds", 2.0)
    vm_rounds = arg(argv, "--vm-rounds", 5, int)
    vm_devices = arg(argv, "--vm-devices", VM_DEVICES, str)
    ft, why = ft_python()
    if "--inside-vm" in argv:
        if why is not None:
            raise SystemExit(f"threads: in the VM: {why}")
        inside_vm(ft, vm_seconds, vm_rounds, vm_devices.split(","))
        return 0
    json_path = arg(argv, "--json", os.path.join(BUILD, "threads.json"), str)
    table_path = arg(argv, "--table", os.path.join(BUILD, "threads.txt"), str)
    try:        # a tree without git (the aarch64 root's copy) has no commit to name
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        commit = "?"
    report = {"commit": commit}
    if why is None:
        why = ft_extension(ft)
    if why is not None:
        report["skipped"] = why
    else:
        report["ft_python"] = ft
        report["ft_version"] = subprocess.run(
            [ft, "-c", "import platform; print(platform.python_version())"],
            check=True, capture_output=True, text=True).stdout.strip() + "t"
        lib = host_micro.build_nullverbs()
        build_c(lib)
        if "--no-host" not in argv:
            report["host"] = host_part(ft, lib, seconds, rounds)
        if "--no-vm" not in argv:
            report["VM"] = vm_part(ft, vm_seconds, vm_rounds, vm_devices)
        if "--no-ir" not in argv:
            report["instructions"] = instructions(ft, lib)
    report["table"] = render(report)
    print(f"bench-threads: skipped: {report['skipped']}" if "skipped" in report
          else "\n" + report["table"], flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    with open(table_path, "w") as f:
        f.write(report["table"] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
