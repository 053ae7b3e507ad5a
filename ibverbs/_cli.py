"""``ibverbs`` / ``python -m ibverbs``: devices, info, gids, ping.

* ``devices``: the RDMA devices and their node GUIDs (like ``ibv_devices``).
* ``gids [-d DEV]``: every valid GID with its index, type and network device
  (like ``show_gids``), read from sysfs.
* ``info [-d DEV] [--json]``: what ``ibv_devinfo -v`` shows: every device
  attribute, and for each port its attributes and valid GIDs, read with
  ``query_device``/``query_port``/``query_gid_table`` (all fields the
  generated struct classes have, through ``_asdict()``).
* ``ping``: RC SEND/RECV ping-pong with latency statistics:

  - ``ping -d DEV [--peer-device DEV2]``: both QPs in this process
    (between two devices, or on one device);
  - ``ping --listen [HOST] [--port P] -d DEV``: a server (on HOST only, when
    given); it answers one client;
  - ``ping HOST [--port P] -d DEV``: the client; both sides exchange their
    ``QPInfo`` (ibverbs.helpers, 28 bytes) over TCP, connect their RC QP
    and the client measures round trips.

  ``-e``/``--events`` sleeps on a completion channel between completions
  instead of busy polling (what ``ibv_rc_pingpong -e`` does): slower round
  trips, no CPU burnt while waiting.

``--json`` (every command) prints exactly one JSON document on every path:
GUIDs are strings in the byte order of ``ibv_devinfo`` and ``rdma -j``
(``"5254:00ff:fe12:3456"``: jq would round a 64-bit integer), enums and
flags are names; a failure is ``{"error": SENTENCE, "status": STATUS}`` (the
sentence also on stderr), except that a listing without devices is the
empty listing.  Ports and GID indexes are checked against the device
(status 2 and a sentence); a network failure names the peer, the port and
the step; Ctrl-C in a ping prints the statistics so far and exits 130.
Exit codes: see EXIT_CODES; the arguments are checked (ibverbs._cli_args)
before any device is looked for.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import struct
import sys
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import ibverbs as ib

from ._cli_args import (DEFAULT_TCP_PORT, EXIT_CODES, EXIT_FAILED, EXIT_INTERRUPTED,  # noqa: F401
                        EXIT_NO_DEVICE, EXIT_NO_LIBRARY, EXIT_OK, EXIT_USAGE, MAX_COUNT, MAX_SIZE,
                        build_parser, json_error, parse_args)
from ._cmevents import _readable
from ._device import guid_text
from ._cli_topo import cmd_topo

_PARAMS = struct.Struct("!II")  # count, size: the client tells the server
SYSFS_INFINIBAND = "/sys/class/infiniband"


class CLIError(Exception):
    """A one-line failure for stderr, with its exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


