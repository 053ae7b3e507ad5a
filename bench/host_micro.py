"""Host microbenchmarks of `make bench` (no device, no VM).

    .venv/bin/python bench/host_micro.py [--quick] [--ir] [--only NAME,...] [--tree DIR]

--tree DIR measures the ibverbs package built in another checkout (for
before/after comparisons); --only measures only the named operations;
--ir only the instruction counts.

1. Instructions per operation of the Python data path, counted with
   valgrind --tool=callgrind through a null provider (bench/nullverbs.c,
   loaded with IBVERBS_LIBRARY): each operation runs K times in a fresh
   interpreter, and (Ir(K) - Ir(0)) / K / units is what one unit costs,
   interpreter dispatch included and the bare `for` loop subtracted.
   The same counts for the C verbs (ibv_post_send, ibv_poll_cq) through
   the same null provider are the reference.
2. `import ibverbs` over `python -c pass`: wall time, median of alternating
   runs, and `-X importtime`'s cumulative figure for the package.
3. Regeneration of generated/ from verbs.h (`python -m generator generate
   --out <tmp>`): wall time, median of 3.

Prints "host <name> <value> <unit>" lines and never fails on a slow
number: these are measurements, not tests.
"""
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build", "bench")
PY = os.path.join(ROOT, ".venv", "bin", "python")
K = 4000

# name: (units per iteration, setup, loop body).  The setup is the same for
# every operation (so that Ir(0) is one baseline); only the body differs.
SETUP = """
import ibverbs as ib
ctx = ib.get_device_list()[0].open()
pd = ctx.alloc_pd()
cq0 = ctx.create_cq(16)                  # always empty
cq16 = ctx.create_cq(1000000 + 16)       # every poll: 16 completions
qp = pd.create_qp(ib.QPInitAttr(cq0, cq0, qp_type=ib.QPType.RC, max_send_wr=128))
mem = bytearray(4096)
import ctypes
addr = ctypes.addressof((ctypes.c_char * 4096).from_buffer(mem))
mr = pd.reg_mr(addr, 4096, 7)
lkey, rkey = mr.lkey, mr.rkey
sge = ib.SGE(addr, 8, lkey)
def wr(i, last):
    return ib.SendWR(wr_id=i, sg_list=[ib.SGE(mr, 8)], opcode=0, send_flags=2 if last else 0,
                     remote_addr=addr + 2048, rkey=rkey)
wr1 = wr(0, True)
wrs32 = [wr(i, i == 31) for i in range(32)]
rwr = ib.RecvWR(wr_id=1, sg_list=[sge])
has_fast = hasattr(ib, "PostList")
if has_fast:
    pl1 = ib.PostList([wr1])
    pl1r = ib.PostList([wr1], release_gil=True)   # what releasing the GIL costs a post
    pl32 = ib.PostList(wrs32)
    buf = ib.WCBuffer(16)
    poll_into0, poll_into16 = cq0.poll_into, cq16.poll_into
    e5 = pl32[5]
    full = ib.WCBuffer(16)
    poll_into16(full)
wc = cq16.poll(1)[0]
post_send, post_recv, poll0, poll16 = qp.post_send, qp.post_recv, cq0.poll, cq16.poll
r = range(int(__import__("sys").argv[2]))
"""

OPS = {
    "loop":               (1, "call", "pass"),
    "sge_build":          (1, "SGE", "ib.SGE(addr, 8, lkey)"),
    "mr_sge":             (1, "SGE", "mr.sge(8)"),
    "sendwr_build":       (1, "WR", "ib.SendWR(wr_id=1, sg_list=[sge], opcode=0, send_flags=2, "
                                    "remote_addr=addr, rkey=rkey)"),
    "post_send_1":        (1, "WR", "post_send(wr1)"),
    "post_send_32":       (32, "WR", "post_send(wrs32)"),
    "post_recv_1":        (1, "WR", "post_recv(rwr)"),
    "postlist_build_32":  (32, "WR", "ib.PostList(wrs32)"),
    "postlist_post_1":    (1, "WR", "post_send(pl1)"),
    "postlist_post_1_gil_released": (1, "WR", "post_send(pl1r)"),
    "postlist_post_32":   (32, "WR", "post_send(pl32)"),
    "entry_set_wr_id":    (1, "call", "e5.wr_id = 7"),
    "entry_set_addr":     (1, "call", "e5.addr = addr"),
    "poll_empty":         (1, "call", "poll0(16)"),
    "poll_16":            (16, "WC", "poll16(16)"),
    "poll_1":             (1, "WC", "poll16(1)"),
    "poll_16_iter":       (16, "WC", "for wc in poll16(16): wc.status"),
    "wc_status":          (1, "call", "wc.status"),
    "count_opcode":       (1, "call", "full.count_opcode(128)"),
    "poll_into_empty":    (1, "call", "poll_into0(buf)"),
    "poll_into_16":       (16, "WC", "poll_into16(buf)"),
    "wcbuf_wr_id":        (1, "call", "full.wr_id(3)"),
    "wcbuf_check":        (1, "call", "full.raise_for_status()"),
}
FAST_OPS = {"postlist_build_32", "postlist_post_1", "postlist_post_1_gil_released", "postlist_post_32", "entry_set_wr_id",
            "entry_set_addr", "poll_into_empty", "poll_into_16", "wcbuf_wr_id", "wcbuf_check", "count_opcode"}

