"""python -m ibverbs on the host: argument handling (the device tier runs
devices/info/ping for real: tests/device/test_cli.py)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings

import cli_argv  # tests/cli_argv.py

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


@pytest.mark.parametrize("argv, words", [
    (["ping", "-s", "0"], "argument -s/--size: must be 1..67108864, not 0"),
    (["ping", "--listen", "-p", "70000"], "argument -p/--port: must be 0..65535, not 70000"),
    (["ping", "--timeout", "-1"], "argument --timeout: must be more than 0"),
    (["ping", "--timeout", "nan"], "argument --timeout: must be more than 0"),
    (["ping", "-s", "3000000000"], "argument -s/--size: must be 1..67108864, not 3000000000"),
    (["ping", "-s", "9" * 40], "argument -s/--size: must be 1..67108864"),
    (["ping", "-n", "0"], "argument -n/--count: must be 1..1000000, not 0"),
    (["ping", "-g", "256"], "argument -g/--gid-index: must be 0..255, not 256"),
    (["ping", "-p", "0", "server"], "--port 0 (any port) is for a server (--listen)"),
    (["ping", "--listen", "10.0.0.1", "--bind", "10.0.0.2"], "HOST '10.0.0.1' and --bind"),
    (["ping", "server", "--peer-device", "rxe1"], "--peer-device and --peer-gid-index are for"),
    (["gids", "-i", "0"], "argument -i/--ib-port: must be 1..255, not 0"),
])
def test_a_bad_argument_is_status_2_before_any_device_is_looked_for(argv, words):
    """Not "no RDMA devices" (status 4, this host has none), not a traceback
    (OverflowError, MemoryError): argparse's message, status 2."""
    out = cli(*argv)
    assert out.returncode == 2, out.stderr
    assert words in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.splitlines()[-1].startswith(f"ibverbs {argv[0]}: error: "), out.stderr


def test_listen_takes_host_as_the_address_to_listen_on():
    from ibverbs._cli_args import parse_args

    args = parse_args(["ping", "--listen", "127.0.0.1"])
    assert (args.bind, args.host) == ("127.0.0.1", None)
    assert parse_args(["ping", "--listen"]).bind == ""
    assert parse_args(["ping", "--listen", "::1", "--bind", "::1"]).bind == "::1"


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


@pytest.mark.parametrize("argv, status", [(["--help"], 0), (["--version"], 0), (["ping", "--help"], 0),
                                          (["ping", "-p", "70000"], 2), ([], 2)])
