"""What a failed post raises, through the null provider (bench/nullverbs.c)
made to fail every post with a chosen return (NULLVERBS_POST_RESULT).
Providers disagree on the sign of that return: mlx5 and rxe return ENOMEM,
siw and erdma -ENOMEM; either is VerbsError(errno=ENOMEM)."""
from __future__ import annotations

import errno
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

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


@pytest.fixture(scope="module")
def nullverbs():
    spec = importlib.util.spec_from_file_location("host_micro", ROOT / "bench" / "host_micro.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_nullverbs()


def failed_posts(lib, result):
    env = dict(os.environ, IBVERBS_LIBRARY=lib, NULLVERBS_POST_RESULT=str(result),
               PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", POSTS], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("result", [errno.ENOMEM, -errno.ENOMEM], ids=["ENOMEM", "-ENOMEM"])
def test_a_failed_post_raises_the_positive_errno_whatever_the_providers_sign(nullverbs, result):
    for way, failure in failed_posts(nullverbs, result).items():
        assert failure is not None, f"{way} did not raise"
        code, message = failure
        assert code == errno.ENOMEM, f"{way}: errno {code}"
        assert os.strerror(errno.ENOMEM) in message, f"{way}: {message}"
        assert "wr_id=" in message, f"{way}: {message}"
