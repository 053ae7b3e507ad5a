"""What a user installs: the sdist and the wheel, built the way a user's pip
builds them, on a machine without rdma-core's development headers.

The sdist must build with only a C compiler and CPython's headers: the
rdma-core headers come with it (third_party/rdma-core).  To prove it, the
system's /usr/include/infiniband and /usr/include/rdma are hidden behind
empty tmpfs mounts in a private mount namespace (unshare -m; the host is
left untouched) while pip installs the sdist into a fresh venv.
"""
from __future__ import annotations

import email
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HIDDEN = ("/usr/include/infiniband", "/usr/include/rdma")


#: the wheel this interpreter builds (spec/targets/targets.yaml): PEP 803's
#: abi3t under either build of 3.15+ (both ABI tags: a GIL build takes abi3
#: tags only), the free-threaded target's under CPython 3.14t, the abi3 one
#: at 3.14's level under the GIL build of 3.14, at 3.9's under the others
_WHEEL_TAG = ("cp315-abi3.abi3t" if sys.version_info >= (3, 15)
              else "cp314-cp314t" if sysconfig.get_config_var("Py_GIL_DISABLED")
              else "cp314-abi3" if sys.version_info >= (3, 14) else "cp39-abi3")


def _run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-4000:]}"
    return r.stdout


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    """The sdist, and the wheel built from it (python -m build does both)."""
    pytest.importorskip("build", reason="the build frontend is not installed (make venv)")
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
         env=dict(os.environ, IBVERBS_WERROR="1"))
    sdist, = out.glob("pyibverbs-*.tar.gz")      # the distribution's name, not the import name
    wheel, = out.glob("pyibverbs-*.whl")
    return sdist, wheel


def _hiding_prefix():
    """The command prefix that runs a command with HIDDEN emptied, or skip."""
    unshare = shutil.which("unshare")
    if not unshare:
        pytest.skip("unshare (util-linux) is not installed")
    ns = [unshare, "-m"] if os.geteuid() == 0 else [unshare, "-r", "-m"]
    probe = subprocess.run(ns + ["true"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.strip()}")
    mounts = "; ".join(f"mount -t tmpfs none {d}" for d in HIDDEN if os.path.isdir(d))
    return ns + ["sh", "-ec", f'{mounts}{"; " if mounts else ""}'
                 'test ! -e /usr/include/infiniband/verbs.h; test ! -e /usr/include/rdma/rdma_cma.h; '
                 'exec "$@"', "hide-rdma-headers"]


def test_the_sdist_installs_into_a_fresh_venv_with_the_system_rdma_headers_hidden(dists, tmp_path):
    sdist, _ = dists
    hide = _hiding_prefix()
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    # pip's own build isolation, as a user's `pip install ibverbs-<v>.tar.gz`
    # runs it: setuptools and wheel from the index, libclang nowhere.
    _run(hide + [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                 "--no-cache-dir", str(sdist)])
    out = _run([str(py), "-c", textwrap.dedent("""
        import ibverbs, ibverbs._ibverbs as ext
        print(ext.__file__)
        print(int(ibverbs.AccessFlags.FLUSH_GLOBAL))
        """)], cwd=str(tmp_path))
    so, flush = out.split()
    assert so.startswith(str(venv)), so
    # a member of rdma-core 65's header: the vendored headers were used
    assert flush == "256"
    # the console script is installed with it
    assert (venv / "bin" / "ibverbs").exists()
    _run([str(venv / "bin" / "ibverbs"), "--help"])


def test_the_wheel_and_the_sdist_carry_the_licences(dists):
    sdist, wheel = dists
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for needed in ("LICENSE", "third_party/rdma-core/COPYING", "third_party/rdma-core/VERSION",
                   "third_party/rdma-core/include/infiniband/verbs.h",
                   "third_party/rdma-core/include/rdma/rdma_cma.h",
                   "third_party/rdma-core/include/rdma/ib_user_verbs.h"):
        assert needed in names, f"{needed} is not in {sdist.name}"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        dist_info = info.rsplit("/", 1)[0]
        assert f"{dist_info}/licenses/LICENSE" in names
        assert f"{dist_info}/licenses/third_party/rdma-core/COPYING" in names
        assert "BSD 3-Clause" in z.read(f"{dist_info}/licenses/LICENSE").decode()
        meta = email.message_from_bytes(z.read(info))
        entry_points = z.read(f"{dist_info}/entry_points.txt").decode()
    assert "ibverbs = ibverbs._cli:main" in entry_points
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.9" in classifiers
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert meta["Author"] == "Tristan Rice"
    # a name of its own on the index: `pip install -U ibverbs` is another
    # project (ibverbs 2026.7.18 and its nightlies), which would replace it
    assert meta["Name"] == "pyibverbs"
    assert dist_info.startswith("pyibverbs-")
    assert wheel.name.startswith(f"pyibverbs-{meta['Version']}-{_WHEEL_TAG}-")
    assert {n.split("/", 1)[0] for n in names if not n.startswith(dist_info)} == {"ibverbs"}
    # rdma4py's home page and documentation describe that other package
    assert not [u for u in meta.get_all("Project-URL") or () if "rdma4py" in u or "d4l3k" in u]
    assert "API-compatible with ibverbs 2026.7.18" in meta["Summary"]
    # the user's extras only: the generator's pins (libclang) are the Makefile's
    assert set(meta.get_all("Provides-Extra")) == {"numpy", "torch", "gpu", "test"}
    assert not [r for r in meta.get_all("Requires-Dist") or () if "libclang" in r]


def test_the_wheel_ships_the_module_without_debug_info(dists, tmp_path):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as z:
        so, = [n for n in z.namelist() if n.startswith("ibverbs/_ibverbs.") and n.endswith(".so")]
        z.extract(so, tmp_path)
    sections = _run(["readelf", "-S", "-W", str(tmp_path / so)])
    assert ".debug_info" not in sections and ".symtab" not in sections
    assert (tmp_path / so).stat().st_size < 700_000


def test_an_editable_install_builds_in_place_and_mypy_sees_it(tmp_path):
    """`pip install -e . --config-settings editable_mode=compat` (README,
    Install): the extension is built in the source tree, and the path entry
    setuptools writes lets mypy follow the import (its default import hook
    would hide the package from static tools)."""
    pytest.importorskip("mypy", reason="mypy is not installed (make venv-test)")
    tree = tmp_path / "tree"
    tree.mkdir()
    files = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                 cwd=str(ROOT)).split("\0")
    for name in filter(None, files):
        src, dst = ROOT / name, tree / name
        if not src.exists() and not src.is_symlink():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    assert not list(tree.glob("ibverbs/*.so"))
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    _run(_hiding_prefix() + [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                             "--no-cache-dir", "-e", str(tree),
                             "--config-settings", "editable_mode=compat"])
    assert list(tree.glob("ibverbs/_ibverbs*.so")), "the extension was not built in place"
    probe = tmp_path / "probe.py"
    probe.write_text("import ibverbs\n"
                     "flags: ibverbs.AccessFlags = ibverbs.AccessFlags.FLUSH_GLOBAL\n"
                     "wrong: int = ibverbs.get_device_list()\n")
    r = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental",
                        "--python-executable", str(py), str(probe)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=str(tmp_path))
    # mypy found the package and its stubs: the one error is the deliberate one
    assert "import-not-found" not in r.stdout, r.stdout
    assert 'probe.py:3: error: Incompatible types in assignment (expression has type "list[Device]"' \
        in r.stdout, r.stdout
    assert "Found 1 error" in r.stdout, r.stdout
