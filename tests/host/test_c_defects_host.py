"""Host-side regression tests of issue 12 (no device needed)."""
import re

import pytest

import ibverbs as ib


def test_unreadable_inline_message_shows_the_range():
    wr = ib.SendWR(opcode=ib.WROpcode.SEND, send_flags=ib.SendFlags.INLINE,
                   sg_list=[ib.SGE(0x10, 8)])
    with pytest.raises(ValueError) as e:
        ib.PostList([wr])
    assert "%" not in str(e.value)
    assert re.search(r"\[0x10, \+8\) is not readable", str(e.value)), str(e.value)


class _Failing:
    def __init__(self, exc):
        self.exc = exc

    def __iter__(self):
        raise self.exc


def test_sg_list_passes_errors_that_are_not_about_its_type():
    with pytest.raises(MemoryError):
        ib.SendWR(sg_list=_Failing(MemoryError()))
    with pytest.raises(KeyError):
        ib.RecvWR(sg_list=_Failing(KeyError("x")))
    with pytest.raises(TypeError, match="sg_list must be a list of SGE"):
        ib.SendWR(sg_list=5)
