"""The API reference (`make docs`, docs/): it builds without a warning and
lists every public name of the package (issue #15, point 1)."""
from __future__ import annotations

import enum
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytest.importorskip("sphinx")
pytest.importorskip("furo")
pytest.importorskip("myst_parser")
ib = pytest.importorskip("ibverbs")

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import ibverbs_api  # noqa: E402


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    """{name: role} of everything the built reference documents."""
    from sphinx.util.inventory import InventoryFile

    out = tmp_path_factory.mktemp("docs")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q",
                           "-b", "html", str(ROOT / "docs"), str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(out / "objects.inv", "rb") as f:
        inv = InventoryFile.load(f, "", lambda base, uri: uri)
    items = inv.data.items() if hasattr(inv, "data") else inv.items()
    return {name: role for role, entries in items for name in entries}


def _public_names():
    names = []
    for name in ibverbs_api.public_names():
        obj = getattr(ib, name)
        names.append(f"ibverbs.{name}")
        if isinstance(obj, type) and not issubclass(obj, BaseException):
            members = ([m.name for m in obj] if issubclass(obj, enum.Enum)
                       else [m for m in vars(obj) if not m.startswith("_")])
            names += [f"ibverbs.{name}.{m}" for m in members]
    import ibverbs.aio
    import ibverbs.cm
    import ibverbs.cuda

    names += [f"ibverbs.cm.{n}" for n in ibverbs.cm.__all__
              if not hasattr(ib, n)]                      # the C classes are at top level
    names += [f"ibverbs.aio.{n}" for n in ("wait", "completions", "async_event", "async_events")]
    names += [f"ibverbs.cuda.{n}" for n in ibverbs.cuda.__all__]
    return names


def test_every_public_name_is_in_a_group():
    assert ibverbs_api._ungrouped() == []


def test_the_reference_lists_every_public_name(inventory):
    missing = [n for n in _public_names() if n not in inventory]
    assert not missing, f"not in the reference: {missing}"


def test_there_is_a_page_per_cli_command(inventory):
    from ibverbs._cli import build_parser

    parser = build_parser()
    (sub,) = parser._subparsers._group_actions
    pages = {n for n, role in inventory.items() if role == "std:doc"}
    for command in sub.choices:
        assert f"cli/{command}" in pages
    for guide in ("guides/quickstart", "guides/safety", "guides/torch", "guides/differences",
                  "guides/chores", "examples"):
        assert guide in pages
