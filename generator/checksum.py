"""Checksums in the header of every generated file, as Argument Clinic's.

Each generated file names, besides the header and spec digests, two more:

* the generator's: a sha256 over templates/ and generator/*.py, so that a
  template or generator change without `make generate` is caught;
* its own: a sha256 of the file's text with that digest written as zeros,
  so that a hand edit is caught.

Both are checked by verify() from the files alone: no libclang, no rdma-core
headers (tests/host/test_generated_checksums.py, `python -m generator
stamps`).  `make check-generated` still compares against a fresh run.
"""
from __future__ import annotations

import hashlib
import os
from typing import Dict, List

from .paths import GENERATOR_DIR, ROOT, TEMPLATE_DIR

ZEROS = "0" * 64
#: What precedes a file's own digest in its header (templates/_header.j2).
OWN_MARK = "this file's own sha256, this number read as zeros: "
#: What precedes the generator's digest.
GENERATOR_MARK = "Made by templates/ and generator/ (sha256 "


def _inputs(root: str) -> List[str]:
    """The generator's own files, relative to *root*, in a fixed order:
    every file under templates/, every .py under generator/ (never a
    __pycache__ or an editor's backup)."""
    found = []
    for top, want_py in ((os.path.relpath(TEMPLATE_DIR, ROOT), False),
                         (os.path.relpath(GENERATOR_DIR, ROOT), True)):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in filenames:
                if name.endswith(".py") if want_py else not name.endswith((".pyc", "~")):
                    found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(p.replace(os.sep, "/") for p in found)


def generator_digest(root: str = ROOT) -> str:
    """sha256 over the names and bytes of templates/ and generator/*.py."""
    digest = hashlib.sha256()
    for rel in _inputs(root):
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        digest.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return digest.hexdigest()


def stamp(text: str) -> str:
    """*text* (rendered with zeros as its own digest) with its digest filled in."""
    at = text.index(OWN_MARK + ZEROS) + len(OWN_MARK)
    own = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return text[:at] + own + text[at + len(ZEROS):]


def _digest_after(text: str, mark: str) -> str:
    at = text.find(mark)
    return "" if at < 0 else text[at + len(mark):at + len(mark) + 64]


def problems(name: str, text: str, generator_sha256: str) -> List[str]:
    """What is wrong with the generated file *name*: a hand edit, or a
    generator that changed since it was written."""
    head = "\n".join(text.split("\n")[:8])
    own = _digest_after(head, OWN_MARK)
    if len(own) != 64:
        return [f"generated/{name}: no checksum in its header"]
    at = text.index(OWN_MARK) + len(OWN_MARK)
    zeroed = text[:at] + ZEROS + text[at + 64:]
    out = []
    if hashlib.sha256(zeroed.encode("utf-8")).hexdigest() != own:
        out.append(f"generated/{name}: edited by hand (its sha256 is not the one in its header)")
    if _digest_after(head, GENERATOR_MARK) != generator_sha256:
        out.append(f"generated/{name}: made by other templates/ or generator/ code than "
                   "these: run `make generate`")
    return out


def verify(generated_dir: str, root: str = ROOT) -> Dict[str, List[str]]:
    """Every generated file's problems, by file name (empty: all fine)."""
    current = generator_digest(root)
    out = {}
    for name in sorted(os.listdir(generated_dir)):
        if name.endswith((".c.h", ".h", ".py", ".pyi")):
            with open(os.path.join(generated_dir, name), encoding="utf-8") as f:
                found = problems(name, f.read(), current)
            if found:
                out[name] = found
    return out
