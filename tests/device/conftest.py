"""Device tier: every test module must give back every verbs resource.

An autouse module-scoped fixture records, before and after each test module,

* what the kernel holds for each RDMA device: the `rdma resource show`
  summary (pd, cq, qp, mr, srq, ctx, cm_id), read over the same netlink
  interface (RDMA_NLDEV_CMD_RES_GET) the `rdma` tool uses, without spawning
  it (~0.4 s a call under emulation; falls back to `rdma -j resource show`);
* what this process holds: the open objects of every handle class
  (`Context._open_count()`, `PD._open_count()`, ...).  The kernel summary
  has no address handles, memory windows or completion channels; these
  counts cover them, and name the Python class that leaked.

After the module (and a gc.collect()) both must be back where they were,
else the module fails with the difference.  The check runs only inside the
run-in-vm guest, where nothing else uses the devices; elsewhere (a shared
host with a real NIC) it is skipped, not failed.
"""
from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest

import rxe

# The fault-injection hooks of the extension (_ibverbs._registry_alias), for
# tests/device/test_c_defects.py; read when ibverbs is first imported.
os.environ.setdefault("IBVERBS_TEST_HOOKS", "1")


def warm_up_librdmacm() -> None:
    """librdmacm opens each device's ibv_context the first time an ID is
    bound to it and keeps it open for the life of the process: a module
    that uses rdma_cm calls this at import (at collection, before any
    fixture), so that its resource snapshot (verbs_resources_are_released)
    compares like with like."""
    if not rxe.in_vm():
        return
    import ibverbs
    from ibverbs import cm
    if not cm.available():
        return
    with cm.create_event_channel() as ch:
        for ip in (rxe.VM_DEVICES["rxe0"], rxe.VM_DEVICES["rxe1"]):
            with ch.create_id() as cm_id:
                cm_id.bind_addr(ip)
                assert cm_id.context is not None
    del ibverbs
    gc.collect()


def _tests_conftest():
    """tests/conftest.py as a module of its own.  Both conftest files are
    imported under the name `conftest`, and pytest imports this one last:
    test modules that `from conftest import poll_until` get this module, so
    it offers the shared helpers too."""
    path = pathlib.Path(__file__).resolve().parents[1] / "conftest.py"
    spec = importlib.util.spec_from_file_location("_ibverbs_tests_conftest", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_shared = _tests_conftest()
Buffer = _shared.Buffer
RCPair = _shared.RCPair
open_device = _shared.open_device
poll_until = _shared.poll_until
del _shared

# Counted by the kernel (the `rdma resource show` summary).
KERNEL_KINDS = ("pd", "cq", "qp", "mr", "srq", "ctx", "cm_id")
# Counted in this process, by handle class.
HANDLE_CLASSES = ("Context", "PD", "CQ", "CompChannel", "QP", "SRQ", "MR", "MW", "AH", "XRCD",
                  "DM", "Flow", "Counters", "WQ", "RWQIndTable", "TD", "ImportedPD", "ImportedMR",
                  "EventChannel", "CMID")

# <rdma/rdma_netlink.h>
_NETLINK_RDMA = 20
_RDMA_NL_NLDEV = 5
_RDMA_NLDEV_CMD_RES_GET = 9
_ATTR_DEV_NAME = 2
_ATTR_RES_SUMMARY = 15
_ATTR_RES_SUMMARY_ENTRY = 16
_ATTR_RES_SUMMARY_ENTRY_NAME = 17
_ATTR_RES_SUMMARY_ENTRY_CURR = 18
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_NLMSG_ERROR, _NLMSG_DONE = 2, 3


def _attrs(data: bytes):
    """(type, payload) of each netlink attribute in data."""
    off = 0
    while off + 4 <= len(data):
        length, kind = struct.unpack_from("=HH", data, off)
        if length < 4:
            break
        yield kind & 0x3FFF, data[off + 4:off + length]
        off += (length + 3) & ~3


def _netlink_summary() -> dict:
    msg_type = (_RDMA_NL_NLDEV << 10) + _RDMA_NLDEV_CMD_RES_GET
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_RDMA) as s:
        s.settimeout(5)
        s.bind((0, 0))
        s.send(struct.pack("=IHHII", 16, msg_type, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0))
        out = {}
        while True:
            buf = s.recv(65536)
            off = 0
            while off + 16 <= len(buf):
                length, kind, _, _, _ = struct.unpack_from("=IHHII", buf, off)
                if length < 16:
                    raise OSError("short netlink message")
                body = buf[off + 16:off + length]
                off += (length + 3) & ~3
                if kind == _NLMSG_DONE:
                    return out
                if kind == _NLMSG_ERROR:
                    err = struct.unpack_from("=i", body)[0]
                    if err:
                        raise OSError(-err, os.strerror(-err))
                    continue
                name, counts = None, {}
                for attr, payload in _attrs(body):
                    if attr == _ATTR_DEV_NAME:
                        name = payload.rstrip(b"\0").decode()
                    elif attr == _ATTR_RES_SUMMARY:
                        for _, entry in _attrs(payload):      # RES_SUMMARY_ENTRY
                            ename, curr = None, None
                            for eattr, epayload in _attrs(entry):
                                if eattr == _ATTR_RES_SUMMARY_ENTRY_NAME:
                                    ename = epayload.rstrip(b"\0").decode()
                                elif eattr == _ATTR_RES_SUMMARY_ENTRY_CURR:
                                    curr = struct.unpack_from("=Q", epayload)[0]
                            if ename is not None and curr is not None:
                                counts[ename] = curr
                if name is not None:
                    out[name] = counts


