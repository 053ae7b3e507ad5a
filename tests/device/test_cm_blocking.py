"""The seed's blocking rdma_cm API (CMID.resolve / connect, and its
listening counterpart CMID.listen_on / get_request / accept) across
rxe0 (10.0.0.1, the server) and rxe1 (10.0.0.2, the client), in two
processes, and its failures: refused, unreachable, timed out.  The
module's leak check proves each leaves nothing open.
"""
import errno
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import rxe
from conftest import poll_until, warm_up_librdmacm

SERVER_IP, CLIENT_IP = rxe.VM_DEVICES["rxe0"], rxe.VM_DEVICES["rxe1"]
TIMEOUT = 60.0      # TCG emulation is slow


warm_up_librdmacm()


@pytest.fixture
def cm(ib, device_names):
    from ibverbs import cm
    if not ib._ibverbs._has_rdmacm():
        pytest.skip("librdmacm.so.1 is not installed")
    return cm


_next_port = [7600]


def free_port():
    _next_port[0] += 1
    return _next_port[0]


SERVER_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import ibverbs as ib

    with ib.CMID.listen_on(sys.argv[2], int(sys.argv[1]), timeout=60) as listener:
        print("listening", flush=True)
        conn = listener.get_request()
        pd = conn.context.alloc_pd()
        cq = conn.context.create_cq(8)
        qp = conn.create_qp(pd, ib.QPInitAttr(cq, cq))
        buf = np.zeros(32, dtype=np.uint8)
        mr = ib.reg_tensor(pd, buf, ib.AccessFlags.LOCAL_WRITE)
        qp.post_recv(ib.RecvWR(wr_id=5, sg_list=[mr.sge()]))
        hello = conn.accept(b"world", initiator_depth=1, rnr_retry_count=7)
        print("accepted", conn.connected, hello[:5].decode(), conn.context.name, flush=True)
        while not (wcs := cq.poll(1)):
            pass
        wcs[0].raise_for_status()
        print("got", bytes(buf[:wcs[0].byte_len]).hex(), flush=True)
        sys.stdin.readline()              # the client is done
        conn.disconnect()
        for obj in (qp, mr, cq, pd, conn):
            obj.close()
    print("done", ib.CMID._open_count(), ib.EventChannel._open_count(), flush=True)
