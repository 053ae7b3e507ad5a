"""Sphinx configuration of the ibverbs reference (`make docs`).

Sphinx + autodoc + napoleon, with the Furo theme and MyST for the Markdown
pages: autodoc reads the built extension, whose docstrings are generated
from the same spec as the stubs; MyST includes the README's own sections,
so the README stays the one source of the guides.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)                       # the package, built in place (make build)
sys.path.insert(0, os.path.join(HERE, "_ext"))

import ibverbs  # noqa: E402  (fails here, not page by page, when it is not built)

project = "ibverbs"
author = "the ibverbs authors"
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
autodoc_class_signature = "separated"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True          # an Attributes section: fields, not a second object description
# Every reference must resolve: make docs runs with -n (nitpicky) and -W.
nitpicky = True
