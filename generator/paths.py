"""Where the generator's inputs and outputs live in the source tree.

A module of its own so that every stage (cli, audit, the freshness check)
can name them without importing the command line.
"""
from __future__ import annotations

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC_DIR = os.path.join(ROOT, "spec")
TEMPLATE_DIR = os.path.join(ROOT, "templates")
GENERATED_DIR = os.path.join(ROOT, "generated")
GENERATOR_DIR = os.path.join(ROOT, "generator")