""")


def test_client_and_server_in_two_processes(ib, cm, tmp_path):
    port = free_port()
    script = tmp_path / "cm_blocking_server.py"
    script.write_text(SERVER_SCRIPT)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    server = subprocess.Popen([sys.executable, str(script), str(port), SERVER_IP],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    try:
        line = server.stdout.readline().strip()
        if line != "listening":
            server.kill()
            pytest.fail(f"the server process did not start: {server.communicate()[1][-2000:]}")
        with ib.CMID.resolve(SERVER_IP, port, source=CLIENT_IP, timeout=TIMEOUT) as cm_id:
            assert (cm_id.host, cm_id.port, cm_id.source, cm_id.connected) == (
                SERVER_IP, port, CLIENT_IP, False)
            assert cm_id.context.name == "rxe1"          # the source address picks the device
            pd = cm_id.context.alloc_pd()
            cq = cm_id.context.create_cq(8)
            qp = cm_id.create_qp(pd, ib.QPInitAttr(cq, cq))
            # by position, as the C method takes them (responder_resources,
            # initiator_depth, flow_control, retry_count, rnr_retry_count)
            reply = cm_id.connect(b"hello", 1, 1, 1, 6, 7)
            assert reply[:5] == b"world" and cm_id.connected
            assert server.stdout.readline().split() == ["accepted", "True", "hello", "rxe0"]
            payload = np.arange(16, dtype=np.uint8) + 100
            mr = ib.reg_tensor(pd, payload, ib.AccessFlags.LOCAL_WRITE)
            qp.post_send(ib.SendWR(wr_id=9, sg_list=[mr.sge()], opcode=ib.WROpcode.SEND,
                                   send_flags=ib.SendFlags.SIGNALED))
            [wc] = poll_until(cq)
            wc.raise_for_status()
            assert server.stdout.readline().split() == ["got", bytes(payload).hex()]
            server.stdin.write("done\n")
            server.stdin.flush()
            cm_id.disconnect()
            assert not cm_id.connected
            cm_id.disconnect()                           # not connected: nothing to do
            with pytest.raises(ib.VerbsError) as busy:
                cm_id.close()                            # its QP is open
            assert busy.value.errno == errno.EBUSY
            for obj in (qp, mr, cq, pd):
                obj.close()
        assert cm_id.closed
        out, err = server.communicate(timeout=120)
        assert server.returncode == 0, err
        assert out.split() == ["done", "0", "0"]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_connecting_to_a_port_without_listener_fails_cleanly(ib, cm):
    with ib.CMID.resolve(SERVER_IP, free_port(), source=CLIENT_IP, timeout=TIMEOUT) as cm_id:
        pd = cm_id.context.alloc_pd()
        cq = cm_id.context.create_cq(8)
        qp = cm_id.create_qp(pd, ib.QPInitAttr(cq, cq))
        with pytest.raises(ib.VerbsError) as refused:
            cm_id.connect(b"anyone?")
        assert refused.value.operation == "rdma_connect"
        assert refused.value.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ETIMEDOUT)
        assert not cm_id.connected
        for obj in (qp, cq, pd):
            obj.close()


def test_resolving_an_unreachable_address_fails_and_leaves_nothing_open(ib, cm):
    """10.0.0.99 is on the veth subnet but nobody answers ARP."""
    ids, channels = ib.CMID._open_count(), ib.EventChannel._open_count()
    with pytest.raises(ib.VerbsError) as failed:
        ib.CMID.resolve("10.0.0.99", 4420, source=CLIENT_IP, timeout=2)
    assert failed.value.errno != 0
    assert failed.value.operation in ("rdma_resolve_addr", "rdma_resolve_route")
    assert (ib.CMID._open_count(), ib.EventChannel._open_count()) == (ids, channels)


def test_waiting_for_a_request_times_out_cleanly(ib, cm):
    ids, channels = ib.CMID._open_count(), ib.EventChannel._open_count()
    with ib.CMID.listen_on(SERVER_IP, free_port()) as listener:
        with pytest.raises(ib.VerbsError) as late:
            listener.get_request(timeout=0.5)
        assert late.value.errno == errno.ETIMEDOUT and "within 0.5 s" in str(late.value)
    assert listener.closed
    assert (ib.CMID._open_count(), ib.EventChannel._open_count()) == (ids, channels)


def test_the_event_driven_api_is_unchanged_on_the_same_class(ib, cm):
    with cm.create_event_channel() as ch, ch.create_id() as cm_id:
        assert isinstance(cm_id, ib.CMID) and type(cm_id) is ib.CMID
        assert (cm_id.host, cm_id.connected) == (None, False)
        with pytest.raises(ValueError, match="CMID.resolve or CMID.listen_on"):
            cm_id.get_request(timeout=0.1)
        cm_id.resolve_addr((SERVER_IP, 1), src=CLIENT_IP)       # returns at once
        ev = cm.wait_event(ch, cm.CMEventType.ADDR_RESOLVED, TIMEOUT)
        assert ev.id is cm_id


def test_the_blocking_api_takes_channel_fds_above_1023(ib, cm, fds_above_1023):
    """A server with a thousand connections has channel fds of 1024 and
    more: each wait polls them (select() raised ValueError)."""
    with ib.CMID.resolve(SERVER_IP, free_port(), source=CLIENT_IP, timeout=TIMEOUT) as cm_id:
        assert cm_id._channel.fd >= 1024 and cm_id.context.name == "rxe1"
    with ib.CMID.listen_on(SERVER_IP, free_port()) as listener:
        assert listener._channel.fd >= 1024
        with pytest.raises(ib.VerbsError) as late:
            listener.get_request(timeout=0.3)
        assert late.value.errno == errno.ETIMEDOUT


def _serve_one(ib, port, ready, done, out):
    """A blocking server in a thread: accept one connection with b"world",
    keep it until done is set."""
    try:
        with ib.CMID.listen_on(SERVER_IP, port, timeout=TIMEOUT) as listener:
            ready.set()
            conn = listener.get_request()
            pd = conn.context.alloc_pd()
            cq = conn.context.create_cq(8)
            qp = conn.create_qp(pd, ib.QPInitAttr(cq, cq))
            out.append(conn.accept(b"world"))
            done.wait(TIMEOUT)
            conn.disconnect()
            for obj in (qp, cq, pd, conn):
                obj.close()
    except BaseException as exc:     # reported by the test
        out.append(exc)
        ready.set()


def test_connect_takes_private_data_as_accept_does(ib, cm):
    """connect(None) sends none (it raised TypeError), connect(16) is a
    TypeError before anything is sent (it sent 16 zero bytes), as accept()."""
    import threading
    port = free_port()
    ready, done, out = threading.Event(), threading.Event(), []
    server = threading.Thread(target=_serve_one, args=(ib, port, ready, done, out), daemon=True)
    server.start()
    try:
        assert ready.wait(TIMEOUT) and not out, out
        with ib.CMID.resolve(SERVER_IP, port, source=CLIENT_IP, timeout=TIMEOUT) as cm_id:
            pd = cm_id.context.alloc_pd()
            cq = cm_id.context.create_cq(8)
            qp = cm_id.create_qp(pd, ib.QPInitAttr(cq, cq))
            with pytest.raises(TypeError):
                cm_id.connect(16)
            assert not cm_id.connected
            reply = cm_id.connect(None)
            assert reply[:5] == b"world" and cm_id.connected
            # the server's accept() returns on its ESTABLISHED (the RTU): a
            # DREQ that overtakes a late RTU under load is DISCONNECTED there
            deadline = time.monotonic() + TIMEOUT
            while not out and time.monotonic() < deadline:
                time.sleep(0.01)
            done.set()
            cm_id.disconnect()
            for obj in (qp, cq, pd):
                obj.close()
    finally:
        done.set()
        server.join(TIMEOUT)
    assert not server.is_alive()
    assert len(out) == 1 and isinstance(out[0], bytes), out     # the request data, padded
    assert out[0] == bytes(len(out[0]))
