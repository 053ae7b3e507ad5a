"""A checkout without the built extension says so (issue 36, point 2).

Python's own error there is "cannot import name '_ibverbs' from partially
initialized module 'ibverbs' (most likely due to a circular import)", and
the command used to exit 3, which means "install rdma-core".  Here the
package is copied without its .so, as a fresh clone is before `make build`.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SENTENCE = "the extension is not built here: run `make build`, or run outside the checkout"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """The package and the files that make a directory a checkout, no .so."""
    tree = tmp_path_factory.mktemp("checkout")
    shutil.copytree(ROOT / "ibverbs", tree / "ibverbs", symlinks=True,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copytree(ROOT / "generated", tree / "generated",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copytree(ROOT / "generator", tree / "generator",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "setup.py", tree / "setup.py")
    assert not list(tree.rglob("*.so"))
    return tree


def _python(cwd, *args):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


def test_import_names_the_missing_build(checkout):
    out = _python(checkout, "-c", "import ibverbs")
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last == f"ImportError: {SENTENCE}", out.stderr
    assert "circular import" not in out.stderr and "partially initialized" not in out.stderr


def test_the_command_exits_5_with_one_line(checkout):
    from ibverbs._cli_args import EXIT_CODES, EXIT_NOT_BUILT

    out = _python(checkout, "-m", "ibverbs", "devices")
    assert (out.returncode, out.stdout) == (EXIT_NOT_BUILT, ""), out
    assert out.stderr == f"ibverbs: {SENTENCE}\n"
    assert EXIT_NOT_BUILT == 5 and "not built" in EXIT_CODES[5]
    # distinct from "libibverbs.so.1 cannot be loaded" (3) and "no device" (4)
    assert len(set(EXIT_CODES)) == len(EXIT_CODES) and EXIT_CODES[3] != EXIT_CODES[5]
    # --help still works: the command line is parsed first
    assert _python(checkout, "-m", "ibverbs", "--help").returncode == 0


def test_an_install_without_the_extension_says_reinstall(checkout, tmp_path):
    """Outside a checkout (a site-packages that lost the .so) the sentence
    names the directory and the fix there, not `make build`."""
    shutil.copytree(checkout / "ibverbs", tmp_path / "ibverbs", symlinks=True)
    out = _python(tmp_path, "-c", "import ibverbs")
    assert out.returncode == 1
    assert "ImportError: the extension ibverbs._ibverbs is missing from " in out.stderr
    assert "reinstall" in out.stderr and "make build" not in out.stderr, out.stderr


def test_the_built_tree_imports():
    """The same check passes the built extension through (this checkout)."""
    if not list((ROOT / "ibverbs").glob("_ibverbs*.so")):
        pytest.skip("not built in place here")
    out = _python(ROOT, "-c", "import ibverbs, sys; print(ibverbs._ibverbs.__name__)")
    assert out.returncode == 0 and out.stdout == "ibverbs._ibverbs\n", out.stderr