class NoDevice(CLIError):
    """No RDMA device (at all, or by the name asked for): exit status 4."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_NO_DEVICE)


def _hex(value: int, width: int = 16) -> str:
    return f"0x{value:0{width}x}"


def _guid(value: int) -> str:
    """A GUID (a __be64 read as a host integer, as every GUID the verbs give)
    as rdma -j and ibv_devinfo write it: xxxx:xxxx:xxxx:xxxx."""
    return guid_text(value)


def _no_device_reason() -> str:
    """Why ibv_get_device_list found nothing, in the words an admin acts on."""
    import os

    try:
        in_sysfs = sorted(os.listdir(SYSFS_INFINIBAND))
    except OSError:
        in_sysfs = None
    if in_sysfs is None or not os.path.isdir("/dev/infiniband"):
        return ("no RDMA devices: this kernel has no RDMA support loaded (ENOSYS: no "
                f"{SYSFS_INFINIBAND} or /dev/infiniband; load the driver, e.g. "
                "`modprobe rdma_rxe` and `rdma link add rxe0 type rxe netdev eth0`)")
    if in_sysfs:
        return (f"no RDMA devices usable: the kernel has {', '.join(in_sysfs)} but libibverbs "
                "has no provider (userspace driver) for them; install ibverbs-providers "
                "(rdma-core)")
    return "no RDMA devices: the kernel supports RDMA but no device is present"


def _devices() -> List[ib.Device]:
    import errno

    try:
        devices = ib.get_device_list()
    except ib.VerbsError as exc:
        if exc.errno != errno.ENOSYS:       # no RDMA in the kernel: said below
            raise
        devices = []
    if not devices:
        raise NoDevice(_no_device_reason())
    return devices


def _find_device(name: Optional[str]) -> ib.Device:
    devices = _devices()
    if name is None:
        return devices[0]
    for dev in devices:
        if dev.name == name:
            return dev
    raise NoDevice(f"no RDMA device named {name!r} (have: {', '.join(d.name for d in devices)})")


# --- devices -------------------------------------------------------------------

def cmd_devices(args: argparse.Namespace) -> int:
    devices = _devices()
    if args.json:
        print(json.dumps([{"name": d.name, "guid": _guid(d.guid),
                           "node_type": _enum_name("NodeType", d.node_type),
                           "transport_type": _enum_name("TransportType", d.transport_type)}
                          for d in devices], indent=2))
        return 0
    print(f"    {'device':<16}\t   node GUID")
    print(f"    {'------':<16}\t----------------")
    for dev in devices:
        print(f"    {dev.name:<16}\t{_guid(dev.guid).replace(':', '')}")
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


def _enum_name(enum: str, value: int) -> Any:
    """An enum value by its name (an unknown value stays an int)."""
    try:
        return getattr(ib, enum)(value).name
    except ValueError:
        return int(value)


def _flag_names(enum: str, value: int) -> List[str]:
    """The names of the bits set in a flag word (unknown bits as hex)."""
    cls = getattr(ib, enum)
    names, rest = [], int(value)
    for member in cls:
        bit = int(member)
        if bit and bit & (bit - 1) == 0 and rest & bit:
            names.append(member.name)
            rest &= ~bit
    if rest:
        names.append(_hex(rest, 8))
    return names


def _gids(ctx: Any, port: int, gid_tbl_len: int) -> List[Dict[str, Any]]:
    """The valid GIDs of a port with their type and network device: from
    sysfs (like show_gids), else ibv_query_gid_table, else ibv_query_gid
    of each index (zero GIDs left out, no type)."""
    from ._gid_table import GID_TYPE_NAMES, sysfs_gid_entries, verbs_gid_entries

    ethernet = int(ctx.query_port(port).link_layer) == 2    # IBV_LINK_LAYER_ETHERNET
    entries: Optional[List[Any]] = sysfs_gid_entries(ctx.name, port, ethernet)
    if entries is None:
        try:
            entries = verbs_gid_entries(ctx, port)
        except (AttributeError, RuntimeError, ib.VerbsError):
            entries = None
    if entries is not None:
        return [{"index": index, "gid": str(ib.Gid(raw)), "type": GID_TYPE_NAMES.get(kind, kind),
                 "netdev": netdev, "ipv4": _ipv4(raw)}
                for index, raw, kind, netdev in entries]
    out = []
    for index in range(gid_tbl_len):
        try:
            gid = ctx.query_gid(port, index)
        except ib.VerbsError:
            continue
        if any(bytes(gid)):
            out.append({"index": index, "gid": str(gid), "type": None, "netdev": None,
                        "ipv4": _ipv4(bytes(gid))})
    return out


def _ipv4(raw: bytes) -> Optional[str]:
    """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), else None."""
    if raw[:12] != bytes(10) + b"\xff\xff":
        return None
    return ".".join(str(b) for b in raw[12:])


def _json_fields(fields: Dict[str, Any]) -> Dict[str, Any]:
    """Struct fields for --json: GUIDs as strings, enums and flags as names."""
    out: Dict[str, Any] = {}
    for name, value in fields.items():
        if name.endswith("guid") and isinstance(value, int):
            out[name] = _guid(value)
        elif name in _ENUM_FIELDS and isinstance(value, int):
            out[name] = _enum_name(_ENUM_FIELDS[name], value)
        elif name in _FLAG_FIELDS and isinstance(value, int):
            out[name] = _flag_names(_FLAG_FIELDS[name], value)
        else:
            out[name] = _jsonable(value)
    return out


def device_info(dev: ib.Device, as_json: bool = False) -> Dict[str, Any]:
    """All attributes of a device and its ports: plain values, or with
    ``as_json`` what --json prints (GUIDs as strings, enums as names)."""
    fields = _json_fields if as_json else _jsonable
    with dev.open() as ctx:
        attr = ctx.query_device()
        ports = []
        for port in range(1, attr.phys_port_cnt + 1):
            pattr = ctx.query_port(port)
            ports.append({"port": port, "attr": fields(pattr._asdict()),
                          "gids": _gids(ctx, port, pattr.gid_tbl_len)})
        if as_json:
            return {"name": dev.name, "guid": _guid(dev.guid),
                    "node_type": _enum_name("NodeType", dev.node_type),
                    "transport_type": _enum_name("TransportType", dev.transport_type),
                    "device": fields(attr._asdict()), "ports": ports}
        return {"name": dev.name, "guid": dev.guid, "node_type": dev.node_type,
                "transport_type": dev.transport_type,
                "device": fields(attr._asdict()), "ports": ports}


_ENUM_FIELDS = {"state": "PortState", "max_mtu": "MTU", "active_mtu": "MTU",
                "link_layer": "LinkLayer", "atomic_cap": "AtomicCap"}
_FLAG_FIELDS = {"device_cap_flags": "DeviceCapFlags", "port_cap_flags": "PortCapFlags"}


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
        return _guid(value)
    return str(value)


def cmd_info(args: argparse.Namespace) -> int:
    devices = [_find_device(args.device)] if args.device else _devices()
    infos = [device_info(d, as_json=args.json) for d in devices]
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
                kind = g.get("type") or ""
                print(f"\t\t\tGID[{g['index']:>4}]:\t\t{g['gid']}" + (f", {kind}" if kind else ""))
        print()
    return 0


# --- gids ------------------------------------------------------------------------

def _ports(nports: int) -> str:
    return "port 1" if nports == 1 else f"ports 1..{nports}"


def _ports_text(nports: int) -> str:
    return "it has " + _ports(nports)


def _check_port(ctx: Any, port: int) -> None:
    """A port the device has, else a sentence and exit status 2 (the verbs
    would answer a bare EINVAL, or an empty table)."""
    nports = ctx.query_device().phys_port_cnt
    if not 1 <= port <= nports:
        raise CLIError(f"{ctx.name} has no port {port} ({_ports_text(nports)})", EXIT_USAGE)


def _check_gid_index(ctx: Any, port: int, index: int, option: str) -> None:
    """A GID index with a GID in the port's table, else exit status 2 (the
    verbs would fail later, in the RTR transition, with a bare errno)."""
    try:
        if any(bytes(ctx.query_gid(port, index))):
            return
    except ib.VerbsError:                   # beyond the table; some providers: an empty slot
        pass
    valid = [g["index"] for g in _gids(ctx, port, ctx.query_port(port).gid_tbl_len)]
    if index not in valid:
        raise CLIError(f"{ctx.name} port {port} has no GID at index {index} ({option}; its GID "
                       f"indexes: {', '.join(map(str, valid)) or 'none'})", EXIT_USAGE)


def cmd_gids(args: argparse.Namespace) -> int:
    devices = [_find_device(args.device)] if args.device else _devices()
    rows = []
    lacking = []                    # (device, its ports) of those without -i's port
    for dev in devices:
        with dev.open() as ctx:
            nports = ctx.query_device().phys_port_cnt
            if args.ib_port is not None and args.ib_port > nports:
                lacking.append((dev.name, nports))
                continue
            for port in range(1, nports + 1):
                if args.ib_port is not None and port != args.ib_port:
                    continue
                for g in _gids(ctx, port, ctx.query_port(port).gid_tbl_len):
                    rows.append({"device": dev.name, "port": port, **g})
    if lacking and len(lacking) == len(devices):
        # one device asked for, or none of them has the port: not an empty table
        if len(lacking) == 1:
            name, nports = lacking[0]
            raise CLIError(f"{name} has no port {args.ib_port} ({_ports_text(nports)})", EXIT_USAGE)
        have = "; ".join(f"{name}: {_ports(n)}" for name, n in lacking)
        raise CLIError(f"no device has port {args.ib_port} ({have})", EXIT_USAGE)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    # the columns of show_gids
    print(f"{'DEV':<10}{'PORT':<6}{'INDEX':<7}{'GID':<41}{'IPv4':<17}{'VER':<9}DEV")
    print(f"{'---':<10}{'----':<6}{'-----':<7}{'---':<41}{'----':<17}{'---':<9}---")
    for r in rows:
        print(f"{r['device']:<10}{r['port']:<6}{r['index']:<7}{r['gid']:<41}{r['ipv4'] or '':<17}"
              f"{r['type'] or '':<9}{r['netdev'] or ''}")
    return 0


# --- ping ------------------------------------------------------------------------

def _pick_gid_index(ctx: Any, port: int) -> int:
    """The RoCE v2 IPv4-mapped GID if there is one (what RoCE peers on an
    IPv4 network route with), else index 0 (InfiniBand, link-local)."""
    try:
        return int(ctx.find_gid(port)[0])
    except LookupError:
        return 0


class _Side:
    """One end of the ping-pong: a device, an RC QP, one CQ and a buffer
    (send half, receive half) registered with PD.reg_mr(buffer, access)."""

    def __init__(self, dev: ib.Device, port: int, gid_index: Optional[int], size: int,
                 depth: int = 16, events: bool = False) -> None:
        # Closed children first (ExitStack: reverse order), also when a step
        # here fails: the error is the one the user sees, not "cannot close
        # context with N open child resource(s)".
        self._stack = contextlib.ExitStack()
        try:
            self._open(dev, port, gid_index, size, depth, events)
        except BaseException:
            self._stack.close()
            raise

    def _open(self, dev: ib.Device, port: int, gid_index: Optional[int], size: int,
              depth: int, events: bool) -> None:
        keep = self._stack.enter_context
        self.ctx = keep(dev.open())
        self.port, self.size = port, size
        self.gid_index = _pick_gid_index(self.ctx, port) if gid_index is None else gid_index
        self.pd = keep(self.ctx.alloc_pd())
        # events: sleep on a completion channel instead of busy polling
        self.channel = keep(self.ctx.create_comp_channel()) if events else None
        self.cq = keep(self.ctx.create_cq(2 * depth, channel=self.channel))
        self.qp = keep(self.pd.create_qp(ib.QPInitAttr(self.cq, self.cq, max_send_wr=depth,
                                                       max_recv_wr=depth)))
        self.buf = bytearray(2 * size)
        self.mr = keep(self.pd.reg_mr(self.buf, ib.AccessFlags.LOCAL_WRITE))
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
            elif _readable(channel.fd, left):
                channel.get_cq_event()  # readable: does not block
                self.cq.ack_events(1)
                armed = False
        self.recvs_done -= want_recv
        self.sends_done -= want_send

    def close(self) -> None:
        self._stack.close()


def _stats_dict(rtts_ns: Sequence[int], size: int) -> Dict[str, Any]:
    s = sorted(rtts_ns)
    n = len(s)

    def pct(p: float) -> float:
        return s[min(n - 1, int(p / 100 * n))] / 1000

    return {"round_trips": n, "size": size, "min_us": s[0] / 1000, "avg_us": sum(s) / n / 1000,
            "median_us": pct(50), "p99_us": pct(99), "max_us": s[-1] / 1000}


def _stats(rtts_ns: Sequence[int], size: int) -> str:
    d = _stats_dict(rtts_ns, size)
    return (f"{d['round_trips']} round trips of {size} bytes: min {d['min_us']:.1f} us, "
            f"avg {d['avg_us']:.1f} us, median {d['median_us']:.1f} us, "
            f"p99 {d['p99_us']:.1f} us, max {d['max_us']:.1f} us")


def _print_result(args: argparse.Namespace, text: str, result: Dict[str, Any]) -> None:
    print(json.dumps(result, indent=2) if args.json else text, flush=True)


class Interrupted(CLIError):
    """Ctrl-C during a ping: what was measured so far is still the result
    (printed as a finished ping prints it), and the status is 130."""

    def __init__(self, text: str, result: Dict[str, Any]) -> None:
        super().__init__("interrupted", EXIT_INTERRUPTED)
        self.text, self.result = text, {**result, "interrupted": True}


def _ping_result(rtts: Sequence[int], size: int, head: str,
                 fields: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    """(text, JSON document) of the round trips measured, none included."""
    if rtts:
        return head + _stats(rtts, size), {**fields, **_stats_dict(rtts, size)}
    return head + f"0 round trips of {size} bytes", {**fields, "round_trips": 0, "size": size}


def _echo(side: _Side, timeout: float) -> None:
    """The server's half of one round trip: receive, re-arm, send it back."""
    side.wait(want_recv=True, want_send=False, timeout=timeout)
    side.post_recv()
    side.send(side.received_seq() or 0)
    side.wait(want_recv=False, want_send=True, timeout=timeout)


