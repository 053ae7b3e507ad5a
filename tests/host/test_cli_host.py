"""python -m ibverbs on the host: argument handling (the device tier runs
devices/info/ping for real: tests/device/test_cli.py)."""
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ibverbs", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_help_names_every_command():
    out = cli("--help")
    assert out.returncode == 0
    for command in ("devices", "info", "ping"):
        assert command in out.stdout


def test_a_command_is_required():
    out = cli()
    assert out.returncode == 2 and "required" in out.stderr


def test_ping_rejects_a_size_of_zero_without_a_traceback():
    out = cli("ping", "-s", "0")
    assert out.returncode != 0 and "--size and --count must be positive" in out.stderr
    assert "Traceback" not in out.stderr


def test_ping_options_are_documented():
    out = cli("ping", "--help")
    for option in ("--listen", "--port", "--device", "--peer-device", "--count", "--size",
                   "--gid-index", "--ib-port", "--events"):
        assert option in out.stdout
