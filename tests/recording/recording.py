"""Host tests through the recording provider (tests/recording/recverbs.c).

The extension loads its libibverbs once, at import, from IBVERBS_LIBRARY:
the host tier's own process has the real one, so a test through the
recording provider runs its body in a child Python that imports ibverbs
with IBVERBS_LIBRARY pointing at librecverbs.so.  In a test module:

    def _sends_one(rec):                 # runs in the child
        qp = rec.qp()                    # an RC QP on rec.pd, CQ rec.cq
        rec.qp_post_send(...)            # or anything the binding offers
        return rec.requests()            # what the provider was handed

    def test_it(recording):              # the fixture (tests/host/conftest.py)
        (req,) = recording(_sends_one)   # the body's return value, unpickled
        assert req["wr_id"] == 7

A body is a module-level function of the test module; it gets a Recorder
(below) and returns anything picklable; an exception in it fails the test
with the child's traceback.  recording(body, *args) passes args along.

Recorder in the child:
  rec.ib                         the ibverbs module, loaded on the provider
  rec.ctx, rec.pd, rec.cq        an open context "rec0", a PD, a CQ
  rec.mr(size)                   (MR, its buffer) registered on rec.pd
  rec.qp(qp_type=RC, **kw)       a QP on rec.cq (kw: QPInitAttr's)
  rec.qpex(send_ops_flags=None, qp_type=RC, **kw)
                                 a QPEx (PD.create_qp_ex) on rec.cq; by
                                 default with every send op the provider has
  rec.requests()                 the records, oldest first, as dicts: kind
                                 ("send", "recv", "srq_recv",
                                 "would_deadlock", "qpex"), post (the post call's
                                 number), index (place in its chain), target
                                 (qp_num, the SRQ's .handle, or for
                                 would_deadlock the QP's or WQ's .handle),
                                 every ibv_send_wr field with each union read
                                 through each member (rdma_*, atomic_*, ud_*,
                                 xrc_remote_srqn, bind_*, tso_*), num_sge and
                                 sges, a list of (addr, length, lkey).
                                 ud_ah_handle and bind_mr_handle: the AH's
                                 and the bound MR's .handle, 0xFFFFFFFF when
                                 the provider no longer had it at the post.
                                 A "qpex" record is one builder call of a
                                 QPEx (tests/recording/recqpex.c says which
                                 fields each fills): call ("wr_start",
                                 "wr_send", "wr_set_sge", ..., "wr_complete",
                                 "wr_abort"), post (its batch, the wr_start's
                                 post number), index (place in the batch),
                                 wr_id/send_flags (qpx->wr_id/wr_flags at an
                                 operation), inline_data (bytes), inline_len
  rec.qpex_calls_of(qp)          the "qpex" records of that QP
  rec.clear()                    forget the records
  rec.push_completion(cq, wr_id, status=0, opcode=0, byte_len=0)
                                 queue a completion on cq (a CQ or CQEx)
  rec.set_locked(cq, True)       hold cq's modelled lock (mlx5's cq->lock); a
                                 CQEx's start_poll that returns a completion
                                 holds it until end_poll.  destroy_qp,
                                 modify_qp to RESET, destroy_wq, modify_wq to
                                 RESET or RESET->RDY on a QP/WQ of a locked CQ
                                 do nothing, record "would_deadlock" (its
                                 "lock_verb": destroy_qp, modify_qp,
                                 destroy_wq, modify_wq) and return EDEADLK;
                                 so does a post_send on a QPEx between
                                 wr_start and wr_complete/wr_abort (the send
                                 queue's lock: "lock_verb" post_send)
  rec.is_locked(cq)
  rec.fail_next_post(rc, bad_index=0)
                                 the next post call returns rc (negative too)
                                 with *bad at that request

Outside pytest: build() returns the library's path, environment() the
child's environment, for a script of your own.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, List

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BUILD = ROOT / "build" / "recording"
SOURCES = [HERE / "recverbs.c", HERE / "recqpex.c"]
HEADER = HERE / "recverbs.h"
KINDS = {1: "send", 2: "recv", 3: "srq_recv", 4: "would_deadlock", 5: "qpex"}
LOCK_VERBS = {1: "destroy_qp", 2: "modify_qp", 3: "destroy_wq", 4: "modify_wq", 5: "post_send"}


def _include_dirs() -> List[str]:
    """rdma-core's headers the extension is built with (setup.py's
    rdma_include_dirs), so that verbs_context and ibv_cq_ex have the
    extension's layout."""
    prefix = os.environ.get("RDMA_CORE")
    if prefix:
        for candidate in ("include", "usr/include"):
            if (pathlib.Path(prefix) / candidate / "infiniband" / "verbs.h").exists():
                return [str(pathlib.Path(prefix) / candidate)]
    return [str(ROOT / "third_party" / "rdma-core" / "include")]


