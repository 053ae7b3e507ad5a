"""The checksums in generated/'s headers (generator/checksum.py), checked
from the files alone: no libclang, no rdma-core headers.  A hand edit of a
generated file, or a change of templates/ or generator/ without `make
generate`, fails here."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

from generator import checksum
from generator.cli import main

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


def _copy_inputs(dest: pathlib.Path) -> None:
    for top in ("templates", "generator"):
        shutil.copytree(ROOT / top, dest / top, ignore=shutil.ignore_patterns("__pycache__"))


def test_a_template_or_generator_change_is_caught(tmp_path):
    _copy_inputs(tmp_path)
    assert checksum.generator_digest(str(tmp_path)) == checksum.generator_digest()
    header = tmp_path / "templates" / "structs.c.h.j2"
    header.write_text(header.read_text() + "\n")
    changed = checksum.generator_digest(str(tmp_path))
    assert changed != checksum.generator_digest()
    found = checksum.verify(str(GENERATED), root=str(tmp_path))
    assert found and all("run `make generate`" in lines[-1] for lines in found.values())
    (tmp_path / "generator" / "new_stage.py").write_text("")
    assert checksum.generator_digest(str(tmp_path)) != changed


def test_the_generator_digest_ignores_caches_and_listing_order(tmp_path):
    _copy_inputs(tmp_path)
    before = checksum.generator_digest(str(tmp_path))
    cache = tmp_path / "generator" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "model.cpython-311.pyc").write_bytes(b"\0junk")
    (tmp_path / "generator" / "notes.txt").write_text("not code")
    assert checksum.generator_digest(str(tmp_path)) == before
