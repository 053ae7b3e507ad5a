"""README's Install section installs this package, and the metadata names
no other (issue #25, point 1).

On the public index the name ``ibverbs`` is the seed (2026.7.18) and its
nightlies: a bare ``pip install ibverbs`` installs that other package, and
the seed's URLs describe it, not this one.
"""
from __future__ import annotations

import pathlib
import platform
import re
import shlex

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in Python 3.11 and later")

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEED_HOSTS = ("d4l3k", "rdma4py")


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _section(title: str) -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, f"README has no section {title!r}"
    return m.group(1)


def _commands(section: str) -> list[list[str]]:
    """The shell commands of the section's bash blocks (comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands.append(words)
    return commands


def test_the_metadata_names_no_url_of_the_seed():
    project = _project()
    assert "urls" not in project, "this project has no site of its own yet: no [project.urls]"
    text = (ROOT / "pyproject.toml").read_text()
    assert not [h for h in SEED_HOSTS if h in text]
    assert "API-compatible with ibverbs 2026.7.18" in project["description"]
    conf = (ROOT / "docs" / "conf.py").read_text()
    assert not [h for h in SEED_HOSTS if h in conf]


def test_install_never_installs_the_name_from_the_index():
    """Every `pip install` of the section names a path (a wheel, an sdist, a
    checkout), never the bare name, which is the seed's on the index."""
    section = _section("Install")
    installs = [c for c in _commands(section) if c[:2] == ["pip", "install"]]
    assert installs
    for cmd in installs:
        words = cmd[2:]
        # an option's value is not a target
        targets = [w for i, w in enumerate(words) if not w.startswith("-")
                   and not (i and words[i - 1] in ("--config-settings", "-C"))]
        assert targets, cmd
        for t in targets:
            assert t.startswith((".", "/", "dist/")) or t.endswith((".whl", ".tar.gz")), \
                f"{' '.join(cmd)}: {t!r} is resolved on the index (the seed's package)"
    assert "`pip install ibverbs` installs that\nother package" in section


def test_install_names_the_files_make_and_build_write():
    """The wheel `make` builds (version from pyproject, the abi3 tag and the
    manylinux floor tools/audit-wheel ships) and the sdist `python -m build
    --sdist` writes."""
    version = _project()["version"]
    section = _section("Install")
    audit = (ROOT / "tools" / "audit-wheel").read_text()
    floor = re.search(r"^ship=(manylinux_\d+_\d+)_\$arch$", audit, re.M).group(1)
    wheel = f"dist/ibverbs-{version}-cp39-abi3-{floor}_x86_64.whl"
    cmds = [" ".join(c) for c in _commands(section)]
    assert "make" in cmds
    assert f"pip install {wheel}" in cmds
    assert "pip install ." in cmds
    assert "python -m build --sdist" in cmds
    assert f"pip install ibverbs-{version}.tar.gz" in cmds
    assert f"dist/ibverbs-{version}.tar.gz" in section
    assert re.search(r"^wheel: ", (ROOT / "Makefile").read_text(), re.M)
    assert platform.system() == "Linux"
