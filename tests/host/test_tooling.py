"""The Makefile and tools/ on a user's machine: `make` on a system without
Debian's package tools, what `make docs` installs, what `make distclean`
removes.  Everything here runs the real script or asks make what it would
run (`make -n`, against a venv path that does not exist, so that every
install step shows); nothing is installed or removed."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENSURE_DEBS = ROOT / "tools" / "ensure-debs"

pytestmark = [pytest.mark.tooling, pytest.mark.skipif(shutil.which("make") is None or shutil.which("bash") is None,
                                reason="needs make and bash")]


@pytest.fixture
def no_dpkg(tmp_path):
    """A PATH with every program of this one except dpkg-query: a
    distribution without Debian's package database, as far as a script can
    tell."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep) + ["/usr/bin", "/bin"]:
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            full = os.path.join(d, name)
            if name == "dpkg-query" or (bin_dir / name).exists() or not os.access(full, os.X_OK):
                continue
            (bin_dir / name).symlink_to(full)
    assert not (bin_dir / "dpkg-query").exists()
    return dict(os.environ, PATH=str(bin_dir))


def _ensure_debs(env, *packages):
    return subprocess.run(["bash", str(ENSURE_DEBS), *packages], env=env, cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)


def _os_release(tmp_path, text):
    path = tmp_path / "os-release"
    path.write_text(text)
    return str(path)


def test_ensure_debs_without_dpkg_query_says_what_to_install_and_succeeds(no_dpkg, tmp_path):
    env = dict(no_dpkg, IBVERBS_OS_RELEASE=_os_release(tmp_path, 'ID="rhel"\nID_LIKE="fedora"\n'))
    r = _ensure_debs(env, "gcc", "make", "python3-dev", "python3-venv", "binutils",
                     "libibverbs1", "ibverbs-providers", "librdmacm1")
    assert r.returncode == 0, r.stderr
    assert "no Debian package database" in r.stderr
    assert "install them with: dnf install gcc make python3-devel binutils libibverbs librdmacm" \
        in r.stderr, r.stderr
    assert "apt-get" not in r.stderr.replace("(no dpkg-query or apt-get)", "")


@pytest.mark.parametrize("release, command", [
    ('ID="opensuse-tumbleweed"\nID_LIKE="opensuse suse"\n',
     "zypper install gcc python3-devel libibverbs1 rdma-core"),
    ("ID=arch\n", "pacman -S --needed gcc python rdma-core"),
    ("ID=gentoo\n", "install their equivalents with this system's package manager"),
])
def test_ensure_debs_names_each_family_s_packages(no_dpkg, tmp_path, release, command):
    env = dict(no_dpkg, IBVERBS_OS_RELEASE=_os_release(tmp_path, release))
    r = _ensure_debs(env, "gcc", "python3-dev", "libibverbs1", "ibverbs-providers")
    assert r.returncode == 0, r.stderr
    assert command in r.stderr, r.stderr