C_REF = r"""
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv)
{
    long n = atol(argv[2]);
    int op = atoi(argv[1]);
    int num;
    struct ibv_device **list = ibv_get_device_list(&num);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq0 = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_cq *cq16 = ibv_create_cq(ctx, 1000000 + 16, NULL, NULL, 0);
    struct ibv_qp_init_attr ia = {.send_cq = cq0, .recv_cq = cq0, .qp_type = IBV_QPT_RC};
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    static char buf[4096];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, 7);
    struct ibv_sge sge = {(uintptr_t)buf, 8, mr->lkey};
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof(wr));
    wr.sg_list = &sge; wr.num_sge = 1; wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED; wr.wr.rdma.remote_addr = (uintptr_t)buf + 2048;
    wr.wr.rdma.rkey = mr->rkey;
    struct ibv_wc wc[16];
    for (long i = 0; i < n; i++) {
        if (op == 0) ibv_poll_cq(cq0, 16, wc);
        else if (op == 1) ibv_post_send(qp, &wr, &bad);
        else ibv_poll_cq(cq16, 16, wc);
    }
    return 0;
}
"""
C_OPS = {"c_poll_empty": (0, 1), "c_post_send_1": (1, 1), "c_poll_16": (2, 16)}


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def build_nullverbs():
    """build/bench/libnullverbs.so (+ the C reference program)."""
    os.makedirs(BUILD, exist_ok=True)
    inc = subprocess.run([os.path.join(ROOT, "tools", "rdma-core"), "44.0"], check=True,
                         capture_output=True, text=True).stdout.strip()
    cflags = ["-O2", "-fPIC", "-fvisibility=hidden", f"-I{inc}/usr/include"]
    obj = os.path.join(BUILD, "nullverbs.o")
    sh(["gcc", *cflags, "-c", os.path.join(ROOT, "bench", "nullverbs.c"), "-o", obj])
    defined = set(subprocess.run(["nm", "--defined-only", "-g", obj], check=True,
                                 capture_output=True, text=True).stdout.split())
    with open(os.path.join(ROOT, "generated", "loader.c.h")) as f:
        required = re.findall(r'\{"(\w+)", \(void \*\*\)&slot_\w+, NULL\}', f.read())
    stubs = os.path.join(BUILD, "nullverbs_stubs.c")
    with open(stubs, "w") as f:
        f.write("#include <stdio.h>\n#include <stdlib.h>\n")
        for name in required:
            if name not in defined:
                f.write(f'__attribute__((visibility("default"))) void {name}(void)\n'
                        f'{{ fputs("nullverbs: {name} is not implemented\\n", stderr); abort(); }}\n')
    lib = os.path.join(BUILD, "libnullverbs.so")
    sh(["gcc", *cflags, "-shared", obj, stubs, "-o", lib])
    cref = os.path.join(BUILD, "c_null.c")
    with open(cref, "w") as f:
        f.write(C_REF)
    sh(["gcc", "-O2", f"-I{inc}/usr/include", cref, "-o", os.path.join(BUILD, "c_null"),
        lib, f"-Wl,-rpath,{BUILD}"])
    return lib