def test_help_version_and_usage_work_without_libibverbs(argv, status):
    env = dict(os.environ, IBVERBS_LIBRARY="/nonexistent/libibverbs.so.1")
    out = subprocess.run([sys.executable, "-m", "ibverbs", *argv], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == status, out.stderr
    assert "Traceback" not in out.stderr and "libibverbs" not in out.stderr
    if argv[:1] == ["--version"]:
        import ibverbs
        assert out.stdout.split() == ["ibverbs", ibverbs.__version__]
    elif status == 0:
        assert out.stdout.startswith("usage: ibverbs")


def test_without_libibverbs_json_is_one_document_too():
    env = dict(os.environ, IBVERBS_LIBRARY="/nonexistent/libibverbs.so.1")
    out = subprocess.run([sys.executable, "-m", "ibverbs", "info", "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 3, out.stderr
    doc = json.loads(out.stdout)
    assert doc["status"] == 3 and "libibverbs" in doc["error"], doc
    assert out.stderr.rstrip("\n").endswith(doc["error"]) and len(out.stderr.splitlines()) == 1


def test_without_libibverbs_one_line_and_status_3(monkeypatch):
    env = dict(os.environ, IBVERBS_LIBRARY="/nonexistent/libibverbs.so.1")
    for argv in ([sys.executable, "-m", "ibverbs", "devices"],):
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60, env=env)
        assert out.returncode == 3, out.stderr
        assert len(out.stderr.splitlines()) == 1 and "libibverbs" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    # the console script (`ibverbs = ibverbs._cli:main`) imports the package first too
    script = "import sys; sys.argv[:] = ['/usr/local/bin/ibverbs', 'devices']; from ibverbs._cli import main"
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
        if json_flag and command != "ping":     # a listing: empty, and still JSON
            assert json.loads(out.stdout) == ({"devices": []} if command == "info" else [])
        elif json_flag:                         # the failure as the one document
            assert json.loads(out.stdout) == {"error": out.stderr[len("ibverbs: "):-1],
                                              "status": 4}
        else:
            assert out.stdout == ""


# Under qemu-user (make test-aarch64-host sets IBVERBS_QEMU_USER=1) each
# command line that reaches the device lookup loads libibverbs' providers
# anew, about 2 s emulated: 150 examples cost 320 s there (8 s natively).
# Parsing command lines is the same Python on every architecture; the
# native host tier runs all 150, the aarch64 tier 15.
CLI_EXAMPLES = 15 if os.environ.get("IBVERBS_QEMU_USER") else 150


@pytest.mark.skipif(os.path.isdir("/sys/class/infiniband"), reason="this host has RDMA devices")
@settings(max_examples=CLI_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cli_argv.command_lines())
def test_generated_command_lines_get_a_documented_status_and_no_traceback(line):
    """Any command line: status 2 (argparse's message) when an argument is
    bad, else 4 (this host has no RDMA device), never a traceback; an
    exception escaping main() fails here; with --json, stdout is one JSON
    document."""
    from ibverbs._cli_args import EXIT_CODES

    argv, valid, chosen = line
    status, out, err = cli_argv.run(argv)
    assert status in EXIT_CODES and "Traceback" not in err + out
    assert status == (4 if valid else 2), (argv, status, err)
    if "json" in chosen:                    # exactly one document, whatever happened
        json.loads(out)
    if status == 4:
        assert err.startswith("ibverbs: no RDMA devices") and len(err.splitlines()) == 1, err
    else:
        assert err.splitlines()[-1].startswith("ibverbs"), err


# --- issue 36: one JSON document on every path; network errors name the step -------

@pytest.mark.parametrize("argv", [["ping", "-s", "0", "--json"], ["gids", "--json", "-i", "0"],
                                  ["devices", "--js", "--bogus"]])
def test_a_usage_error_with_json_is_one_document_and_argparse_s_message(argv):
    out = cli(*argv)
    assert out.returncode == 2, out.stderr
    doc = json.loads(out.stdout)
    assert doc == {"error": out.stderr.splitlines()[-1], "status": 2}, (doc, out.stderr)
    assert out.stderr.splitlines()[0].startswith("usage: ibverbs")


def test_help_says_what_json_prints_on_a_failure_and_on_ctrl_c():
    out = cli("--help").stdout
    assert '{"error": SENTENCE, "status": EXIT_STATUS}' in out
    assert "Ctrl-C in a ping" in out and "exits 130" in out


def test_a_refused_connection_names_the_host_port_and_step():
    import socket

    from ibverbs import _cli

    with socket.socket() as s:                 # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(_cli.CLIError) as info:
        with _cli._step(f"connecting to 127.0.0.1:{port}", "exchanging QP info", 2):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert str(info.value) == f"connecting to 127.0.0.1:{port} (exchanging QP info): " \
        "Connection refused" and info.value.status == 1
    with pytest.raises(_cli.CLIError) as info:
        with _cli._step("connecting to peer.invalid:18515", "exchanging QP info", 2):
            socket.create_connection(("peer.invalid", 18515), timeout=2).close()
    assert str(info.value).startswith("connecting to peer.invalid:18515 (exchanging QP info): ")


def test_a_silent_peer_names_the_step_and_the_timeout():
    import socket

    from ibverbs import _cli

    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            with pytest.raises(_cli.CLIError) as info:
                with _cli._step(f"connecting to 127.0.0.1:{port}", "exchanging QP info", 0.5):
                    _cli._remote_info(conn)
    assert str(info.value) == f"connecting to 127.0.0.1:{port} (exchanging QP info): the peer " \
        "sent no QPInfo within 0.5 s"


def test_guid_text_is_the_byte_order_ibv_devinfo_prints():
    """Every GUID the verbs give is a __be64 read as a host integer; its
    text is its bytes in memory order (issue 36: --json showed the
    integer's hex digits, byte-swapped on x86)."""
    import ibverbs
    from ibverbs._device import guid_text

    value = int.from_bytes(bytes.fromhex("5254000000123456"), sys.byteorder)
    assert guid_text(value) == "5254:0000:0012:3456"
    assert repr(ibverbs.Device("rxe0", value)) == "Device(name='rxe0', guid=5254:0000:0012:3456)"
