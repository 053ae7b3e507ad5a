"""README.md is written for users first (issue #25, point 7): a table of
contents, then what a new user needs in the order they need it; how the
extension is generated is CONTRIBUTING's."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _sections() -> list[str]:
    return re.findall(r"^## (.*)$", README, re.M)


def _github_slug(heading: str) -> str:
    """The anchor GitHub (and PyPI) give a heading."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def test_the_first_sections_are_what_a_new_user_needs():
    first = _sections()[:5]
    assert first[:2] == ["Contents", "Install"] and first[2].startswith("Quickstart"), first
    assert first[3:] == ["Checking your setup", "GPUDirect with torch tensors"], first


def test_the_contents_link_every_section():
    contents = README.split("## Contents\n", 1)[1].split("\n## ", 1)[0]
    links = set(re.findall(r"\]\(#([^)]+)\)", contents))
    slugs = {_github_slug(s) for s in _sections() if s != "Contents"}
    assert links <= slugs, f"links to no section: {links - slugs}"
    assert slugs <= links, f"sections the contents leave out: {slugs - links}"


def test_generator_internals_are_contributing_s():
    """Words only a contributor needs stay out of the user sections."""
    users = README.split("## Development\n", 1)[0]
    for internal in ("PyType_FromSpecWithBases", "templates/", "generator/stubs.py",
                     "generator/converters", "rdmacm_methods.c.h", "hand_attributes"):
        assert internal not in users, internal
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    for moved in ("### How the stubs are generated", "### Why CQEx and QPEx are subclasses",
                  "### rdma_cm in the generator", "### From the spec to the extension"):
        assert moved in contributing, moved
