"""rdma_cm (librdmacm) on Soft-RoCE: rxe0 is 10.0.0.1, rxe1 is 10.0.0.2.

Connections are made across the two devices, event-driven (every wait is a
select() on the channel's fd with a timeout, so a missing event fails the
test instead of hanging it), in one process and across two processes.
"""
import contextlib
import errno
import fcntl
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import rxe
from conftest import high_fds, in_fork_child, poll_until, run_paused, warm_up_librdmacm

SERVER_IP, CLIENT_IP = rxe.VM_DEVICES["rxe0"], rxe.VM_DEVICES["rxe1"]
TIMEOUT = 20.0      # seconds per event (TCG emulation is slow)


warm_up_librdmacm()


@pytest.fixture
def cm(ib, device_names):
    from ibverbs import cm
    if not cm.available():
        pytest.skip("librdmacm.so.1 is not installed")
    return cm


@pytest.fixture
def channel(cm):
    with cm.create_event_channel() as ch:
        yield ch


_next_port = [7471]


def free_port():
    _next_port[0] += 1
    return _next_port[0]


class Side:
    """One end of a connection: its CM ID, and a PD/CQ/QP on its context."""

    def __init__(self, ib, cm_id, qp_type=None):
        self.cm_id = cm_id
        ctx = cm_id.context
        self.pd = ctx.alloc_pd()
        self.cq = ctx.create_cq(16)
        self.qp = cm_id.create_qp(self.pd, ib.QPInitAttr(
            self.cq, self.cq, qp_type=qp_type or ib.QPType.RC, max_send_wr=16, max_recv_wr=16))
        self.mrs = []
        self.ahs = []

    def buffer(self, ib, size, fill):
        array = np.full(size, fill, dtype=np.uint8)
        mr = ib.reg_tensor(self.pd, array, ib.AccessFlags.LOCAL_WRITE)
        self.mrs.append(mr)
        return array, mr

    def close(self):
        self.cm_id.destroy_qp()
        for ah in self.ahs:
            ah.close()
        for mr in self.mrs:
            mr.close()
        self.cq.close()
        self.pd.close()
        self.cm_id.close()


def connect_pair(ib, cm, channel, port, client_data=b"hello", server_data=b"world",
                 before_accept=None):
    """listener on rxe0, client from rxe1; returns (listener, client Side,
    server Side, events) once both sides are ESTABLISHED."""
    E = cm.CMEventType
    listener = channel.create_id(cm.PortSpace.TCP)
    listener.bind_addr((SERVER_IP, port))
    listener.listen()
    client_id = channel.create_id(cm.PortSpace.TCP)
    client_id.resolve_addr((SERVER_IP, port), src=CLIENT_IP)
    ev = cm.wait_event(channel, E.ADDR_RESOLVED, TIMEOUT)
    assert ev.id is client_id and ev.status == 0
    client_id.resolve_route()
    ev = cm.wait_event(channel, E.ROUTE_RESOLVED, TIMEOUT)
    assert ev.id is client_id
    client = Side(ib, client_id)
    client_id.connect(private_data=client_data, retry_count=5, rnr_retry_count=6)
    request = cm.wait_event(channel, E.CONNECT_REQUEST, TIMEOUT)
    assert request.listen_id is listener
    assert isinstance(request.id, ib.CMID) and request.id is not listener
    server = Side(ib, request.id)
    if before_accept:
        before_accept(server)
    request.id.accept(private_data=server_data)
    established = {}
    for _ in range(2):
        ev = cm.wait_event(channel, E.ESTABLISHED, TIMEOUT)
        established["client" if ev.id is client_id else "server"] = ev
    assert set(established) == {"client", "server"}
    return listener, client, server, request, established


def disconnect_both(cm, channel, client, server):
    """Client disconnects; the server answers its DISCONNECTED with its own
    disconnect (which sends the DREP): both sides see DISCONNECTED."""
    client.cm_id.disconnect()
    ev = cm.wait_event(channel, cm.CMEventType.DISCONNECTED, TIMEOUT)
    assert ev.id is server.cm_id
    server.cm_id.disconnect()
    ev = cm.wait_event(channel, cm.CMEventType.DISCONNECTED, TIMEOUT)
    assert ev.id is client.cm_id


def test_connect_accept_send_and_disconnect_in_one_process(ib, cm, channel):
    port = free_port()
    received = {}

    def post_receive(server):
        received["array"], mr = server.buffer(ib, 256, 0)
        server.qp.post_recv(ib.RecvWR(wr_id=41, sg_list=[mr.sge()]))

    listener, client, server, request, established = connect_pair(
        ib, cm, channel, port, client_data=b"client says hi", server_data=b"server says ok",
        before_accept=post_receive)
    try:
        # private data both ways (the transport pads it with zeros)
        assert request.private_data[:14] == b"client says hi"
        assert set(request.private_data[14:]) <= {0}
        assert request.param.retry_count == 5 and request.param.rnr_retry_count == 6
        assert request.param.qp_num == client.qp.qp_num
        assert established["client"].private_data[:14] == b"server says ok"
        assert established["client"].param.qp_num == server.qp.qp_num
        assert established["server"].param is None
        # the connection manager moved both QPs to RTS
        assert client.qp.state == ib.QPState.RTS and server.qp.state == ib.QPState.RTS
        assert client.cm_id.qp is client.qp and client.cm_id.pd is client.pd
        assert client.cm_id.local_addr[0] == CLIENT_IP
        assert client.cm_id.peer_addr == (SERVER_IP, port)
        assert server.cm_id.local_addr == (SERVER_IP, port)
        assert server.cm_id.peer_addr[0] == CLIENT_IP
        assert client.cm_id._ports()[1] == port
        assert client.cm_id.context.name == "rxe1" and server.cm_id.context.name == "rxe0"

        payload, mr = client.buffer(ib, 256, 0)
        payload[:] = np.arange(256, dtype=np.uint8)
        client.qp.post_send(ib.SendWR(wr_id=40, sg_list=[mr.sge()], opcode=ib.WROpcode.SEND,
                                      send_flags=ib.SendFlags.SIGNALED))
        [sent] = poll_until(client.cq)
        sent.raise_for_status()
        assert sent.wr_id == 40
        [arrived] = poll_until(server.cq)
        arrived.raise_for_status()
        assert arrived.wr_id == 41 and arrived.byte_len == 256
        assert arrived.opcode == ib.WCOpcode.RECV
        assert (received["array"] == np.arange(256, dtype=np.uint8)).all()

        disconnect_both(cm, channel, client, server)
    finally:
        client.close()
        server.close()
        listener.close()


