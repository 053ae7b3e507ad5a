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


#: the budgets of the interpreter running the tests (3.11's; 3.14's
#: constructors with the cp314-abi3 build; 3.15's with cp315-abi3t)
BUDGETS = host_micro().budgets_for(sys.version_info)


@pytest.fixture(scope="module")
def counts():
    hm = host_micro()
    if not BUDGETS:
        pytest.skip("the budgets are CPython 3.11's, 3.14's and 3.15's instruction counts")
    from ibverbs import _ibverbs
    want = {(3, 14): "cp314-abi3", (3, 15): "cp315-abi3t"}.get(sys.version_info[:2])
    if want is not None:
        if _ibverbs._target != want:
            pytest.skip(f"{sys.version_info[0]}.{sys.version_info[1]}'s budgets are the {want} "
                        f"build's, not {_ibverbs._target}'s")
        hm.PY = sys.executable      # the sid root's python3.14 or 3.15 (no .venv there)
    lib = hm.build_nullverbs()
    hm.build_nullcall(_ibverbs._target)     # the floor at the extension's Limited API
    names = list(BUDGETS)
    return hm, hm.measure(hm.our_env(lib, str(ROOT)), names + ["floor_" + n for n in names],
                          k=1000)


@pytest.mark.parametrize("name", list(host_micro().BUDGETS))
def test_operation_stays_within_its_budget(counts, name):
    hm, measured = counts
    if name not in BUDGETS:
        pytest.skip(f"no budget for {name} on CPython {sys.version_info[0]}.{sys.version_info[1]}")
    label, goal, budget = BUDGETS[name]
    count, floor = measured[name], measured["floor_" + name]
    assert count <= budget * 1.1, (
        f"{label}: {count:.0f} instructions, budget {budget} (+10%); goal {goal}, "
        f"the interpreter's floor for this call shape {floor:.0f}")


def test_the_floor_is_below_every_budget(counts):
    """The floor is the same call shape into C that does nothing: a budget
    under it could never be met, so BUDGETS would be wrong."""
    hm, measured = counts
    for name, (label, _, budget) in BUDGETS.items():
        assert measured["floor_" + name] < budget, label
