"""The stamps in generated/'s headers (generator/checksum.py): each file's
own checksum, checked from the files alone (no libclang, no rdma-core
headers), so that a hand edit fails here; and stamps local to each file, so
that a change of the generator or the spec rewrites only the files whose
text it changes (an upgrade's diff shows its C, not 42 headers)."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

from generator import checksum
from generator.cli import main

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[2]
GENERATED = ROOT / "generated"


def test_every_generated_file_matches_its_checksums():
    assert sorted(p.name for p in GENERATED.iterdir() if p.name.endswith(".c.h"))
    assert checksum.verify(str(GENERATED)) == {}


def test_the_stamps_command_needs_no_libclang(capsys):
    assert main(["stamps"]) == 0
    assert "every checksum matches" in capsys.readouterr().out
    # the same in a process where libclang cannot be imported at all
    code = ("import sys; sys.modules['clang'] = sys.modules['clang.cindex'] = None; "
            "from generator.cli import main; sys.exit(main(['stamps']))")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


def test_a_hand_edit_is_caught(tmp_path):
    out = tmp_path / "generated"
    shutil.copytree(GENERATED, out)
    path = out / "qp.c.h"
    path.write_text(path.read_text().replace("goto exit;", "goto exit; ", 1))
    found = checksum.verify(str(out))
    assert list(found) == ["qp.c.h"] and "edited by hand" in found["qp.c.h"][0]


def _generate(tmp_path: pathlib.Path, edit) -> dict:
    """generated/ as a copy of generator/, templates/, spec/ and the
    package's Python (the python: methods' defs) makes it after edit(copy
    root): {name: text}."""
    root = tmp_path / "tree"
    for top in ("generator", "templates", "spec", "ibverbs"):
        shutil.copytree(ROOT / top, root / top,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so", "src"))
    edit(root)
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, "-m", "generator", "--rdma-core",
                          str(ROOT / "third_party" / "rdma-core"), "generate", "--out", str(out)],
                         cwd=root, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return {p.name: p.read_text(encoding="utf-8") for p in out.iterdir()}


def _changed(files: dict) -> set:
    committed = {p.name: p.read_text(encoding="utf-8") for p in GENERATED.iterdir()
                 if p.is_file() and p.name != "__pycache__"}
    assert set(files) == set(committed)
    return {name for name, text in files.items() if committed[name] != text}


def _body(text: str) -> str:
    return text.split("\n\n", 1)[1]


def test_a_comment_in_a_generator_module_changes_no_generated_file(tmp_path):
    pytest.importorskip("clang.cindex", reason="libclang is not installed (pip install libclang==18.1.1)")
    def edit(root):
        for module in ("audit.py", "emit.py", "converters/args.py"):
            path = root / "generator" / module
            path.write_text("# a comment a maintainer added\n" + path.read_text())
    assert _changed(_generate(tmp_path, edit)) == set()


def test_one_spec_key_changes_only_the_files_whose_text_changes(tmp_path):
    pytest.importorskip("clang.cindex", reason="libclang is not installed (pip install libclang==18.1.1)")
    def edit(root):
        path = root / "spec" / "context.yaml"
        text = path.read_text()
        assert "cqe: {arg: cqe, min: 1}" in text
        path.write_text(text.replace("cqe: {arg: cqe, min: 1}", "cqe: {arg: cqe, min: 2}"))
    files = _generate(tmp_path, edit)
    changed = _changed(files)
    # the range check and docstring of Context.create_cq, and its stub's docstring
    assert changed == {"context.c.h", "_ibverbs.pyi"}
    committed = (GENERATED / "context.c.h").read_text()
    assert _body(files["context.c.h"]) != _body(committed)
    assert "(at least 2)" in files["context.c.h"] and "(at least 2)" not in committed
