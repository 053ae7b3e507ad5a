"""The device tier across two kernels: node1 and node2, each with rxe0,
QPInfo over TCP, connect_rc and find_gid on each side; UD through an AH
built from the peer's GID; rdma_cm by name and by address; an MTU
mismatch; the CLI between the nodes.  Every test checks what landed on
the other node, not just that the calls returned."""
from __future__ import annotations

import json

import pytest

from conftest import pair, wait_all

SUCCESS = 0
# ibv_wc_opcode
SEND, RDMA_WRITE, RDMA_READ, CMP_SWAP, FETCH_ADD = 0, 1, 2, 3, 4
RECV, RECV_RDMA_WITH_IMM = 128, 129
MTU_1024, MTU_4096 = 3, 5


def check_rc(srv: dict, cli: dict) -> None:
    """Everything the client posted completed, in order, and arrived."""
    assert [(w["wr_id"], w["status"], w["opcode"]) for w in cli["send_wcs"]] == [
        (1, SUCCESS, RDMA_WRITE), (2, SUCCESS, RDMA_READ), (3, SUCCESS, SEND),
        (4, SUCCESS, SEND), (5, SUCCESS, FETCH_ADD), (6, SUCCESS, CMP_SWAP)]
    exp = cli["expect"]
    assert srv["write_sha"] == exp["write"]            # the WRITE landed on node1
    assert cli["read_sha"] == exp["read"]              # the READ brought node1's bytes
    recvs = srv["recv_wcs"]
    assert [(w["wr_id"], w["status"], w["opcode"], w["with_imm"]) for w in recvs] == [
        (10, SUCCESS, RECV, False), (11, SUCCESS, RECV, True)]
    assert recvs[1]["imm"] == 0x12345678
    assert srv["send_sha"] == exp["send"] and srv["imm_send_sha"] == exp["imm_send"]
    assert cli["olds"] == [100, 105]                   # fetch-add saw 100, cmp-swap 105
    assert srv["word"] == 7                            # 100 + 5, swapped for 7


def test_rc_every_operation_between_nodes(node1, node2, tcp_port):
    srv, cli = pair(node1, node2, "rc", tcp_port, "--size 65536")
    check_rc(srv, cli)
    assert srv["path_mtu"] == cli["path_mtu"] == MTU_1024      # both at 1500


def test_ud_through_an_address_handle_from_the_peers_gid(node1, node2, tcp_port):
    srv, cli = pair(node2, node1, "ud", tcp_port, "--size 512")
    assert cli["wc"]["status"] == SUCCESS and srv["wc"]["status"] == SUCCESS
    assert srv["wc"]["byte_len"] == 40 + 512
    assert srv["payload_sha"] == cli["payload_sha"]
    assert srv["grh_flag"] and srv["src_qp"] == srv["client_qpn"]
    # The GRH names node1 as the sender: its IPv4 header came over the wire.
    assert (srv["src_ip"], srv["dst_ip"]) == (node1.ip, node2.ip)
    assert srv["reply_dgid"] == srv["client_gid"]


@pytest.mark.parametrize("by", ["name", "address"])
def test_rdma_cm_blocking_api_resolves_the_other_node(node1, node2, tcp_port, by):
    host = "node1" if by == "name" else node1.ip
    s = node1.python("tests/cluster/peer.py cm-server --bind %s --port %d" % (node1.ip, tcp_port))
    c = node2.python("tests/cluster/peer.py cm-client --host %s --port %d" % (host, tcp_port))
    srv, cli = (r.json() for r in wait_all([s, c]))
    assert cli["status"] == SUCCESS and cli["reply"] == "world"
    assert (cli["device"], cli["host"], cli["local"], cli["peer"]) == (
        "rxe0", host, node2.ip, [node1.ip, tcp_port])
    [conn] = srv["connections"]
    assert conn == {"hello": "hello", "device": "rxe0", "peer": node2.ip,
                    "status": SUCCESS, "data": cli["data"]}
    assert srv["open_ids"] == 0