def _rdma_tool_summary() -> dict:
    out = subprocess.run(["rdma", "-j", "resource", "show"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return {d["ifname"]: {k: v for k, v in d.items() if k not in ("ifindex", "ifname")}
            for d in json.loads(out)}


def kernel_counts() -> dict:
    """{device: {kind: count}} for every RDMA device, as `rdma resource show`
    prints them."""
    try:
        summary = _netlink_summary()
    except OSError:
        if shutil.which("rdma") is None:
            raise
        summary = _rdma_tool_summary()
    return {dev: {k: counts.get(k, 0) for k in KERNEL_KINDS} for dev, counts in summary.items()}


def process_counts(ib) -> dict:
    """{class name: open objects of this process}."""
    return {name: getattr(ib, name)._open_count() for name in HANDLE_CLASSES}


def resource_snapshot(ib) -> dict:
    gc.collect()
    return {"kernel": kernel_counts(), "process": process_counts(ib)}


def leaked(before: dict, after: dict) -> list:
    """Human-readable differences between two snapshots."""
    diffs = []
    for dev in sorted(set(before["kernel"]) | set(after["kernel"])):
        b, a = before["kernel"].get(dev, {}), after["kernel"].get(dev, {})
        for kind in KERNEL_KINDS:
            if a.get(kind, 0) != b.get(kind, 0):
                diffs.append(f"{dev}: {kind} {b.get(kind, 0)} -> {a.get(kind, 0)}")
    for name in HANDLE_CLASSES:
        b, a = before["process"][name], after["process"][name]
        if a != b:
            diffs.append(f"open {name} objects {b} -> {a}")
    return diffs


def accounting_enabled() -> bool:
    return rxe.in_vm() and os.environ.get("IBVERBS_NO_LEAK_CHECK") != "1"


@pytest.fixture(scope="module", autouse=True)
def verbs_resources_are_released(request):
    """Fails the module when it leaves a PD, MR, CQ, QP, SRQ, context (kernel
    summary) or any handle object (AH, MW, channel... : process counts)
    behind."""
    if not accounting_enabled():
        yield
        return
    import ibverbs as ib
    before = resource_snapshot(ib)
    yield
    after = resource_snapshot(ib)
    diffs = leaked(before, after)
    if diffs:
        pytest.fail(f"{request.module.__name__} left verbs resources behind: " + "; ".join(diffs),
                    pytrace=False)


def skip_if_unsupported(ib, what, make):
    """Skip the calling tests where the running provider lacks a feature
    (rxe of rdma-core 33.2: no memory windows, no ibv_create_cq_ex, no
    ibv_wr_* API): make() builds a throwaway object (closed again) and an
    EOPNOTSUPP from it skips; any other error is raised."""
    import errno as _errno
    try:
        obj = make()
    except ib.VerbsError as exc:
        if exc.errno != _errno.EOPNOTSUPP:
            raise
        pytest.skip(f"this provider has no {what}: {exc}")
    else:
        obj.close()


@contextlib.contextmanager
def high_fds():
    """Every file descriptor below 1024 taken (RLIMIT_NOFILE raised as
    needed), so that the next one opened, an event channel's, is 1024 or
    more: select() refuses those (FD_SETSIZE), poll() does not."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 1200
    if hard != resource.RLIM_INFINITY and hard < want:
        pytest.skip(f"RLIMIT_NOFILE's hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
    fds = [os.open(os.devnull, os.O_RDONLY)]
    try:
        while fds[-1] < 1023:
            fds.append(os.dup(fds[0]))     # the lowest free one: below 1024 until all are taken
        yield
    finally:
        for fd in fds:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
def fds_above_1023():
    with high_fds():
        yield


# --- a call stopped inside its GIL-released section (the extension's test hook) -------

def in_thread(call):
    """Start call() in a daemon thread: (thread, box), box getting its
    "result", or the exception it raised as "error"."""
    box = {}

    def body():
        try:
            box["result"] = call()
        except BaseException as exc:    # reported by the caller
            box["error"] = exc
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, box


def paused_call(call, timeout=10.0):
    """Start call() in a thread, stopped by the test hook (_test_pause) at the
    pause point of its released section, just before its provider or
    librdmacm call: (thread, result box, how many calls are paused), 0 when
    it ended before pausing (its result or error in the box).  resume() it."""
    from ibverbs import _ibverbs
    _ibverbs._test_pause(True)
    t, box = in_thread(call)
    deadline = time.monotonic() + timeout
    paused = 0
    while paused == 0 and t.is_alive() and time.monotonic() < deadline:
        paused = _ibverbs._test_paused(0.1)
    return t, box, paused


def resume(t, box, timeout=10.0):
    """Let a paused_call() go on, and wait for it: its result box."""
    from ibverbs import _ibverbs
    _ibverbs._test_pause(False)
    t.join(timeout)
    assert not t.is_alive()
    return box


def run_paused(call, while_paused, timeout=10.0):
    """call() stopped inside its released section while while_paused() runs
    here, then resumed: call()'s result, or its exception raised here."""
    t, box, paused = paused_call(call, timeout)
    try:
        assert paused, f"it never reached its released section: {box}"
        while_paused()
    finally:
        box = resume(t, box, timeout)
    if "error" in box:
        raise box["error"]
    return box["result"]


def in_fork_child(body):
    """body() in a fork() child: its text ('ok' or the error) back here."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:                                    # pragma: no cover - the child
        os.close(r)
        try:
            msg = body()
        except BaseException as exc:
            msg = f"{type(exc).__name__}: {exc}"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


def connect_loopback(ib, ctx, a, b, port, gid_index, access):
    """RC QPs a and b of one device connected to each other."""
    gid = ctx.query_gid(port, gid_index)
    ib.connect_rc(a, ib.local_qp_info(b, ctx.query_port(port), gid, port=port),
                  port=port, sgid_index=gid_index, access=access)
    ib.connect_rc(b, ib.local_qp_info(a, ctx.query_port(port), gid, port=port),
                  port=port, sgid_index=gid_index, access=access)
