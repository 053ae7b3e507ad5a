"""The PCIe-tree tier: one q35 guest (tests/vm/run-in-vm --topology
pcie-tree: root ports, two PCIe switches, expander host bridges on two NUMA
nodes, five virtio-net NICs with rxe0..rxe4, accelerator stand-ins) boots
once per session and runs tests/topology/guest_report.py; the tests here, on
the host, check its report against the tree vm-lib.sh builds.  A nested VM
is not possible inside the device tier's VM, hence a host-side tier.

Runs only with IBVERBS_TOPOLOGY=1 (make test-topology sets it): a plain
`pytest` must not boot a VM unasked.  With IBVERBS_REQUIRE_DEVICE=1 a guest
that cannot boot fails the tier instead of skipping it.  Not collected in a
VM.  By hand, take the VM lock around it:
  IBVERBS_TOPOLOGY=1 flock /tmp/ibverbs-vm.lock .venv/bin/python -m pytest -q tests/topology
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

if os.environ.get("IBVERBS_VM") == "1":
    collect_ignore_glob = ["test_*.py"]


def _unavailable(what: str) -> None:
    if os.environ.get("IBVERBS_REQUIRE_DEVICE") == "1":
        pytest.fail(what)
    pytest.skip(what)


@pytest.fixture(scope="session")
def report() -> dict:
    """What guest_report.py printed in the PCIe-tree guest."""
    if os.environ.get("IBVERBS_TOPOLOGY") != "1":
        pytest.skip("boots a q35 VM: set IBVERBS_TOPOLOGY=1 (make test-topology does)")
    if shutil.which("qemu-system-x86_64") is None:
        _unavailable("qemu-system-x86_64 is missing (tests/vm/ensure-deps installs it)")
    start = time.monotonic()
    r = subprocess.run([str(ROOT / "tests/vm/run-in-vm"), "--topology", "pcie-tree",
                        "--timeout", "400", sys.executable, "tests/topology/guest_report.py"],
                       cwd=ROOT, capture_output=True, text=True, timeout=480,
                       env=dict(os.environ, PYTHONPATH=str(ROOT),  # the in-place build
                                IBVERBS_VM_DEBUG="1"))     # the guest's boot times
    secs = time.monotonic() - start
    if r.returncode != 0:
        _unavailable(f"run-in-vm --topology pcie-tree: status {r.returncode}\n"
                     f"{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    boot = [line for line in r.stderr.splitlines() if "guest uptime" in line]
    print(f"PCIe-tree guest: booted, reported and powered off in {secs:.1f} s; {boot}")
    doc: dict = json.loads(r.stdout)
    return doc
