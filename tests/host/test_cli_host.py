"""python -m ibverbs on the host: argument handling (the device tier runs
devices/info/ping for real: tests/device/test_cli.py)."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ibverbs", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_help_names_every_command():
    out = cli("--help")
    assert out.returncode == 0
    for command in ("devices", "info", "gids", "ping"):
        assert command in out.stdout
    for status in range(5):                 # the exit statuses are documented
        assert f"\n  {status}  " in out.stdout


def test_a_command_is_required():
    out = cli()
    assert out.returncode == 2 and "required" in out.stderr


def test_ping_rejects_a_size_of_zero_without_a_traceback():
    out = cli("ping", "-s", "0")
    assert out.returncode == 2 and "--size and --count must be positive" in out.stderr
    assert "Traceback" not in out.stderr


def test_ping_options_are_documented():
    out = cli("ping", "--help")
    for option in ("--listen", "--port", "--device", "--peer-device", "--count", "--size",
                   "--gid-index", "--ib-port", "--events"):
        assert option in out.stdout


def test_version():
    out = cli("--version")
    assert out.returncode == 0 and out.stdout.startswith("ibverbs ")
    import ibverbs
    assert out.stdout.split()[1] == ibverbs.__version__


def test_without_libibverbs_one_line_and_status_3(monkeypatch):
    env = dict(os.environ, IBVERBS_LIBRARY="/nonexistent/libibverbs.so.1")
    for argv in ([sys.executable, "-m", "ibverbs", "devices"],):
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 3, out.stderr
        assert len(out.stderr.splitlines()) == 1 and "libibverbs" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    # the console script (`ibverbs = ibverbs._cli:main`) imports the package first too
    script = "import sys; sys.argv[0] = '/usr/local/bin/ibverbs'; from ibverbs._cli import main"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 3 and len(out.stderr.splitlines()) == 1, out.stderr
    # a program importing the package still gets the ImportError
    out = subprocess.run([sys.executable, "-c", "import ibverbs"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 1 and "ImportError" in out.stderr


@pytest.mark.skipif(os.path.isdir("/sys/class/infiniband"), reason="this host has RDMA devices")
@pytest.mark.parametrize("command", ["devices", "info", "gids", "ping"])
def test_no_rdma_in_the_kernel_says_so_in_one_line(command):
    for json_flag in ([], ["--json"]):
        out = cli(command, *json_flag)
        assert out.returncode == 4, out.stderr
        assert out.stderr.startswith("ibverbs: no RDMA devices: this kernel has no RDMA support")
        assert "ENOSYS" in out.stderr and len(out.stderr.splitlines()) == 1
        assert out.stdout == ""
