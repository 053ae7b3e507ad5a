"""Shared fixtures.

Two tiers: tests/host (no device: generator, layout, pure Python, the
extension's import-time behaviour) and tests/device (marked `integration`:
real verbs, in the Soft-RoCE VM that `make test` boots, or on a host with
a real RDMA NIC).  Device fixtures open rxe0/rxe1 in the VM, the first
device(s) elsewhere (IBVERBS_TEST_DEVICE / IBVERBS_TEST_DEVICE2 override),
and pick the RoCE v2 IPv4 GID from sysfs, never a fixed index.

IBVERBS_REQUIRE_DEVICE=1 (set by `make test`) turns "no device" into a
failure instead of a skip, so a broken VM can never pass as green.
"""
from __future__ import annotations

import os
import pathlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, NoReturn, Optional, Tuple

import pytest

if TYPE_CHECKING:
    import ibverbs as ibv

ROOT = pathlib.Path(__file__).resolve().parents[1]
TESTS = pathlib.Path(__file__).resolve().parent
for p in (str(ROOT), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)

import rxe  # noqa: E402  (tests/rxe.py)

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the VM's tiers and tools that run without hypothesis
    pass
else:
    # Speed is not what these properties test: the aarch64 tier runs under
    # qemu-user and CI shares 2 cores with a VM, where generating 100
    # examples can take seconds.  Tests that set their own settings keep them.
    settings.register_profile("ibverbs", deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("ibverbs")


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    for item in items:
        if "/device/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.integration)


def _require_device() -> bool:
    return os.environ.get("IBVERBS_REQUIRE_DEVICE") == "1"


def _device_names() -> Tuple[Optional[str], Optional[str]]:
    names = rxe.rdma_devices()
    first = os.environ.get("IBVERBS_TEST_DEVICE")
    second = os.environ.get("IBVERBS_TEST_DEVICE2")
    if rxe.in_vm():
        first, second = first or "rxe0", second or "rxe1"
    first = first or (names[0] if names else None)
    second = second or (names[1] if len(names) > 1 else first)
    return first, second


def _missing(what: str) -> NoReturn:
    if _require_device():
        pytest.fail(f"{what} (IBVERBS_REQUIRE_DEVICE=1: the device tier must run)")
    pytest.skip(what)


@pytest.fixture(scope="session")
def ib() -> ModuleType:
    import ibverbs
    return ibverbs


@pytest.fixture(scope="session")
def device_names() -> Tuple[str, str]:
    first, second = _device_names()
    if first is None or second is None:
        _missing("no RDMA device on this host (run `make test`, which boots the Soft-RoCE VM)")
    return first, second


@pytest.fixture(scope="session")
def port() -> int:
    return int(os.environ.get("IBVERBS_TEST_PORT", "1"))


def open_device(ib: Any, name: str) -> "ibv.Context":
    for dev in ib.get_device_list():
        if dev.name == name:
            ctx: ibv.Context = dev.open()
            return ctx
    _missing(f"RDMA device {name} not found")


@pytest.fixture
def ctx(ib: Any, device_names: Tuple[str, str]) -> "Iterator[ibv.Context]":
    with open_device(ib, device_names[0]) as c:
        yield c


@pytest.fixture
def ctx2(ib: Any, device_names: Tuple[str, str]) -> "Iterator[ibv.Context]":
    """The second device (rxe1 in the VM); the first one if there is one."""
    with open_device(ib, device_names[1]) as c:
        yield c


@pytest.fixture
def gid_index(device_names: Tuple[str, str], port: int) -> int:
    idx = rxe.roce_v2_ipv4_gid_index(device_names[0], port)
    if idx is None:
        _missing(f"{device_names[0]} has no RoCE v2 IPv4 GID")
    return idx


@pytest.fixture
def gid_index2(device_names: Tuple[str, str], port: int) -> int:
    idx = rxe.roce_v2_ipv4_gid_index(device_names[1], port)
    if idx is None:
        _missing(f"{device_names[1]} has no RoCE v2 IPv4 GID")
    return idx


@pytest.fixture
def pd(ctx: "ibv.Context") -> "Iterator[ibv.PD]":
    with ctx.alloc_pd() as p:
        yield p


@pytest.fixture
def cq(ctx: "ibv.Context") -> "Iterator[ibv.CQ]":
    with ctx.create_cq(64) as c:
        yield c


@pytest.fixture
def access(ib: Any) -> "ibv.AccessFlags":
    A = ib.AccessFlags
    flags: ibv.AccessFlags = A.LOCAL_WRITE | A.REMOTE_WRITE | A.REMOTE_READ | A.REMOTE_ATOMIC
    return flags


class Buffer:
    """Page-aligned host memory (numpy) registered as an MR."""

    def __init__(self, pd: "ibv.PD", size: int, access: int, fill: int = 0) -> None:
        import numpy as np
        raw = np.zeros(size + 4096, dtype=np.uint8)
        offset = (-raw.ctypes.data) % 4096
        self.array = raw[offset:offset + size]
        self.array[:] = fill
        self.mr = pd.reg_mr(self.array.ctypes.data, size, access)

    @property
    def addr(self) -> int:
        return self.array.ctypes.data

    def close(self) -> None:
        self.mr.close()


@pytest.fixture
def make_buffer(pd: "ibv.PD", access: int) -> Iterator[Callable[..., Buffer]]:
    made: List[Buffer] = []

    def make(size: int = 4096, fill: int = 0, on_pd: "Optional[ibv.PD]" = None,
             acc: Optional[int] = None) -> Buffer:
        b = Buffer(on_pd or pd, size, access if acc is None else acc, fill)
        made.append(b)
        return b
    yield make
    for b in reversed(made):
        b.close()


def collected_through_its_class(base: type, args: Tuple[Any, ...]) -> bool:
    """Whether a Python subclass of base, whose instance is kept in a cycle
    through its own class, is collected (the type's tp_traverse visits the
    type: tests/host/test_gc_subclass.py, tests/device/test_gc_subclass_device.py)."""
    import gc
    import weakref
    cls = type("Sub" + base.__name__, (base,), {})
    obj = cls(*args)
    setattr(cls, "keep", obj)      # obj -> cls (its type) -> cls.__dict__ -> obj
    ref = weakref.ref(obj)
    del obj, cls
    gc.collect()
    return ref() is None


def poll_until(cq: "ibv.CQ", n: int = 1, timeout: float = 10.0) -> "List[ibv.WC]":
    """Poll until n completions arrived (or fail after timeout seconds)."""
    import time
    got: "List[ibv.WC]" = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        got += cq.poll(max(1, n - len(got)))
        if len(got) < n and time.monotonic() > deadline:
            raise AssertionError(f"only {len(got)} of {n} completions within {timeout}s: {got}")
    return got


class RCPair:
    """Two connected QPs (a on ctx_a, b on ctx_b) with their own CQs."""

    def __init__(self, ib: Any, pd_a: "ibv.PD", pd_b: "ibv.PD", port: int, gid_a: int, gid_b: int,
                 access: int, qp_type: Optional[int] = None, max_send_wr: int = 64,
                 max_recv_wr: int = 64, max_sge: int = 4, max_inline_data: int = 64) -> None:
        qp_type = ib.QPType.RC if qp_type is None else qp_type
        self.cq_a = pd_a.context.create_cq(128)
        self.cq_b = pd_b.context.create_cq(128)
        self.qp_a = pd_a.create_qp(ib.QPInitAttr(
            self.cq_a, self.cq_a, qp_type=qp_type, max_send_wr=max_send_wr,
            max_recv_wr=max_recv_wr, max_send_sge=max_sge, max_recv_sge=max_sge,
            max_inline_data=max_inline_data))
        self.qp_b = pd_b.create_qp(ib.QPInitAttr(
            self.cq_b, self.cq_b, qp_type=qp_type, max_send_wr=max_send_wr,
            max_recv_wr=max_recv_wr, max_send_sge=max_sge, max_recv_sge=max_sge,
            max_inline_data=max_inline_data))
        ctx_a, ctx_b = pd_a.context, pd_b.context
        info_a = ib.local_qp_info(self.qp_a, ctx_a.query_port(port),
                                  ctx_a.query_gid(port, gid_a), port=port, psn=0x100)
        info_b = ib.local_qp_info(self.qp_b, ctx_b.query_port(port),
                                  ctx_b.query_gid(port, gid_b), port=port, psn=0x200)
        ib.connect_rc(self.qp_a, info_b, port=port, sgid_index=gid_a, access=access,
                      local_psn=0x100)
        ib.connect_rc(self.qp_b, info_a, port=port, sgid_index=gid_b, access=access,
                      local_psn=0x200)

    def close(self) -> None:
        for obj in (self.qp_a, self.qp_b, self.cq_a, self.cq_b):
            obj.close()


@pytest.fixture
def rc_pair(ib: Any, pd: "ibv.PD", port: int, gid_index: int, access: int) -> Iterator[RCPair]:
    """RC loopback on one device."""
    pair = RCPair(ib, pd, pd, port, gid_index, gid_index, access)
    yield pair
    pair.close()


@pytest.fixture(scope="session")
def on_null_provider() -> Callable[..., Any]:
    """run(code, interpreter=None, **env): `code` run by a fresh interpreter
    (this one, or the given executable) whose ibverbs loads the null
    provider (bench/nullverbs.c, built by bench/host_micro.py) instead of
    libibverbs.so.1; env adds environment variables (those of nullverbs.c
    included).  Its CompletedProcess, text output captured."""
    import importlib.util
    import shutil
    import subprocess
    if shutil.which("gcc") is None:
        pytest.skip("the null provider needs gcc")
    spec = importlib.util.spec_from_file_location("host_micro", ROOT / "bench" / "host_micro.py")
    assert spec is not None and spec.loader is not None
    host_micro = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host_micro)
    lib = host_micro.build_nullverbs()

    def run(code: str, interpreter: Optional[str] = None,
            **env: str) -> "subprocess.CompletedProcess[str]":
        full = dict(os.environ, IBVERBS_LIBRARY=lib, PYTHONPATH=str(ROOT), **env)
        return subprocess.run([interpreter or sys.executable, "-c", code], capture_output=True,
                              text=True, env=full, cwd=ROOT, timeout=120)
    return run