def test_rdma_write_over_cm_qps(ib, cm, channel):
    """The CM-made QPs take the whole data path: an RDMA WRITE lands."""
    port = free_port()
    target = {}

    def expose(server):
        array = np.zeros(64, dtype=np.uint8)
        mr = ib.reg_tensor(server.pd, array, ib.AccessFlags.LOCAL_WRITE | ib.AccessFlags.REMOTE_WRITE)
        server.mrs.append(mr)
        target.update(array=array, mr=mr)

    listener, client, server, _, _ = connect_pair(ib, cm, channel, port, before_accept=expose)
    try:
        src, mr = client.buffer(ib, 64, 0x5A)
        client.qp.post_send(ib.SendWR(wr_id=1, sg_list=[mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                                      send_flags=ib.SendFlags.SIGNALED,
                                      remote_addr=target["mr"].addr, rkey=target["mr"].rkey))
        [wc] = poll_until(client.cq)
        wc.raise_for_status()
        assert (target["array"] == 0x5A).all()
        disconnect_both(cm, channel, client, server)
    finally:
        client.close()
        server.close()
        listener.close()


SERVER_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import ibverbs as ib
    from ibverbs import cm
    E = cm.CMEventType
    port = int(sys.argv[1])
    with cm.create_event_channel() as ch:
        listener = ch.create_id()
        listener.bind_addr((sys.argv[2], port))
        listener.listen()
        print("listening", flush=True)
        req = cm.wait_event(ch, E.CONNECT_REQUEST, 60)
        conn = req.id
        ctx = conn.context
        pd = ctx.alloc_pd()
        cq = ctx.create_cq(8)
        qp = conn.create_qp(pd, ib.QPInitAttr(cq, cq))
        buf = np.zeros(32, dtype=np.uint8)
        mr = ib.reg_tensor(pd, buf, ib.AccessFlags.LOCAL_WRITE)
        qp.post_recv(ib.RecvWR(wr_id=5, sg_list=[mr.sge()]))
        conn.accept(private_data=b"pid" + str(__import__("os").getpid()).encode())
        cm.wait_event(ch, E.ESTABLISHED, 60)
        while not (wcs := cq.poll(1)):
            pass
        wcs[0].raise_for_status()
        print("got", req.private_data[:6].decode(), bytes(buf[:wcs[0].byte_len]).hex(), flush=True)
        cm.wait_event(ch, E.DISCONNECTED, 60)
        conn.disconnect()
        conn.destroy_qp()
        for obj in (mr, cq, pd, conn, listener):
            obj.close()
        print("done", ib.CMID._open_count(), flush=True)
""")


def test_client_and_server_in_two_processes(ib, cm, channel, tmp_path):
    port = free_port()
    script = tmp_path / "cm_server.py"
    script.write_text(SERVER_SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    server = subprocess.Popen([sys.executable, str(script), str(port), SERVER_IP],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    client = None
    try:
        line = server.stdout.readline().strip()
        if line != "listening":
            server.kill()
            pytest.fail(f"the server process did not start: {server.communicate()[1][-2000:]}")
        E = cm.CMEventType
        cm_id = channel.create_id()
        cm_id.resolve_addr((SERVER_IP, port), src=CLIENT_IP)
        cm.wait_event(channel, E.ADDR_RESOLVED, TIMEOUT)
        cm_id.resolve_route()
        cm.wait_event(channel, E.ROUTE_RESOLVED, TIMEOUT)
        client = Side(ib, cm_id)
        cm_id.connect(private_data=b"proc-2")
        ev = cm.wait_event(channel, E.ESTABLISHED, TIMEOUT)
        assert ev.private_data.startswith(b"pid%d" % server.pid)
        payload, mr = client.buffer(ib, 16, 0)
        payload[:] = np.arange(16, dtype=np.uint8) + 100
        client.qp.post_send(ib.SendWR(wr_id=9, sg_list=[mr.sge()], opcode=ib.WROpcode.SEND,
                                      send_flags=ib.SendFlags.SIGNALED))
        [wc] = poll_until(client.cq)
        wc.raise_for_status()
        assert server.stdout.readline().split() == ["got", "proc-2", bytes(payload).hex()]
        cm_id.disconnect()
        ev = cm.wait_event(channel, E.DISCONNECTED, TIMEOUT)
        assert ev.id is cm_id
        out, err = server.communicate(timeout=60)
        assert server.returncode == 0, err
        assert out.split() == ["done", "0"]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if client is not None:
            client.close()


def test_reject_reaches_the_client_with_its_private_data(ib, cm, channel):
    E = cm.CMEventType
    port = free_port()
    with channel.create_id() as listener, channel.create_id() as client_id:
        listener.bind_addr((SERVER_IP, port))
        listener.listen()
        client_id.resolve_addr((SERVER_IP, port), src=CLIENT_IP)
        cm.wait_event(channel, E.ADDR_RESOLVED, TIMEOUT)
        client_id.resolve_route()
        cm.wait_event(channel, E.ROUTE_RESOLVED, TIMEOUT)
        client = Side(ib, client_id)
        try:
            client_id.connect(private_data=b"let me in")
            req = cm.wait_event(channel, E.CONNECT_REQUEST, TIMEOUT)
            req.id.reject(private_data=b"go away")
            ev = cm.wait_event(channel, E.REJECTED, TIMEOUT)
            assert ev.id is client_id
            assert ev.status == 28       # IB_CM_REJ_CONSUMER_DEFINED
            assert ev.private_data[:7] == b"go away"
            req.id.close()
        finally:
            client.close()


def test_connect_to_a_port_without_listener_is_rejected(ib, cm, channel):
    E = cm.CMEventType
    with channel.create_id() as client_id:
        client_id.resolve_addr((SERVER_IP, free_port()), src=CLIENT_IP)
        cm.wait_event(channel, E.ADDR_RESOLVED, TIMEOUT)
        client_id.resolve_route()
        cm.wait_event(channel, E.ROUTE_RESOLVED, TIMEOUT)
        client = Side(ib, client_id)
        try:
            client_id.connect()
            ev = cm.wait_event(channel, None, 60)
            assert ev.id is client_id
            assert ev.event in (E.REJECTED, E.UNREACHABLE)
            assert ev.status != 0
        finally:
            client.close()


def test_resolving_an_unreachable_address_fails_cleanly(ib, cm, channel):
    """10.0.0.99 is on the veth subnet but nobody answers ARP: either the
    call fails at once or ADDR_ERROR/ROUTE_ERROR arrives."""
    E = cm.CMEventType
    with channel.create_id() as cm_id:
        try:
            cm_id.resolve_addr(("10.0.0.99", 1), src=CLIENT_IP, timeout_ms=500)
        except ib.VerbsError as exc:
            assert exc.errno != 0
            return
        ev = cm.wait_event(channel, None, 60)
        assert ev.id is cm_id
        if ev.event == E.ADDR_RESOLVED:       # resolved without a reply: the route must fail
            cm_id.resolve_route(timeout_ms=500)
            ev = cm.wait_event(channel, None, 60)
        assert ev.event in (E.ADDR_ERROR, E.ROUTE_ERROR, E.ROUTE_RESOLVED) and (
            ev.event == E.ROUTE_RESOLVED or ev.status < 0)


def test_bad_arguments_raise_python_errors(ib, cm, channel, ctx):
    with channel.create_id() as cm_id:
        with pytest.raises(ValueError, match="numeric"):
            cm_id.resolve_addr(("not an address", 1))
        with pytest.raises(ValueError):
            cm_id.resolve_addr((SERVER_IP, 70000))
        with pytest.raises(ValueError):
            cm_id.resolve_addr((SERVER_IP, 1, 2))
        with pytest.raises(TypeError):
            cm_id.bind_addr(1234)
        with pytest.raises(ValueError):
            cm_id.resolve_route(timeout_ms=0)
        with pytest.raises(ValueError):
            cm_id.connect(private_data=b"x" * 256)
        with pytest.raises(ValueError):
            cm_id.connect(retry_count=8)
        with pytest.raises(TypeError):
            cm_id.connect(private_data=12)
        with pytest.raises(TypeError):
            cm_id.migrate("channel")
        with pytest.raises(ValueError):
            channel.create_id(ps=12345)
        with pytest.raises(TypeError):
            cm_id.create_qp(None, None)
        # no device yet: create_qp is refused before librdmacm is asked
        with ctx.alloc_pd() as pd, ctx.create_cq(4) as cq:
            with pytest.raises(ib.VerbsError) as exc:
                cm_id.create_qp(pd, ib.QPInitAttr(cq, cq))
            assert exc.value.errno == errno.EINVAL
    with pytest.raises(TypeError):
        ib.CMID()
    with pytest.raises(TypeError):
        ib.EventChannel()


def test_argument_errors_name_the_argument(ib, cm, channel, ctx):
    """The CM methods' arguments go through the generated parsers (spec
    impl:, spec/rdmacm/cm.yaml): a wrong type is a TypeError naming the
    argument, out of range a ValueError, keywords work as they did."""
    with channel.create_id() as cm_id:
        with pytest.raises(TypeError, match="timeout_ms must be an int, not str"):
            cm_id.resolve_route(timeout_ms="1")
        with pytest.raises(ValueError, match="timeout_ms must be in 1"):
            cm_id.resolve_addr(SERVER_IP, None, 0)
        with pytest.raises(TypeError, match="backlog must be an int, not str"):
            cm_id.listen("16")
        with pytest.raises(ValueError, match="backlog must be in 0"):
            cm_id.listen(backlog=-1)
        with pytest.raises(TypeError, match="blacklog"):
            cm_id.listen(blacklog=3)
        with pytest.raises(ValueError, match=r"private_data must be at most 255 bytes \(the transport"):
            cm_id.accept(b"x" * 256)
        with pytest.raises(ValueError, match="private_data must be at most 255 bytes"):
            cm_id.reject(private_data=bytearray(256))
        with pytest.raises(TypeError):
            cm_id.reject(12)
        with pytest.raises(ValueError, match="flow_control must be at most 1, got 2"):
            cm_id.connect(flow_control=2)
        with pytest.raises(ValueError, match="rnr_retry_count must be in 0"):
            cm_id.connect(b"", rnr_retry_count=-1)
        with pytest.raises(ValueError, match="initiator_depth must be at most 255, got 256"):
            ib._ibverbs.CMID.accept(cm_id, None, 1, 256)   # the C method, by position
        with pytest.raises(TypeError, match="optname must be an int, not str"):
            cm_id.set_option("TOS", 1)
        with pytest.raises(TypeError, match="pd must be PD, not NoneType"):
            cm_id.create_qp(None, None)
        with ctx.alloc_pd() as pd:
            with pytest.raises(TypeError, match="init_attr must be a QPInitAttr, not NoneType"):
                cm_id.create_qp(pd, init_attr=None)
        with pytest.raises(TypeError, match="dst: the host must be a str"):
            cm_id.resolve_addr((1, 2))
        with pytest.raises(TypeError, match="src: the host must be a str"):
            cm_id.resolve_addr(SERVER_IP, src=5)
        with pytest.raises(TypeError, match="channel must be EventChannel, not str"):
            cm_id.migrate("channel")
        with pytest.raises(TypeError, match="addr: the host must be a str"):
            cm_id.bind_addr(1234)
    with pytest.raises(TypeError, match="ps must be an int, not str"):
        channel.create_id(ps="TCP")
    with pytest.raises(ValueError, match="ps must be a PortSpace"):
        channel.create_id(12345)


def test_create_qp_checks_the_context_and_is_single(ib, cm, channel, ctx):
    with channel.create_id() as cm_id:
        cm_id.bind_addr(SERVER_IP)
        cm_ctx = cm_id.context
        assert cm_ctx.name == "rxe0"
        with ctx.alloc_pd() as other_pd, cm_ctx.alloc_pd() as pd, cm_ctx.create_cq(4) as cq, \
                ctx.create_cq(4) as other_cq:
            with pytest.raises(ValueError, match="another context"):
                cm_id.create_qp(other_pd, ib.QPInitAttr(cq, cq))
            with pytest.raises(ValueError, match="another context"):
                cm_id.create_qp(pd, ib.QPInitAttr(other_cq, other_cq))
            qp = cm_id.create_qp(pd, ib.QPInitAttr(cq, cq))
            assert qp.state == ib.QPState.INIT      # rdma_create_qp moves it to INIT
            with pytest.raises(ib.VerbsError) as exc:
                cm_id.create_qp(pd, ib.QPInitAttr(cq, cq))
            assert exc.value.errno == errno.EEXIST
            # the QP ties the CM ID: EBUSY, nothing changed
            with pytest.raises(ib.VerbsError) as exc:
                cm_id.close()
            assert exc.value.errno == errno.EBUSY
            assert not cm_id.closed and cm_id.qp is qp
            # closing the QP itself (ibv_destroy_qp) also releases the ID
            qp.close()
            assert cm_id.qp is None and cm_id.pd is None
            qp2 = cm_id.create_qp(pd, ib.QPInitAttr(cq, cq))
            cm_id.destroy_qp()
            assert qp2.closed and cm_id.qp is None
            cm_id.destroy_qp()      # harmless when there is none


def test_closed_objects_raise_ebadf_and_parents_refuse_with_ebusy(ib, cm, channel):
    cm_id = channel.create_id()
    with pytest.raises(ib.VerbsError) as exc:
        channel.close()
    assert exc.value.errno == errno.EBUSY and not channel.closed
    cm_id.close()
    cm_id.close()       # idempotent
    assert cm_id.closed and repr(cm_id) == "<ibverbs.CMID closed>"
    for call in (lambda: cm_id.bind_addr(SERVER_IP), lambda: cm_id.resolve_route(),
                 lambda: cm_id.connect(), lambda: cm_id.listen(), cm_id.disconnect,
                 lambda: cm_id.context, lambda: cm_id.local_addr, cm_id._ports,
                 lambda: cm_id.migrate(channel), cm_id.destroy_qp):
        with pytest.raises(ib.VerbsError) as exc:
            call()
        assert exc.value.errno == errno.EBADF
    other = cm.create_event_channel()
    other.close()
    with pytest.raises(ib.VerbsError) as exc:
        other.get_cm_event()
    assert exc.value.errno == errno.EBADF
    with pytest.raises(ib.VerbsError) as exc:
        other.create_id()
    assert exc.value.errno == errno.EBADF
    with pytest.raises(ib.VerbsError) as exc:
        other.fd
    assert exc.value.errno == errno.EBADF


def test_nonblocking_channel_raises_eagain(ib, cm, channel):
    flags = fcntl.fcntl(channel.fd, fcntl.F_GETFL)
    fcntl.fcntl(channel.fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    with pytest.raises(ib.VerbsError) as exc:
        channel.get_cm_event()
    assert exc.value.errno == errno.EAGAIN


def test_asyncio_reader_on_the_channel_fd(ib, cm, channel):
    import asyncio
    E = cm.CMEventType

    async def resolve():
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        loop.add_reader(channel.fd, lambda: ready.done() or ready.set_result(None))
        try:
            cm_id.resolve_addr((SERVER_IP, 1), src=CLIENT_IP)
            await asyncio.wait_for(ready, TIMEOUT)
        finally:
            loop.remove_reader(channel.fd)
        return channel.get_cm_event()

    with channel.create_id() as cm_id:
        ev = asyncio.run(resolve())
        assert ev.event == E.ADDR_RESOLVED and ev.id is cm_id
        assert cm.cm_event_str(ev.event) == "RDMA_CM_EVENT_ADDR_RESOLVED" == ev.event_str


def test_async_events_awaited_through_two_cmids_contexts_wake_both(ib, cm, channel, port,
                                                                  gid_index, access):
    """Each CMID's .context is its own Context object of librdmacm's one
    ibv_context: one async fd.  Awaited together, both waiters are woken
    (an event loop watches an fd with one reader: a second add_reader
    replaced the first, whose waiter then slept for ever)."""
    import asyncio
    from ibverbs import aio
    with channel.create_id() as id_a, channel.create_id() as id_b:
        id_a.bind_addr(SERVER_IP)
        id_b.bind_addr(SERVER_IP)
        ctx_a, ctx_b = id_a.context, id_b.context
        assert ctx_a is not ctx_b and ctx_a.async_fd == ctx_b.async_fd
        pd = ctx_a.alloc_pd()
        cq = ctx_a.create_cq(16)
        buf = np.zeros(64, dtype=np.uint8)
        mr = pd.reg_mr(buf.ctypes.data, buf.nbytes, access)
        srqs = [pd.create_srq(max_wr=16) for _ in range(2)]
        qps = []
        try:
            info = lambda q: ib.local_qp_info(q, ctx_a.query_port(port),
                                              ctx_a.query_gid(port, gid_index), port=port)
            senders = []
            for srq in srqs:
                a = pd.create_qp(ib.QPInitAttr(cq, cq))
                b = pd.create_qp(ib.QPInitAttr(cq, cq, srq=srq))
                qps += [a, b]
                ib.connect_rc(a, info(b), port=port, sgid_index=gid_index, access=access)
                ib.connect_rc(b, info(a), port=port, sgid_index=gid_index, access=access)
                srq.post_recv([ib.RecvWR(wr_id=i, sg_list=[mr.sge(16)]) for i in range(4)])
                srq.modify(srq_limit=4)     # the first receive goes below it
                senders.append(a)

            async def main():
                # librdmacm's context outlives each test: what earlier tests'
                # objects left on it (a QP's last WQE, a port event) is not ours
                while True:
                    try:
                        await asyncio.wait_for(ctx_a.async_event(), 0.2)
                    except asyncio.TimeoutError:
                        break
                waiters = [asyncio.ensure_future(ctx.async_event()) for ctx in (ctx_a, ctx_b)]
                await asyncio.sleep(0.05)
                assert not any(w.done() for w in waiters)
                for a in senders:
                    a.post_send(ib.SendWR(wr_id=1, sg_list=[mr.sge(16)], opcode=ib.WROpcode.SEND,
                                          send_flags=ib.SendFlags.SIGNALED))
                done, pending = await asyncio.wait(waiters, timeout=TIMEOUT)
                for w in pending:
                    w.cancel()
                await asyncio.gather(*pending, return_exceptions=True)
                assert not pending, "a waiter was never woken"
                return [w.result() for w in waiters]

            events = asyncio.run(main())
            assert {e.event_type for e in events} == {ib.EventType.SRQ_LIMIT_REACHED}
            assert sorted(map(id, (e.element for e in events))) == sorted(map(id, srqs))
            assert not aio._contexts
            poll_until(cq, 4)
        finally:
            for obj in (*qps, *srqs, mr, cq, pd):
                obj.close()


def test_an_event_whose_id_carries_its_listeners_context_names_the_new_id(ib, cm, channel):
    """librdmacm gives a CONNECT_REQUEST's new ID its listener's context
    until the request's reader gives it its own, so an event of the new ID
    that another thread reads in that window carries the listener's token.
    Such an event is made here (test hook: the new ID's context set back to
    its listener's, as librdmacm left it) and must still name the new ID."""
    from ibverbs import _ibverbs
    listener, client, server, _, _ = connect_pair(ib, cm, channel, free_port())
    try:
        _ibverbs._test_copy_context(server.cm_id, listener)
        client.cm_id.disconnect()
        ev = cm.wait_event(channel, cm.CMEventType.DISCONNECTED, TIMEOUT)
        assert ev.id is not listener, "the new ID's DISCONNECTED named its listener"
        assert ev.id is server.cm_id
        server.cm_id.disconnect()
        ev = cm.wait_event(channel, cm.CMEventType.DISCONNECTED, TIMEOUT)
        assert ev.id is client.cm_id
    finally:
        client.close()
        server.close()
        listener.close()


def test_migrate_id_moves_events_and_the_parent_count(ib, cm, channel):
    E = cm.CMEventType
    with cm.create_event_channel() as other:
        cm_id = other.create_id()
        cm_id.migrate(channel)
        assert cm_id.channel is channel
        other.close()       # no CM ID left on it
        assert other.closed
        cm_id.resolve_addr((SERVER_IP, 1), src=CLIENT_IP)
        ev = cm.wait_event(channel, E.ADDR_RESOLVED, TIMEOUT)
        assert ev.id is cm_id
        with pytest.raises(ib.VerbsError) as exc:
            channel.close()
        assert exc.value.errno == errno.EBUSY
        cm_id.close()


def test_udp_port_space_ids_resolve(ib, cm, channel):
    E = cm.CMEventType
    with channel.create_id(cm.PortSpace.UDP) as cm_id:
        assert cm_id.ps == cm.PortSpace.UDP
        cm_id.resolve_addr((SERVER_IP, 1), src=CLIENT_IP)
        cm.wait_event(channel, E.ADDR_RESOLVED, TIMEOUT)
        assert cm_id.context.name == "rxe1"


def test_ud_datagram_through_a_udp_port_space_connection(ib, cm, channel):
    """PortSpace.UDP: connect/accept is a SIDR exchange; the client's
    ESTABLISHED carries UDParam (address handle attributes, QP number,
    Q_Key), enough to send the server a datagram."""
    E = cm.CMEventType
    port = free_port()
    with channel.create_id(cm.PortSpace.UDP) as listener, \
            channel.create_id(cm.PortSpace.UDP) as client_id:
        listener.bind_addr((SERVER_IP, port))
        listener.listen()
        client_id.resolve_addr((SERVER_IP, port), src=CLIENT_IP)
        cm.wait_event(channel, E.ADDR_RESOLVED, TIMEOUT)
        client_id.resolve_route()
        cm.wait_event(channel, E.ROUTE_RESOLVED, TIMEOUT)
        client = Side(ib, client_id, qp_type=ib.QPType.UD)
        server = None
        try:
            client_id.connect(private_data=b"ud?")
            req = cm.wait_event(channel, E.CONNECT_REQUEST, TIMEOUT)
            assert req.private_data[:3] == b"ud?" and req.listen_id is listener
            server = Side(ib, req.id, qp_type=ib.QPType.UD)
            inbox, inbox_mr = server.buffer(ib, 40 + 32, 0)      # 40 bytes of GRH first
            server.qp.post_recv(ib.RecvWR(wr_id=3, sg_list=[inbox_mr.sge()]))
            req.id.accept(private_data=b"ud!")
            ev = cm.wait_event(channel, E.ESTABLISHED, TIMEOUT)
            assert ev.id is client_id and ev.private_data[:3] == b"ud!"
            assert isinstance(ev.param, cm.UDParam)
            assert ev.param.qp_num == server.qp.qp_num and ev.param.qkey != 0
            ah = client.pd.create_ah(ev.param.ah_attr)
            client.ahs.append(ah)
            out, out_mr = client.buffer(ib, 32, 0x77)
            client.qp.post_send(ib.SendWR(wr_id=4, sg_list=[out_mr.sge()], opcode=ib.WROpcode.SEND,
                                          send_flags=ib.SendFlags.SIGNALED, ah=ah,
                                          remote_qpn=ev.param.qp_num,
                                          remote_qkey=ev.param.qkey))
            poll_until(client.cq)[0].raise_for_status()
            [wc] = poll_until(server.cq)
            wc.raise_for_status()
            assert wc.wr_id == 3 and wc.byte_len == 40 + 32 and wc.src_qp == client.qp.qp_num
            assert (inbox[40:] == 0x77).all()
        finally:
            client.close()
            if server is not None:
                server.close()


def test_get_cm_event_blocks_with_the_gil_released(ib, cm, channel):
    """A thread waits in get_cm_event on an idle channel: meanwhile this
    thread runs (close() of the busy channel is refused with EBUSY), then
    makes the event that wakes it."""
    E = cm.CMEventType
    other = cm.create_event_channel()
    got = []
    waiter = threading.Thread(target=lambda: got.append(other.get_cm_event()), daemon=True)
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()
    with pytest.raises(ib.VerbsError) as exc:
        other.close()
    assert exc.value.errno == errno.EBUSY and "in progress" in str(exc.value)
    cm_id = other.create_id()
    cm_id.resolve_addr((SERVER_IP, 1), src=CLIENT_IP)
    waiter.join(TIMEOUT)
    assert not waiter.is_alive()
    assert got[0].event == E.ADDR_RESOLVED and got[0].id is cm_id
    cm_id.close()
    other.close()


def test_the_cm_context_is_borrowed_never_closed(ib, cm, channel):
    """cm_id.context is librdmacm's ibv_context: closing (or collecting)
    the Python object leaves the device open (the module's kernel ctx count
    would drop otherwise) and usable."""
    with channel.create_id() as cm_id:
        assert cm_id.context is None            # no device before binding
        cm_id.bind_addr(SERVER_IP)
        ctx = cm_id.context
        assert cm_id.context is ctx and ctx.name == "rxe0"
        ctx.close()
        assert ctx.closed
        again = cm_id.context
        assert again is not ctx and not again.closed
        del ctx, again
        gc.collect()
        with cm_id.context.alloc_pd() as pd, cm_id.context.create_cq(4) as cq:
            with cm_id.create_qp(pd, ib.QPInitAttr(cq, cq)) as qp:
                assert qp.state == ib.QPState.INIT
                assert cm_id.qp is qp
            assert cm_id.qp is None


def test_set_option_reuseaddr_lets_a_second_id_bind_the_port(ib, cm, channel):
    """Two IDs on one address and port: EADDRINUSE, unless both set
    REUSEADDR (rdma_set_option) before binding; TOS and ACK_TIMEOUT take
    their ranges."""
    O = cm.CMIDOption
    port = free_port()
    with channel.create_id() as a, channel.create_id() as b:
        a.bind_addr((SERVER_IP, port))
        with pytest.raises(ib.VerbsError) as exc:
            b.bind_addr((SERVER_IP, port))
        assert exc.value.errno == errno.EADDRINUSE
    with channel.create_id() as a, channel.create_id() as b:
        for cm_id in (a, b):
            cm_id.set_option(O.REUSEADDR, True)
            cm_id.set_option(O.TOS, 32)
            cm_id.set_option(O.ACK_TIMEOUT, 14)
        a.bind_addr((SERVER_IP, port))
        b.bind_addr((SERVER_IP, port))
        assert a.local_addr == b.local_addr == (SERVER_IP, port)
        with pytest.raises(ValueError):
            a.set_option(O.TOS, 256)
        with pytest.raises(ValueError):
            a.set_option(O.ACK_TIMEOUT, 32)
        with pytest.raises(ValueError, match="CMIDOption"):
            a.set_option(77, 1)


def test_garbage_collection_in_any_order_leaks_nothing(ib, cm):
    """Everything dropped without close(), a connected pair included: the
    module's leak check (kernel cm_id/qp/pd/cq counts, open objects) proves
    it was all destroyed."""
    ch = cm.create_event_channel()
    listener, client, server, request, established = connect_pair(ib, cm, ch, free_port())
    assert ib.CMID._open_count() == 3
    del listener, client, server, request, established, ch
    gc.collect()
    assert ib.CMID._open_count() == 0
    assert ib.EventChannel._open_count() == 0


def test_a_cm_qp_closed_before_the_connect_response_leaves_its_id(ib, cm, channel):
    """qp.close() of a QP made by create_qp clears id->qp at once: librdmacm
    moves id->qp to RTR/RTS when it reads CONNECT_RESPONSE, which on a freed
    QP was a use after free.  With no QP the event reaches the caller."""
    E = cm.CMEventType
    port = free_port()
    with channel.create_id() as listener, channel.create_id() as client_id:
        listener.bind_addr((SERVER_IP, port))
        listener.listen()
        client_id.resolve_addr((SERVER_IP, port), src=CLIENT_IP)
        cm.wait_event(channel, E.ADDR_RESOLVED, TIMEOUT)
        client_id.resolve_route()
        cm.wait_event(channel, E.ROUTE_RESOLVED, TIMEOUT)
        client = Side(ib, client_id)
        server = None
        try:
            client_id.connect(retry_count=5, rnr_retry_count=6)
            req = cm.wait_event(channel, E.CONNECT_REQUEST, TIMEOUT)
            server = Side(ib, req.id)
            client.qp.close()
            assert client_id.qp is None
            req.id.accept()
            ev = cm.wait_event(channel, timeout=TIMEOUT)
            assert ev.id is client_id and ev.event == E.CONNECT_RESPONSE, ev
        finally:
            client.close()
            if server is not None:
                server.close()


def test_a_cm_qp_is_busy_while_get_cm_event_waits_on_its_channel(ib, cm, channel):
    port = free_port()
    with channel.create_id() as client_id:
        client_id.resolve_addr((SERVER_IP, port), src=CLIENT_IP)
        cm.wait_event(channel, cm.CMEventType.ADDR_RESOLVED, TIMEOUT)
        client = Side(ib, client_id)
        try:
            events = []
            waiter = threading.Thread(target=lambda: events.append(channel.get_cm_event()))
            waiter.start()
            time.sleep(1.0)                # the waiter is blocked in rdma_get_cm_event
            with pytest.raises(ib.VerbsError) as e:
                client.qp.close()
            assert e.value.errno == errno.EBUSY
            client_id.resolve_route()      # wakes the waiter
            waiter.join(TIMEOUT)
            assert not waiter.is_alive() and events[0].event == cm.CMEventType.ROUTE_RESOLVED
            client.qp.close()
            assert client_id.qp is None
        finally:
            client.close()


# ---- calls that release the GIL hold what librdmacm may touch -----------------------

def _request(ib, cm, channel, port):
    """listener on rxe0, client from rxe1 connecting: (listener, client Side,
    server Side, request event) at CONNECT_REQUEST, before accept."""
    E = cm.CMEventType
    listener = channel.create_id(cm.PortSpace.TCP)
    listener.bind_addr((SERVER_IP, port))
    listener.listen()
    client_id = channel.create_id(cm.PortSpace.TCP)
    client_id.resolve_addr((SERVER_IP, port), src=CLIENT_IP)
    cm.wait_event(channel, E.ADDR_RESOLVED, TIMEOUT)
    client_id.resolve_route()
    cm.wait_event(channel, E.ROUTE_RESOLVED, TIMEOUT)
    client = Side(ib, client_id)
    client_id.connect(retry_count=5, rnr_retry_count=6)
    request = cm.wait_event(channel, E.CONNECT_REQUEST, TIMEOUT)
    return listener, client, Side(ib, request.id), request


def _refused_while(call, *closes):
    """Run call in a thread, paused (the test hook) with the GIL released
    inside its librdmacm call; meanwhile each close() must raise EBUSY."""
    import ibverbs as ib

    def closing():
        for close in closes:
            with pytest.raises(ib.VerbsError) as exc:
                close()
            assert exc.value.errno == errno.EBUSY
    assert run_paused(call, closing, TIMEOUT) is None


def test_qps_are_held_while_accept_and_disconnect_run(ib, cm, channel):
    """accept() and disconnect() release the GIL inside librdmacm, which
    moves the ID's QP (ibv_modify_qp): a qp.close() from another thread
    meanwhile (here while the call is paused by the test hook) is refused,
    for its own QP and for any QP on the channel; it was a use after free."""
    E = cm.CMEventType
    listener, client, server, request = _request(ib, cm, channel, free_port())
    try:
        _refused_while(request.id.accept, server.qp.close, client.qp.close,
                       request.id.destroy_qp)
        assert not server.qp.closed and request.id.qp is server.qp
        for _ in range(2):
            cm.wait_event(channel, E.ESTABLISHED, TIMEOUT)
        assert server.qp.state == ib.QPState.RTS and client.qp.state == ib.QPState.RTS
        _refused_while(client.cm_id.disconnect, client.qp.close)
        assert client.qp.state == ib.QPState.ERR
        cm.wait_event(channel, E.DISCONNECTED, TIMEOUT)
        server.cm_id.disconnect()
        cm.wait_event(channel, E.DISCONNECTED, TIMEOUT)
    finally:
        client.close()
        server.close()
        listener.close()


def _waiting(channel):
    """A thread blocked in channel.get_cm_event(); join it with the returned list."""
    events = []
    # a daemon: if the test fails before it wakes the waiter, the process can still exit
    waiter = threading.Thread(target=lambda: events.append(channel.get_cm_event()), daemon=True)
    waiter.start()
    time.sleep(1.0)                # the waiter is blocked in rdma_get_cm_event
    assert waiter.is_alive()
    return waiter, events


def test_a_qp_made_while_get_cm_event_waits_is_held_too(ib, cm, channel):
    """get_cm_event's hold covers every QP of its channel's CMIDs, also one
    created after it began to wait (it was a snapshot at entry)."""
    with channel.create_id() as client_id:
        client_id.resolve_addr((SERVER_IP, free_port()), src=CLIENT_IP)
        cm.wait_event(channel, cm.CMEventType.ADDR_RESOLVED, TIMEOUT)
        waiter, events = _waiting(channel)
        client = Side(ib, client_id)       # while the waiter waits
        try:
            with pytest.raises(ib.VerbsError) as e:
                client.qp.close()
            assert e.value.errno == errno.EBUSY and not client.qp.closed
            client_id.resolve_route()      # wakes the waiter
            waiter.join(TIMEOUT)
            assert not waiter.is_alive() and events[0].event == cm.CMEventType.ROUTE_RESOLVED
            client.qp.close()
            assert client_id.qp is None
        finally:
            client.close()


def test_a_cmid_migrated_onto_a_waited_channel_has_its_qp_held(ib, cm, channel):
    with cm.create_event_channel() as other, other.create_id() as cm_id:
        cm_id.resolve_addr((SERVER_IP, free_port()), src=CLIENT_IP)
        cm.wait_event(other, cm.CMEventType.ADDR_RESOLVED, TIMEOUT)
        side = Side(ib, cm_id)
        try:
            waiter, events = _waiting(channel)
            cm_id.migrate(channel)
            with pytest.raises(ib.VerbsError) as e:
                side.qp.close()
            assert e.value.errno == errno.EBUSY
            cm_id.resolve_route()          # its event now arrives on channel
            waiter.join(TIMEOUT)
            assert not waiter.is_alive() and events[0].id is cm_id
        finally:
            side.close()


# ---- a failed qp.close() leaves the QP on its ID -------------------------------------

MCAST_GID = bytes.fromhex("ff0e0000000000000000000000001234")


def test_a_cm_qp_whose_destroy_fails_stays_driven_by_its_id(ib, cm, channel):
    """ibv_destroy_qp refuses (EBUSY) a UD QP still attached to a multicast
    group: the QP stays open, and on its rdma_cm_id.  accept() then answers
    the SIDR request with that QP's number (it sent 0: the ID had been told
    it had no QP before the destroy was tried)."""
    E = cm.CMEventType
    port = free_port()
    with channel.create_id(cm.PortSpace.UDP) as listener, \
            channel.create_id(cm.PortSpace.UDP) as client_id:
        listener.bind_addr((SERVER_IP, port))
        listener.listen()
        client_id.resolve_addr((SERVER_IP, port), src=CLIENT_IP)
        cm.wait_event(channel, E.ADDR_RESOLVED, TIMEOUT)
        client_id.resolve_route()
        cm.wait_event(channel, E.ROUTE_RESOLVED, TIMEOUT)
        client = Side(ib, client_id, qp_type=ib.QPType.UD)
        server = None
        try:
            client_id.connect()
            req = cm.wait_event(channel, E.CONNECT_REQUEST, TIMEOUT)
            server = Side(ib, req.id, qp_type=ib.QPType.UD)
            server.qp.attach_mcast(MCAST_GID, 0)
            with pytest.raises(ib.VerbsError) as e:
                server.qp.close()
            assert e.value.errno == errno.EBUSY and not server.qp.closed
            assert req.id.qp is server.qp
            req.id.accept()
            ev = cm.wait_event(channel, E.ESTABLISHED, TIMEOUT)
            assert ev.id is client_id and ev.param.qp_num == server.qp.qp_num
            server.qp.detach_mcast(MCAST_GID, 0)
        finally:
            client.close()
            if server is not None:
                server.close()


# ---- fork() children ------------------------------------------------------------------

def test_inherited_cmids_and_their_contexts_stay_the_parents(ib, cm, channel):
    with channel.create_id() as parent_id:
        parent_id.bind_addr(SERVER_IP)
        parent_ctx = parent_id.context

        def child():
            for inherited in (lambda: parent_ctx.alloc_pd(), lambda: parent_id.listen()):
                with pytest.raises(ib.VerbsError) as exc:
                    inherited()
                assert exc.value.errno == errno.EBADF, exc.value
            return "ok"

        assert in_fork_child(child) == "ok"
        with parent_ctx.alloc_pd():            # still the parent's, and usable here
            pass


# A pre-fork server: the parent has verbs objects (so the fork() check is
# armed) and an rdma_cm channel and ID, but has bound none to a device; each
# worker then uses rdma_cm of its own.  (A parent that bound IDs has
# librdmacm's device contexts open: a child's librdmacm hands it those,
# and the kernel refuses a write() on the parent's device file from
# another process, EACCES on rxe's post_send doorbell.)
FORK_SCRIPT = textwrap.dedent("""
    import errno, os, sys
    import numpy as np
    import ibverbs as ib
    from ibverbs import cm

    S, C, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    E = cm.CMEventType
    parent_channel = cm.create_event_channel()
    inherited = parent_channel.create_id()
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        inherited.close()
        parent_channel.close()
        sys.exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 99)
    try:
        try:
            inherited.listen()
            raise AssertionError("the parent's CMID worked in the child")
        except ib.VerbsError as exc:
            assert exc.errno == errno.EBADF, exc
        wait = lambda ch, kind: cm.wait_event(ch, kind, 20)
        with cm.create_event_channel() as ch:
            listener = ch.create_id()
            listener.bind_addr((S, port))
            listener.listen()
            client = ch.create_id()
            client.resolve_addr((S, port), src=C)
            wait(ch, E.ADDR_RESOLVED)
            client.resolve_route()
            wait(ch, E.ROUTE_RESOLVED)

            def side(cm_id, fill):
                ctx = cm_id.context            # borrowed, made in this process
                pd, cq = ctx.alloc_pd(), ctx.create_cq(8)
                qp = cm_id.create_qp(pd, ib.QPInitAttr(cq, cq))
                buf = np.full(16, fill, dtype=np.uint8)
                return [qp, ib.reg_tensor(pd, buf, ib.AccessFlags.LOCAL_WRITE), cq, pd], buf

            (cqp, cmr, ccq, cpd), _ = side(client, 0x5A)
            client.connect()
            req = wait(ch, E.CONNECT_REQUEST)
            (sqp, smr, scq, spd), inbox = side(req.id, 0)
            sqp.post_recv(ib.RecvWR(wr_id=1, sg_list=[smr.sge()]))
            req.id.accept()
            wait(ch, E.ESTABLISHED)
            wait(ch, E.ESTABLISHED)
            cqp.post_send(ib.SendWR(wr_id=2, sg_list=[cmr.sge()], opcode=ib.WROpcode.SEND,
                                    send_flags=ib.SendFlags.SIGNALED))
            for cq in (ccq, scq):
                while not (wcs := cq.poll(1)):
                    pass
                wcs[0].raise_for_status()
            assert (inbox == 0x5A).all()
            client.disconnect()
            wait(ch, E.DISCONNECTED)
            req.id.disconnect()
            wait(ch, E.DISCONNECTED)
            for obj in (cqp, cmr, ccq, cpd, sqp, smr, scq, spd, client, req.id, listener):
                obj.close()
        print("ok", flush=True)
        os._exit(0)
    except BaseException as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        os._exit(1)
""")


def test_rdma_cm_works_in_a_fork_child(ib, cm, tmp_path):
    """A worker fork()ed from a pre-fork server connects, accepts, sends and
    disconnects with rdma_cm: the contexts librdmacm opens for its IDs are
    its own (they were marked the parent's: EBADF on their first use)."""
    script = tmp_path / "cm_fork.py"
    script.write_text(FORK_SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    result = subprocess.run([sys.executable, str(script), SERVER_IP, CLIENT_IP,
                             str(free_port())], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, timeout=120)
    assert (result.returncode, result.stdout.strip()) == (0, "ok"), result.stderr[-2000:]


# ---- events name their own CMID ------------------------------------------------------

def test_a_cm_event_finds_its_cmid_when_the_address_names_another(ib, cm, channel):
    """The registry says the ID's address is another CMID's (the test hook:
    as when an ID is destroyed and another made at its address while the
    event is read): the event still names its own CMID (by its token)."""
    from ibverbs import _ibverbs
    with channel.create_id() as cm_id, channel.create_id() as other:
        _ibverbs._registry_alias(cm_id, other)
        try:
            cm_id.resolve_addr((SERVER_IP, free_port()), src=CLIENT_IP)
            ev = cm.wait_event(channel, cm.CMEventType.ADDR_RESOLVED, TIMEOUT)
            assert ev.id is cm_id
        finally:
            _ibverbs._registry_alias(cm_id, cm_id)


def test_wait_event_takes_a_channel_fd_above_1023(ib, cm, fds_above_1023):
    with cm.create_event_channel() as ch:
        assert ch.fd >= 1024
        with pytest.raises(TimeoutError):
            cm.wait_event(ch, timeout=0.2)
        with ch.create_id() as cm_id:
            cm_id.resolve_addr((SERVER_IP, free_port()), src=CLIENT_IP)
            assert cm.wait_event(ch, cm.CMEventType.ADDR_RESOLVED, TIMEOUT).id is cm_id


# ---- fuzz: a thread closing CM QPs while connect/accept/disconnect run ----------------

CM_FUZZ_EXAMPLES = int(os.environ.get("IBVERBS_CM_FUZZ_EXAMPLES", "4"))


def _next_event(cm, channel, timeout):
    """The channel's next event within timeout, or None (any kind: which ones
    come depends on what was closed when)."""
    try:
        return cm.wait_event(channel, timeout=timeout)
    except TimeoutError:
        return None


def _closer(sides, plan, outcome):
    """The other thread: close the planned sides' QPs, each after its delay;
    each close() either destroys the QP or says EBUSY, nothing else."""
    import ibverbs as ib
    for who, delay in plan:
        time.sleep(delay)
        try:
            sides[who].qp.close()
            outcome.append((who, "closed"))
        except ib.VerbsError as exc:
            outcome.append((who, exc.errno))


@settings(max_examples=CM_FUZZ_EXAMPLES, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(during=st.sampled_from(["connect", "accept", "disconnect"]),
       plan=st.lists(st.tuples(st.sampled_from(["client", "server"]),
                               st.sampled_from([0.0, 0.1, 0.4, 0.8])), min_size=1, max_size=3),
       high=st.booleans())
def test_fuzz_closing_cm_qps_from_a_thread_during_cm_calls(ib, cm, during, plan, high):
    """Whatever is closed when: every close() destroys the QP or says
    EBUSY, never frees one librdmacm is moving (connect, accept, disconnect
    paused inside librdmacm by the test hook for 0.3 s, the closes timed
    from the pause on); a destroyed QP has left its ID, an open one is still
    on it; channel fds above 1023 when high."""
    E = cm.CMEventType
    port = free_port()
    with (high_fds() if high else contextlib.nullcontext()), cm.create_event_channel() as ch:
        listener = ch.create_id()
        client_id = ch.create_id()
        sides, outcome, closer = {}, [], None
        try:
            listener.bind_addr((SERVER_IP, port))
            listener.listen()
            client_id.resolve_addr((SERVER_IP, port), src=CLIENT_IP)
            assert cm.wait_event(ch, E.ADDR_RESOLVED, TIMEOUT).id is client_id
            client_id.resolve_route()
            cm.wait_event(ch, E.ROUTE_RESOLVED, TIMEOUT)
            sides["client"] = Side(ib, client_id)

            def call(name, fn):
                nonlocal closer
                if name != during or closer is not None:
                    return fn()
                mine = [(w, d) for w, d in plan if w in sides]
                closer = threading.Thread(target=_closer, args=(sides, mine, outcome), daemon=True)

                def paused():
                    closer.start()
                    time.sleep(0.3)
                return run_paused(fn, paused, TIMEOUT)

            call("connect", lambda: client_id.connect(retry_count=5, rnr_retry_count=6))
            request = cm.wait_event(ch, E.CONNECT_REQUEST, TIMEOUT)
            sides["server"] = Side(ib, request.id)
            call("accept", request.id.accept)
            while _next_event(cm, ch, 2.0) is not None:      # ESTABLISHED, CONNECT_RESPONSE, ...
                pass
            for who in ("client", "server"):
                try:
                    call("disconnect", sides[who].cm_id.disconnect)
                except ib.VerbsError:
                    pass            # not connected (what was closed decides)
            while _next_event(cm, ch, 1.0) is not None:
                pass
        finally:
            if closer is not None:
                closer.join(TIMEOUT)
            for side in sides.values():
                assert side.cm_id.qp is (None if side.qp.closed else side.qp)
                side.close()
            client_id.close()
            listener.close()
    assert all(what in ("closed", errno.EBUSY) for _, what in outcome), outcome


@pytest.mark.parametrize("call", ["resolve_route", "connect", "accept", "disconnect",
                                  "establish"])
def test_calls_that_need_a_device_refuse_a_cmid_without_one(ib, channel, call):
    """librdmacm dereferences id->verbs in these (resolve_route, disconnect:
    a segfault on a fresh CMID, found by test_gil.py): VerbsError EINVAL."""
    with channel.create_id() as cm_id:
        with pytest.raises(ib.VerbsError, match="no (device|address) yet") as exc:
            getattr(cm_id, call)()
        assert exc.value.errno == errno.EINVAL
