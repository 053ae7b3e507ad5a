"""Two processes, one RDMA write, no torch: the connection info over a TCP socket.

The target (``--listen``) registers a zeroed buffer and waits for one
writer on a TCP port; both sides exchange their ``QPInfo`` (28 bytes), the
target also sends the ``RemoteBuffer`` (20 bytes: address, rkey, length)
the writer may write to; both connect their RC QP (``connect_rc``); the
writer posts one RDMA_WRITE of a known pattern, waits for its completion and
tells the target over TCP; the target checks every byte and answers
``OK``/``BAD``. Each side exits 0 when the bytes landed, 1 when they did not.

    python examples/rdma_write_tcp.py --listen [-d rxe1] [-p 18516]   # the target
    python examples/rdma_write_tcp.py HOST     [-d rxe0] [-p 18516]   # the writer

Device: ``-d``, else $IBVERBS_DEVICE, else the first device with an ACTIVE
port. GID: the RoCE v2 IPv4 one (``Context.find_gid``), or the port's IB
GID on InfiniBand. tests/device/test_examples.py runs it on Soft-RoCE.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
from typing import Tuple

import ibverbs as ib

ACCESS = ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.REMOTE_WRITE
TIMEOUT = 30.0                  # seconds for the peer, the TCP exchange and the completion


def pattern(size: int, seed: int) -> bytes:
    """What the writer writes, which the target can compute too."""
    block = bytes((i + seed) % 251 for i in range(251))
    return (block * (size // 251 + 1))[:size]


def choose(name: str | None) -> Tuple[ib.Device, int]:
    """The device (by name, or the first one with an ACTIVE port) and its port."""
    devices = ib.get_device_list()
    for dev in devices:
        if name is not None and dev.name != name:
            continue
        with dev.open() as ctx:
            for port in range(1, ctx.query_device().phys_port_cnt + 1):
                if ctx.query_port(port).state == ib.PortState.ACTIVE:
                    return dev, port
    have = ", ".join(d.name for d in devices) or "none"
    raise SystemExit(f"no RDMA device {name + ' ' if name else ''}with an ACTIVE port "
                     f"(have: {have})")


def gid_of(ctx: ib.Context, port: int) -> Tuple[int, ib.Gid]:
    if ctx.query_port(port).link_layer == ib.LinkLayer.INFINIBAND:
        return ctx.find_gid(port, gid_type=ib.GIDType.IB, family=None)
    return ctx.find_gid(port)


def recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        data += chunk
    return data


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("host", nargs="?", help="the target's address (the writer)")
    ap.add_argument("--listen", action="store_true", help="be the target")
    ap.add_argument("-d", "--device", default=os.environ.get("IBVERBS_DEVICE"))
    ap.add_argument("-p", "--port", type=int, default=18516, help="TCP port (default 18516)")
    ap.add_argument("-s", "--size", type=int, default=1 << 20, help="bytes (default 1 MiB)")
    ap.add_argument("--seed", type=int, default=0, help="the pattern written (default 0)")
    args = ap.parse_args()
    if args.listen == (args.host is not None):
        ap.error("give either --listen or HOST")
    if not 1 <= args.size <= 1 << 30:
        ap.error("--size must be 1..2**30")

    dev, port = choose(args.device)
    # Every object goes on the stack as it is made: leaving the block closes
    # them in reverse order (QPs and MRs before the PD, the PD and CQ before
    # the context), also when a step fails, so the error that stops the
    # program is the one shown.
    with contextlib.ExitStack() as stack:
        ctx = stack.enter_context(dev.open())
        pd = stack.enter_context(ctx.alloc_pd())
        cq = stack.enter_context(ctx.create_cq(4))
        qp = stack.enter_context(pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC)))
        gid_index, gid = gid_of(ctx, port)
        mine = ib.local_qp_info(qp, ctx.query_port(port), gid, port=port)
        role = "target" if args.listen else "writer"
        print(f"{role}: {dev.name} port {port} GID[{gid_index}] {gid}", flush=True)

        if args.listen:
            buf = bytearray(args.size)
            mr = stack.enter_context(pd.reg_mr(buf, ACCESS))
            srv = stack.enter_context(socket.create_server(("", args.port)))
            print(f"target: listening on port {srv.getsockname()[1]}", flush=True)
            conn, peer = srv.accept()
            stack.enter_context(conn)
            conn.settimeout(TIMEOUT)
            remote = ib.QPInfo.from_bytes(recv_exact(conn, 28))
            conn.sendall(mine.to_bytes() + mr.remote().to_bytes())
            ib.connect_rc(qp, remote, port=port, sgid_index=gid_index, access=ACCESS)
            conn.sendall(b"R")                         # ready: RTS, the writer may write
            recv_exact(conn, 1)                        # the writer's write completed
            ok = bytes(buf) == pattern(args.size, args.seed)
            conn.sendall(b"K" if ok else b"F")
            print(f"target: {args.size} bytes written by {peer[0]}: "
                  f"{'OK' if ok else 'BAD (not the pattern)'}", flush=True)
        else:
            src = bytearray(pattern(args.size, args.seed))
            mr = stack.enter_context(pd.reg_mr(src, ib.AccessFlags.LOCAL_WRITE))
            conn = stack.enter_context(socket.create_connection((args.host, args.port),
                                                                timeout=TIMEOUT))
            conn.sendall(mine.to_bytes())
            reply = recv_exact(conn, 48)
            remote, target = ib.QPInfo.from_bytes(reply[:28]), ib.RemoteBuffer.from_bytes(reply[28:])
            if target.length < args.size:
                raise SystemExit(f"the target's buffer has {target.length} bytes, not {args.size}")
            ib.connect_rc(qp, remote, port=port, sgid_index=gid_index, access=ACCESS)
            recv_exact(conn, 1)                        # the target is ready
            qp.post_send(ib.SendWR(wr_id=1, sg_list=[mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                                   send_flags=ib.SendFlags.SIGNALED,
                                   remote_addr=target.addr, rkey=target.rkey))
            cq.wait(timeout=TIMEOUT)                   # CompletionError if it failed
            conn.sendall(b"D")
            ok = recv_exact(conn, 1) == b"K"
            print(f"writer: {args.size} bytes to {args.host}: "
                  f"{'OK' if ok else 'BAD (the target saw other bytes)'}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