def callgrind(cmd, env):
    fd, out = tempfile.mkstemp(prefix="callgrind.", dir=BUILD)
    os.close(fd)
    try:
        sh(["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, *cmd],
           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(out) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    return int(line.split()[1])
    finally:
        os.unlink(out)
    raise RuntimeError("no totals in callgrind output")


def instructions(lib, only, tree):
    env = dict(os.environ, IBVERBS_LIBRARY=lib, PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=tree)
    script = os.path.join(BUILD, "micro_op.py")
    with open(script, "w") as f:
        f.write(SETUP)
        f.write("op = __import__('sys').argv[1]\n")
        for name, (_, _, body) in OPS.items():
            f.write(f"def op_{name}():\n    for _ in r:\n        {body}\n")
        f.write("globals()['op_' + op]()\n")
    probe = subprocess.run([PY, "-c", "import ibverbs; print(hasattr(ibverbs, 'PostList'))"],
                           env=env, cwd=tree, capture_output=True, text=True)
    fast = probe.stdout.strip() == "True"
    base = callgrind([PY, script, "loop", "0"], env)
    results = {}
    for name, (units, unit, _) in OPS.items():
        if (only and name not in only and name != "loop") or (name in FAST_OPS and not fast):
            continue
        ir = callgrind([PY, script, name, str(K)], env)
        results[name] = ((ir - base) / K, units, unit)
    loop = results.pop("loop")[0]
    print(f"host ir_loop {loop:.0f} instructions/iteration (subtracted below)", flush=True)
    for name, (per_iter, units, unit) in results.items():
        print(f"host ir_{name} {(per_iter - loop) / units:.0f} instructions/{unit}", flush=True)
    cbin = os.path.join(BUILD, "c_null")
    cbase = callgrind([cbin, "0", "0"], env)
    for name, (op, units) in C_OPS.items():
        ir = callgrind([cbin, str(op), str(K)], env)
        print(f"host ir_{name} {(ir - cbase) / K / units:.1f} instructions/"
              f"{'WC' if units > 1 else 'call'}", flush=True)


def import_time(rounds):
    # Bytecode cached (as in an installed wheel), in a private cache so that
    # the tree gets no __pycache__.
    cache = tempfile.mkdtemp(prefix="pycache.")
    env = dict(os.environ, PYTHONPYCACHEPREFIX=cache)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("IBVERBS_LIBRARY", None)
    subprocess.run([PY, "-c", "import ibverbs"], cwd=ROOT, env=env, check=True)  # warm caches
    # CPU time (user + sys) of each child, not wall time: on a shared, busy
    # machine it is the steadier figure.
    bare, with_import = [], []
    for _ in range(rounds):
        for cmd, acc in (("pass", bare), ("import ibverbs", with_import)):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run([PY, "-c", cmd], cwd=ROOT, env=env, check=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            acc.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    delta = (statistics.median(with_import) - statistics.median(bare)) * 1e3
    print(f"host import_ms {delta:.2f} ms CPU (median of {rounds} alternating runs; "
          f"python -c pass {statistics.median(bare) * 1e3:.1f} ms)", flush=True)
    if shutil.which("valgrind"):
        ir_pass = callgrind([PY, "-c", "pass"], env)
        ir_import = callgrind([PY, "-c", "import ibverbs"], env)
        print(f"host import_ir {ir_import - ir_pass} instructions "
              f"({(ir_import - ir_pass) / ir_pass:.2f} x python -c pass)", flush=True)
    cum = []
    for _ in range(rounds):
        err = subprocess.run([PY, "-X", "importtime", "-c", "import ibverbs"], cwd=ROOT, env=env,
                             check=True, capture_output=True, text=True).stderr
        for line in err.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) == 3 and parts[2] == "ibverbs":
                cum.append(int(parts[1]) / 1e3)
    if cum:
        print(f"host importtime_ms {statistics.median(cum):.2f} ms (-X importtime cumulative, median)",
              flush=True)
    shutil.rmtree(cache, ignore_errors=True)


def regen_time(rounds):
    inc = subprocess.run([os.path.join(ROOT, "tools", "rdma-core"), "44.0"], check=True,
                         capture_output=True, text=True).stdout.strip()
    times = []
    for _ in range(rounds):
        out = tempfile.mkdtemp(prefix="regen.")
        try:
            t0 = time.perf_counter()
            sh([PY, "-m", "generator", "--rdma-core", inc, "generate", "--out", out],
               cwd=ROOT, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
        finally:
            shutil.rmtree(out)
    print(f"host regenerate_s {statistics.median(times):.2f} s (median of {rounds})", flush=True)


def main(argv):
    quick = "--quick" in argv
    only = set()
    if "--only" in argv:
        only = set(argv[argv.index("--only") + 1].split(","))
    tree = ROOT
    if "--tree" in argv:
        tree = os.path.abspath(argv[argv.index("--tree") + 1])
    if shutil.which("valgrind"):
        lib = build_nullverbs()
        instructions(lib, only, tree)
    else:
        print("host ir_* skipped: valgrind not installed (apt-get install valgrind)")
    if not only and "--ir" not in argv:
        import_time(5 if quick else 15)
        regen_time(1 if quick else 3)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
