"""README's shell blocks work when pasted (issue 36, point 2).

The blocks marked ``<!-- tested: NAME -->`` are extracted as written and run
in bash: the install block in a fresh venv (a fresh $HOME) against the wheel
``make`` builds, the setup and no-NIC blocks with that venv active.  What
needs root or a VM is not run here: ``make`` (its wheel is built here with
the same ``python -m build``), ``apt install``, and ``tests/vm/run-in-vm``,
whose command runs here without the VM, and in the VM in
tests/device/test_examples.py (the Quickstart on rxe).
"""
from __future__ import annotations

import ast
import os
import pathlib
import re
import shlex
import subprocess
import sys
import sysconfig

import pytest

pytestmark = pytest.mark.tooling

# tomllib is 3.11's; tomli, its source, reads the same on 3.9 and 3.10
tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli",
                              reason="tomllib is in Python 3.11 and later, tomli before")

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def readme_block(name: str) -> str:
    """The bash block that follows ``<!-- tested: name -->``."""
    m = re.search(rf"^<!-- tested: {re.escape(name)} -->\n```bash\n(.*?)```", README, re.S | re.M)
    assert m, f"README has no bash block marked 'tested: {name}'"
    return m.group(1)


def commands(block: str) -> list[str]:
    return [line.split("  #", 1)[0].rstrip() for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def make_wheel_name() -> str:
    """The file tools/audit-wheel writes: the manylinux floor it ships, and
    the legacy alias `wheel tags` adds, in the order wheel sorts them."""
    audit = (ROOT / "tools" / "audit-wheel").read_text()
    floor = re.search(r"^ship=(manylinux_\d+_\d+)_\$arch$", audit, re.M).group(1)
    assert '--platform-tag "$ship.manylinux2014_$arch"' in audit
    return f"pyibverbs-{_version()}-cp39-abi3-manylinux2014_x86_64.{floor}_x86_64.whl"


def test_the_install_block_names_the_wheel_make_writes():
    block = readme_block("install")
    first = block.splitlines()[0]
    assert first.split("#")[0].strip() == "make"
    assert f"dist/{make_wheel_name()}" in first.split("#", 1)[1].split(), first
    # never the bare name: on the index `ibverbs` is another project
    for cmd in commands(block):
        words = shlex.split(cmd)
        if words[:2] == ["pip", "install"]:
            assert "ibverbs" not in words and "-U" not in words, cmd
            if "pyibverbs" in words:
                assert "--no-index" in words and "--find-links" in words, cmd


def test_the_quickstart_file_is_the_readme_block():
    section = README.split("\n## Quickstart\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    source = (ROOT / "examples" / "quickstart.py").read_text()
    doc = ast.get_docstring(ast.parse(source), clean=False)
    body = source.split('"""', 2)[2].lstrip("\n")
    assert doc and "tests/vm/run-in-vm" in doc
    assert body == block
    assert "python examples/quickstart.py" in readme_block("no-nic")


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """dist/ as `make` leaves it: the wheel of this tree (built here the way
    the Makefile's `wheel` target builds it, without the retag)."""
    pytest.importorskip("build", reason="the build frontend is not installed (make venv)")
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        pytest.skip("the README's blocks run the system's python3, whose wheel (abi3) the "
                    "GIL tier builds: this free-threaded interpreter builds the cp314t one")
    dist = tmp_path_factory.mktemp("checkout") / "dist"
    r = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
                        "--outdir", str(dist), str(ROOT)], capture_output=True, text=True,
                       env=dict(os.environ, IBVERBS_WERROR="1"), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    wheel, = dist.glob("pyibverbs-*.whl")
    # the blocks run the system's python3, which takes this wheel only if it
    # is at least the wheel's python tag (cp315-abi3.abi3t built by a 3.15
    # beside a system 3.14, as in the sid root: tools/sid-root)
    needs = (3, int(wheel.name.split("-")[2][3:]))
    r = _bash('python3 -c "import sys; print(*sys.version_info[:2])"', dist, dist)
    system = tuple(int(x) for x in r.stdout.split()) if r.returncode == 0 else None
    if system is not None and system < needs:
        pytest.skip(f"the system's python3 is {system[0]}.{system[1]}, and this interpreter's "
                    f"wheel ({wheel.name}) needs {needs[0]}.{needs[1]}")
    return dist.parent


def _bash(script: str, cwd, home) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["HOME"] = str(home)
    # the system's python3, as a user's shell finds it (not this venv's)
    env["PATH"] = ":".join(p for p in env.get("PATH", "").split(":")
                           if not p.startswith(str(ROOT)) and ".venv" not in p)
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def installed(wheelhouse, tmp_path_factory):
    """The install block, pasted into a shell in the checkout (less `make`)."""
    home = tmp_path_factory.mktemp("home")
    lines = commands(readme_block("install"))
    assert lines[0] == "make"
    r = _bash("\n".join(lines[1:]), wheelhouse, home)
    if r.returncode != 0 and "numpy" in r.stderr and ("Could not find" in r.stderr
                                                     or "connection" in r.stderr.lower()):
        pytest.skip(f"numpy cannot be fetched here: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return home, wheelhouse


def test_the_install_block_installs_this_package_and_numpy(installed):
    home, checkout = installed
    venv = home / ".venvs" / "ibverbs"
    r = _bash(". ~/.venvs/ibverbs/bin/activate\n"
              "python -c 'import ibverbs, numpy, importlib.metadata as m; "
              "print(ibverbs._ibverbs.__file__); print(m.version(\"pyibverbs\")); "
              "print(ibverbs.__version__)'", checkout, home)
    assert r.returncode == 0, r.stderr
    so, dist_version, version = r.stdout.split()
    assert so.startswith(str(venv)) and dist_version == version == _version()


def test_the_setup_and_no_nic_blocks_run_the_installed_package(installed):
    """In the checkout, with the venv active: `ibverbs devices` and the
    Quickstart import the installed package (not the checkout's unbuilt
    one); with no device here they stop at the device list."""
    home, _ = installed
    cmds = commands(readme_block("no-nic"))
    assert cmds[0].startswith("sudo apt install ") and cmds[1].startswith("tests/vm/run-in-vm ")
    quickstart = cmds[1][len("tests/vm/run-in-vm "):]
    devices = commands(readme_block("setup"))[0]
    assert devices == "ibverbs devices"
    r = _bash(f". ~/.venvs/ibverbs/bin/activate\n"
              f"{devices} && s=0 || s=$?; echo status=$s\n{quickstart}", ROOT, home)
    out = r.stdout + r.stderr
    assert "Traceback" not in out.split("status=")[0], out
    status = int(re.search(r"status=(\d+)", r.stdout).group(1))
    assert status in (0, 4), out          # devices listed, or none here (exit 4, one line)
    assert "ImportError" not in out and "ModuleNotFoundError" not in out, out
    assert "not built here" not in out, out
    if r.returncode == 0:
        assert re.search(r"port \d+: 4096 bytes written", r.stdout), out
    else:                                  # no RDMA device on this host
        assert "no RDMA device" in out or "ibv_get_device_list failed" in out, out
