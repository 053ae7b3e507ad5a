"""The far end of an RC connection in a process of its own, to be killed.

`python tests/fault_peer.py DEVICE [SIZE]` opens DEVICE, registers SIZE
bytes (default 1 MiB) for remote writes and reads, and talks JSON lines:

  out  {"info": <QPInfo hex>, "addr": int, "rkey": int, "length": int, "pid": int}
  in   {"info": <QPInfo hex>, "psn": int}          connect to that QP
  out  {"ready": true}
  in   {"sum": true}                               out {"sum": <sum of the bytes>}
  EOF on stdin: close everything and exit 0.

The fault tests and the soak SIGKILL it with writes in flight: what the
survivor sees then is the point, so this end keeps no state worth saving.
"""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import ibverbs as ib  # noqa: E402
import rxe  # noqa: E402

PORT = 1
ACCESS = ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.REMOTE_WRITE | ib.AccessFlags.REMOTE_READ


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(device: str, size: int) -> int:
    gid_index = rxe.roce_v2_ipv4_gid_index(device, PORT)
    ctx = next(d for d in ib.get_device_list() if d.name == device).open()
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(16)
    qp = pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC))
    buf = bytearray(size)
    mr = pd.reg_mr(buf, ACCESS)
    info = ib.local_qp_info(qp, ctx.query_port(PORT), ctx.query_gid(PORT, gid_index), port=PORT,
                            psn=0x300)
    say({"info": info.to_bytes().hex(), "addr": mr.addr, "rkey": mr.rkey, "length": size,
         "pid": os.getpid()})
    for line in sys.stdin:
        request = json.loads(line)
        if "info" in request:
            remote = ib.QPInfo.from_bytes(bytes.fromhex(request["info"]))
            ib.connect_rc(qp, remote, port=PORT, sgid_index=gid_index, access=ACCESS,
                          local_psn=0x300)
            say({"ready": True})
        elif "sum" in request:
            say({"sum": sum(buf)})
    for obj in (qp, mr, cq, pd, ctx):
        obj.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1 << 20))
