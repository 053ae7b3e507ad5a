"""The extension's C compiles against the oldest headers it promises to
support: CPython 3.9's, under Py_LIMITED_API=0x03090000, with every
implicitly declared function an error (a function 3.9 hides from the
Limited API would otherwise return an int and truncate a pointer)."""
from __future__ import annotations

import glob
import os
import pathlib
import shutil
import subprocess

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = sorted((ROOT / "ibverbs" / "src").glob("*.c"))


def python39_include() -> str:
    explicit = os.environ.get("IBVERBS_PY39_INCLUDE")
    if explicit:
        return explicit
    pyenv_root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found = sorted(glob.glob(os.path.join(pyenv_root, "versions", "3.9*", "include", "python3.9")))
    if not found:
        pytest.skip("no CPython 3.9 headers (pyenv install 3.9, or IBVERBS_PY39_INCLUDE)")
    return found[-1]


def rdma_include() -> list[str]:
    # The vendored headers generated/ is made from, as setup.py uses them.
    return [f"-I{ROOT / 'third_party' / 'rdma-core' / 'include'}"]


@pytest.mark.parametrize("source", SOURCES, ids=[s.name for s in SOURCES])
def test_compiles_against_python39_limited_api(source):
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("no gcc")
    cmd = [gcc, "-std=gnu11", "-fsyntax-only", "-Werror=implicit-function-declaration",
           "-DPy_LIMITED_API=0x03090000", f"-I{python39_include()}",
           f"-I{ROOT / 'ibverbs' / 'src'}", f"-I{ROOT / 'generated'}", *rdma_include(),
           str(source)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-4000:]


def test_the_build_refuses_implicit_declarations():
    setup = (ROOT / "setup.py").read_text()
    assert '"-Werror=implicit-function-declaration"' in setup
