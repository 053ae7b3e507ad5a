"""Thread domains, extended SRQs (PD.create_srq_ex) and importing the
objects of a context through its command FD (import_device, import_pd,
import_mr).  rxe has neither thread domains nor import: those are clean
VerbsErrors that leave nothing behind."""
import errno
import os

import pytest

from conftest import poll_until, skip_if_unsupported
from test_qpex import QPExPair


def open_counts(ib):
    return {name: getattr(ib, name)._open_count()
            for name in ("Context", "PD", "MR", "TD", "ImportedPD", "ImportedMR", "SRQ")}


# ---- thread domains ---------------------------------------------------------------

def test_alloc_td_is_a_clean_error_on_rxe(ib, ctx):
    before = open_counts(ib)
    try:
        td = ctx.alloc_td()
    except ib.VerbsError as e:
        assert e.errno in (errno.EOPNOTSUPP, errno.ENOSYS)
    else:       # a provider with thread domains
        assert isinstance(td, ib.TD) and td.context is ctx
        with pytest.raises(ib.VerbsError) as e:
            ctx.close()
        assert e.value.errno == errno.EBUSY
        td.close()
        assert td.closed
    assert open_counts(ib) == before


# ---- importing a context's objects -------------------------------------------------

def test_import_device_of_a_dup_of_cmd_fd(ib, ctx, pd, access):
    before = open_counts(ib)
    fd = os.dup(ctx.cmd_fd)
    try:
        imported = ib.import_device(fd)
    except ib.VerbsError as e:
        # rxe has no import_context: refused, and the FD is still ours
        assert e.errno == errno.EOPNOTSUPP
        os.fstat(fd)
        os.close(fd)
        assert open_counts(ib) == before
        return
    # A provider that can: the imported context sees the same PD and MR
    # objects; closing the imports unimports them, the owners keep them.
    import numpy as np
    buf = np.zeros(4096, dtype=np.uint8)
    mr = pd.reg_mr(buf.ctypes.data, 4096, access)
    ipd = imported.import_pd(pd.handle)
    assert isinstance(ipd, ib.ImportedPD) and isinstance(ipd, ib.PD)
    assert ipd.handle == pd.handle and ipd.context is imported
    imr = ipd.import_mr(mr.handle)
    assert isinstance(imr, ib.ImportedMR) and imr.pd is ipd
    assert (imr.lkey, imr.rkey, imr.addr, imr.length) == (mr.lkey, mr.rkey, mr.addr, mr.length)
    with pytest.raises(ib.VerbsError):
        ipd.close()                     # its imported MR is open
    imr.close()
    ipd.close()
    imported.close()
    with pytest.raises(OSError):
        os.fstat(fd)                    # the imported context owned the FD
    assert mr.lkey and pd.handle        # still the owner's, still open
    mr.close()
    assert open_counts(ib) == before


def test_import_device_refuses_what_is_not_a_verbs_fd(ib):
    with pytest.raises(ValueError):
        ib.import_device(-1)
    with pytest.raises(TypeError):
        ib.import_device("3")
    r, w = os.pipe()
    try:
        with pytest.raises(ib.VerbsError):
            ib.import_device(r)
        os.fstat(r)                     # not taken on failure
    finally:
        os.close(r)
        os.close(w)


def test_import_pd_and_import_mr_are_clean_errors_on_rxe(ib, ctx, pd, make_buffer):
    buf = make_buffer(4096)
    before = open_counts(ib)
    with pytest.raises(ib.VerbsError) as e:
        ctx.import_pd(pd.handle)
    assert e.value.errno == errno.EOPNOTSUPP
    with pytest.raises(ib.VerbsError) as e:
        pd.import_mr(buf.mr.handle)
    assert e.value.errno == errno.EOPNOTSUPP
    with pytest.raises(ValueError):
        ctx.import_pd(2**32)
    with pytest.raises(ValueError):
        pd.import_mr(-1)
    assert open_counts(ib) == before


# ---- extended SRQs ------------------------------------------------------------------

