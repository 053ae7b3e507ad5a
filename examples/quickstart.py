"""README.md's Quickstart, as a file to run: one RDMA write between two QPs of one
device (tests/host/test_readme_commands.py keeps it equal to the README's block).

    python examples/quickstart.py                       # a machine with an RDMA NIC
    tests/vm/run-in-vm python examples/quickstart.py    # no NIC: Soft-RoCE in a VM
"""
import contextlib
import os

import numpy as np
import ibverbs as ib


def pick_device() -> tuple[ib.Device, int]:
    """$IBVERBS_DEVICE, else the first device with an ACTIVE port: (device, port)."""
    wanted = os.environ.get("IBVERBS_DEVICE")
    for dev in ib.get_device_list():
        if wanted is not None and dev.name != wanted:
            continue
        with dev.open() as probe:
            for port in range(1, probe.query_device().phys_port_cnt + 1):
                if probe.query_port(port).state == ib.PortState.ACTIVE:
                    return dev, port
    raise SystemExit(f"no RDMA device {wanted or ''} with an ACTIVE port (`ibverbs devices`)")


dev, port = pick_device()
with contextlib.ExitStack() as stack:        # closes children first, also on an error
    ctx = stack.enter_context(dev.open())
    pd = stack.enter_context(ctx.alloc_pd())
    cq = stack.enter_context(ctx.create_cq(64))
    access = ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.REMOTE_WRITE | ib.AccessFlags.REMOTE_READ
    src = np.full(4096, 7, dtype=np.uint8)
    dst = np.zeros(4096, dtype=np.uint8)
    src_mr = stack.enter_context(ib.reg_tensor(pd, src, access))
    dst_mr = stack.enter_context(ib.reg_tensor(pd, dst, access))

    a = stack.enter_context(pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC)))
    b = stack.enter_context(pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC)))
    if ctx.query_port(port).link_layer == ib.LinkLayer.INFINIBAND:
        gid_index, gid = ctx.find_gid(port, gid_type=ib.GIDType.IB, family=None)
    else:
        gid_index, gid = ctx.find_gid(port)  # the RoCE v2 IPv4 GID (types read from sysfs)

    def info(qp: ib.QP) -> ib.QPInfo:
        return ib.local_qp_info(qp, ctx.query_port(port), gid, port=port)

    ib.connect_rc(a, info(b), port=port, sgid_index=gid_index, access=access)
    ib.connect_rc(b, info(a), port=port, sgid_index=gid_index, access=access)

    a.post_send(ib.SendWR(wr_id=1, sg_list=[src_mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                          send_flags=ib.SendFlags.SIGNALED,
                          remote_addr=dst_mr.addr, rkey=dst_mr.rkey))
    cq.wait(timeout=10)             # the completion, or CompletionError / TimeoutError
    assert (dst == 7).all()
    print(f"{dev.name} port {port}: 4096 bytes written")
