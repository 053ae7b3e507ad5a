"""The node side of the cross-node tests: one program, a role per test.

    python tests/cluster/peer.py ROLE [--host H] [--port P] [options]

Each role runs on one node (rxe0, its RoCE v2 IPv4 GID from find_gid),
exchanges what the verbs need with its peer over TCP (QPInfo.to_bytes(), a
JSON line per message), checks what it can on its side, and prints its
result as the last line of stdout: a JSON object that the host test
asserts on (bytes landed, completions arrived, their statuses and times).
A server role prints {"listening": PORT} first.
"""
from __future__ import annotations

import argparse
import errno
import hashlib
import json
import os
import select
import socket
import sys
import time

import numpy as np

import ibverbs as ib

PORT = 1
A = ib.AccessFlags
ALL_ACCESS = A.LOCAL_WRITE | A.REMOTE_WRITE | A.REMOTE_READ | A.REMOTE_ATOMIC
GRH = 40
QKEY = 0x11111111


def say(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def pattern(seed: int, size: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)


def digest(arr: np.ndarray) -> str:
    return hashlib.sha256(memoryview(np.ascontiguousarray(arr))).hexdigest()


class Link:
    """The TCP side channel: one JSON object a line."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.f = sock.makefile("rwb")

    @classmethod
    def serve(cls, port: int, timeout: float = 120) -> "Link":
        srv = socket.create_server(("", port))
        srv.settimeout(timeout)
        say({"listening": port})
        conn, _ = srv.accept()
        srv.close()
        conn.settimeout(None)
        return cls(conn)

    @classmethod
    def dial(cls, host: str, port: int, timeout: float = 120) -> "Link":
        """Connect, retrying while the server is not up yet."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return cls(socket.create_connection((host, port), timeout=5))
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def send(self, **obj: object) -> None:
        self.f.write((json.dumps(obj) + "\n").encode())
        self.f.flush()

    def recv(self) -> dict:
        line = self.f.readline()
        if not line:
            raise ConnectionError("the peer closed the side channel")
        return json.loads(line)


class Node:
    """This node's rxe0: context, GID, PD, one CQ."""

    def __init__(self, cqe: int = 512, channel: bool = False) -> None:
        dev = next(d for d in ib.get_device_list() if d.name == "rxe0")
        self.ctx = dev.open()
        self.gid_index, self.gid = self.ctx.find_gid(PORT)
        self.pd = self.ctx.alloc_pd()
        self.channel = self.ctx.create_comp_channel() if channel else None
        self.cq = self.ctx.create_cq(cqe, channel=self.channel)
        self.mrs: list = []

    def buffer(self, size: int, fill: "np.ndarray | int" = 0) -> "tuple[np.ndarray, ib.MR]":
        arr = np.zeros(size, dtype=np.uint8)
        arr[:] = fill
        mr = ib.reg_tensor(self.pd, arr, ALL_ACCESS)
        self.mrs.append(mr)
        return arr, mr

    def rc_qp(self, depth: int = 128) -> "ib.QP":
        return self.pd.create_qp(ib.QPInitAttr(self.cq, self.cq, max_send_wr=depth,
                                               max_recv_wr=depth))

    def info(self, qp: "ib.QP") -> "ib.QPInfo":
        return ib.local_qp_info(qp, self.ctx.query_port(PORT), self.gid, port=PORT)

    def connect(self, qp: "ib.QP", remote_hex: str, **kw: object) -> None:
        ib.connect_rc(qp, ib.QPInfo.from_bytes(bytes.fromhex(remote_hex)), port=PORT,
                      sgid_index=self.gid_index, access=ALL_ACCESS, **kw)

    def poll(self, n: int, timeout: float = 60) -> "list[ib.WC]":
        got: list = []
        deadline = time.monotonic() + timeout
        while len(got) < n:
            got += self.cq.poll(min(64, n - len(got)))
            if len(got) < n and time.monotonic() > deadline:
                raise TimeoutError("%d of %d completions in %ss" % (len(got), n, timeout))
        return got

    def close(self, *objs: object) -> None:
        for obj in list(objs) + self.mrs[::-1] + [self.cq, self.channel, self.pd, self.ctx]:
            if obj is not None:
                obj.close()  # type: ignore[attr-defined]


def wc_summary(wcs: "list[ib.WC]") -> list:
    return [{"wr_id": w.wr_id, "status": int(w.status), "opcode": int(w.opcode),
             "byte_len": w.byte_len, "imm": w.imm_data,
             "with_imm": bool(w.wc_flags & ib.WCFlags.WITH_IMM)} for w in wcs]


# --- RC: every operation, QPInfo over TCP -----------------------------------

def rc_server(args: argparse.Namespace) -> dict:
    size = args.size
    node = Node()
    qp = node.rc_qp()
    target, target_mr = node.buffer(size)                     # RDMA WRITE lands here
    source, source_mr = node.buffer(size, pattern(2, size))   # RDMA READ reads this
    word = np.zeros(1, dtype=np.uint64)
    word[0] = 100
    word_mr = ib.reg_tensor(node.pd, word, ALL_ACCESS)
    recv, recv_mr = node.buffer(2 * size)
    link = Link.serve(args.port)
    link.send(qp=node.info(qp).to_bytes().hex(), target=[target_mr.addr, target_mr.rkey],
              source=[source_mr.addr, source_mr.rkey], word=[word_mr.addr, word_mr.rkey],
              mtu=int(node.ctx.query_port(PORT).active_mtu))
    peer = link.recv()
    node.connect(qp, peer["qp"])
    qp.post_recv([ib.RecvWR(wr_id=10, sg_list=[recv_mr.sge(size, 0)]),
                  ib.RecvWR(wr_id=11, sg_list=[recv_mr.sge(size, size)])])
    link.send(ready=True)
    done = link.recv()
    wcs = node.poll(2)
    attr, _ = qp.query()
    result = {"recv_wcs": wc_summary(wcs), "write_sha": digest(target),
              "send_sha": digest(recv[:size]), "imm_send_sha": digest(recv[size:]),
              "word": int(word[0]), "path_mtu": int(attr["path_mtu"]),
              "active_mtu": int(node.ctx.query_port(PORT).active_mtu), "client": done}
    link.send(bye=True)
    node.close(qp, word_mr)
    return result


def rc_client(args: argparse.Namespace) -> dict:
    size = args.size
    node = Node()
    qp = node.rc_qp()
    link = Link.dial(args.host, args.port)
    srv = link.recv()
    link.send(qp=node.info(qp).to_bytes().hex())
    node.connect(qp, srv["qp"])
    assert link.recv() == {"ready": True}
    out, out_mr = node.buffer(size, pattern(1, size))
    back, back_mr = node.buffer(size)
    msg, msg_mr = node.buffer(2 * size)
    msg[:size] = pattern(3, size)
    msg[size:] = pattern(4, size)
    olds = np.zeros(2, dtype=np.uint64)
    olds_mr = ib.reg_tensor(node.pd, olds, ALL_ACCESS)
    O, S = ib.WROpcode, ib.SendFlags.SIGNALED
    t0 = time.monotonic()
    qp.post_send([
        ib.SendWR(wr_id=1, sg_list=[out_mr.sge()], opcode=O.RDMA_WRITE, send_flags=S,
                  remote_addr=srv["target"][0], rkey=srv["target"][1]),
        ib.SendWR(wr_id=2, sg_list=[back_mr.sge()], opcode=O.RDMA_READ, send_flags=S,
                  remote_addr=srv["source"][0], rkey=srv["source"][1]),
        ib.SendWR(wr_id=3, sg_list=[msg_mr.sge(size, 0)], opcode=O.SEND, send_flags=S),
        ib.SendWR(wr_id=4, sg_list=[msg_mr.sge(size, size)], opcode=O.SEND_WITH_IMM,
                  send_flags=S, imm_data=0x12345678),
        ib.SendWR(wr_id=5, sg_list=[olds_mr.sge(8, 0)], opcode=O.ATOMIC_FETCH_AND_ADD,
                  send_flags=S, remote_addr=srv["word"][0], rkey=srv["word"][1],
                  compare_add=5),
        ib.SendWR(wr_id=6, sg_list=[olds_mr.sge(8, 8)], opcode=O.ATOMIC_CMP_AND_SWP,
                  send_flags=S, remote_addr=srv["word"][0], rkey=srv["word"][1],
                  compare_add=105, swap=7),
    ])
    wcs = node.poll(6)
    secs = time.monotonic() - t0
    attr, _ = qp.query()
    result = {"send_wcs": wc_summary(wcs), "read_sha": digest(back),
              "expect": {"write": digest(out), "read": digest(pattern(2, size)),
                         "send": digest(msg[:size]), "imm_send": digest(msg[size:])},
              "olds": [int(x) for x in olds], "secs": secs, "path_mtu": int(attr["path_mtu"]),
              "active_mtu": int(node.ctx.query_port(PORT).active_mtu),
              "server_mtu": srv["mtu"]}
    link.send(**result)
    link.recv()                                   # the server has checked
    node.close(qp, olds_mr)
    return result


# --- UD: an address handle from the peer's GID ------------------------------

def ud_qp(node: Node) -> "ib.QP":
    qp = node.pd.create_qp(ib.QPInitAttr(node.cq, node.cq, qp_type=ib.QPType.UD))
    qp.to_init(PORT, qkey=QKEY)
    qp.to_rtr(None, 0)
    qp.to_rts(0)
    return qp


def ud_server(args: argparse.Namespace) -> dict:
    node = Node()
    qp = ud_qp(node)
    buf, mr = node.buffer(GRH + args.size)
    qp.post_recv(ib.RecvWR(wr_id=1, sg_list=[mr.sge()]))
    link = Link.serve(args.port)
    link.send(qpn=qp.qp_num, gid=bytes(node.gid).hex(), gid_index=node.gid_index)
    peer = link.recv()
    (wc,) = node.poll(1)
    grh = bytes(buf[:GRH])
    # RoCE v2 over IPv4: the GRH's last 20 bytes hold the IPv4 header.
    src_ip = socket.inet_ntoa(grh[32:36])
    dst_ip = socket.inet_ntoa(grh[36:40])
    ah_back = node.ctx.init_ah_from_wc(PORT, wc, grh)
    result = {"wc": wc_summary([wc])[0], "src_qp": wc.src_qp, "client_qpn": peer["qpn"],
              "grh_flag": bool(wc.wc_flags & ib.WCFlags.GRH), "src_ip": src_ip,
              "dst_ip": dst_ip, "payload_sha": digest(buf[GRH:]),
              "reply_dgid": bytes(ah_back.dgid).hex(), "client_gid": peer["gid"]}
    link.send(done=True)
    node.close(qp)
    return result


def ud_client(args: argparse.Namespace) -> dict:
    node = Node()
    qp = ud_qp(node)
    link = Link.dial(args.host, args.port)
    srv = link.recv()
    payload, mr = node.buffer(args.size, pattern(5, args.size))
    ah = node.pd.create_ah(ib.AHAttr(dgid=ib.Gid(bytes.fromhex(srv["gid"])),
                                     sgid_index=node.gid_index, port_num=PORT, is_global=1,
                                     hop_limit=64))
    link.send(qpn=qp.qp_num, gid=bytes(node.gid).hex())
    qp.post_send(ib.SendWR(wr_id=2, sg_list=[mr.sge()], opcode=ib.WROpcode.SEND,
                           send_flags=ib.SendFlags.SIGNALED, ah=ah, remote_qpn=srv["qpn"],
                           remote_qkey=QKEY))
    (wc,) = node.poll(1)
    link.recv()
    result = {"wc": wc_summary([wc])[0], "payload_sha": digest(payload)}
    ah.close()
    node.close(qp)
    return result


# --- rdma_cm ----------------------------------------------------------------

def cm_server(args: argparse.Namespace) -> dict:
    """Blocking API: listen_on / get_request / accept, one SEND received,
    for each of --count connections."""
    got = []
    with ib.CMID.listen_on(args.bind, args.port, timeout=120) as listener:
        say({"listening": args.port})
        for _ in range(args.count):
            conn = listener.get_request(timeout=120)
            pd = conn.context.alloc_pd()
            cq = conn.context.create_cq(8)
            qp = conn.create_qp(pd, ib.QPInitAttr(cq, cq))
            buf = np.zeros(64, dtype=np.uint8)
            mr = ib.reg_tensor(pd, buf, A.LOCAL_WRITE)
            qp.post_recv(ib.RecvWR(wr_id=5, sg_list=[mr.sge()]))
            hello = conn.accept(b"world", initiator_depth=1, rnr_retry_count=7)
            deadline = time.monotonic() + 60
            while not (wcs := cq.poll(1)):
                if time.monotonic() > deadline:
                    raise TimeoutError("no SEND from the client")
            got.append({"hello": bytes(hello[:5]).decode(), "device": conn.context.name,
                        "peer": conn.peer_addr[0], "status": int(wcs[0].status),
                        "data": bytes(buf[:wcs[0].byte_len]).hex()})
            # The client disconnects once its SEND completed (ACKed); the
            # blocking API has no call for that event, so wait on the
            # connection's own channel.
            from ibverbs import cm
            cm.wait_event(conn._channel, cm.CMEventType.DISCONNECTED, 60)
            conn.disconnect()
            for obj in (qp, mr, cq, pd, conn):
                obj.close()
    return {"connections": got, "open_ids": ib.CMID._open_count()}


def retrying(attempt, timeout: float = 120):
    """attempt() until it stops raising ECONNREFUSED (the server, started
    at the same moment on the other node, is not listening yet)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return attempt()
        except ib.VerbsError as e:
            if e.errno != errno.ECONNREFUSED or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def cm_client(args: argparse.Namespace) -> dict:
    """Blocking API: CMID.resolve by name or address, connect, one SEND."""
    t0 = time.monotonic()

    def attempt():
        cm_id = ib.CMID.resolve(args.host, args.port, timeout=60)
        pd = cm_id.context.alloc_pd()
        cq = cm_id.context.create_cq(8)
        qp = cm_id.create_qp(pd, ib.QPInitAttr(cq, cq))
        try:
            return cm_id, pd, cq, qp, cm_id.connect(b"hello", 1, 1, 1, 6, 7)
        except BaseException:
            for obj in (qp, cq, pd, cm_id):
                obj.close()
            raise

    cm_id, pd, cq, qp, reply = retrying(attempt)
    payload = pattern(6, 32)
    mr = ib.reg_tensor(pd, payload, A.LOCAL_WRITE)
    qp.post_send(ib.SendWR(wr_id=9, sg_list=[mr.sge()], opcode=ib.WROpcode.SEND,
                           send_flags=ib.SendFlags.SIGNALED))
    (wc,) = poll_cq(cq)
    result = {"reply": bytes(reply[:5]).decode(), "device": cm_id.context.name,
              "host": cm_id.host, "local": cm_id.local_addr[0], "peer": list(cm_id.peer_addr),
              "status": int(wc.status), "data": bytes(payload).hex(),
              "secs": time.monotonic() - t0}
    cm_id.disconnect()
    for obj in (qp, mr, cq, pd):
        obj.close()
    cm_id.close()
    return result


def poll_cq(cq: "ib.CQ", n: int = 1, timeout: float = 60) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n:
        got += cq.poll(n - len(got))
        if time.monotonic() > deadline:
            raise TimeoutError("no completion")
    return got


def cm_events_server(args: argparse.Namespace) -> dict:
    """Event API: bind_addr/listen, CONNECT_REQUEST, accept, ESTABLISHED,
    a SEND, DISCONNECTED."""
    from ibverbs import cm
    E = cm.CMEventType
    with cm.create_event_channel() as ch:
        listener = ch.create_id()
        listener.bind_addr((args.bind, args.port))
        listener.listen()
        say({"listening": args.port})
        req = cm.wait_event(ch, E.CONNECT_REQUEST, 120)
        conn = req.id
        pd = conn.context.alloc_pd()
        cq = conn.context.create_cq(8)
        qp = conn.create_qp(pd, ib.QPInitAttr(cq, cq))
        buf = np.zeros(64, dtype=np.uint8)
        mr = ib.reg_tensor(pd, buf, A.LOCAL_WRITE)
        qp.post_recv(ib.RecvWR(wr_id=5, sg_list=[mr.sge()]))
        conn.accept(private_data=b"events")
        est = cm.wait_event(ch, E.ESTABLISHED, 60)
        (wc,) = poll_cq(cq)
        disc = cm.wait_event(ch, E.DISCONNECTED, 60)
        result = {"request_listen_id_ok": req.listen_id is listener,
                  "private": bytes(req.private_data[:5]).decode(),
                  "established_id_ok": est.id is conn, "disconnected_id_ok": disc.id is conn,
                  "device": conn.context.name, "peer": conn.peer_addr[0],
                  "status": int(wc.status), "data": bytes(buf[:wc.byte_len]).hex()}
        conn.disconnect()
        conn.destroy_qp()
        for obj in (mr, cq, pd, conn, listener):
            obj.close()
    return result


def cm_events_client(args: argparse.Namespace) -> dict:
    from ibverbs import cm
    E = cm.CMEventType
    with cm.create_event_channel() as ch:
        deadline = time.monotonic() + 120
        # The event API takes numeric addresses (CMID.resolve looks names up).
        host = socket.gethostbyname(args.host)
        while True:
            cm_id = ch.create_id()
            cm_id.resolve_addr((host, args.port))
            cm.wait_event(ch, E.ADDR_RESOLVED, 60)
            cm_id.resolve_route(2000)
            cm.wait_event(ch, E.ROUTE_RESOLVED, 60)
            pd = cm_id.context.alloc_pd()
            cq = cm_id.context.create_cq(8)
            qp = cm_id.create_qp(pd, ib.QPInitAttr(cq, cq))
            cm_id.connect(private_data=b"hello", retry_count=5, rnr_retry_count=6)
            ev = cm.wait_event(ch, None, 60)
            if ev.event == E.ESTABLISHED:
                break
            # REJECTED: nobody listens yet
            cm_id.destroy_qp()
            for obj in (cq, pd, cm_id):
                obj.close()
            if time.monotonic() > deadline:
                raise TimeoutError("never established: %s" % ev.event)
            time.sleep(0.5)
        payload = pattern(7, 48)
        mr = ib.reg_tensor(pd, payload, A.LOCAL_WRITE)
        qp.post_send(ib.SendWR(wr_id=9, sg_list=[mr.sge()], opcode=ib.WROpcode.SEND,
                               send_flags=ib.SendFlags.SIGNALED))
        (wc,) = poll_cq(cq)
        result = {"established_id_ok": ev.id is cm_id,
                  "reply": bytes(ev.private_data[:6]).decode(),
                  "status": int(wc.status), "data": bytes(payload).hex(),
                  "device": cm_id.context.name}
        cm_id.disconnect()
        cm.wait_event(ch, E.DISCONNECTED, 60)
        cm_id.destroy_qp()
        for obj in (mr, cq, pd, cm_id):
            obj.close()
    return result


def cm_fail(args: argparse.Namespace) -> dict:
    """What a failing resolve or connect raises, and how fast."""
    t0 = time.monotonic()
    out = {}
    try:
        with ib.CMID.resolve(args.host, args.port, timeout=args.timeout) as cm_id:
            out["resolved"] = True
            pd = cm_id.context.alloc_pd()
            cq = cm_id.context.create_cq(8)
            qp = cm_id.create_qp(pd, ib.QPInitAttr(cq, cq))
            try:
                cm_id.connect(b"anyone?")
                out["connected"] = True
            except ib.VerbsError as e:
                out.update(operation=e.operation, errno=e.errno, error=str(e))
            for obj in (qp, cq, pd):
                obj.close()
    except ib.VerbsError as e:
        out.update(operation=e.operation, errno=e.errno, error=str(e))
    out["secs"] = time.monotonic() - t0
    out["open_ids"] = ib.CMID._open_count()
    out["open_channels"] = ib.EventChannel._open_count()
    return out


# --- faults: a peer that dies, a wire that is cut, a lossy link ------------

LINK_GRACE_S = 30.0


def async_events(ctx: "ib.Context", seconds: float, until=None, link=None) -> list:
    """[(event name, monotonic time)] from ctx's async fd for up to
    seconds, or until until(events) is true, or until the peer closes the
    side channel link.  A close does not end the wait for until(): after
    a cut wire heals, the peer's FIN and the port's PORT_ACTIVE arrive
    together, in either order, so the events get LINK_GRACE_S more."""
    os.set_blocking(ctx.async_fd, False)
    events: list = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (until and until(events)):
        fds = [ctx.async_fd] + ([link.sock] if link is not None else [])
        ready = select.select(fds, [], [], 0.2)[0]
        if link is not None and link.sock in ready and not link.sock.recv(1):
            if until is None:
                break
            link = None
            deadline = min(deadline, time.monotonic() + LINK_GRACE_S)
            continue
        if ctx.async_fd in ready:
            try:
                ev = ctx.get_async_event()
            except ib.VerbsError:
                continue
            events.append((ev.event_type_str, time.monotonic()))
            ctx.ack_async_event(ev)
    return events


def sink_server(args: argparse.Namespace) -> dict:
    """The passive side of a flood: a connected QP and a large MR for the
    client's RDMA WRITEs.  Then it watches its async events for --timeout
    seconds: a cut wire shows here as PORT_ERR, the heal as PORT_ACTIVE."""
    node = Node()
    qp = node.rc_qp()
    buf, mr = node.buffer(args.size)
    link = Link.serve(args.port)
    link.send(qp=node.info(qp).to_bytes().hex(), target=[mr.addr, mr.rkey])
    node.connect(qp, link.recv()["qp"], timeout=args.qp_timeout, retry_cnt=args.retry_cnt)
    link.send(ready=True)
    t0 = time.monotonic()
    events = async_events(node.ctx, args.timeout, link=link,
                          until=lambda evs: any(e == "port active" for e, _ in evs))
    state = node.ctx.query_port(PORT).state
    node.close(qp)
    return {"events": [[e, t - t0] for e, t in events], "port_state": int(state),
            "released": True}


def flood_client(args: argparse.Namespace) -> dict:
    """RDMA WRITEs with at least --wrs in flight until one fails; then every
    posted WR must complete (the rest flushed in error).  Writes the file
    /tmp/flooding once --wrs are in flight, for the host to strike."""
    node = Node(cqe=1024)
    depth = max(2 * args.wrs, 128)
    qp = node.rc_qp(depth)
    link = Link.dial(args.host, args.port)
    srv = link.recv()
    link.send(qp=node.info(qp).to_bytes().hex())
    node.connect(qp, srv["qp"], timeout=args.qp_timeout, retry_cnt=args.retry_cnt)
    assert link.recv() == {"ready": True}
    chunk = 4096
    src, src_mr = node.buffer(chunk, pattern(8, chunk))
    slots = max(1, args.size // chunk)
    O, S = ib.WROpcode, ib.SendFlags.SIGNALED
    posted, done, statuses = 0, {}, {}
    inflight = 0
    first_error = last_success = marker_t = None
    success_after_error = False
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if first_error is None and inflight < depth:
            n = min(depth - inflight, 32)
            qp.post_send([ib.SendWR(wr_id=posted + i, sg_list=[src_mr.sge()],
                                    opcode=O.RDMA_WRITE, send_flags=S,
                                    remote_addr=srv["target"][0] + ((posted + i) % slots) * chunk,
                                    rkey=srv["target"][1]) for i in range(n)])
            posted += n
            inflight += n
            if marker_t is None and inflight >= args.wrs:
                marker_t = time.monotonic()
                open("/tmp/flooding", "w").close()
        for wc in node.cq.poll(64):
            inflight -= 1
            assert wc.wr_id not in done, "wr_id %d completed twice" % wc.wr_id
            done[wc.wr_id] = int(wc.status)
            statuses[wc.status_str] = statuses.get(wc.status_str, 0) + 1
            now = time.monotonic()
            if wc.status == ib.WCStatus.SUCCESS:
                last_success = now
                success_after_error |= first_error is not None
            elif first_error is None:
                first_error = now
                first_status = int(wc.status)
                inflight_at_error = inflight + 1
        if first_error is not None and inflight == 0:
            break
    state, _ = qp.query()
    result = {"posted": posted, "completed": len(done),
              "all_completed": sorted(done) == list(range(posted)),
              "statuses": statuses, "first_error_status": first_status if first_error else None,
              "inflight_at_error": inflight_at_error if first_error else None,
              "detect_s": (first_error - last_success) if first_error and last_success else None,
              "flood_s": (first_error or time.monotonic()) - (marker_t or 0),
              "qp_state": int(state["qp_state"]),
              "success_after_error": success_after_error}
    node.close(qp)             # every resource can still be released
    result["released"] = True
    return result


def write_bw_client(args: argparse.Namespace) -> dict:
    """--count RDMA WRITEs of --size bytes into a sink-server, --wrs in
    flight: MB/s (the bench's cross-node WRITE bandwidth)."""
    node = Node(cqe=1024)
    qp = node.rc_qp(256)
    link = Link.dial(args.host, args.port)
    srv = link.recv()
    link.send(qp=node.info(qp).to_bytes().hex())
    node.connect(qp, srv["qp"])
    assert link.recv() == {"ready": True}
    src, mr = node.buffer(args.size, pattern(9, args.size))
    sge = mr.sge()
    O, S = ib.WROpcode, ib.SendFlags.SIGNALED
    wr = ib.SendWR(wr_id=0, sg_list=[sge], opcode=O.RDMA_WRITE, send_flags=S,
                   remote_addr=srv["target"][0], rkey=srv["target"][1])
    posted = done = 0
    t0 = time.perf_counter()
    while done < args.count:
        while posted < args.count and posted - done < args.wrs:
            qp.post_send(wr)
            posted += 1
        for wc in node.cq.poll(16):
            wc.raise_for_status()
            done += 1
    secs = time.perf_counter() - t0
    link.sock.close()
    node.close(qp)
    return {"MBps": args.count * args.size / secs / 1e6, "secs": secs}


def bulk_server(args: argparse.Namespace) -> dict:
    """The receiving side of the lossy-link test: --total bytes each by
    RDMA WRITE (into this node), RDMA READ (from it) and SEND, in rounds
    of --size bytes; every round's bytes are checked by SHA-256 here."""
    size, rounds = args.size, args.total // args.size
    node = Node(cqe=1024)
    qp = node.rc_qp(256)
    buf, mr = node.buffer(size)
    recv, recv_mr = node.buffer(size)
    msg = 1 << 20
    link = Link.serve(args.port)
    link.send(qp=node.info(qp).to_bytes().hex(), target=[mr.addr, mr.rkey], rounds=rounds)
    node.connect(qp, link.recv()["qp"], timeout=args.qp_timeout, retry_cnt=args.retry_cnt,
                 rnr_retry=7)
    bad = {"write": 0, "read": 0, "send": 0}
    checked = {"write": 0, "read": 0, "send": 0}
    link.send(ready=True)
    for r in range(rounds):
        # WRITE: the client wrote pattern(100 + r) here
        m = link.recv()
        assert m["op"] == "write"
        checked["write"] += size
        bad["write"] += digest(buf) != digest(pattern(100 + r, size))
        # READ: the client reads pattern(200 + r) from here
        buf[:] = pattern(200 + r, size)
        link.send(op="read")
        assert link.recv()["op"] == "read-done"
        checked["read"] += size
        # SEND: --size bytes in 1 MiB messages
        qp.post_recv([ib.RecvWR(wr_id=i, sg_list=[recv_mr.sge(msg, i * msg)])
                      for i in range(size // msg)])
        link.send(op="send")
        wcs = node.poll(size // msg, timeout=600)
        assert all(w.status == 0 and w.byte_len == msg for w in wcs), wc_summary(wcs)
        checked["send"] += size
        bad["send"] += digest(recv) != digest(pattern(300 + r, size))
    cli = link.recv()
    link.send(bye=True)
    node.close(qp)
    return {"checked": checked, "bad_rounds": bad, "client": cli}


def bulk_client(args: argparse.Namespace) -> dict:
    node = Node(cqe=1024)
    qp = node.rc_qp(256)
    link = Link.dial(args.host, args.port)
    srv = link.recv()
    link.send(qp=node.info(qp).to_bytes().hex())
    node.connect(qp, srv["qp"], timeout=args.qp_timeout, retry_cnt=args.retry_cnt, rnr_retry=7)
    assert link.recv() == {"ready": True}
    size, msg = args.size, 1 << 20
    buf, mr = node.buffer(size)
    O, S = ib.WROpcode, ib.SendFlags.SIGNALED
    secs = {"write": 0.0, "read": 0.0, "send": 0.0}
    read_bad = 0

    def one_way(opcode, key):
        """size bytes in msg-sized RDMA requests to or from the target, timed."""
        t = time.monotonic()
        qp.post_send([ib.SendWR(wr_id=i, sg_list=[mr.sge(msg, i * msg)], opcode=opcode,
                                send_flags=S, remote_addr=srv["target"][0] + i * msg,
                                rkey=srv["target"][1]) for i in range(size // msg)])
        wcs = node.poll(size // msg, timeout=600)
        secs[key] += time.monotonic() - t
        assert all(w.status == 0 for w in wcs), wc_summary(wcs)

    for r in range(srv["rounds"]):
        buf[:] = pattern(100 + r, size)
        one_way(O.RDMA_WRITE, "write")
        link.send(op="write")
        assert link.recv()["op"] == "read"
        buf[:] = 0
        one_way(O.RDMA_READ, "read")
        read_bad += digest(buf) != digest(pattern(200 + r, size))
        link.send(op="read-done")
        assert link.recv()["op"] == "send"
        buf[:] = pattern(300 + r, size)
        t = time.monotonic()
        qp.post_send([ib.SendWR(wr_id=i, sg_list=[mr.sge(msg, i * msg)], opcode=O.SEND,
                                send_flags=S) for i in range(size // msg)])
        wcs = node.poll(size // msg, timeout=600)
        secs["send"] += time.monotonic() - t
        assert all(w.status == 0 for w in wcs), wc_summary(wcs)
    total = srv["rounds"] * size
    hw = "/sys/class/infiniband/rxe0/ports/1/hw_counters/"
    counters = {}
    for name in ("sent_pkts", "rcvd_pkts", "completer_retry_err", "rcvd_seq_err",
                 "duplicate_request", "out_of_seq_request", "retry_exceeded_err"):
        try:
            with open(hw + name) as f:
                counters[name] = int(f.read())
        except OSError:
            pass
    result = {"read_bad_rounds": read_bad, "bytes_each": total,
              "goodput_MBps": {k: total / v / 1e6 for k, v in secs.items()},
              "counters": counters}
    link.send(**result)
    link.recv()
    node.close(qp)
    return result


ROLES = {f.__name__.replace("_", "-"): f for f in (
    rc_server, rc_client, ud_server, ud_client, cm_server, cm_client, cm_events_server,
    cm_events_client, cm_fail, sink_server, flood_client, write_bw_client, bulk_server,
    bulk_client)}


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=sorted(ROLES))
    ap.add_argument("--host", default="node1")
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--port", type=int, default=18515)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=10)
    ap.add_argument("--wrs", type=int, default=64)
    ap.add_argument("--total", type=int, default=64 << 20)
    ap.add_argument("--qp-timeout", type=int, default=14)
    ap.add_argument("--retry-cnt", type=int, default=7)
    args = ap.parse_args(argv)
    fn = ROLES[args.role]
    say(fn(args))
    return 0

if __name__ == "__main__":
    sys.exit(main())
