"""WC on the host (no device): a subclass's own attributes win.

WC finds status, opcode, wr_id and byte_len by the name's identity before
the generic lookup (ibverbs/src/wc.c, ibp_WC_getattro), a speed-up for
completion loops; a subclass inherits that slot, and its property or class
attribute of one of those names must still win, as for any other name
(issue 35, point 8)."""
from __future__ import annotations

import pytest

import ibverbs as ib

HOT = ("status", "opcode", "wr_id", "byte_len")


@pytest.mark.parametrize("name", HOT)
def test_a_subclass_property_of_a_hot_field_is_what_reads(name):
    cls = type("MyWC", (ib.WC,), {name: property(lambda self: f"my {name}")})
    assert getattr(cls(), name) == f"my {name}"
    assert getattr(ib.WC(), name) == 0          # WC itself is unchanged


@pytest.mark.parametrize("name", HOT)
def test_a_subclass_class_attribute_of_a_hot_field_is_what_reads(name):
    cls = type("MyWC", (ib.WC,), {name: 42})
    assert getattr(cls(), name) == 42
    grandchild = type("Grandchild", (cls,), {})
    assert getattr(grandchild(), name) == 42


def test_a_subclass_without_its_own_reads_the_completions_fields():
    class Plain(ib.WC):
        extra = "kept"
    wc = Plain()
    assert (wc.status, wc.opcode, wc.wr_id, wc.byte_len, wc.qp_num) == (0, 0, 0, 0, 0)
    assert wc.extra == "kept" and wc.status == ib.WCStatus.SUCCESS


def test_a_subclass_getattr_sees_only_missing_names():
    class Fallback(ib.WC):
        def __getattr__(self, name):
            return f"missing {name}"
    wc = Fallback()
    assert wc.status == 0 and wc.nonexistent == "missing nonexistent"