def test_create_srq_ex_makes_a_basic_srq_that_feeds_a_qp(ib, ctx, pd, port, gid_index,
                                                          access, make_buffer):
    skip_if_unsupported(ib, "extended SRQs", lambda: pd.create_srq_ex(max_wr=4))
    with ctx.create_cq(4) as cq:
        skip_if_unsupported(ib, "extended QP post API", lambda: pd.create_qp_ex(
            cq, cq, send_ops_flags=ib.QPCreateSendOps.SEND))
    with pd.create_srq_ex(max_wr=16, max_sge=2, srq_type=ib.SRQType.BASIC) as srq:
        assert isinstance(srq, ib.SRQ) and srq.pd is pd
        assert srq.xrcd is None and srq.cq is None
        assert srq.query()["max_wr"] >= 16
        with ctx.create_cq(16) as cq_a, ctx.create_cq(16) as cq_b:
            a = pd.create_qp_ex(cq_a, cq_a, send_ops_flags=ib.QPCreateSendOps.SEND)
            b = pd.create_qp_ex(cq_b, cq_b, srq=srq)
            try:
                assert b.srq is srq
                gid = ctx.query_gid(port, gid_index)
                info = lambda q, psn: ib.local_qp_info(q, ctx.query_port(port), gid,
                                                       port=port, psn=psn)
                ib.connect_rc(a, info(b, 2), port=port, sgid_index=gid_index,
                              access=access, local_psn=1)
                ib.connect_rc(b, info(a, 1), port=port, sgid_index=gid_index,
                              access=access, local_psn=2)
                src, dst = make_buffer(32, fill=0x61), make_buffer(32)
                srq.post_recv(ib.RecvWR(wr_id=77, sg_list=[dst.mr.sge()]))
                a.wr_start()
                a.wr_flags = ib.SendFlags.SIGNALED
                a.wr_send()
                a.wr_set_sge(src.mr.lkey, src.addr, 32)
                a.wr_complete()
                poll_until(cq_a, 1)[0].raise_for_status()
                (rwc,) = poll_until(cq_b, 1)
                rwc.raise_for_status()
                assert rwc.wr_id == 77 and rwc.qp_num == b.qp_num
                assert bytes(dst.array) == b"a" * 32
                with pytest.raises(ib.VerbsError) as e:
                    srq.close()         # a QP uses it
                assert e.value.errno == errno.EBUSY
            finally:
                a.close()
                b.close()


def test_create_srq_ex_keeps_its_cq_open(ib, ctx, pd):
    with ctx.create_cq(4) as cq:
        # rxe of rdma-core 33.2 refuses a CQ in struct ibv_srq_init_attr_ex
        skip_if_unsupported(ib, "extended SRQs with a CQ", lambda: pd.create_srq_ex(cq=cq))
        try:
            srq = pd.create_srq_ex(cq=cq)
        except ib.VerbsError as e:
            pytest.fail(f"a basic SRQ with a CQ given: {e}")
        assert srq.cq is cq
        with pytest.raises(ib.VerbsError) as e:
            cq.close()
        assert e.value.errno == errno.EBUSY
        srq.close()


def test_create_srq_ex_xrc_and_tag_matching_are_clean_errors_on_rxe(ib, ctx, pd):
    before = open_counts(ib)
    with ctx.create_cq(4) as cq:
        with pytest.raises(ib.VerbsError):
            pd.create_srq_ex(srq_type=ib.SRQType.XRC, cq=cq)       # no xrcd
        with pytest.raises(ib.VerbsError):
            pd.create_srq_ex(srq_type=ib.SRQType.TM, cq=cq, max_num_tags=4, max_ops=4)
    assert open_counts(ib) == before


def test_create_srq_ex_checks_its_arguments(ib, pd, ctx2):
    with pytest.raises(ValueError):
        pd.create_srq_ex(max_wr=0)
    with pytest.raises(ValueError):
        pd.create_srq_ex(srq_type=-1)
    with pytest.raises(TypeError):
        pd.create_srq_ex(xrcd=pd)
    with pytest.raises(TypeError):
        pd.create_srq_ex(cq="cq")
    with ctx2.create_cq(4) as other:
        with pytest.raises(ValueError, match="another context"):
            pd.create_srq_ex(cq=other)
