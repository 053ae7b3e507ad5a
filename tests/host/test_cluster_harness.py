"""The two-VM harness's host-side pieces that need no VM: qemu-pump's
per-node prefixes and pid file, run-cluster's argument checks, the shared
run.sh writer (tests/vm/vm-lib.sh).  The cluster itself is tested by
tests/cluster (make test-cluster-fast)."""
import os
import pathlib
import subprocess

VM = pathlib.Path(__file__).resolve().parents[1] / "vm"


def test_qemu_pump_prefixes_every_line_and_keeps_a_pid_file(tmp_path):
    out, err, pid = tmp_path / "out", tmp_path / "err", tmp_path / "pid"
    for f in (out, err):
        os.mkfifo(f)
    # The pid file is written once QEMU (here: sh) has started.
    script = ('for i in $(seq 100); do test -s %s && break; sleep 0.05; done; '
              'test -s %s || exit 9; printf "one\\ntwo\\nthr" >%s; printf "ee\\n" >%s; '
              'printf "oops" >%s' % (pid, pid, out, out, err))
    r = subprocess.run(["/usr/bin/python3", str(VM / "qemu-pump"), "--prefix", "node2",
                        "--pidfile", str(pid), "30", str(out), str(err), str(tmp_path / "log"),
                        "--", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r
    assert r.stdout == "node2: one\nnode2: two\nnode2: three\n"
    assert r.stderr == "node2: oops\n"          # the unfinished last line gets its newline
    assert not pid.exists()                     # removed once QEMU is gone


def test_run_cluster_refuses_a_node_without_a_command():
    r = subprocess.run([str(VM / "run-cluster"), "--node1", "true", "--node3", "true"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 125 and "no command for node2" in r.stderr


def test_run_cluster_usage_names_the_options():
    r = subprocess.run([str(VM / "run-cluster"), "--bogus"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 125
    for word in ("--node1", "--mtu", "--control", "--only", "set_link"):
        assert word in r.stderr


def test_run_sh_quotes_the_environment_and_the_command(tmp_path):
    env = dict(os.environ, WEIRD="it's $HOME `x` \"q\"", OPENBLAS_CORETYPE="Zen")
    subprocess.run(["bash", "-c", '. "$0"; accel=tcg; vm_extra_env=IBVERBS_CLUSTER_NODE=2; '
                    'vm_write_run_sh "$1" /tmp prog printenv WEIRD IBVERBS_CLUSTER_NODE',
                    str(VM / "vm-lib.sh"), str(tmp_path / "run.sh")], env=env, check=True,
                   timeout=60)
    text = (tmp_path / "run.sh").read_text()
    assert "OPENBLAS_CORETYPE" not in text          # the host's CPU model stays home
    r = subprocess.run(["sh", str(tmp_path / "run.sh")], capture_output=True, text=True,
                       timeout=60, env={})
    assert r.stdout == env["WEIRD"] + "\n2\n", (r, text[-300:])