def _ping_loop(a: _Side, count: int, timeout: float, rtts: List[int],
               peer: Optional[_Side] = None) -> None:
    """a pings, the peer echoes: ``peer`` in this process, else over the wire.
    Each round trip's time goes into ``rtts`` as it completes (Ctrl-C
    leaves what was measured).  Each echo must carry the sequence number
    sent (when size >= 8)."""
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


def _recv_exact(sock: socket.socket, n: int, what: str) -> bytes:
    """n bytes from the peer (the socket has the --timeout)."""
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except socket.timeout:
            raise TimeoutError(f"the peer sent no {what} within {sock.gettimeout():g} s") from None
        if not chunk:
            raise ConnectionError(f"the peer closed the connection before sending {what}")
        data += chunk
    return data


def _remote_info(sock: socket.socket) -> ib.QPInfo:
    raw = _recv_exact(sock, 28, "QPInfo")
    try:
        return ib.QPInfo.from_bytes(raw)
    except ValueError as exc:
        raise CLIError(f"the peer sent an invalid QPInfo ({exc})") from None


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@contextlib.contextmanager
def _step(where: str, step: str, timeout: float) -> Iterator[None]:
    """A network failure (or a completion that never came) as one sentence
    naming the peer and the step: "connecting to 10.0.0.2:18515 (exchanging
    QP info): Connection refused".  A verb's own error passes unchanged."""
    try:
        yield
    except (CLIError, ib.VerbsError):
        raise
    except OSError as exc:                  # TimeoutError, ConnectionError, gaierror
        reason = exc.strerror or str(exc)
        if isinstance(exc, socket.timeout) and reason == "timed out":     # connect()'s words
            reason = f"no answer within {timeout:g} s"
        raise CLIError(f"{where} ({step}): {reason}") from None


