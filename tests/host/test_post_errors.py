"""What a failed post raises, through the null provider (bench/nullverbs.c)
made to fail every post with a chosen return (NULLVERBS_POST_RESULT).
Providers disagree on the sign of that return: mlx5 and rxe return ENOMEM,
siw and erdma -ENOMEM; either is VerbsError(errno=ENOMEM)."""
from __future__ import annotations

import errno
import json
import os

import pytest

POSTS = """
import ctypes, json, sys
import ibverbs as ib
ctx = ib.get_device_list()[0].open()
pd = ctx.alloc_pd()
cq = ctx.create_cq(16)
qp = pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC, max_send_wr=16, max_recv_wr=16))
mem = bytearray(4096)
addr = ctypes.addressof((ctypes.c_char * 4096).from_buffer(mem))
mr = pd.reg_mr(addr, 4096, 7)
send = ib.SendWR(wr_id=5, sg_list=[mr.sge(8)], opcode=ib.WROpcode.SEND, send_flags=2)
recv = ib.RecvWR(wr_id=6, sg_list=[mr.sge(8)])
ways = {
    "post_send(wr)": lambda: qp.post_send(send),
    "post_send(wr) again": lambda: qp.post_send(send),     # the kept request's way
    "post_send([wr, wr])": lambda: qp.post_send([send, send]),
    "post_send(PostList)": lambda: qp.post_send(ib.PostList([send, send])),
    "post_recv(wr)": lambda: qp.post_recv(recv),
    "post_recv(wr) again": lambda: qp.post_recv(recv),
    "post_recv([wr, wr])": lambda: qp.post_recv([recv, recv]),
    "post_recv(PostList)": lambda: qp.post_recv(ib.PostList([recv, recv])),
}
out = {}
for name, post in ways.items():
    try:
        post()
        out[name] = None
    except ib.VerbsError as e:
        out[name] = [e.errno, str(e)]
json.dump(out, sys.stdout)
"""


def failed_posts(on_null_provider, result):
    out = on_null_provider(POSTS, NULLVERBS_POST_RESULT=str(result))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("result", [errno.ENOMEM, -errno.ENOMEM], ids=["ENOMEM", "-ENOMEM"])
def test_a_failed_post_raises_the_positive_errno_whatever_the_providers_sign(on_null_provider,
                                                                             result):
    for way, failure in failed_posts(on_null_provider, result).items():
        assert failure is not None, f"{way} did not raise"
        code, message = failure
        assert code == errno.ENOMEM, f"{way}: errno {code}"
        assert os.strerror(errno.ENOMEM) in message, f"{way}: {message}"
        assert "wr_id=" in message, f"{way}: {message}"
        # the explanation reads the QP's size back (nullverbs' ibv_query_qp)
        queue = "send queue full (max_send_wr=16)" if way.startswith("post_send") \
            else "receive queue full (max_recv_wr=16)"
        assert queue in message, f"{way}: {message}"


NOT_AN_SGE = """
import json
import ibverbs as ib
ctx = ib.get_device_list()[0].open()
pd = ctx.alloc_pd()
cq = ctx.create_cq(16)
qp = pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC, max_send_wr=64, max_recv_wr=16,
                                max_inline_data=64))
mr = pd.reg_mr(bytearray(64), ib.AccessFlags.LOCAL_WRITE)
out = {}
for opcode in (ib.WROpcode.SEND, ib.WROpcode.BIND_MW):
    held = [mr.sge(8)]
    wr = ib.SendWR(wr_id=1, opcode=opcode, send_flags=ib.SendFlags.INLINE)
    wr.sg_list = held                   # the list itself: the caller's to change
    held[0] = 1 << 200
    for way, post in (("one", lambda: qp.post_send(wr)), ("list of 2", lambda: qp.post_send([wr, wr])),
                      ("list of 40", lambda: qp.post_send([wr] * 40))):
        try:
            post()
            out[f"{opcode.name} {way}"] = "posted"
        except (TypeError, ValueError) as e:
            out[f"{opcode.name} {way}"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def test_an_inline_request_whose_list_no_longer_holds_sges_is_refused_every_way(on_null_provider):
    """A request holds the list it was given, which stays the caller's to
    change.  An INLINE request's post looks for the MRs of its SGEs to hold
    them (the provider copies their bytes): an item that is no longer an SGE
    is the fill's to refuse, with TypeError.  The free-threaded build read
    it as an SGE and crashed."""
    out = on_null_provider(NOT_AN_SGE)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    for way in ("one", "list of 2", "list of 40"):
        assert got[f"SEND {way}"] == "TypeError: sg_list[0] must be an SGE, not int", got
        # a BIND_MW without mw and bind_info: refused for that, before its list matters
        assert got[f"BIND_MW {way}"].startswith(("TypeError", "ValueError")), got
