"""The test machine itself: fails loudly when the Soft-RoCE VM is broken."""
import os
import subprocess

import pytest

import rxe

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.skipif(not rxe.in_vm(), reason="checks the run-in-vm guest")
def test_vm_selftest_passes():
    selftest = os.path.join(HERE, "..", "vm", "selftest")
    out = subprocess.run([selftest], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_devices_are_active(device_names, port):
    for name in set(device_names):
        assert rxe.port_state(name, port) == "ACTIVE"
