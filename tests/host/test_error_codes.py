"""How a verb's failure becomes an errno, through the null provider
(bench/nullverbs.c): each verb's own convention (spec `errors:`), never a
guess from the sign of its result."""
from __future__ import annotations

import errno
import json

REREG = """
import ctypes, json, sys
import ibverbs as ib
ctx = ib.get_device_list()[0].open()
pd = ctx.alloc_pd()
mem = bytearray(4096)
addr = ctypes.addressof((ctypes.c_char * 4096).from_buffer(mem))
mr = pd.reg_mr(addr, 4096, 1)
try:
    mr.rereg_mr(ib.ReregMRFlags.CHANGE_ACCESS, access=ib.AccessFlags.LOCAL_WRITE)
    json.dump(None, sys.stdout)
except ib.VerbsError as e:
    import sys
    json.dump([e.errno, str(e)], sys.stdout)
"""


def test_rereg_mr_reports_errno_not_its_negative_code(on_null_provider):
    # ibv_rereg_mr returns IBV_REREG_MR_ERR_CMD (-4) with errno EOPNOTSUPP:
    # read as a negated errno, -4 was EINTR, "Interrupted system call"
    out = on_null_provider(REREG)
    assert out.returncode == 0, out.stderr
    code, message = json.loads(out.stdout)
    assert code == errno.EOPNOTSUPP, message
    assert "ibv_rereg_mr failed: Operation not supported" in message, message