def _serve(args: argparse.Namespace, dev: ib.Device) -> int:
    try:
        family = socket.AF_INET6 if ":" in args.bind else socket.AF_INET
        srv = socket.create_server((args.bind, args.port), family=family, reuse_port=False)
    except OSError as exc:
        raise CLIError(f"cannot listen on {args.bind or '*'}:{args.port}: {exc.strerror or exc}") \
            from None
    with srv:
        port = srv.getsockname()[1]
        # --json: stdout is the one document at the end; the notice a
        # script waits for (the port, with -p 0) goes to stderr
        print(f"listening on {args.bind or '*'}:{port} ({dev.name})", flush=True,
              file=sys.stderr if args.json else sys.stdout)
        conn, peer = srv.accept()               # a server waits for its client
    served, size = 0, 0
    where = f"serving {_address(peer[0], peer[1])} on port {port}"
    try:
        with conn:
            conn.settimeout(args.timeout)           # every step after it: --timeout
            with _step(where, "receiving the parameters", args.timeout):
                count, size = _PARAMS.unpack(_recv_exact(conn, _PARAMS.size, "parameters"))
            if not (1 <= size <= MAX_SIZE and 1 <= count <= MAX_COUNT):
                raise CLIError(f"the client at {peer[0]} asked for {count} round trips of {size} "
                               f"bytes; this server serves 1..{MAX_COUNT} of 1..{MAX_SIZE} bytes")
            with _step(where, "exchanging QP info", args.timeout):
                remote = _remote_info(conn)
            side = _Side(dev, args.ib_port, args.gid_index, size, events=args.events)
            try:
                with _step(where, "exchanging QP info", args.timeout):
                    conn.sendall(side.info().to_bytes())
                side.connect(remote)
                side.post_recv()
                with _step(where, "sending the ready mark", args.timeout):
                    conn.sendall(b"R")                  # ready: the first receive is posted
                with _step(where, "round trips", args.timeout):
                    for _ in range(count):
                        _echo(side, args.timeout)
                        served += 1
                with _step(where, "waiting for the done mark", args.timeout):
                    _recv_exact(conn, 1, "its done mark")   # the client is done
            finally:
                side.close()
    except KeyboardInterrupt:
        raise Interrupted(f"served {served} round trips of {size} bytes to {peer[0]} (interrupted)",
                          {"served": served, "size": size, "peer": peer[0], "device": dev.name,
                           "listening": port}) from None
    _print_result(args, f"served {count} round trips of {size} bytes to {peer[0]}",
                  {"served": count, "size": size, "peer": peer[0], "device": dev.name,
                   "listening": port})
    return 0


