"""Production faults on Soft-RoCE: what the user sees, and that nothing is lost.

A dead peer process, a link taken down under live QPs, a receiver that is
not ready, a CQ overrun, remote access errors, and a QP recovered in place.
Each test asserts the completions (every work request accounted for, once),
the async events and the QP/port states the README's "When things go wrong"
describes; the module's resource check (conftest) asserts that the kernel's
`rdma resource show` counts are back at baseline afterwards.

QPs here are connected with small timeouts (timeout=10: 4 ms, retry_cnt=1)
so that a dead peer is noticed in well under a second; the measured times
are printed (`pytest -s`) and quoted in the README.
"""
from __future__ import annotations

import json
import pathlib
import select
import signal
import subprocess
import sys
import time

import pytest

import rxe
from conftest import poll_until

TESTS = pathlib.Path(__file__).resolve().parents[1]
SIZE = 4096


def hw_counter(dev: str, name: str, port: int = 1):
    """An rxe port counter (sysfs hw_counters), e.g. rcvd_rnr_err; None where
    the provider has no such counter (other NICs name theirs differently)."""
    try:
        return int(pathlib.Path(f"/sys/class/infiniband/{dev}/ports/{port}/hw_counters/{name}")
                   .read_text())
    except FileNotFoundError:
        return None


def qp_state(qp):
    return qp.query()[0]["qp_state"]


def drain(cq, n, timeout=20.0):
    """Exactly n completions (poll_until), then nothing more for a moment."""
    wcs = poll_until(cq, n, timeout)
    time.sleep(0.05)
    extra = cq.poll(16)
    assert not extra, f"more completions than work requests: {extra}"
    return wcs


def async_events(ctx, until, timeout=10.0):
    """Read ctx's async events until one of type `until` arrives; returns all
    that came, in order (fails after timeout seconds)."""
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([ctx.async_fd], [], [], max(0.0, left))
        if not ready:
            raise AssertionError(f"no {until!r} event within {timeout} s; got {seen}")
        ev = ctx.get_async_event()
        ctx.ack_async_event(ev)
        seen.append(ev)
        if ev.event_type == until:
            return seen


def no_async_event(ctx, wait=0.2):
    ready, _, _ = select.select([ctx.async_fd], [], [], wait)
    return not ready


class Endpoint:
    """One side of an RC connection: a QP with its own CQ and a buffer."""

    def __init__(self, ib, pd, access, cqe=64, size=SIZE, fill=0, mr_access=None, max_send_wr=64):
        from conftest import Buffer
        self.ib, self.pd = ib, pd
        self.ctx = pd.context
        self.cq = self.ctx.create_cq(cqe)
        self.qp = pd.create_qp(ib.QPInitAttr(self.cq, self.cq, qp_type=ib.QPType.RC,
                                             max_send_wr=max_send_wr, max_recv_wr=64))
        self.buf = Buffer(pd, size, access if mr_access is None else mr_access, fill)

    def info(self, port, gid_index, psn):
        ctx = self.ctx
        return self.ib.local_qp_info(self.qp, ctx.query_port(port), ctx.query_gid(port, gid_index),
                                     port=port, psn=psn)

    def write(self, wr_id, remote_addr, rkey, length=None, signaled=True):
        ib = self.ib
        self.qp.post_send(ib.SendWR(
            wr_id=wr_id, sg_list=[self.buf.mr.sge(length or self.buf.array.size)],
            opcode=ib.WROpcode.RDMA_WRITE, remote_addr=remote_addr, rkey=rkey,
            send_flags=ib.SendFlags.SIGNALED if signaled else 0))

    def close(self):
        for obj in (self.qp, self.buf, self.cq):
            obj.close()


def connect(ib, a, b, port, gid_a, gid_b, access, **rts):
    """Connect a.qp <-> b.qp (RESET -> RTS both), with to_rts keywords."""
    ib.connect_rc(a.qp, b.info(port, gid_b, 0x200), port=port, sgid_index=gid_a, access=access,
                  local_psn=0x100, **rts)
    ib.connect_rc(b.qp, a.info(port, gid_a, 0x100), port=port, sgid_index=gid_b, access=access,
                  local_psn=0x200, **rts)


@pytest.fixture
def endpoints(ib, pd, access):
    made = []

    def make(on_pd=None, **kw):
        e = Endpoint(ib, on_pd or pd, access, **kw)
        made.append(e)
        return e
    yield make
    for e in reversed(made):
        e.close()


