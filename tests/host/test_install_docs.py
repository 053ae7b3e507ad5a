"""How a user installs this package, and the metadata pip sees (issue #25,
point 1; issue 36, points 1 and 3).

On the public index the project ``ibverbs`` is ibverbs 2026.7.18 (rdma4py)
and its nightlies.  This package is the distribution ``pyibverbs`` (import
name ``ibverbs``), so that ``pip install -U ibverbs`` never swaps one for
the other; its install commands name a file, a directory or ``pyibverbs``
from ``dist/``, never a name pip resolves on the index.
"""
from __future__ import annotations

import pathlib
import platform
import re
import shlex
import sys

import pytest

pytestmark = pytest.mark.tooling

# tomllib is 3.11's; tomli, its source, reads the same on 3.9 and 3.10
tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli",
                              reason="tomllib is in Python 3.11 and later, tomli before")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEED_HOSTS = ("d4l3k", "rdma4py")
PAGES = {"README.md": ROOT / "README.md", "install guide": ROOT / "docs" / "guides" / "install.md"}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _commands(text: str) -> list[list[str]]:
    """The shell commands of the text's bash blocks (comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def test_the_distribution_has_a_name_of_its_own():
    project = _project()
    assert project["name"] == "pyibverbs"
    assert "API-compatible with ibverbs 2026.7.18" in project["description"]
    # the import name and the command stay `ibverbs`
    assert project["scripts"] == {"ibverbs": "ibverbs._cli:main"}
    assert "ibverbs" in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    from ibverbs import _version
    assert _version.DISTRIBUTION == project["name"]


def test_the_metadata_names_no_url_of_rdma4py_and_no_development_extra():
    project = _project()
    urls = project.get("urls", {})
    assert not [u for u in urls.values() for h in SEED_HOSTS if h in u]
    assert not [h for h in SEED_HOSTS if h in (ROOT / "docs" / "conf.py").read_text()]
    for name, url in urls.items():
        assert url.startswith("https://"), (name, url)
    # the user's extras: the generator's pins (libclang) are the Makefile's
    assert set(project["optional-dependencies"]) == {"numpy", "torch", "gpu", "test"}
    assert "libclang" not in str(project["optional-dependencies"])
    assert re.search(r"^GEN_PKGS := libclang==", (ROOT / "Makefile").read_text(), re.M)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_install_never_resolves_a_name_on_the_index(page):
    """Every `pip install` names a path (a wheel, an sdist, a checkout) or
    `pyibverbs` from dist/ with --no-index, or a package of the index that
    is not this one (numpy)."""
    text = PAGES[page].read_text()
    installs = [c for c in _commands(text) if c[:2] == ["pip", "install"]]
    assert installs, page
    for cmd in installs:
        words = cmd[2:]
        targets = [w for i, w in enumerate(words) if not w.startswith("-")
                   and not (i and words[i - 1] in ("--config-settings", "-C", "--find-links"))]
        assert targets, cmd
        for t in targets:
            if t.split("[")[0] == "pyibverbs":
                assert "--no-index" in words and "--find-links" in words, cmd
                continue
            assert t not in ("ibverbs",) and not t.startswith("ibverbs["), cmd
            assert (t.startswith((".", "/", "dist/")) or t.endswith((".whl", ".tar.gz"))
                    or t in ("numpy", "torch")), f"{' '.join(cmd)}: {t!r} is resolved on the index"
    assert "pip install -U ibverbs" in " ".join(text.split()), page


def test_the_install_guide_names_the_files_make_and_build_write():
    """The wheel `make` builds (version from pyproject, the abi3 tag and the
    manylinux floor tools/audit-wheel ships) and the sdist `python -m build
    --sdist` writes."""
    version = _project()["version"]
    text = PAGES["install guide"].read_text()
    audit = (ROOT / "tools" / "audit-wheel").read_text()
    floor = re.search(r"^ship=(manylinux_\d+_\d+)_\$arch$", audit, re.M).group(1)
    wheel = f"dist/pyibverbs-{version}-cp39-abi3-manylinux2014_x86_64.{floor}_x86_64.whl"
    assert wheel in text and wheel in (ROOT / "README.md").read_text()
    cmds = [" ".join(c) for c in _commands(text)]
    assert "make" in cmds
    assert "pip install --no-index --find-links dist pyibverbs" in cmds
    assert "pip install ." in cmds
    assert "python -m build --sdist" in cmds
    assert f"pip install pyibverbs-{version}.tar.gz" in cmds
    assert f"dist/pyibverbs-{version}.tar.gz" in text
    assert re.search(r"^wheel: ", (ROOT / "Makefile").read_text(), re.M)
    assert platform.system() == "Linux"