def _client(args: argparse.Namespace, dev: ib.Device) -> int:
    side = _Side(dev, args.ib_port, args.gid_index, args.size, events=args.events)
    rtts: List[int] = []
    peer = _address(args.host, args.port)
    fields = {"device": dev.name, "peer": args.host}
    try:
        with _step(f"connecting to {peer}", "exchanging QP info", args.timeout):
            conn = socket.create_connection((args.host, args.port), timeout=args.timeout)
        with conn:
            with _step(f"connecting to {peer}", "exchanging QP info", args.timeout):
                conn.sendall(_PARAMS.pack(args.count, args.size) + side.info().to_bytes())
                remote = _remote_info(conn)
            side.connect(remote)
            with _step(f"pinging {peer}", "waiting for the ready mark", args.timeout):
                _recv_exact(conn, 1, "its ready mark")   # the server's receive is posted
            with _step(f"pinging {peer}", "round trips", args.timeout):
                _ping_loop(side, args.count, args.timeout, rtts)
            with _step(f"pinging {peer}", "sending the done mark", args.timeout):
                conn.sendall(b"D")
    except KeyboardInterrupt:
        raise Interrupted(*_ping_result(rtts, args.size, "interrupted: ", fields)) from None
    finally:
        side.close()
    _print_result(args, *_ping_result(rtts, args.size, "", fields))
    return 0