def _host_micro() -> Any:
    """bench/host_micro.py, whose write_missing_stubs the null provider uses too."""
    spec = importlib.util.spec_from_file_location("host_micro", ROOT / "bench" / "host_micro.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build() -> str:
    """build/recording/librecverbs.so, rebuilt when a source (recverbs.c,
    recqpex.c, recverbs.h) or the extension's symbol list
    (generated/loader.c.h) is newer."""
    BUILD.mkdir(parents=True, exist_ok=True)
    lib = BUILD / "librecverbs.so"
    loader = ROOT / "generated" / "loader.c.h"
    newest = max(p.stat().st_mtime for p in [*SOURCES, HEADER, loader, pathlib.Path(__file__)])
    if lib.exists() and lib.stat().st_mtime >= newest:
        return str(lib)
    cflags = ["-O1", "-g", "-fPIC", "-fvisibility=hidden", "-Wall", "-Werror",
              "-Wno-unused-parameter", *[f"-I{d}" for d in _include_dirs()]]
    objs = [BUILD / (source.stem + ".o") for source in SOURCES]
    for source, obj in zip(SOURCES, objs):
        subprocess.run(["gcc", *cflags, "-c", str(source), "-o", str(obj)], check=True)
    stubs = BUILD / "recverbs_stubs.c"
    _host_micro().write_missing_stubs(objs, stubs, "recverbs")
    tmp = BUILD / f"librecverbs.so.{os.getpid()}"
    subprocess.run(["gcc", *cflags, "-shared", *map(str, objs), str(stubs), "-o", str(tmp),
                    "-lpthread"], check=True)
    os.replace(tmp, lib)      # atomic: a child of another test never sees half a file
    return str(lib)


def environment(lib: str | None = None) -> Dict[str, str]:
    env = dict(os.environ)
    env["IBVERBS_LIBRARY"] = lib or build()
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
    env.pop("IBVERBS_TEST_HOOKS", None)
    return env


def run(body: Callable[..., Any], *args: Any, timeout: float = 300, lib: str | None = None) -> Any:
    """body(Recorder(), *args) in a child under the recording provider; its
    return value.  An exception in the child raises AssertionError here with
    the child's output."""
    module = sys.modules[body.__module__]
    with tempfile.TemporaryDirectory(prefix="recording.") as tmp:
        out = pathlib.Path(tmp) / "result.pickle"
        argfile = pathlib.Path(tmp) / "args.pickle"
        argfile.write_bytes(pickle.dumps(args))
        proc = subprocess.run(
            [sys.executable, "-c", "import recording, sys; recording._child(*sys.argv[1:])",
             str(module.__file__), body.__name__, str(argfile), str(out)],
            env=environment(lib), cwd=str(ROOT), capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0 or not out.exists():
            raise AssertionError(f"{body.__name__} under the recording provider exited "
                                 f"{proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n"
                                 f"{proc.stderr}")
        if proc.stdout:
            sys.stdout.write(proc.stdout)
        return pickle.loads(out.read_bytes())


def _child(path: str, name: str, argfile: str, out: str) -> None:
    spec = importlib.util.spec_from_file_location("_recorded_" + pathlib.Path(path).stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    args = pickle.loads(pathlib.Path(argfile).read_bytes())
    result = getattr(module, name)(Recorder(), *args)
    pathlib.Path(out).write_bytes(pickle.dumps(result))


class Recorder:
    """The child's view of the provider (see the module's docstring)."""

    def __init__(self) -> None:
        import ibverbs
        path = os.environ["IBVERBS_LIBRARY"]
        # The extension dlopened this very file: the same handle, the same records.
        self.lib = lib = ctypes.CDLL(path)
        lib.rec_field_names.restype = ctypes.c_char_p
        lib.rec_count.restype = ctypes.c_size_t
        lib.rec_read.argtypes = [ctypes.c_size_t, ctypes.c_void_p]
        lib.rec_request_size.restype = ctypes.c_size_t
        lib.rec_cq_push.argtypes = [ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32,
                                    ctypes.c_uint32, ctypes.c_uint32]
        lib.rec_cq_set_locked.argtypes = [ctypes.c_uint32, ctypes.c_int]
        lib.rec_cq_locked.argtypes = [ctypes.c_uint32]
        lib.rec_fail_next_post.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.rec_qpex_call_names.restype = ctypes.c_char_p
        self.fields = [n for n in lib.rec_field_names().decode().split(",") if n]
        # A qpex record's `call` code is its place in this list, from 1.
        self.qpex_calls = [""] + [n for n in lib.rec_qpex_call_names().decode().split(",") if n]
        max_sge = lib.rec_max_sge()
        max_inline = lib.rec_max_inline()

        class SGE(ctypes.Structure):
            _fields_ = [("addr", ctypes.c_uint64), ("length", ctypes.c_uint32),
                        ("lkey", ctypes.c_uint32)]

        class Request(ctypes.Structure):
            _fields_ = [(n, ctypes.c_uint64) for n in self.fields] + [
                ("sge", SGE * max_sge), ("inline_data", ctypes.c_uint8 * max_inline)]

        assert ctypes.sizeof(Request) == lib.rec_request_size(), "recverbs.c and its mirror differ"
        self._request = Request
        self.ib = ibverbs
        self.ctx = ibverbs.get_device_list()[0].open()
        self.pd = self.ctx.alloc_pd()
        self.cq = self.ctx.create_cq(64)
        self._keep: List[Any] = []

    def mr(self, size: int = 4096, access: int = 7):
        buf = bytearray(size)
        addr = ctypes.addressof((ctypes.c_char * size).from_buffer(buf))
        mr = self.pd.reg_mr(addr, size, access)
        self._keep.append(buf)
        return mr, buf

    def qp(self, qp_type=None, **kw):
        ib = self.ib
        kw.setdefault("max_send_wr", 64)
        kw.setdefault("max_recv_wr", 64)
        return self.pd.create_qp(ib.QPInitAttr(self.cq, self.cq,
                                               qp_type=ib.QPType.RC if qp_type is None else qp_type,
                                               **kw))

    def qpex(self, send_ops_flags=None, qp_type=None, **kw):
        """A QPEx on rec.cq (PD.create_qp_ex); send_ops_flags defaults to
        every operation the recording provider has a builder for."""
        ib = self.ib
        ops = ib.QPCreateSendOps
        if send_ops_flags is None:
            send_ops_flags = 0
            for op in ops:
                if op.name != "FLUSH":
                    send_ops_flags |= op
        kw.setdefault("max_send_wr", 64)
        kw.setdefault("max_recv_wr", 64)
        return self.pd.create_qp_ex(self.cq, self.cq,
                                    qp_type=ib.QPType.RC if qp_type is None else qp_type,
                                    send_ops_flags=int(send_ops_flags), **kw)

    def qpex_calls_of(self, qp) -> List[Dict[str, Any]]:
        """The qpex records of this QP, oldest first."""
        return [r for r in self.requests() if r["kind"] == "qpex" and r["target"] == qp.qp_num]

    def requests(self) -> List[Dict[str, Any]]:
        out = []
        raw = self._request()
        for i in range(self.lib.rec_count()):
            if self.lib.rec_read(i, ctypes.byref(raw)) != 0:
                break
            r = {n: getattr(raw, n) for n in self.fields}
            r["kind"] = KINDS[r["kind"]]
            r["num_sge"] = ctypes.c_int32(r["num_sge"] & 0xFFFFFFFF).value
            r["sges"] = [(s.addr, s.length, s.lkey) for s in raw.sge[:r["sges_recorded"]]]
            if r["kind"] == "would_deadlock":
                r["lock_verb"] = LOCK_VERBS[r["opcode"]]
            if r["kind"] == "qpex":
                r["call"] = self.qpex_calls[r["call"]]
                r["inline_data"] = bytes(raw.inline_data[:min(r["inline_len"], len(raw.inline_data))])
            out.append(r)
        return out

    def clear(self) -> None:
        self.lib.rec_clear()

    def push_completion(self, cq, wr_id: int, status: int = 0, opcode: int = 0,
                        byte_len: int = 0) -> None:
        assert self.lib.rec_cq_push(cq.handle, wr_id, status, opcode, byte_len) == 0

    def set_locked(self, cq, locked: bool = True) -> None:
        assert self.lib.rec_cq_set_locked(cq.handle, int(locked)) == 0

    def is_locked(self, cq) -> bool:
        return self.lib.rec_cq_locked(cq.handle) == 1

    def fail_next_post(self, rc: int, bad_index: int = 0) -> None:
        self.lib.rec_fail_next_post(rc, bad_index)
