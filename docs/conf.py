"""Sphinx configuration of the ibverbs reference (`make docs`).

Why Sphinx (9.0.4, pinned in the Makefile) with autodoc, napoleon, MyST and
the Furo theme:

* autodoc documents the *built* extension by introspection: a C class's
  methods, their text signatures and docstrings are the generated method
  table's, the same text the generator writes into the stubs, so the
  reference cannot drift from what editors show (tools that read only
  Python source or stubs, such as mkdocstrings' griffe, would need the
  stubs to be the source of truth instead of the spec);
* napoleon renders the Google-style Args/Returns/Raises sections that
  generator/docstrings.py writes (and that read well in help() too);
* MyST: the guides are Markdown pages of their own (docs/guides), and
  CONTRIBUTING.md and examples/README.md are included whole;
* Furo is a maintained, accessible theme with no JavaScript framework;
* ``-W -n`` (make docs) turns any warning and any unresolved reference into
  a failure.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)                       # the package, built in place (make build)
sys.path.insert(0, os.path.join(HERE, "_ext"))

import ibverbs  # noqa: E402  (fails here, not page by page, when it is not built)

project = "ibverbs"


def _copyright_holder() -> tuple:
    """(year, holders) from LICENSE's copyright line, so the footer names
    whom the licence names."""
    import re

    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        m = re.search(r"^Copyright \(c\) (\d{4}), (.+)$", f.read(), re.M)
    if m is None:
        raise RuntimeError("LICENSE has no 'Copyright (c) YEAR, HOLDERS' line")
    return m.group(1), m.group(2).strip()


_year, author = _copyright_holder()
copyright = f"{_year}, {author}"              # noqa: A001 (Sphinx's name)
version = release = ibverbs.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon", "myst_parser", "ibverbs_api"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = f"ibverbs {release}"
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_class_signature = "mixed"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True          # an Attributes section: fields, not a second object description
# Every reference must resolve: make docs runs with -n (nitpicky) and -W.
nitpicky = True
