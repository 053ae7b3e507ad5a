"""Every GC type of the extension visits its type (issue 23, point 7).

On 3.9+ an instance of a heap type holds a reference to its type, and the
type's tp_traverse must visit it (templates/record_type.c.h.j2,
templates/handle.c.h.j2, PostList_traverse): otherwise a Python subclass's
instance that its own class refers to (a class attribute, a registry kept on
the class) is a cycle the collector cannot see, and it is never freed.

Each public class of the extension is subclassed in Python, an instance is
put in a cycle through its class, and it must be collected.  CMID (rdma_cm,
made only by EventChannel.create_id) needs a device:
tests/device/test_gc_subclass_device.py.
"""
from __future__ import annotations

import gc

import pytest

from tests.conftest import collected_through_its_class

import ibverbs
from ibverbs import _ibverbs

#: arguments of the classes a bare call cannot make (all closed or plain
#: objects; none needs a device)
ARGS = {
    "SGE": lambda: (0x1000, 8, 1),
    "QPInitAttr": lambda: (None, None),
}
#: not subclassable (no Py_TPFLAGS_BASETYPE): made by verbs only
FINAL = {"CQEx", "QPEx", "PostList", "PostListEntry"}
#: made only through a device (rdma_cm; MWBind needs an open MR): the device
#: tier covers CMID and MWBind(Info);
#: EventChannel instances are always of the C class (no subclass can be made)
DEVICE = {"CMID", "EventChannel", "MWBind", "MWBindInfo"}


def _classes():
    return sorted(name for name, value in vars(_ibverbs).items()
                  if isinstance(value, type) and value.__module__ == "ibverbs")


def test_the_enumeration_knows_every_class():
    names = set(_classes())
    assert len(names) > 40
    assert FINAL | DEVICE | set(ARGS) <= names
    final = {n for n in names if not getattr(_ibverbs, n).__flags__ & (1 << 10)}
    assert final == FINAL


@pytest.mark.parametrize("name", [n for n in _classes() if n not in FINAL | DEVICE])
def test_a_subclass_instance_in_a_cycle_through_its_class_is_collected(name):
    base = getattr(_ibverbs, name)
    assert collected_through_its_class(base, ARGS.get(name, tuple)())


def test_the_final_types_traverse_their_type_too():
    """PostList and its entries cannot be subclassed; their tp_traverse
    still visits the type each instance holds."""
    plist = ibverbs.PostList(ibverbs.SendWR(wr_id=1))
    entry = plist[0]
    for obj in (plist, entry):
        assert gc.is_tracked(obj)
        assert type(obj) in gc.get_referents(obj)
