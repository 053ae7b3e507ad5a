"""The stamp in the header of every generated file, after Argument Clinic's
per-block checksums: each file carries the sha256 of its own text (that
digest read as zeros), so that a hand edit is caught from the files alone
(no libclang, no rdma-core headers: tests/host/test_generated_checksums.py,
`python -m generator stamps`).

A file is stamped with what it is made of, nothing wider: no digest of the
whole generator, templates or spec, which would rewrite every header on any
change of them and bury the one line of C that changed.  Which headers the
files were made from is said once, in loader.c.h and rdmacm_loader.c.h
(their sha256 and rdma-core release).  Whether generated/ is what the
generator makes now is `python -m generator check` (`make
check-generated`): a fresh render compared with the committed files,
exact whatever changed (a generator, template, spec or header change that
changes the output).
"""
from __future__ import annotations

import hashlib
import os
from typing import Dict, List

ZEROS = "0" * 64
#: What precedes a file's own digest in its header (templates/_header.j2).
OWN_MARK = "sha256 of this file, this number read as zeros: "


def stamp(text: str) -> str:
    """*text* (rendered with zeros as its own digest) with its digest filled in."""
    at = text.index(OWN_MARK + ZEROS) + len(OWN_MARK)
    own = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return text[:at] + own + text[at + len(ZEROS):]


def problems(name: str, text: str) -> List[str]:
    """What is wrong with the generated file *name*: a hand edit."""
    head = "\n".join(text.split("\n")[:8])
    at = head.find(OWN_MARK)
    own = head[at + len(OWN_MARK):at + len(OWN_MARK) + 64] if at >= 0 else ""
    if len(own) != 64:
        return [f"generated/{name}: no checksum in its header"]
    at += len(OWN_MARK)
    zeroed = text[:at] + ZEROS + text[at + 64:]
    if hashlib.sha256(zeroed.encode("utf-8")).hexdigest() != own:
        return [f"generated/{name}: edited by hand (its sha256 is not the one in its header)"]
    return []


def verify(generated_dir: str) -> Dict[str, List[str]]:
    """Every generated file's problems, by file name (empty: all fine)."""
    out = {}
    for name in sorted(os.listdir(generated_dir)):
        if name.endswith((".c.h", ".h", ".py", ".pyi")):
            with open(os.path.join(generated_dir, name), encoding="utf-8") as f:
                found = problems(name, f.read())
            if found:
                out[name] = found
    return out