def _local(args: argparse.Namespace, dev: ib.Device) -> int:
    peer_dev = _find_device(args.peer_device) if args.peer_device else dev
    if peer_dev is not dev:
        with peer_dev.open() as ctx:
            _check_port(ctx, args.ib_port)
            if args.peer_gid_index is not None:
                _check_gid_index(ctx, args.ib_port, args.peer_gid_index, "--peer-gid-index")
    elif args.peer_gid_index is not None:
        with dev.open() as ctx:
            _check_gid_index(ctx, args.ib_port, args.peer_gid_index, "--peer-gid-index")
    rtts: List[int] = []
    fields = {"device": dev.name, "peer_device": peer_dev.name}
    head = f"{dev.name} <-> {peer_dev.name}: "
    try:
        a = _Side(dev, args.ib_port, args.gid_index, args.size, events=args.events)
        try:
            b = _Side(peer_dev, args.ib_port, args.peer_gid_index, args.size, events=args.events)
            try:
                a.connect(b.info())
                b.connect(a.info())
                b.post_recv()
                _ping_loop(a, args.count, args.timeout, rtts, peer=b)
            finally:
                b.close()
        finally:
            a.close()
    except KeyboardInterrupt:
        raise Interrupted(*_ping_result(rtts, args.size, "interrupted: " + head, fields)) from None
    _print_result(args, *_ping_result(rtts, args.size, head, fields))
    return 0


