"""Device discovery and the queries of a device context."""
import errno

import pytest

import rxe


def test_device_list_names_the_rdma_devices_in_sysfs(ib):
    names = sorted(d.name for d in ib.get_device_list())
    assert names == rxe.rdma_devices()
    assert all(d.guid != 0 for d in ib.get_device_list())


def test_open_by_name_and_context_attributes(ib, device_names):
    dev = next(d for d in ib.get_device_list() if d.name == device_names[0])
    with dev.open() as ctx:
        assert ctx.name == device_names[0]
        assert ctx.num_comp_vectors >= 1
        assert isinstance(ctx.async_fd, int) and ctx.async_fd >= 0
        assert not ctx.closed
    assert ctx.closed


def test_open_unknown_device_raises_verbs_error(ib):
    with pytest.raises(ib.VerbsError) as exc:
        ib.Device("no_such_device", 0).open()
    assert exc.value.errno == errno.ENODEV


def test_query_device_reports_capabilities(ib, ctx):
    attr = ctx.query_device()
    assert isinstance(attr.fw_ver, str)
    assert attr.phys_port_cnt >= 1
    assert attr.max_qp > 0 and attr.max_cqe > 0 and attr.max_mr_size > 0
    assert attr.max_sge >= 1 and attr.max_qp_wr > 0
    assert attr.node_guid != 0
    ex = ctx.query_device_ex()
    assert ex.orig_attr.max_qp == attr.max_qp
    assert "max_qp" in attr._asdict()


def test_query_port_is_active_ethernet(ib, ctx, port):
    attr = ctx.query_port(port)
    assert attr.state == ib.PortState.ACTIVE
    assert attr.link_layer == ib.LinkLayer.ETHERNET
    assert ib.MTU.MTU_256 <= attr.active_mtu <= attr.max_mtu
    assert attr.gid_tbl_len > 0


def test_query_port_out_of_range_raises(ib, ctx):
    with pytest.raises(ib.VerbsError):
        ctx.query_port(99)
    with pytest.raises(ValueError):
        ctx.query_port(256)


def test_query_gid_matches_sysfs(ib, ctx, device_names, port, gid_index):
    gid = ctx.query_gid(port, gid_index)
    assert isinstance(gid, ib.Gid)
    with open(f"/sys/class/infiniband/{device_names[0]}/ports/{port}/gids/{gid_index}") as f:
        assert str(gid) == f.read().strip()
    assert gid.raw[10:12] == b"\xff\xff"      # IPv4-mapped
    assert gid == gid.raw and bytes(gid) == gid.raw


def test_query_gid_ex_and_table_give_the_roce_v2_entry(ib, ctx, port, gid_index):
    entry = ctx.query_gid_ex(port, gid_index)
    assert entry.gid_type == ib.GIDType.ROCE_V2
    assert entry.gid_index == gid_index and entry.port_num == port
    table = ctx.query_gid_table()
    assert any(e.gid == entry.gid and e.gid_index == gid_index for e in table)


def test_query_pkey_default_partition(ctx, port):
    assert ctx.query_pkey(port, 0) == 0xFFFF
    assert ctx.get_pkey_index(port, 0xFFFF) == 0


def test_string_helpers(ib):
    assert ib.wc_status_str(ib.WCStatus.SUCCESS) == "success"
    assert ib.port_state_str(ib.PortState.ACTIVE) == "active"
    assert ib.node_type_str(ib.NodeType.CA) == "InfiniBand channel adapter"
    assert ib.rate_to_mbps(ib.Rate.RATE_10_GBPS) == 10000
    assert ib.rate_to_mult(ib.Rate.RATE_10_GBPS) == 4
    assert ib.mult_to_rate(4) == ib.Rate.RATE_10_GBPS
    assert ib.is_qpt_supported(1 << ib.QPType.RC, ib.QPType.RC)
    assert not ib.is_qpt_supported(0, ib.QPType.RC)