def test_rdma_cm_event_api_between_nodes(node1, node2, tcp_port):
    s = node1.python("tests/cluster/peer.py cm-events-server --port %d" % tcp_port)
    c = node2.python("tests/cluster/peer.py cm-events-client --host node1 --port %d" % tcp_port)
    srv, cli = (r.json() for r in wait_all([s, c]))
    assert cli["established_id_ok"] and cli["reply"] == "events"
    assert srv["request_listen_id_ok"] and srv["established_id_ok"] and srv["disconnected_id_ok"]
    assert srv["private"] == "hello" and srv["peer"] == node2.ip
    assert srv["status"] == cli["status"] == SUCCESS and srv["data"] == cli["data"]


def cm_fail(node, host, port, timeout=10):
    r = node.python("tests/cluster/peer.py cm-fail --host %s --port %d --timeout %g"
                    % (host, port, timeout)).wait().check().json()
    assert r["open_ids"] == 0 and r["open_channels"] == 0       # nothing left open
    return r


def test_rdma_cm_connect_refused_by_the_other_node(node2, tcp_port):
    import errno
    r = cm_fail(node2, "node1", tcp_port)
    assert r["resolved"] and "connected" not in r
    assert (r["operation"], r["errno"]) == ("rdma_connect", errno.ECONNREFUSED), r
    assert r["secs"] < 10


def test_rdma_cm_peer_unreachable(node2, tcp_port):
    """10.0.1.99 is on the wire's subnet; nobody answers its ARP."""
    r = cm_fail(node2, "10.0.1.99", tcp_port, timeout=10)
    assert "resolved" not in r and r["errno"] != 0
    assert r["operation"] in ("rdma_resolve_addr", "rdma_resolve_route"), r


def test_rdma_cm_resolve_timeout(node2, tcp_port):
    """A timeout shorter than the ARP retries: ETIMEDOUT from our wait,
    within about the time asked for."""
    import errno
    r = cm_fail(node2, "10.0.1.98", tcp_port, timeout=0.5)
    assert r["operation"] == "rdma_resolve_addr" and r["errno"] in (errno.ETIMEDOUT,
                                                                     errno.EHOSTUNREACH), r
    assert r["secs"] < 5


def test_mtu_mismatch_negotiates_the_smaller_path_mtu(node1, node2, tcp_port):
    """node2 at 9000 (rxe: 4096), node1 at 1500 (rxe: 1024): connect_rc
    takes the smaller on both sides, and 1 MiB messages arrive whole."""
    node2.run("ip link set eth0 mtu 9000")
    try:
        srv, cli = pair(node1, node2, "rc", tcp_port, "--size 1048576")
    finally:
        node2.run("ip link set eth0 mtu 1500")
    assert cli["active_mtu"] == MTU_4096 and srv["active_mtu"] == MTU_1024
    assert srv["path_mtu"] == cli["path_mtu"] == MTU_1024
    check_rc(srv, cli)


def test_cli_ping_between_nodes_and_info_on_each(node1, node2, tcp_port):
    cli = "%s -m ibverbs" % node1.cluster_python
    s = node1.spawn("%s ping --listen -d rxe0 --port %d --json --timeout 120" % (cli, tcp_port))
    # Until the listener is up an attempt prints its error as JSON too: only
    # the one that succeeded is kept.
    c = node2.spawn("for i in $(seq 60); do out=$(%s ping node1 -d rxe0 --port %d -n 200 -s 8 "
                    "--json) && { echo \"$out\"; exit 0; }; sleep 0.5; done; exit 1"
                    % (cli, tcp_port))
    res_s, res_c = wait_all([s, c])
    ping = json.loads(res_c.out[res_c.out.index("{"):])
    served = json.loads(res_s.out[res_s.out.rindex("{\n"):]) if "{\n" in res_s.out else None
    assert ping["round_trips"] == 200 and ping["peer"] == "node1"
    assert served is None or served["served"] == 200
    print("ibverbs ping -s 8 node2 -> node1: median %.0f us" % ping["median_us"])
    for node in (node1, node2):
        info = json.loads(node.run("%s info --json" % cli).out)
        text = json.dumps(info)
        assert "rxe0" in text and "rxe1" not in text         # one device per node
        gids = json.loads(node.run("%s gids --json" % cli).out)
        assert any(g["index"] == 1 and g["ipv4"] == node.ip and "v2" in str(g["type"]).lower()
                   for g in gids), gids