def test_make_deps_goes_on_without_dpkg_query(no_dpkg):
    """`make`, `make build`, `make docs` and `make test-host` all start with
    this step; it used to stop them on every non-Debian system."""
    r = subprocess.run(["make", "-s", "deps"], env=no_dpkg, cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "not checking for the Debian packages gcc make python3-dev" in r.stderr


def test_ibverbs_skip_debs_skips_the_step_on_debian_too():
    r = _ensure_debs(dict(os.environ, IBVERBS_SKIP_DEBS="1"), "no-such-package-ibverbs")
    assert r.returncode == 0, r.stderr
    assert "IBVERBS_SKIP_DEBS is set" in r.stderr


def _make_n(tmp_path, *args):
    """What make would run, for a venv that does not exist yet."""
    venv = tmp_path / "venv"
    r = subprocess.run(["make", "-n", f"VENV={venv}", *args], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120,
                       env=dict(os.environ, IBVERBS_SKIP_DEBS="1"))
    assert r.returncode == 0, r.stderr
    return r.stdout


def _installed(commands: str):
    """The packages of every `pip install` line."""
    names = set()
    for line in commands.splitlines():
        m = re.search(r"-m pip .* install (.*?)(?: 2>&1|$)", line)
        if m:
            names |= {re.split(r"[=<>]", p)[0] for p in m.group(1).split()}
    return names


def test_make_docs_installs_the_docs_requirements_only(tmp_path):
    installed = _installed(_make_n(tmp_path, "docs"))
    assert {"sphinx", "furo", "myst-parser", "setuptools"} <= installed, installed
    assert not installed & {"torch", "pytest", "numpy", "hypothesis", "mypy", "libclang"}, installed


def test_the_test_setup_still_includes_the_docs_requirements(tmp_path):
    """tests/host/test_docs.py builds the docs."""
    installed = _installed(_make_n(tmp_path, "venv-test"))
    assert {"sphinx", "furo", "myst-parser", "torch", "pytest"} <= installed, installed


def _removed(commands: str):
    return [p for line in commands.splitlines() if line.startswith("rm -rf ")
            for p in line.split()[2:]]


def test_distclean_keeps_the_caches_every_checkout_shares(tmp_path):
    out = _make_n(tmp_path, "distclean")
    removed = _removed(out)
    assert str(tmp_path / "venv") in removed
    assert not [p for p in removed if ".cache" in p or "ibverbs-rdma-core" in p], removed
    assert "kept the shared caches" in out


def test_distclean_caches_1_removes_them(tmp_path):
    removed = _removed(_make_n(tmp_path, "distclean", "CACHES=1"))
    for cache in ("ibverbs-rdma-core", "ibverbs-vm", "ibverbs-aarch64"):
        assert any(p.endswith("/" + cache) for p in removed), (cache, removed)


def test_make_help_documents_caches_1():
    r = subprocess.run(["make", "-s", "help"], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                       timeout=60)
    assert "make distclean CACHES=1" in r.stdout


def test_make_test_builds_the_aarch64_wheel_and_runs_its_host_tier(tmp_path):
    """Generated C must compile for every target: `make test` on x86_64
    cross-builds the aarch64 wheel and runs the host tier under qemu-user
    (test-aarch64-host) in its chain of CPU tiers, after the host tier,
    then the free-threaded and the sid root's 3.14 and 3.15 host tiers and
    3.9's (the cp39-abi3 floor), beside the chain of VM tiers; TEST_SERIAL=1
    runs them all in turn."""
    r = subprocess.run(["make", "-s", "-p", "-n", "-q", "HOST_ARCH=x86_64", "help"], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60)
    test_rule = re.search(r"^test: (.*)$", r.stdout, re.M)
    assert test_rule, "no test rule"
    assert {"check-generated", "build", "venv-test"} <= set(test_rule.group(1).split())
    cpu = re.search(r"^TEST_CPU := (.*)$", r.stdout, re.M).group(1).split()
    vm = re.search(r"^TEST_VM := (.*)$", r.stdout, re.M).group(1).split()
    assert cpu == ["check-releases", "test-host", "test-aarch64-host", "test-ft-host",
                   "test-314-host", "test-315-host", "test-39-host"], cpu
    assert vm == ["test-device", "test-cluster-fast", "test-topology", "test-ft-device"], vm
    serial = subprocess.run(["make", "-n", "HOST_ARCH=x86_64", "TEST_SERIAL=1", "test"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            timeout=60).stdout
    assert ("check-releases test-host test-aarch64-host test-ft-host test-314-host test-315-host "
            "test-39-host test-device test-cluster-fast" in serial), serial[-2000:]
    out = _make_n(tmp_path, "test-aarch64-host")
    assert "make wheel ARCH=aarch64" in out or "wheel ARCH=aarch64" in out
    assert "chroot" in out and "pytest" in out


def test_the_39_tier_builds_a_copy_with_39s_headers_and_tests_it_in_its_own_venv(tmp_path):
    """`make test-39-host`: the wheel built by CPython 3.9 (pip wheel, its own
    headers) in a copy of the tree, the host tier run there in build/venv-39:
    never the in-place build the other tiers import, nor .venv's pip."""
    out = _make_n(tmp_path, "test-39-host")
    assert "wheel -q --no-deps --no-build-isolation" in out and "build/py39/tree" in out
    assert "build/venv-39/bin/python -m pytest" in out and "tests/host tests/gpu" in out
    assert "build_ext --inplace" not in out
    assert f"{tmp_path / 'venv'}/bin/python -m pip" not in out
    assert "sys.version_info[:2] != (3, 9)" in out      # a candidate that is not 3.9 is passed over


def test_the_39_tier_says_why_it_skips_where_there_is_no_39(tmp_path):
    """Without CPython 3.9 (no pyenv, none on the PATH) the target passes
    with one line that says why, like the sid root's tiers."""
    path = "/usr/bin:/bin"
    if shutil.which("python3.9", path=path):
        pytest.skip("this machine has a system python3.9")
    r = subprocess.run(["make", "-s", "test-39-host"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, env={"PATH": path, "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip() == ("test-39-host: skipped: no CPython 3.9 (not in pyenv, not python3.9 "
                                "on the PATH; IBVERBS_PY39 names one)"), r.stdout + r.stderr


def test_hypothesis_never_fails_a_property_for_being_slow():
    """CI's aarch64 tier runs under qemu-user, where a property once failed
    on generating 9 examples in 1.18 s: speed is not what the properties test."""
    from hypothesis import HealthCheck, settings
    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check


def test_only_the_main_host_tier_runs_the_tests_of_the_repository_itself(tmp_path):
    """The tests marked tooling (generator, spec, docs, packaging tools, the
    VM harness) do not depend on the interpreter: test-host runs them, and
    the 3.14t, 3.9, 3.14, 3.15 and aarch64 host tiers, which test the
    extension on their interpreter, leave them out."""
    assert "-m pytest -q tests/host tests/gpu\n" in _make_n(tmp_path, "test-host")
    for target in ("test-ft-host", "test-39-host", "test-aarch64-host"):
        out = _make_n(tmp_path, target)
        assert re.search(r'pytest -q -p no:cacheprovider -m \\?"not tooling\\?" tests/host', out), \
            (target, out[-1500:])
    r = subprocess.run(["make", "-s", "-p", "-n", "-q", "help"], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True, timeout=60)
    assert re.search(r'^SID_HOST_TESTS = \$\(NOT_TOOLING\) tests/host$', r.stdout, re.M)
    assert re.search(r'^NOT_TOOLING := -m "not tooling"$', r.stdout, re.M)
    marked = {p.stem for p in (ROOT / "tests" / "host").glob("test_*.py")
              if "pytest.mark.tooling" in p.read_text()}
    assert {"test_generator", "test_spec_keys", "test_cluster_harness", "test_tooling"} <= marked
    assert not marked & {"test_threads_host", "test_recording_provider", "test_extension"}


def test_the_free_threaded_device_tier_leaves_out_the_tests_that_start_processes(tmp_path):
    """test-ft-device leaves out the device tests marked processes (the CLI
    and the examples as processes of their own); test-device runs them."""
    assert '-m "not slow" tests/device' in _make_n(tmp_path, "test-device")
    out = _make_n(tmp_path, "test-ft-device")
    assert '-m "not slow and not processes" tests/device' in out, out[-1500:]
    cli = (ROOT / "tests" / "device" / "test_cli.py").read_text()
    for test in re.findall(r"((?:@.*\n)*)def (test_\w+)\((.*?)(?=\n(?:@|def |# ---)|\Z)", cli, re.S):
        decorators, name, body = test
        starts = "Popen" in body or "_server(" in body or re.search(r"(?<![_.\w])cli\(", body)
        assert bool(starts) == ("@pytest.mark.processes" in decorators), name