def cmd_ping(args: argparse.Namespace) -> int:
    dev = _find_device(args.device)
    # The port and GID index before anything else, the server's too (its
    # QP is made once a client has come)
    with dev.open() as ctx:
        _check_port(ctx, args.ib_port)
        if args.gid_index is not None:
            _check_gid_index(ctx, args.ib_port, args.gid_index, "-g/--gid-index")
    if args.listen:
        return _serve(args, dev)
    if args.host:
        return _client(args, dev)
    return _local(args, dev)


# --- main ------------------------------------------------------------------------

COMMANDS = {"devices": cmd_devices, "info": cmd_info, "gids": cmd_gids, "ping": cmd_ping,
            "topo": cmd_topo}
# What --json prints when there is no device: an empty listing, valid JSON.
_EMPTY_JSON: Dict[str, Any] = {"devices": [], "info": {"devices": []}, "gids": []}


def _fail(args: argparse.Namespace, message: str, status: int) -> int:
    """A failure: one line on stderr; with --json also the one document on
    stdout, {"error": the same sentence, "status": the exit status}."""
    if getattr(args, "json", False):
        print(json_error(message, status), flush=True)
    print(f"ibverbs: {message}", file=sys.stderr)
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The ``ibverbs`` console script; returns the exit status.  A failure is
    one line on stderr (``ibverbs: ...``), never a traceback; with --json,
    stdout has exactly one JSON document on every path (see _fail)."""
    args = parse_args(argv)                 # exit status 2 (or 0: --help) before any verb
    try:
        return int(COMMANDS[args.func](args))
    except NoDevice as exc:
        if args.json and args.func in _EMPTY_JSON and not getattr(args, "device", None):
            # a listing of no devices: still the listing (documented), empty
            print(json.dumps(_EMPTY_JSON[args.func]))
            print(f"ibverbs: {exc}", file=sys.stderr)
            return exc.status
        return _fail(args, str(exc), exc.status)
    except Interrupted as exc:              # Ctrl-C in a ping: the statistics so far
        _print_result(args, exc.text, exc.result)
        return exc.status
    except CLIError as exc:
        return _fail(args, str(exc), exc.status)
    except (ib.VerbsError, TimeoutError, ConnectionError, OSError, RuntimeError,
            LookupError) as exc:
        return _fail(args, str(exc), EXIT_FAILED)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", EXIT_INTERRUPTED)
    except Exception as exc:                # still one line: what failed, and where to report it
        return _fail(args, f"{type(exc).__name__}: {exc} (an unexpected error: please report it)",
                     EXIT_FAILED)
