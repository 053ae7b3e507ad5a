"""Which of the wheels `make` builds pip installs on each CPython, from the
installers' own tag order (no network, no interpreter of each version
needed): packaging.tags.cpython_tags, which pip uses, and pip's own
get_supported() with its vendored copy, given each interpreter's version
and ABI.  pip takes, of the wheels whose tags the interpreter supports,
the one whose best tag comes first in that order.

What this records (packaging 26, pip 26):
  3.9-3.13 -> cp39-abi3;  3.14 -> cp314-abi3;  3.14t -> cp314-cp314t;
  3.15 and 3.15t -> cp315-abi3.abi3t (PEP 803's abi3t, spec/targets/targets.yaml).
  packaging gives a GIL build abi3 tags only and a free-threaded one abi3t
  tags only, so the abi3t wheel, meant for both builds, carries both ABI
  tags: tagged cp315-abi3t alone, a GIL 3.15 would take cp314-abi3.
"""
from __future__ import annotations

import pathlib
import runpy

import pytest

tags = pytest.importorskip("packaging.tags", reason="packaging is not installed")
from packaging.utils import parse_wheel_filename  # noqa: E402

pytestmark = pytest.mark.tooling

PLATFORM = "manylinux2014_x86_64.manylinux_2_17_x86_64"   # tools/audit-wheel's
#: an x86_64 glibc 2.17+ machine's platforms, best first (a subset of
#: packaging's list: the wheels' platform is the same for all)
PLATFORMS = ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"]

#: the wheels `make` builds: the targets' tags (generated/targets.py)
WHEELS = [f"{t['python_tag']}-{t['abi_tag']}" for t in runpy.run_path(
    str(pathlib.Path(__file__).resolve().parents[2] / "generated" / "targets.py"))["TARGETS"]]
INTERPRETERS = {    # name: (version, ABI of the interpreter's own build)
    **{f"3.{m}": ((3, m), f"cp3{m}") for m in range(9, 14)},
    "3.14": ((3, 14), "cp314"),
    "3.14t": ((3, 14), "cp314t"),
    "3.15": ((3, 15), "cp315"),
    "3.15t": ((3, 15), "cp315t"),
}
KNOWS_ABI3T = hasattr(tags, "_abi3t_applies")
#: packaging before 24 gives a free-threaded build the abi3 tags (Debian
#: bookworm's 23.0, the aarch64 root's): what it would pick there is no choice
KNOWS_FREE_THREADED = hasattr(tags, "_is_threaded_cpython")


def wheel_tags(tag: str):
    """The wheel's tags, as strings (pip's vendored Tag class is not ours)."""
    return {str(t) for t in parse_wheel_filename(f"pyibverbs-1.0-{tag}-{PLATFORM}.whl")[3]}


def choice(order, wheels):
    """The wheel pip takes given the interpreter's supported tags in order
    (pip's CandidateEvaluator: the best-ranked supported tag wins), or None."""
    rank = {}
    for i, t in enumerate(order):
        rank.setdefault(str(t), i)
    ranked = [(min(rank[t] for t in wheel_tags(w) if t in rank), w) for w in wheels
              if any(t in rank for t in wheel_tags(w))]
    return min(ranked)[1] if ranked else None


def packaging_order(version, abi):
    return list(tags.cpython_tags(version, [abi], PLATFORMS))


def pip_order(version, abi):
    compatibility_tags = pytest.importorskip("pip._internal.utils.compatibility_tags",
                                             reason="pip is not installed")
    return compatibility_tags.get_supported(version=f"{version[0]}{version[1]}",
                                            platforms=PLATFORMS, impl="cp", abis=[abi])


EXPECTED = {
    **{f"3.{m}": "cp39-abi3" for m in range(9, 14)},
    "3.14": "cp314-abi3",
    "3.14t": "cp314-cp314t",
    # the abi3t wheel, by its abi3 tag on a GIL build, by abi3t on the other
    "3.15": "cp315-abi3.abi3t",
    "3.15t": "cp315-abi3.abi3t" if KNOWS_ABI3T else None,
}


@pytest.mark.parametrize("name", list(INTERPRETERS))
def test_packaging_picks_each_interpreters_wheel(name):
    if name.endswith("t") and not KNOWS_FREE_THREADED:
        pytest.skip("this packaging does not know free-threaded ABIs (packaging < 24)")
    version, abi = INTERPRETERS[name]
    assert choice(packaging_order(version, abi), WHEELS) == EXPECTED[name]


@pytest.mark.parametrize("name", list(INTERPRETERS))
def test_pip_picks_the_same(name):
    """pip's get_supported() (its vendored packaging): the same choice
    wherever its packaging knows free-threaded ABIs as ours does."""
    pip_tags = pytest.importorskip("pip._vendor.packaging.tags", reason="pip is not installed")
    version, abi = INTERPRETERS[name]
    picked = choice(pip_order(version, abi), WHEELS)
    if not hasattr(pip_tags, "_is_threaded_cpython") and name.endswith("t"):
        # pip before 24.1 (packaging < 24) gives a free-threaded build the
        # abi3 tags: it would take an abi3 wheel that cannot load there
        pytest.skip(f"this pip's packaging does not know free-threaded ABIs "
                    f"(it picks {picked} on {name})")
    expected = EXPECTED[name]
    if name == "3.15t" and not hasattr(pip_tags, "_abi3t_applies"):
        expected = None     # no abi3t: no wheel for 3.15t (pip builds the sdist)
    assert picked == expected


def test_an_abi3t_wheel_for_both_builds_carries_both_abi_tags():
    """PEP 803's abi3t wheel loads on 3.15's GIL build too: tagged
    cp315-abi3.abi3t, pip takes it on both 3.15 builds and on nothing older;
    tagged cp315-abi3t alone, a GIL 3.15 would pass it over for cp314-abi3."""
    if not KNOWS_ABI3T:
        pytest.skip("this packaging does not know abi3t")
    assert "cp315-abi3.abi3t" in WHEELS
    lone = [w.replace("abi3.abi3t", "abi3t") for w in WHEELS]
    picked = {name: choice(packaging_order(*INTERPRETERS[name]), lone) for name in INTERPRETERS}
    assert picked == dict(EXPECTED, **{"3.15": "cp314-abi3", "3.15t": "cp315-abi3t"})


def test_the_order_ranks_the_newer_stable_abi_first():
    """What the choice rests on: cp314-abi3 before cp39-abi3 on 3.14+, and
    neither supported by a free-threaded build."""
    if not KNOWS_FREE_THREADED:
        pytest.skip("this packaging does not know free-threaded ABIs (packaging < 24)")
    order = [str(t) for t in packaging_order((3, 14), "cp314")]
    assert order.index("cp314-abi3-manylinux_2_17_x86_64") < \
        order.index("cp39-abi3-manylinux_2_17_x86_64")
    assert not wheel_tags("cp39-abi3") & {str(t) for t in packaging_order((3, 14), "cp314t")}
    assert not wheel_tags("cp314-abi3") & {str(t) for t in packaging_order((3, 13), "cp313")}
