"""``python -m ibverbs``: devices, info, ping.

* ``devices``: the RDMA devices and their node GUIDs (like ``ibv_devices``).
* ``info [-d DEV] [--json]``: what ``ibv_devinfo -v`` shows: every device
  attribute, and for each port its attributes and valid GIDs, read with
  ``query_device``/``query_port``/``query_gid_table`` (all fields the
  generated struct classes have, through ``_asdict()``).
* ``ping``: RC SEND/RECV ping-pong with latency statistics:

  - ``ping -d DEV [--peer-device DEV2]``: both QPs in this process
    (between two devices, or on one device);
  - ``ping --listen [--port P] -d DEV``: a server; it answers one client;
  - ``ping HOST [--port P] -d DEV``: the client; both sides exchange their
    ``QPInfo`` (ibverbs.helpers, 28 bytes) over TCP, connect their RC QP
    and the client measures round trips.

  ``-e``/``--events`` sleeps on a completion channel between completions
  instead of busy polling (what ``ibv_rc_pingpong -e`` does): slower round
  trips, no CPU burnt while waiting.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import struct
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import ibverbs as ib

DEFAULT_TCP_PORT = 18515      # the port ibv_rc_pingpong uses
_PARAMS = struct.Struct("!II")  # count, size: the client tells the server


def _hex(value: int, width: int = 16) -> str:
    return f"0x{value:0{width}x}"


def _find_device(name: Optional[str]) -> ib.Device:
    devices = ib.get_device_list()
    if not devices:
        raise SystemExit("no RDMA devices found")
    if name is None:
        return devices[0]
    for dev in devices:
        if dev.name == name:
            return dev
    raise SystemExit(f"no RDMA device named {name!r} (have: {', '.join(d.name for d in devices)})")


# --- devices -------------------------------------------------------------------

def cmd_devices(args: argparse.Namespace) -> int:
    devices = ib.get_device_list()
    if args.json:
        print(json.dumps([{"name": d.name, "guid": d.guid} for d in devices], indent=2))
        return 0
    print(f"    {'device':<16}\t   node GUID")
    print(f"    {'------':<16}\t----------------")
    for dev in devices:
        # Device.guid is the __be64 read as a host integer: wire order, as ibv_devices
        print(f"    {dev.name:<16}\t{dev.guid.to_bytes(8, sys.byteorder).hex()}")
    return 0


# --- info ------------------------------------------------------------------------

def _jsonable(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, ib.Gid):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return str(value)


def _gids(ctx: Any, port: int, gid_tbl_len: int) -> List[Dict[str, Any]]:
    """The valid GIDs of a port: from ibv_query_gid_table (one call, with
    types), else ibv_query_gid of each index (zero GIDs left out)."""
    try:
        entries = ctx.query_gid_table()
    except (AttributeError, RuntimeError, ib.VerbsError):
        entries = None
    if entries is not None:
        return [{"index": e.gid_index, "gid": str(ib.Gid(bytes(e.gid))), "type": int(e.gid_type),
                 "ndev_ifindex": e.ndev_ifindex}
                for e in entries if e.port_num == port]
    out = []
    for index in range(gid_tbl_len):
        try:
            gid = ctx.query_gid(port, index)
        except ib.VerbsError:
            continue
        if any(bytes(gid)):
            out.append({"index": index, "gid": str(gid)})
    return out


def device_info(dev: ib.Device) -> Dict[str, Any]:
    """All attributes of a device and its ports, as plain values."""
    with dev.open() as ctx:
        attr = ctx.query_device()
        ports = []
        for port in range(1, attr.phys_port_cnt + 1):
            pattr = ctx.query_port(port)
            ports.append({"port": port, "attr": _jsonable(pattr._asdict()),
                          "gids": _gids(ctx, port, pattr.gid_tbl_len)})
        return {"name": dev.name, "guid": dev.guid, "node_type": dev.node_type,
                "transport_type": dev.transport_type,
                "device": _jsonable(attr._asdict()), "ports": ports}


_ENUM_FIELDS = {"state": "PortState", "max_mtu": "MTU", "active_mtu": "MTU",
                "link_layer": "LinkLayer", "atomic_cap": "AtomicCap"}
_FLAG_FIELDS = {"device_cap_flags": "DeviceCapFlags", "port_cap_flags": "PortCapFlags"}
_GID_TYPES = {0: "IB", 1: "RoCE v1", 2: "RoCE v2"}   # enum ibv_gid_type


def _show(name: str, value: Any) -> str:
    enum = _ENUM_FIELDS.get(name) or _FLAG_FIELDS.get(name)
    if enum is not None and isinstance(value, int):
        try:
            member = getattr(ib, enum)(value)
            label = getattr(member, "name", None) or str(member).split(".", 1)[-1]
            text = f"{label} ({value})" if name in _ENUM_FIELDS else f"{_hex(value, 8)} ({label})"
            return text
        except (ValueError, AttributeError):
            pass
    if name.endswith("guid") and isinstance(value, int):
        # a __be64 read as a host integer: show it in wire order, as
        # ibv_devinfo does (xxxx:xxxx:xxxx:xxxx)
        h = value.to_bytes(8, sys.byteorder).hex()
        return ":".join(h[i:i + 4] for i in range(0, 16, 4))
    return str(value)


def cmd_info(args: argparse.Namespace) -> int:
    devices = [_find_device(args.device)] if args.device else ib.get_device_list()
    infos = [device_info(d) for d in devices]
    if args.json:
        print(json.dumps({"devices": infos}, indent=2))
        return 0
    for info in infos:
        print(f"hca_id:\t{info['name']}")
        for key, value in sorted(info["device"].items()):
            print(f"\t{key + ':':<28}{_show(key, value)}")
        for port in info["ports"]:
            print(f"\t\tport:\t{port['port']}")
            for key, value in sorted(port["attr"].items()):
                print(f"\t\t\t{key + ':':<24}{_show(key, value)}")
            for g in port["gids"]:
                kind = _GID_TYPES.get(g.get("type", -1), "")
                print(f"\t\t\tGID[{g['index']:>4}]:\t\t{g['gid']}" + (f", {kind}" if kind else ""))
        print()
    return 0


# --- ping ------------------------------------------------------------------------

def _pick_gid_index(ctx: Any, port: int) -> int:
    """The RoCE v2 IPv4-mapped GID if there is one (what RoCE peers on an
    IPv4 network route with), else index 0 (InfiniBand, link-local)."""
    try:
        entries = ctx.query_gid_table()
    except (AttributeError, RuntimeError, ib.VerbsError):
        return 0
    for e in entries:
        raw = bytes(e.gid)
        if e.port_num == port and e.gid_type == ib.GIDType.ROCE_V2 and raw[:12] == bytes(10) + b"\xff\xff":
            return int(e.gid_index)
    return 0


class _Side:
    """One end of the ping-pong: a device, an RC QP, one CQ and a buffer
    (send half, receive half) registered with PD.reg_mr(buffer, access)."""

    def __init__(self, dev: ib.Device, port: int, gid_index: Optional[int], size: int,
                 depth: int = 16, events: bool = False) -> None:
        self.ctx = dev.open()
        self.port, self.size = port, size
        self.gid_index = _pick_gid_index(self.ctx, port) if gid_index is None else gid_index
        self.pd = self.ctx.alloc_pd()
        # events: sleep on a completion channel instead of busy polling
        self.channel = self.ctx.create_comp_channel() if events else None
        self.cq = self.ctx.create_cq(2 * depth, channel=self.channel)
        self.qp = self.pd.create_qp(ib.QPInitAttr(self.cq, self.cq, max_send_wr=depth,
                                                  max_recv_wr=depth))
        self.buf = bytearray(2 * size)
        self.mr = self.pd.reg_mr(self.buf, ib.AccessFlags.LOCAL_WRITE)
        self.send_sge = self.mr.sge(size, 0)
        self.recv_sge = self.mr.sge(size, size)
        # Completions polled but not waited for yet.  The CQ gives them in
        # the order they happened, not the order wait() asks for them: the
        # server's echo SEND completes when the client's ACK comes back, and
        # the client's next ping can land (its receive completes) first.
        self.recvs_done = 0
        self.sends_done = 0

    def info(self) -> ib.QPInfo:
        return ib.local_qp_info(self.qp, self.ctx.query_port(self.port),
                                self.ctx.query_gid(self.port, self.gid_index), port=self.port)

    def connect(self, remote: ib.QPInfo) -> None:
        ib.connect_rc(self.qp, remote, port=self.port, sgid_index=self.gid_index,
                      access=ib.AccessFlags.LOCAL_WRITE)

    def post_recv(self) -> None:
        self.qp.post_recv(ib.RecvWR(wr_id=1, sg_list=[self.recv_sge]))

    def send(self, seq: int) -> None:
        """SEND the send half, which starts with seq (when it has room)."""
        if self.size >= 8:
            struct.pack_into("!Q", self.buf, 0, seq)
        self.qp.post_send(ib.SendWR(wr_id=2, sg_list=[self.send_sge], opcode=ib.WROpcode.SEND,
                                    send_flags=ib.SendFlags.SIGNALED))

    def received_seq(self) -> Optional[int]:
        if self.size < 8:
            return None
        return int(struct.unpack_from("!Q", self.buf, self.size)[0])

    def wait(self, want_recv: bool, want_send: bool, timeout: float = 10.0) -> None:
        """Busy-poll (latency first), or with events sleep on the completion
        channel, until the wanted completions arrived; one that arrives
        early (the other kind, or the next round's) is kept for a later wait."""
        deadline = time.monotonic() + timeout
        armed = False
        while (want_recv and not self.recvs_done) or (want_send and not self.sends_done):
            wcs = self.cq.poll(4)
            for wc in wcs:
                wc.raise_for_status()
                if wc.wr_id == 1:
                    self.recvs_done += 1
                else:
                    self.sends_done += 1
            if wcs:
                continue                # the loop condition decides
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no completion within {timeout:g} s (is the peer running?)")
            channel = self.channel
            if channel is None:
                continue                # busy polling
            if not armed:               # arm, then poll once more: no completion slips by
                self.cq.req_notify()
                armed = True
            elif select.select([channel.fd], [], [], left)[0]:
                channel.get_cq_event()  # readable: does not block
                self.cq.ack_events(1)
                armed = False
        self.recvs_done -= want_recv
        self.sends_done -= want_send

    def close(self) -> None:
        for obj in (self.qp, self.mr, self.cq, self.channel, self.pd, self.ctx):
            if obj is not None:
                obj.close()


def _stats(rtts_ns: Sequence[int], size: int) -> str:
    s = sorted(rtts_ns)
    n = len(s)

    def pct(p: float) -> float:
        return s[min(n - 1, int(p / 100 * n))] / 1000

    avg = sum(s) / n / 1000
    return (f"{n} round trips of {size} bytes: min {s[0] / 1000:.1f} us, avg {avg:.1f} us, "
            f"median {pct(50):.1f} us, p99 {pct(99):.1f} us, max {s[-1] / 1000:.1f} us")


def _echo(side: _Side, timeout: float) -> None:
    """The server's half of one round trip: receive, re-arm, send it back."""
    side.wait(want_recv=True, want_send=False, timeout=timeout)
    side.post_recv()
    side.send(side.received_seq() or 0)
    side.wait(want_recv=False, want_send=True, timeout=timeout)


def _ping_loop(a: _Side, count: int, timeout: float, peer: Optional[_Side] = None) -> List[int]:
    """a pings, the peer echoes: ``peer`` in this process, else over the wire.
    Each echo must carry the sequence number sent (when size >= 8)."""
    rtts = []
    for seq in range(count):
        t0 = time.perf_counter_ns()
        a.post_recv()
        a.send(seq)
        if peer is not None:
            _echo(peer, timeout)
        a.wait(want_recv=True, want_send=True, timeout=timeout)
        rtts.append(time.perf_counter_ns() - t0)
        got = a.received_seq()
        if got is not None and got != seq:
            raise RuntimeError(f"round trip {seq}: the echo carries {got}")
    return rtts


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the peer closed the connection")
        data += chunk
    return data


def _serve(args: argparse.Namespace, dev: ib.Device) -> int:
    with socket.create_server((args.bind, args.port), reuse_port=False) as srv:
        print(f"listening on {args.bind or '*'}:{srv.getsockname()[1]} ({dev.name})", flush=True)
        conn, peer = srv.accept()
    with conn:
        count, size = _PARAMS.unpack(_recv_exact(conn, _PARAMS.size))
        remote = ib.QPInfo.from_bytes(_recv_exact(conn, 28))
        side = _Side(dev, args.ib_port, args.gid_index, size, events=args.events)
        try:
            conn.sendall(side.info().to_bytes())
            side.connect(remote)
            side.post_recv()
            conn.sendall(b"R")                      # ready: the first receive is posted
            for _ in range(count):
                _echo(side, args.timeout)
            _recv_exact(conn, 1)                     # the client is done
        finally:
            side.close()
    print(f"served {count} round trips of {size} bytes to {peer[0]}")
    return 0


def _client(args: argparse.Namespace, dev: ib.Device) -> int:
    side = _Side(dev, args.ib_port, args.gid_index, args.size, events=args.events)
    try:
        with socket.create_connection((args.host, args.port), timeout=args.timeout) as conn:
            conn.sendall(_PARAMS.pack(args.count, args.size) + side.info().to_bytes())
            remote = ib.QPInfo.from_bytes(_recv_exact(conn, 28))
            side.connect(remote)
            _recv_exact(conn, 1)                     # the server's receive is posted
            rtts = _ping_loop(side, args.count, args.timeout)
            conn.sendall(b"D")
    finally:
        side.close()
    print(_stats(rtts, args.size))
    return 0


def _local(args: argparse.Namespace, dev: ib.Device) -> int:
    peer_dev = _find_device(args.peer_device) if args.peer_device else dev
    a = _Side(dev, args.ib_port, args.gid_index, args.size, events=args.events)
    try:
        b = _Side(peer_dev, args.ib_port, args.peer_gid_index, args.size, events=args.events)
        try:
            a.connect(b.info())
            b.connect(a.info())
            b.post_recv()
            rtts = _ping_loop(a, args.count, args.timeout, peer=b)
        finally:
            b.close()
    finally:
        a.close()
    print(f"{dev.name} <-> {peer_dev.name}: " + _stats(rtts, args.size))
    return 0


def cmd_ping(args: argparse.Namespace) -> int:
    if args.size < 1 or args.count < 1:
        raise SystemExit("--size and --count must be positive")
    dev = _find_device(args.device)
    if args.listen:
        return _serve(args, dev)
    if args.host:
        return _client(args, dev)
    return _local(args, dev)


# --- main ------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m ibverbs", description="RDMA devices from Python.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("devices", help="list the RDMA devices and their node GUIDs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_devices)
    p = sub.add_parser("info", help="device and port attributes and GIDs (like ibv_devinfo -v)")
    p.add_argument("-d", "--device", help="only this device (default: all)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_info)
    p = sub.add_parser("ping", help="RC ping-pong latency (in one process, or client/server over TCP)",
                       description="Without HOST or --listen both QPs run in this process, between "
                                   "-d DEV and --peer-device DEV2 (default: the same device).")
    p.add_argument("host", nargs="?", help="connect to a `ping --listen` server on HOST")
    p.add_argument("--listen", action="store_true", help="serve one client")
    p.add_argument("--bind", default="", help="address to listen on (default: all)")
    p.add_argument("-p", "--port", type=int, default=DEFAULT_TCP_PORT,
                   help=f"TCP port for the QPInfo exchange (default {DEFAULT_TCP_PORT}; 0: any, with --listen)")
    p.add_argument("-d", "--device", help="RDMA device (default: the first)")
    p.add_argument("--peer-device", help="in-process mode: the other device (default: -d's)")
    p.add_argument("-i", "--ib-port", type=int, default=1, help="device port (default 1)")
    p.add_argument("-g", "--gid-index", type=int, help="local GID index (default: the RoCE v2 IPv4 one, else 0)")
    p.add_argument("--peer-gid-index", type=int, help="in-process mode: the peer device's GID index")
    p.add_argument("-n", "--count", type=int, default=1000, help="round trips (default 1000)")
    p.add_argument("-s", "--size", type=int, default=64, help="message size in bytes (default 64)")
    p.add_argument("-e", "--events", action="store_true",
                   help="sleep on a completion channel instead of busy polling (like ibv_rc_pingpong -e)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the peer (default 10)")
    p.set_defaults(func=cmd_ping)
    return ap


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ib.VerbsError, TimeoutError, ConnectionError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