@pytest.fixture
def pd2(ctx2):
    with ctx2.alloc_pd() as p:
        yield p


# --- a peer process killed with work in flight ------------------------------------------

def test_peer_killed_with_writes_in_flight_completes_every_request(
        ib, ctx, pd, endpoints, device_names, port, gid_index, access):
    """SIGKILL the peer with 48 writes of 256 KiB posted, post 16 more after
    its death: 64 completions, one per wr_id; the ones after the death in
    error (a transport or remote error first, WR_FLUSH_ERR after it); the QP in ERR; close
    works."""
    chunk = 256 * 1024
    peer = subprocess.Popen([sys.executable, str(TESTS / "fault_peer.py"), device_names[1],
                             str(64 * chunk)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        hello = json.loads(peer.stdout.readline())
        me = endpoints(size=chunk, fill=5)
        ib.connect_rc(me.qp, ib.QPInfo.from_bytes(bytes.fromhex(hello["info"])), port=port,
                      sgid_index=gid_index, access=access, local_psn=0x100,
                      timeout=10, retry_cnt=1)
        peer.stdin.write(json.dumps({"info": me.info(port, gid_index, 0x100).to_bytes().hex()})
                         + "\n")
        peer.stdin.flush()
        assert json.loads(peer.stdout.readline()) == {"ready": True}
        for i in range(48):
            me.write(i, hello["addr"] + i * chunk, hello["rkey"])
        peer.send_signal(signal.SIGKILL)
        peer.wait(30)
        died = time.monotonic()
        for i in range(48, 64):
            me.write(i, hello["addr"] + i * chunk, hello["rkey"])
        wcs = drain(me.cq, 64, timeout=30)
        noticed = time.monotonic() - died
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait()
    assert sorted(wc.wr_id for wc in wcs) == list(range(64)), [wc.wr_id for wc in wcs]
    statuses = [wc.status for wc in wcs]
    first_error = next(i for i, s in enumerate(statuses) if s != ib.WCStatus.SUCCESS)
    assert first_error < 48 + 1, statuses
    # A QP the kernel has already destroyed no longer answers: the retries
    # run out.  Caught while the dying process's resources are torn down, the
    # responder NAKs instead: a remote access error once its MR is gone, a
    # remote invalid request while its QP is being moved to ERR (rxe answers
    # either, depending on which it reaches first; CI saw the second).
    remote_errors = (ib.WCStatus.RETRY_EXC_ERR, ib.WCStatus.REM_ACCESS_ERR,
                     ib.WCStatus.REM_INV_REQ_ERR)
    assert statuses[first_error] in remote_errors, statuses
    assert all(s == ib.WCStatus.WR_FLUSH_ERR for s in statuses[first_error + 1:]), statuses
    assert all(s == ib.WCStatus.SUCCESS for s in statuses[:first_error]), statuses
    with pytest.raises(ib.CompletionError,
                       match="transport retry counter exceeded|remote access|remote invalid request"):
        wcs[first_error].raise_for_status()
    assert qp_state(me.qp) == ib.QPState.ERR
    print(f"\npeer SIGKILLed: {first_error} of 64 writes landed before it died; "
          f"{ib.WCStatus(statuses[first_error]).name} {noticed:.2f} s after its death "
          f"(timeout=10, retry_cnt=1)")


# --- the link taken down under live QPs, and brought back ----------------------------------

def _ip(*args):
    subprocess.run(["ip", *args], check=True, timeout=30)


def _wait_ready(dev, timeout=20.0):
    """Port ACTIVE and its RoCE v2 IPv4 GID back (the GID table is refilled
    asynchronously after the link comes up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if rxe.port_state(dev) == "ACTIVE" and rxe.roce_v2_ipv4_gid_index(dev) is not None:
                return
        except LookupError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"{dev} not ACTIVE with its GID {timeout} s after link up")


@pytest.fixture
def flappable_link(device_names):
    """The second device's netdev, restored (up, with the VM's routes) after
    the test whatever happens."""
    if not rxe.in_vm():
        pytest.skip("takes a network link down: only inside the run-in-vm guest")
    netdev = rxe.netdev_of(device_names[1])
    yield netdev
    _ip("link", "set", netdev, "up")
    _restore_routes(netdev)
    for dev in device_names:
        _wait_ready(dev)


def _restore_routes(netdev):
    """Taking a link down flushes the routes through it; rdma_cm (in other
    modules) needs the VM's policy route for 10.0.0.1 via veth1 back
    (tests/vm/init)."""
    _ip("route", "replace", "10.0.0.1", "dev", netdev, "src", "10.0.0.2", "table", "101")


def test_link_down_gives_port_err_retry_exceeded_and_a_new_connection_after_up(
        ib, ctx, ctx2, pd, pd2, endpoints, flappable_link, device_names, port, gid_index,
        gid_index2, access):
    a, b = endpoints(fill=1), endpoints(on_pd=pd2)
    connect(ib, a, b, port, gid_index, gid_index2, access, timeout=10, retry_cnt=1)
    a.write(1, b.buf.addr, b.buf.mr.rkey)
    assert poll_until(a.cq, 1)[0].status == ib.WCStatus.SUCCESS

    # veth1 down takes veth0's carrier with it: both ports go DOWN.
    _ip("link", "set", flappable_link, "down")
    down = time.monotonic()
    for c in (ctx, ctx2):
        assert async_events(c, ib.EventType.PORT_ERR)[-1].port_num == port
        assert c.query_port(port).state == ib.PortState.DOWN
    a.buf.array[:] = 2
    a.write(2, b.buf.addr, b.buf.mr.rkey)
    (wc,) = drain(a.cq, 1)
    noticed = time.monotonic() - down
    assert (wc.wr_id, wc.status) == (2, ib.WCStatus.RETRY_EXC_ERR)
    assert qp_state(a.qp) == ib.QPState.ERR
    assert (b.buf.array == 1).all()

    _ip("link", "set", flappable_link, "up")
    for c in (ctx, ctx2):
        assert async_events(c, ib.EventType.PORT_ACTIVE)[-1].port_num == port
    _restore_routes(flappable_link)
    for dev in device_names:
        _wait_ready(dev)
    for c in (ctx, ctx2):
        assert c.query_port(port).state == ib.PortState.ACTIVE
    c, d = endpoints(fill=3), endpoints(on_pd=pd2)
    connect(ib, c, d, port, gid_index, gid_index2, access, timeout=10, retry_cnt=1)
    c.write(3, d.buf.addr, d.buf.mr.rkey)
    drain(c.cq, 1)[0].raise_for_status()
    assert (d.buf.array == 3).all()
    # The failed pair, recovered in place, works again too.
    for e in (a, b):
        e.qp.reset()
    connect(ib, a, b, port, gid_index, gid_index2, access)
    a.write(4, b.buf.addr, b.buf.mr.rkey)
    drain(a.cq, 1)[0].raise_for_status()
    assert (b.buf.array == 2).all()
    print(f"\nlink down: RETRY_EXC_ERR {noticed:.2f} s after `ip link set down` "
          f"(timeout=10, retry_cnt=1)")


# --- receiver not ready --------------------------------------------------------------------

def _send(ib, e, wr_id, length=64):
    e.qp.post_send(ib.SendWR(wr_id=wr_id, sg_list=[e.buf.mr.sge(length)], opcode=ib.WROpcode.SEND,
                             send_flags=ib.SendFlags.SIGNALED))


def _recv(ib, e, wr_id, length=SIZE):
    e.qp.post_recv(ib.RecvWR(wr_id=wr_id, sg_list=[e.buf.mr.sge(length)]))


def test_rnr_retry_0_fails_at_the_first_rnr_nak(ib, ctx, endpoints, device_names, port, gid_index,
                                                 access):
    a, b = endpoints(fill=9), endpoints()
    connect(ib, a, b, port, gid_index, gid_index, access, rnr_retry=0, min_rnr_timer=1)
    dev = device_names[0]
    naks = hw_counter(dev, "rcvd_rnr_err")
    t0 = time.monotonic()
    _send(ib, a, 1)
    (wc,) = drain(a.cq, 1)
    took = time.monotonic() - t0
    assert (wc.wr_id, wc.status) == (1, ib.WCStatus.RNR_RETRY_EXC_ERR)
    assert wc.status_str == "RNR retry counter exceeded"
    if naks is not None:
        assert hw_counter(dev, "rcvd_rnr_err") == naks + 1
    assert qp_state(a.qp) == ib.QPState.ERR
    assert (b.buf.array == 0).all()
    print(f"\nrnr_retry=0: RNR_RETRY_EXC_ERR after {took * 1e3:.1f} ms")


def test_rnr_retry_7_retries_until_the_receive_is_posted(ib, ctx, endpoints, device_names, port,
                                                        gid_index, access):
    """rnr_retry=7 means retry forever: the SEND waits (RNR NAKs counted)
    and lands once the receiver posts its buffer."""
    a, b = endpoints(fill=9), endpoints()
    connect(ib, a, b, port, gid_index, gid_index, access, rnr_retry=7, min_rnr_timer=1)
    dev = device_names[0]
    naks = hw_counter(dev, "rcvd_rnr_err")
    _send(ib, a, 1)
    time.sleep(0.5)
    assert a.cq.poll(1) == []
    if naks is not None:
        retried = hw_counter(dev, "rcvd_rnr_err") - naks
        assert retried >= 2, retried
    _recv(ib, b, 7)
    (wc,) = drain(a.cq, 1)
    assert (wc.wr_id, wc.status) == (1, ib.WCStatus.SUCCESS)
    (rwc,) = drain(b.cq, 1)
    assert (rwc.wr_id, rwc.status, rwc.byte_len) == (7, ib.WCStatus.SUCCESS, 64)
    assert (b.buf.array[:64] == 9).all() and (b.buf.array[64:] == 0).all()
    if naks is not None:
        print(f"\nrnr_retry=7, min_rnr_timer=1: {retried} RNR NAKs in 0.5 s, then delivered")


# --- CQ overrun ----------------------------------------------------------------------------

def test_cq_overrun_reports_cq_err_and_does_not_crash(ib, ctx, endpoints, port, gid_index, access):
    """More signaled writes than the CQ holds, nothing polled: CQ_ERR names
    the CQ; the CQ holds its first cqe completions and the others are lost
    (rxe drops them and keeps the QP in RTS; hardware may move the QPs to
    ERR). Nothing crashes, and everything closes."""
    a, b = endpoints(cqe=4, fill=4), endpoints()
    connect(ib, a, b, port, gid_index, gid_index, access)
    cqe = a.cq.cqe
    n = cqe + 4
    for i in range(n):
        a.write(i, b.buf.addr, b.buf.mr.rkey, length=64)
    events = async_events(ctx, ib.EventType.CQ_ERR)
    assert events[-1].element is a.cq
    time.sleep(0.3)
    wcs = a.cq.poll(n + 16)
    assert [(wc.wr_id, wc.status) for wc in wcs] == [(i, ib.WCStatus.SUCCESS) for i in range(cqe)]
    assert (b.buf.array[:64] == 4).all()
    state = ib.QPState(qp_state(a.qp))
    print(f"\nCQ overrun: cqe={cqe}, {n} signaled writes: {len(wcs)} completions, "
          f"{n - len(wcs)} lost; QP {state.name}")
    if state == ib.QPState.RTS:
        a.write(n, b.buf.addr, b.buf.mr.rkey, length=64)
        assert [(wc.wr_id, wc.status) for wc in drain(a.cq, 1)] == [(n, ib.WCStatus.SUCCESS)]


# --- remote access errors ----------------------------------------------------------------

@pytest.mark.parametrize("fault", ["bad_rkey", "mr_without_remote_write", "out_of_bounds"])
def test_remote_access_error_on_both_sides(ib, ctx, endpoints, port, gid_index, access, fault):
    """The requester's completion says REM_ACCESS_ERR and its QP goes to ERR;
    the responder's QP goes to ERR too, flushing its posted receives; the
    target memory is untouched."""
    A = ib.AccessFlags
    a = endpoints(fill=6)
    b = endpoints(mr_access=A.LOCAL_WRITE if fault == "mr_without_remote_write" else None)
    connect(ib, a, b, port, gid_index, gid_index, access)
    for i in range(3):
        _recv(ib, b, 100 + i)
    addr, rkey, length = b.buf.addr, b.buf.mr.rkey, 64
    if fault == "bad_rkey":
        rkey ^= 0x100
    elif fault == "out_of_bounds":
        addr += SIZE - 32
    a.write(1, addr, rkey, length=length)
    (wc,) = drain(a.cq, 1)
    assert (wc.wr_id, wc.status) == (1, ib.WCStatus.REM_ACCESS_ERR)
    assert wc.status_str == "remote access error"
    assert qp_state(a.qp) == ib.QPState.ERR
    rwcs = drain(b.cq, 3)
    print(f"\n{fault}: responder {ib.QPState(qp_state(b.qp)).name}, "
          f"{[(w.wr_id, ib.WCStatus(w.status).name) for w in rwcs]}")
    assert sorted(w.wr_id for w in rwcs) == [100, 101, 102]
    assert {w.status for w in rwcs} == {ib.WCStatus.WR_FLUSH_ERR}
    assert qp_state(b.qp) == ib.QPState.ERR
    assert (b.buf.array == 0).all()


def test_bad_local_key_is_a_local_protection_error(ib, ctx, endpoints, port, gid_index, access):
    a, b = endpoints(fill=6), endpoints()
    connect(ib, a, b, port, gid_index, gid_index, access)
    sge = ib.SGE(a.buf.addr, 64, a.buf.mr.lkey ^ 0x100)
    a.qp.post_send(ib.SendWR(wr_id=5, sg_list=[sge], opcode=ib.WROpcode.RDMA_WRITE,
                             remote_addr=b.buf.addr, rkey=b.buf.mr.rkey,
                             send_flags=ib.SendFlags.SIGNALED))
    (wc,) = drain(a.cq, 1)
    # Hardware says LOC_PROT_ERR; rxe reports a bad lkey as LOC_QP_OP_ERR.
    assert wc.wr_id == 5
    assert wc.status in (ib.WCStatus.LOC_PROT_ERR, ib.WCStatus.LOC_QP_OP_ERR), wc
    assert qp_state(a.qp) == ib.QPState.ERR
    assert (b.buf.array == 0).all()


# --- recovery in place ---------------------------------------------------------------------

def test_qp_recovered_in_place_err_reset_init_rtr_rts(ib, ctx, endpoints, port, gid_index, access):
    """A bad rkey puts both QPs in ERR; every outstanding request is flushed
    (accounted for), then QP.reset() and to_init/to_rtr/to_rts bring the
    same QPs back and traffic flows again."""
    a, b = endpoints(fill=8), endpoints()
    connect(ib, a, b, port, gid_index, gid_index, access)
    for i in range(4):
        _recv(ib, b, 200 + i)
    a.write(1, b.buf.addr, b.buf.mr.rkey ^ 0x100, length=64)
    for i in range(2, 6):
        a.write(i, b.buf.addr, b.buf.mr.rkey, length=64)
    wcs = drain(a.cq, 5)
    assert [(w.wr_id, w.status) for w in wcs] == (
        [(1, ib.WCStatus.REM_ACCESS_ERR)] + [(i, ib.WCStatus.WR_FLUSH_ERR) for i in range(2, 6)])
    assert sorted(w.wr_id for w in drain(b.cq, 4)) == [200, 201, 202, 203]

    for e in (a, b):
        assert qp_state(e.qp) == ib.QPState.ERR
        e.qp.reset()
        assert qp_state(e.qp) == ib.QPState.RESET
    for e, other, psn in ((a, b, 0x10), (b, a, 0x20)):
        e.qp.to_init(port, access=access)
        assert qp_state(e.qp) == ib.QPState.INIT
    for e, other, psn in ((a, b, 0x20), (b, a, 0x10)):
        e.qp.to_rtr(other.info(port, gid_index, psn), gid_index)
        assert qp_state(e.qp) == ib.QPState.RTR
    for e, psn in ((a, 0x10), (b, 0x20)):
        e.qp.to_rts(psn)
        assert qp_state(e.qp) == ib.QPState.RTS

    _recv(ib, b, 300)
    _send(ib, a, 6, length=128)
    a.write(7, b.buf.addr + 1024, b.buf.mr.rkey, length=64)
    assert [(w.wr_id, w.status) for w in drain(a.cq, 2)] == [(6, ib.WCStatus.SUCCESS),
                                                            (7, ib.WCStatus.SUCCESS)]
    (rwc,) = drain(b.cq, 1)
    assert (rwc.wr_id, rwc.byte_len) == (300, 128)
    assert (b.buf.array[:128] == 8).all() and (b.buf.array[1024:1088] == 8).all()
    assert (b.buf.array[128:1024] == 0).all()


def test_reset_works_from_every_state_and_on_a_closed_qp_raises(ib, ctx, endpoints, port, gid_index,
                                                               access):
    a, b = endpoints(), endpoints()
    a.qp.reset()                                  # RESET -> RESET
    assert qp_state(a.qp) == ib.QPState.RESET
    connect(ib, a, b, port, gid_index, gid_index, access)
    a.qp.reset()                                  # RTS -> RESET
    assert qp_state(a.qp) == ib.QPState.RESET
    qp = a.pd.create_qp(ib.QPInitAttr(a.cq, a.cq))
    qp.close()
    with pytest.raises(ib.VerbsError):
        qp.reset()
