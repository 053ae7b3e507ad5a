"""Test doubles in a work request, as the seed takes them: SendWR and
RecvWR store whatever items their sg_list has (a client's unit test builds
RecvWR(sg_list=[fake_mr.sge(...)]) with a SimpleNamespace), and a post
refuses an item that is no SGE with TypeError.  The posts run through the
null provider (bench/nullverbs.c loaded as libibverbs)."""
from __future__ import annotations

import textwrap
import types

import pytest

import ibverbs as ib


def _fake_sge():
    return types.SimpleNamespace(addr=0x1000, length=64, lkey=7)


@pytest.mark.parametrize("cls", [ib.SendWR, ib.RecvWR])
def test_a_request_stores_test_doubles_in_its_sg_list(cls):
    fake = _fake_sge()
    wr = cls(wr_id=3, sg_list=[fake, ib.SGE(0x2000, 8)])
    assert wr.sg_list[0] is fake and wr.sg_list[1].addr == 0x2000
    other = _fake_sge()
    wr.sg_list = (other,)
    assert wr.sg_list == [other]
    wr.sg_list.append(fake)
    assert wr.sg_list == [other, fake]
    # not a sequence at all is still refused at once
    with pytest.raises(TypeError, match="sg_list must be a list of SGE or None"):
        cls(sg_list=5)


POST_DOUBLES = """
import types
import ibverbs as ib
ctx = ib.get_device_list()[0].open()
pd = ctx.alloc_pd()
cq = ctx.create_cq(16)
qp = pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC))
fake = types.SimpleNamespace(addr=0x1000, length=64, lkey=7)
real = ib.SGE(0x1000, 64, 7)
def refused(call, *args):
    try:
        call(*args)
    except TypeError as exc:
        print(type(exc).__name__, exc)
    else:
        print("accepted")
send = ib.SendWR(wr_id=1, sg_list=[real, fake], opcode=ib.WROpcode.SEND)
recv = ib.RecvWR(wr_id=2, sg_list=[fake])
refused(qp.post_send, send)
refused(qp.post_send, [send, send])
refused(qp.post_recv, recv)
refused(qp.post_recv, [recv])
refused(ib.PostList, [recv])
# the same requests post once their items are SGEs, and a kept request
# is not one built from the double
recv.sg_list = [real]
qp.post_recv(recv)
qp.post_recv(recv)
send.sg_list[1] = real
qp.post_send(send)
recv.sg_list.append(fake)
refused(qp.post_recv, recv)
print("posted")
"""


def test_posting_a_test_double_raises_type_error(on_null_provider):
    out = on_null_provider(textwrap.dedent(POST_DOUBLES))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines == [
        "TypeError sg_list[1] must be an SGE, not SimpleNamespace",
        "TypeError sg_list[1] must be an SGE, not SimpleNamespace",
        "TypeError sg_list[0] must be an SGE, not SimpleNamespace",
        "TypeError sg_list[0] must be an SGE, not SimpleNamespace",
        "TypeError sg_list[0] must be an SGE, not SimpleNamespace",
        "TypeError sg_list[1] must be an SGE, not SimpleNamespace",
        "posted",
    ], out.stdout + out.stderr
