"""README.md is the front door (issue 36, point 4; issue #25, point 7): what
the package is, install, a first program with its no-NIC path, checking the
setup, the differences from ibverbs 2026.7.18, links; at most ~12 KB.  The
rest is the manual's (docs/guides), and how the extension is generated is
CONTRIBUTING's."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()

#: A dated measurement: a date, a time of day, a load average, "that day".
DATED = re.compile(r"\b20\d\d-\d\d-\d\d\b|\bload average\b|\bload of \d|[(,;] ?load \d|"
                   r"\bat load \d|\bthat day\b|\bthe make test of\b|(?<![\w:.])\d{1,2}:\d\d(?![\w:.])(?! *(us|ms|s)\b)|"
                   r"\bthis session\b")


def _sections() -> list[str]:
    return re.findall(r"^## (.*)$", README, re.M)


def test_the_readme_is_a_front_door():
    assert len(README.encode()) <= 12_500, f"README.md is {len(README.encode())} bytes"
    assert _sections() == ["Install", "Quickstart", "Checking your setup",
                           "Free-threaded Python (3.14t)",
                           "Differences from ibverbs 2026.7.18 (rdma4py)", "Read on", "License"]
    # the Quickstart comes early: a reader reaches it in the first screenfuls
    assert README.index("## Quickstart") < 4_500


def test_the_compatibility_promise_is_stated_as_it_is():
    """'runs unchanged, except' and then the exceptions, by the name users
    know, never our word for it."""
    assert "runs unchanged, except" in " ".join(README.split())
    section = README.split("\n## Differences from ibverbs 2026.7.18 (rdma4py)\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    assert len(re.findall(r"^- \*\*", section, re.M)) >= 6
    for hit in ("TypeError", "ValueError", "to_rtr", "ETIMEDOUT", "pyibverbs", "GIL"):
        assert hit in section, hit


def test_user_text_never_says_the_seed():
    pages = [ROOT / "README.md", ROOT / "examples" / "README.md",
             *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docs").rglob("*.rst"))]
    pages = [p for p in pages if "contributing" not in p.parts and "_build" not in p.parts]
    said = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p in pages
            for m in re.finditer(r"(?i)[^\n]{0,30}\bthe seed\b[^\n]{0,30}", p.read_text())]
    assert not said, said


def test_no_dated_measurement_in_readme_contributing_or_the_manual():
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
    dated = [f"{p.relative_to(ROOT)}: {m.group(0)!r} in {p.read_text()[max(0, m.start() - 40):m.end() + 20]!r}"
             for p in pages for m in DATED.finditer(p.read_text())]
    assert not dated, dated


def test_every_link_of_the_readme_leads_somewhere():
    slugs = {re.sub(r"[^\w\- ]", "", s.lower()).replace(" ", "-") for s in _sections()}
    broken = []
    for target in re.findall(r"\]\(([^)]+)\)", README):
        if target.startswith("#"):
            if target[1:] not in slugs:
                broken.append(target)
        elif not target.startswith("http"):
            path = ROOT / target.split("#", 1)[0]
            # the topology guide's slot: filled by the branch that writes the guide
            if target == "docs/guides/topology.md" and not path.exists():
                continue
            if not path.exists():
                broken.append(target)
    assert not broken, broken


def test_the_manual_has_real_pages_not_slices_of_the_readme():
    """docs/ used to be {include}s of README sections cut at heading
    strings: a page is its own text now."""
    sliced = [str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md")
              if re.search(r"```\{include\} (\.\./)+README\.md\n", p.read_text())
              or re.search(r"```\{include\} \S*/CONTRIBUTING\.md\n(:[\w-]+:.*\n)*:end-before:",
                           p.read_text())]
    assert not sliced, sliced


def test_generator_internals_are_contributing_s():
    """Words only a contributor needs stay out of the README."""
    for internal in ("PyType_FromSpecWithBases", "templates/", "generator/stubs.py",
                     "generator/converters", "rdmacm_methods.c.h", "hand_attributes"):
        assert internal not in README, internal
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    for moved in ("### How the stubs are generated", "### Why CQEx and QPEx are subclasses",
                  "### rdma_cm in the generator", "### From the spec to the extension"):
        assert moved in contributing, moved
