"""Device memory, flow steering, flow counters, work queues and RSS tables.

Soft-RoCE implements none of them: each verb must fail with a clean
VerbsError (EOPNOTSUPP, or the errno libibverbs gives for a missing
provider op), bad input must be caught before the verb, and nothing may
leak (the module's leak accounting checks the kernel's and our counts)."""
import errno

import pytest

UNSUPPORTED = (errno.EOPNOTSUPP, errno.ENOSYS, errno.EPROTONOSUPPORT, errno.EINVAL)


def assert_unsupported(excinfo, verb):
    assert excinfo.value.errno in UNSUPPORTED, excinfo.value
    assert verb in str(excinfo.value)


def test_alloc_dm_is_unsupported_and_checks_arguments(ib, ctx):
    with pytest.raises(ib.VerbsError) as e:
        ctx.alloc_dm(4096)
    assert_unsupported(e, "ibv_alloc_dm")
    with pytest.raises(ValueError):
        ctx.alloc_dm(0)
    with pytest.raises(ValueError):
        ctx.alloc_dm(4096, log_align_req=-1)
    with pytest.raises(TypeError):
        ctx.alloc_dm("4096")
    assert ib.DM._open_count() == 0


def test_import_dm_of_an_unknown_handle_fails_cleanly(ib, ctx):
    with pytest.raises((ib.VerbsError, RuntimeError)) as e:
        ctx.import_dm(12345)
    assert "ibv_import_dm" in str(e.value)
    unavailable = isinstance(e.value, RuntimeError)     # rdma-core < 35: not exported
    if unavailable:
        assert "unavailable" in str(e.value)
    else:
        assert e.value.errno != 0
    with pytest.raises(RuntimeError if unavailable else ValueError):
        ctx.import_dm(-1)
    assert ib.DM._open_count() == 0


def test_create_counters_is_unsupported(ib, ctx):
    with pytest.raises(ib.VerbsError) as e:
        ctx.create_counters()
    assert_unsupported(e, "ibv_create_counters")
    assert ib.Counters._open_count() == 0


def test_create_wq_is_unsupported_and_checks_its_cq(ib, ctx, ctx2, pd, cq):
    with pytest.raises(ib.VerbsError) as e:
        pd.create_wq(cq, wq_type=ib.WQType.RQ, max_wr=16)
    assert_unsupported(e, "ibv_create_wq")
    with pytest.raises(TypeError):
        pd.create_wq(object())
    with pytest.raises(TypeError):
        pd.create_wq()
    with pytest.raises(ValueError):
        pd.create_wq(cq, max_wr=0)
    if ctx2.name != ctx.name:
        with ctx2.create_cq(8) as other:
            with pytest.raises(ValueError, match="another context"):
                pd.create_wq(other)
    closed = ctx.create_cq(4)
    closed.close()
    with pytest.raises(ib.VerbsError) as e:
        pd.create_wq(closed)
    assert e.value.errno == errno.EBADF
    assert ib.WQ._open_count() == 0
    # the CQ and PD were not left counted as parents of a WQ
    cq.close()
    pd.close()


def test_create_rwq_ind_table_checks_its_wq_list(ib, ctx, cq):
    with pytest.raises(ValueError, match="power of two"):
        ctx.create_rwq_ind_table([])
    with pytest.raises(TypeError, match="must be a WQ"):
        ctx.create_rwq_ind_table([cq])
    with pytest.raises(TypeError, match=r"wqs\[0\] must be a WQ, not CQ"):
        ctx.create_rwq_ind_table([cq, cq, cq])     # each item is checked before the count
    with pytest.raises(TypeError, match="wqs must be a sequence"):
        ctx.create_rwq_ind_table(5)
    assert ib.RWQIndTable._open_count() == 0


def test_create_flow_is_unsupported_on_rc_qps_of_rxe(ib, pd, cq):
    with pd.create_qp(ib.QPInitAttr(cq, cq)) as qp:
        rule = ib.FlowAttr([ib.FlowSpecEth(dst_mac="02:00:00:00:00:01", ether_type=0x0800),
                            ib.FlowSpecIPv4(dst_ip="10.0.0.1"),
                            ib.FlowSpecTCPUDP("udp", dst_port=4791)], port=1)
        with pytest.raises(ib.VerbsError) as e:
            qp.create_flow(rule)
        assert_unsupported(e, "ibv_create_flow")
        with pytest.raises(TypeError):
            qp.create_flow(b"\0" * 20)
        with pytest.raises(ValueError, match="packed struct ibv_flow_attr"):
            qp._create_flow(b"\0" * 8)
        with pytest.raises(ValueError, match="packed struct ibv_flow_attr"):
            qp._create_flow(rule.pack() + b"\0")     # size field disagrees
    assert ib.Flow._open_count() == 0


def test_create_flow_refuses_specs_libibverbs_would_walk_past_the_rule(ib, pd, cq):
    """libibverbs steps from spec to spec by each header's size, num_of_specs
    times, with no bound: a header that lies is refused before the verb
    (rxe would answer EOPNOTSUPP; a NIC with flow steering reads past)."""
    import struct
    rule = ib.FlowAttr([ib.FlowSpecEth(ether_type=0x0800)]).pack()
    lying = rule[:24] + struct.pack("=H", 400) + rule[26:]      # the spec's hdr.size
    extra = bytearray(rule + ib.FlowSpecEth().pack())         # a spec num_of_specs omits
    struct.pack_into("=H", extra, 8, len(extra))
    with pd.create_qp(ib.QPInitAttr(cq, cq)) as qp:
        for bad in (lying, bytes(extra)):
            with pytest.raises(ValueError, match="attr's specs must fill it"):
                qp._create_flow(bad)
        with pytest.raises(ib.VerbsError) as e:     # the honest rule reaches rxe
            qp._create_flow(rule)
        assert_unsupported(e, "ibv_create_flow")
    assert ib.Flow._open_count() == 0


def test_raw_packet_qp_is_refused_by_rxe(ib, pd, cq):
    # Flow steering and RSS need raw packet QPs, which rxe does not create.
    with pytest.raises(ib.VerbsError):
        pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RAW_PACKET))


def test_odp_registration_and_prefetch_fail_cleanly(ib, pd, make_buffer, access):
    """On-demand paging: rxe of Linux 6.1 has none, so an ON_DEMAND
    registration is refused by the kernel and ibv_advise_mr (a prefetch of
    an ordinary MR) by the provider; nothing is registered by either."""
    buf = make_buffer(4096, fill=3)
    with pytest.raises(ib.VerbsError) as e:
        pd.reg_mr(buf.addr, 4096, access | ib.AccessFlags.ON_DEMAND)
    assert_unsupported(e, "ibv_reg_mr")
    PREFETCH, PREFETCH_WRITE, FLAG_FLUSH = 0, 1, 1      # enum ib_uverbs_advise_mr_*
    for advice, flags in ((PREFETCH, 0), (PREFETCH_WRITE, FLAG_FLUSH)):
        with pytest.raises(ib.VerbsError) as e:
            buf.mr.advise_mr(advice, flags)
        assert_unsupported(e, "ibv_advise_mr")
    with pytest.raises(ValueError):
        buf.mr.advise_mr(-1)
    assert not buf.mr.closed and bytes(buf.array[:4]) == b"\x03" * 4
