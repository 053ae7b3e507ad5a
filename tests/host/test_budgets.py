"""The data path's instruction budgets (issue 27): each budgeted operation
of bench/host_micro.py, counted with callgrind through the null provider
(bench/nullverbs.c), must stay within 10% of its budget.  Instruction
counts between the script's markers are exact (the same count every run),
so this is no timed test: a count that grows means the code grew.  A
budget that has to move needs a reason (CONTRIBUTING, "Changing a hot
loop")."""
from __future__ import annotations

import importlib.util
import pathlib
import shutil
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("gcc") is None,
                                reason="needs valgrind and gcc (make venv-test installs them)")


def host_micro():
    spec = importlib.util.spec_from_file_location("host_micro", ROOT / "bench" / "host_micro.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def counts():
    hm = host_micro()
    if sys.version_info[:2] != (3, 11):
        pytest.skip("the budgets are CPython 3.11's instruction counts")
    lib = hm.build_nullverbs()
    hm.build_nullcall()
    names = list(hm.BUDGETS)
    return hm, hm.measure(hm.our_env(lib, str(ROOT)), names + ["floor_" + n for n in names],
                          k=1000)


@pytest.mark.parametrize("name", list(host_micro().BUDGETS))
def test_operation_stays_within_its_budget(counts, name):
    hm, measured = counts
    label, goal, budget = hm.BUDGETS[name]
    count, floor = measured[name], measured["floor_" + name]
    assert count <= budget * 1.1, (
        f"{label}: {count:.0f} instructions, budget {budget} (+10%); goal {goal}, "
        f"the interpreter's floor for this call shape {floor:.0f}")


def test_the_floor_is_below_every_budget(counts):
    """The floor is the same call shape into C that does nothing: a budget
    under it could never be met, so BUDGETS would be wrong."""
    hm, measured = counts
    for name, (label, _, budget) in hm.BUDGETS.items():
        assert measured["floor_" + name] < budget, label
