"""Bad input on real verbs objects: out-of-range integers and wrong types for
every argument of every method, callbacks that close what is in use, the
queue and QP misuse the verbs allow (overflow, posting in RESET, bad keys),
unmapped memory.  Only Python exceptions, never a crash, and the objects stay
usable afterwards.

The arguments and their bounds come from the generated C (the parser of
tests/host/test_bad_input_host.py), so a verb added to the spec is covered
without touching this file.
"""
from __future__ import annotations

import ctypes
import errno
import importlib.util
import mmap
import pathlib
import sys

import numpy as np
import pytest
import rxe

from conftest import RCPair, open_device, poll_until


def _host_module():
    path = pathlib.Path(__file__).resolve().parents[1] / "host" / "test_bad_input_host.py"
    name = "_ibverbs_bad_input_host"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module          # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


H = _host_module()
HANDLE_FILES = ("context", "compchannel", "cq", "mr", "mw", "pd", "qp", "srq", "ah", "xrcd",
                "qpex")
CLASS_NAMES = ("Context", "CompChannel", "CQ", "MR", "MW", "PD", "QP", "SRQ", "AH", "XRCD",
               "QPEx")


def _methods():
    """(class, method, params) of every generated method with arguments."""
    out = []
    for f in HANDLE_FILES:
        for cname, params in sorted(H.generated_functions(f + ".c.h").items()):
            cls = next(c for c in CLASS_NAMES if cname.startswith(c + "_"))
            out.append((cls, cname[len(cls) + 1:], params))
    return out


METHODS = _methods()
INT_CASES = [(c, m, ps, i) for c, m, ps in METHODS for i, p in enumerate(ps) if p.kind == "int"]
TYPE_CASES = [(c, m, ps, i) for c, m, ps in METHODS for i, p in enumerate(ps) if H.wrong_types(p)]
HANDLE_CASES = [(c, m, ps, i) for c, m, ps in METHODS for i, p in enumerate(ps) if p.kind == "handle"]


def _ids(cases):
    return [f"{c}.{m}-{ps[i].name}" for c, m, ps, i in cases]


class Pool:
    """One open object of every class (and a WC), for the whole module."""

    def __init__(self, ib, name, port, gid_index, access):
        self.ib = ib
        self.ctx = open_device(ib, name)
        self.pd = self.ctx.alloc_pd()
        self.ch = self.ctx.create_comp_channel()
        self.cq = self.ctx.create_cq(16, channel=self.ch)
        self.srq = self.pd.create_srq(max_wr=8)
        self.qp = self.pd.create_qp(ib.QPInitAttr(self.cq, self.cq))
        try:
            self.qpex = self.pd.create_qp_ex(self.cq, self.cq,
                                             send_ops_flags=ib.QPCreateSendOps.SEND)
        except ib.VerbsError:
            self.qpex = None                  # rxe before rdma-core 34: no ibv_wr_* API
        self.buf = np.zeros(4096, dtype=np.uint8)
        self.mr = ib.reg_tensor(self.pd, self.buf, access)
        try:
            self.mw = self.pd.alloc_mw(ib.MWType.TYPE_2)
        except ib.VerbsError:
            self.mw = None                    # rxe before rdma-core 35 has no memory windows
        gid = self.ctx.query_gid(port, gid_index)
        self.ah_attr = ib.AHAttr(dgid=gid, sgid_index=gid_index, port_num=port)
        self.ah = self.pd.create_ah(self.ah_attr)
        try:
            self.xrcd = self.ctx.open_xrcd()
        except ib.VerbsError:
            self.xrcd = None                  # rxe has no XRC
        # A WC: a receive flushed by moving a QP to ERR.
        flush = self.pd.create_qp(ib.QPInitAttr(self.cq, self.cq))
        flush.to_init(port, ib.AccessFlags.LOCAL_WRITE)
        flush.post_recv(ib.RecvWR(wr_id=1, sg_list=[self.mr.sge(64)]))
        flush.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)
        (self.wc,) = poll_until(self.cq, 1)
        flush.close()

    def of(self, cls):
        return {"Context": self.ctx, "CompChannel": self.ch, "CQ": self.cq, "MR": self.mr,
                "MW": self.mw, "PD": self.pd, "QP": self.qp, "SRQ": self.srq, "AH": self.ah,
                "XRCD": self.xrcd, "QPEx": self.qpex,
                "CompCntr": None}[cls]     # rxe has no completion counters

    def value(self, p):
        """A value that converts fine for parameter p."""
        ib = self.ib
        if p.kind == "int":
            return H.valid_int(p)
        if p.kind == "handle":
            return None if p.none_ok else self.of(p.type)
        if p.kind == "struct":
            return {"AHAttr": lambda: ib.AHAttr(),
                    "QPInitAttr": lambda: ib.QPInitAttr(self.cq, self.cq),
                    "MWBind": lambda: ib._ibverbs.MWBind(self.mr, self.mr.addr, 64),
                    "ECE": lambda: ib._ibverbs.ECE(),
                    "MWBindInfo": lambda: ib.MWBindInfo(self.mr, self.mr.addr, 64)}[p.type]()
        if p.kind == "wc":
            return self.wc
        if p.kind == "gid":
            return bytes(16)
        if p.kind == "bytes":
            return bytes(p.size)
        if p.kind == "other":
            return bytes(8)     # any bytes-like object (wr_set_inline_data, wr_send_tso)
        raise AssertionError(f"no value for {p}")

    def close(self):
        objs = [self.xrcd, self.ah, self.mw, self.mr, self.qpex, self.qp, self.srq, self.cq, self.ch,
                self.pd, self.ctx]
        for obj in objs:
            if obj is not None:
                obj.close()


@pytest.fixture(scope="module")
def pool(ib, device_names, port):
    import rxe
    gid_index = rxe.roce_v2_ipv4_gid_index(device_names[0], port)
    A = ib.AccessFlags
    access = A.LOCAL_WRITE | A.REMOTE_WRITE | A.REMOTE_READ | A.MW_BIND
    p = Pool(ib, device_names[0], port, gid_index, access)
    yield p
    del p.wc
    p.close()


def _call(pool, cls, method, params, i, value):
    self = pool.of(cls)
    kwargs = {q.name: pool.value(q) for q in params if q is not params[i]}
    kwargs[params[i].name] = value
    return getattr(self, method)(**kwargs)


def _check_every(pool, cases, check):
    """Run check on every case (one test for all: each test costs time in
    the emulated VM); fail with the list of cases that failed."""
    failures = []
    for case in cases:
        cls, method, params, i = case
        if pool.of(cls) is None or any(q.kind == "handle" and pool.of(q.type) is None
                                       for q in params):
            continue                  # a class this device does not support (XRCD; MW before 35)
        try:
            check(*case)
        except RuntimeError as exc:
            if "is unavailable" not in str(exc):      # a verb newer than this libibverbs
                failures.append(f"{cls}.{method}({params[i].name}=...): RuntimeError: {exc}")
        except (Exception, pytest.fail.Exception) as exc:
            failures.append(f"{cls}.{method}({params[i].name}=...): {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures)


def test_every_integer_argument_out_of_range_is_a_value_error(pool):
    def check(cls, method, params, i):
        p = params[i]
        for bad in H.out_of_range(p):
            with pytest.raises(ValueError, match=p.name):
                _call(pool, cls, method, params, i, bad)
        assert not pool.of(cls).closed
    assert len(INT_CASES) > 40
    _check_every(pool, INT_CASES, check)


def test_every_argument_of_a_wrong_type_is_a_type_error(ib, pool):
    def check(cls, method, params, i):
        p = params[i]
        for bad in H.wrong_types(p):
            with pytest.raises(TypeError):
                _call(pool, cls, method, params, i, bad)
        if p.kind == "handle":
            # An object of another handle class, and one that only claims
            # the class through __class__ (isinstance() would accept it).
            other = pool.pd if p.type != "PD" else pool.cq

            class Impostor:
                __class__ = getattr(ib, p.type)
            for bad in (other, Impostor()):
                with pytest.raises(TypeError):
                    _call(pool, cls, method, params, i, bad)
    _check_every(pool, TYPE_CASES, check)


def test_a_closed_handle_argument_is_ebadf(ib, pool):
    def check(cls, method, params, i):
        p = params[i]
        if p.type == "XRCD" and pool.xrcd is None:
            return                    # rxe has no XRC domain to close
        closed = {"CompChannel": lambda: pool.ctx.create_comp_channel(),
                  "PD": lambda: pool.ctx.alloc_pd(),
                  "MW": lambda: pool.pd.alloc_mw(ib.MWType.TYPE_2),
                  "CQ": lambda: pool.ctx.create_cq(2),
                  "SRQ": lambda: pool.pd.create_srq(max_wr=2),
                  "AH": lambda: pool.pd.create_ah(pool.ah_attr)}[p.type]()
        closed.close()
        with pytest.raises(ib.VerbsError) as exc:
            _call(pool, cls, method, params, i, closed)
        assert exc.value.errno == errno.EBADF
    assert HANDLE_CASES
    _check_every(pool, HANDLE_CASES, check)


class Abort(Exception):
    pass


def test_closing_an_object_from_inside_a_call_on_it_is_refused(ib, pool):
    """An argument's __index__ runs Python code in the middle of the call:
    closing the object from there raises EBUSY (it is in flight), and the
    exception the callback raises comes out of the call unchanged."""
    def check(cls, method, params, i):
        self = pool.of(cls)
        attempts = []

        class Evil:
            def __index__(self_):
                try:
                    self.close()
                except ib.VerbsError as exc:
                    attempts.append(exc.errno)
                else:
                    attempts.append("closed")
                raise Abort

        with pytest.raises(Abort):
            _call(pool, cls, method, params, i, Evil())
        assert attempts == [errno.EBUSY] and not self.closed
    _check_every(pool, INT_CASES, check)


def test_closing_a_handle_argument_from_inside_the_call_is_refused(ib, pool):
    """create_cq(channel=ch, comp_vector=<callback closing ch>): the channel
    is in flight too, so it is not freed under the CQ being created."""
    ch = pool.ctx.create_comp_channel()
    attempts = []

    class Evil:
        def __index__(self):
            try:
                ch.close()
            except ib.VerbsError as exc:
                attempts.append(exc.errno)
            return 0
    try:
        with pool.ctx.create_cq(4, channel=ch, comp_vector=Evil()) as cq:
            assert cq.channel is ch and attempts == [errno.EBUSY]
    finally:
        ch.close()
    assert ch.closed


# ---- struct classes that need verbs objects ------------------------------------

FIELD_CASES = [(cls, p) for cls, ps in H.struct_fields().items()
               if cls in ("QPInitAttr", "MWBind") for p in ps]


# Fields that take only their enum's members (spec `members:`), whose C range
# is wider: the largest member is the largest value they take.
ENUM_FIELDS = {("QPInitAttr", "qp_type"): "QPType"}


def test_struct_fields_holding_handles_check_ranges_and_types(ib, pool):
    failures = []
    for cls, p in FIELD_CASES:
        obj = pool.value(H.Param("x", "struct", type=cls))
        try:
            if p.kind == "int":
                for bad in H.out_of_range(p):
                    with pytest.raises(ValueError, match=p.name):
                        setattr(obj, p.name, bad)
                enum = ENUM_FIELDS.get((cls, p.name))
                hi = max(getattr(ib, enum)) if enum else p.hi
                setattr(obj, p.name, hi)
                assert getattr(obj, p.name) == hi
                if enum:
                    with pytest.raises(ValueError, match=f"{p.name} {p.hi} is not a {enum}"):
                        setattr(obj, p.name, p.hi)
            for bad in H.wrong_types(p):
                with pytest.raises(TypeError):
                    setattr(obj, p.name, bad)
        except (Exception, pytest.fail.Exception) as exc:
            failures.append(f"{cls}.{p.name}: {type(exc).__name__}: {exc}")
    assert len(FIELD_CASES) > 10 and not failures, "\n".join(failures)


# ---- the hand-written data path ------------------------------------------------

def test_poll_and_ack_events_check_their_counts(ib, pool):
    cq = pool.cq
    for bad in (0, -1, 2**31, 2**64):
        with pytest.raises(ValueError):
            cq.poll(bad)
    for bad in ("1", 1.5, None, object()):
        with pytest.raises(TypeError):
            cq.poll(bad)
    assert cq.poll(1000) == []          # large but valid: a heap buffer
    for bad in (-1, 2**32, 2**64):
        with pytest.raises(ValueError):
            cq.ack_events(bad)
    with pytest.raises(ValueError, match="more CQ events"):
        cq.ack_events(1)
    with pytest.raises(TypeError):
        cq.ack_events("1")


def test_mr_sge_checks_offset_and_length(ib, pool):
    mr = pool.mr
    with pytest.raises(ValueError, match=r"2\*\*32"):
        mr.sge(2**32)
    with pytest.raises(ValueError, match="exceeds"):
        mr.sge(4097)
    with pytest.raises(ValueError, match="non-negative"):
        mr.sge(1, offset=-1)
    for bad_offset in (4097, 2**63 - 1):
        with pytest.raises(ValueError):
            mr.sge(1, offset=bad_offset)
    for bad in (2**64, -2**64):
        with pytest.raises(ValueError):
            mr.sge(offset=bad)
    with pytest.raises(TypeError):
        mr.sge("1")
    with pytest.raises(ValueError, match=r"2\*\*32"):
        ib.SGE(mr, 2**32)


def test_posting_wrong_types_raises_type_error(ib, pool):
    qp = pool.qp
    for bad in (None, 1, "x", ib.RecvWR(), [ib.RecvWR()], [ib.SendWR(), 1], (ib.SendWR(), None),
                {ib.SendWR(), 2}, iter([ib.SendWR(), "x"])):
        with pytest.raises(TypeError):
            qp.post_send(bad)
    for bad in (None, 1, ib.SendWR(), [ib.SendWR()], [ib.RecvWR(), "x"]):
        with pytest.raises(TypeError):
            qp.post_recv(bad)
        with pytest.raises(TypeError):
            pool.srq.post_recv(bad)
    for empty in ([], (), iter([]), set()):     # nothing to post (the seed's behaviour)
        assert qp.post_send(empty) is None
        assert qp.post_recv(empty) is None
    wr = ib.SendWR(sg_list=[pool.mr.sge()])
    wr.sg_list.append("not an SGE")       # the stored list is mutable: checked at post time
    with pytest.raises(TypeError):
        qp.post_send(wr)
    with pytest.raises(TypeError):
        pool.ctx.ack_async_event("event")


def test_closing_a_qp_from_a_list_it_iterates_is_refused(ib, pool):
    attempts = []

    class Sneaky(list):
        def __iter__(self):
            try:
                pool.qp.close()
            except ib.VerbsError as exc:
                attempts.append(exc.errno)
            return super().__iter__()
    with pytest.raises(ib.VerbsError):          # RESET QP: the post itself fails (EINVAL)
        pool.qp.post_send(Sneaky([ib.SendWR(wr_id=1)]))
    assert attempts == [errno.EBUSY] and not pool.qp.closed


def test_a_closed_object_refuses_every_method_with_ebadf(ib, device_names, access):
    ctx = open_device(ib, device_names[0])
    pd = ctx.alloc_pd()
    cq = ctx.create_cq(8)
    qp = pd.create_qp(ib.QPInitAttr(cq, cq))
    buf = np.zeros(64, dtype=np.uint8)
    mr = ib.reg_tensor(pd, buf, access)
    for obj in (mr, qp, cq, pd, ctx):
        obj.close()
        obj.close()          # harmless
        assert obj.closed and "closed" in repr(obj)
    calls = [lambda: ctx.query_port(1), lambda: ctx.alloc_pd(), lambda: ctx.create_cq(8),
             lambda: ctx.get_async_event(), lambda: pd.reg_mr(buf.ctypes.data, 64, access),
             lambda: pd.create_srq(), lambda: cq.poll(1), lambda: cq.req_notify(),
             lambda: cq.resize(16), lambda: qp.post_send(ib.SendWR()),
             lambda: qp.post_recv(ib.RecvWR()), lambda: qp.modify(ib.QPAttrMask.STATE, qp_state=0),
             lambda: qp.query(), lambda: mr.sge(), lambda: mr.lkey, lambda: qp.qp_num,
             lambda: ctx.async_fd, lambda: ib.SGE(mr, 8), lambda: ctx.__enter__()]
    for call in calls:
        with pytest.raises(ib.VerbsError) as exc:
            call()
        assert exc.value.errno == errno.EBADF
    # Attributes that need no verbs object still answer; the MR let its
    # owner go (the seed's rule).
    assert mr.owner is None and qp.pd is pd and pd.context is ctx


# ---- queues, states and keys -------------------------------------------------------

def _failed_index(exc):
    import re
    m = re.search(r"work request (\d+)", str(exc))
    assert m, str(exc)
    return int(m.group(1))


def test_posting_on_a_qp_in_reset_fails_and_the_qp_still_connects(
        ib, ctx, pd, port, gid_index, access, make_buffer):
    src, dst = make_buffer(64, fill=4), make_buffer(64)
    with ctx.create_cq(16) as cq:
        a = pd.create_qp(ib.QPInitAttr(cq, cq))
        b = pd.create_qp(ib.QPInitAttr(cq, cq))
        try:
            assert a.state == ib.QPState.RESET
            wr = ib.SendWR(wr_id=1, sg_list=[src.mr.sge()], opcode=ib.WROpcode.RDMA_WRITE,
                           send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr, rkey=dst.mr.rkey)
            with pytest.raises(ib.VerbsError) as exc:
                a.post_send(wr)
            assert exc.value.errno != 0 and "work request 0" in str(exc.value)
            if rxe.rdma_core_release() >= (44,):
                with pytest.raises(ib.VerbsError):
                    a.post_recv(ib.RecvWR(sg_list=[dst.mr.sge()]))
            # (rxe of rdma-core 33.2 queues receives on a RESET QP; 44.0 refuses.)
            assert cq.poll(16) == []
            info = lambda q: ib.local_qp_info(q, ctx.query_port(port), ctx.query_gid(port, gid_index),
                                              port=port)
            ib.connect_rc(a, info(b), port=port, sgid_index=gid_index, access=access)
            ib.connect_rc(b, info(a), port=port, sgid_index=gid_index, access=access)
            a.post_send(wr)
            poll_until(cq, 1)[0].raise_for_status()
            assert bytes(dst.array) == b"\x04" * 64
        finally:
            a.close()
            b.close()


def test_more_receives_than_the_queue_holds_fail_and_it_stays_usable(
        ib, pd, port, gid_index, access, make_buffer):
    pair = RCPair(ib, pd, pd, port, gid_index, gid_index, access, max_recv_wr=4)
    try:
        src, dst = make_buffer(8, fill=6), make_buffer(8)
        _, cap = pair.qp_b.query()
        wrs = [ib.RecvWR(wr_id=i, sg_list=[dst.mr.sge()]) for i in range(cap.max_recv_wr + 4)]
        with pytest.raises(ib.VerbsError) as exc:
            pair.qp_b.post_recv(wrs)
        assert cap.max_recv_wr <= _failed_index(exc.value) < len(wrs)
        pair.qp_a.post_send(ib.SendWR(sg_list=[src.mr.sge()], opcode=ib.WROpcode.SEND,
                                      send_flags=ib.SendFlags.SIGNALED))
        poll_until(pair.cq_a, 1)[0].raise_for_status()
        (rwc,) = poll_until(pair.cq_b, 1)
        assert rwc.wr_id == 0 and rwc.is_success and bytes(dst.array) == b"\x06" * 8
        pair.qp_b.post_recv(wrs[0])               # room again
    finally:
        pair.close()


def test_more_receives_than_the_srq_holds_fail_and_it_stays_usable(ib, pd, make_buffer):
    dst = make_buffer(8)
    with pd.create_srq(max_wr=4) as srq:
        cap = srq.query()["max_wr"]
        wrs = [ib.RecvWR(wr_id=i, sg_list=[dst.mr.sge()]) for i in range(cap + 4)]
        with pytest.raises(ib.VerbsError) as exc:
            srq.post_recv(wrs)
        assert cap <= _failed_index(exc.value) < len(wrs)
        with pytest.raises(ib.VerbsError):
            srq.post_recv(wrs[0])                 # full: refused, not lost
        assert srq.query()["max_wr"] == cap


@pytest.mark.parametrize("bad", ["lkey", "rkey"])
def test_a_wrong_key_gives_an_error_completion_and_the_qp_recovers(
        ib, rc_pair, make_buffer, port, gid_index, access, bad):
    src, dst = make_buffer(64, fill=5), make_buffer(64)
    sge = src.mr.sge()
    if bad == "lkey":
        sge.lkey = src.mr.lkey ^ 0x5500
    wr = ib.SendWR(wr_id=3, sg_list=[sge], opcode=ib.WROpcode.RDMA_WRITE,
                   send_flags=ib.SendFlags.SIGNALED, remote_addr=dst.addr,
                   rkey=dst.mr.rkey ^ (0x5500 if bad == "rkey" else 0))
    rc_pair.qp_a.post_send(wr)
    (wc,) = poll_until(rc_pair.cq_a, 1)
    assert wc.wr_id == 3 and not wc.is_success
    if bad == "lkey":      # rxe reports a bad lkey as a local QP operation error
        assert wc.status in (ib.WCStatus.LOC_PROT_ERR, ib.WCStatus.LOC_QP_OP_ERR)
    else:
        assert wc.status == ib.WCStatus.REM_ACCESS_ERR
    with pytest.raises(ib.CompletionError):
        wc.raise_for_status()
    assert rc_pair.qp_a.query()[0]["qp_state"] == ib.QPState.ERR
    # A QP in ERR refuses or flushes what is posted; it does not crash.
    try:
        rc_pair.qp_a.post_send(wr)
    except ib.VerbsError:
        pass
    else:
        (flushed,) = poll_until(rc_pair.cq_a, 1)
        assert flushed.status == ib.WCStatus.WR_FLUSH_ERR
    # Recover: RESET -> INIT -> RTR -> RTS on both sides, then it works.
    ctx = rc_pair.qp_a.pd.context
    for qp in (rc_pair.qp_a, rc_pair.qp_b):
        qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.RESET)
    while rc_pair.cq_a.poll(16) or rc_pair.cq_b.poll(16):
        pass
    info = lambda q, psn: ib.local_qp_info(q, ctx.query_port(port), ctx.query_gid(port, gid_index),
                                           port=port, psn=psn)
    ib.connect_rc(rc_pair.qp_a, info(rc_pair.qp_b, 9), port=port, sgid_index=gid_index,
                  access=access, local_psn=8)
    ib.connect_rc(rc_pair.qp_b, info(rc_pair.qp_a, 8), port=port, sgid_index=gid_index,
                  access=access, local_psn=9)
    wr.sg_list = [src.mr.sge()]
    wr.rkey = dst.mr.rkey
    rc_pair.qp_a.post_send(wr)
    poll_until(rc_pair.cq_a, 1)[0].raise_for_status()
    assert bytes(dst.array) == b"\x05" * 64


def test_registering_unmapped_memory_is_efault(ib, pd, access):
    m = mmap.mmap(-1, 3 * 4096)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    m.close()                    # unmapped now; the address is a plain int
    for addr, length in ((base, 4096), (base + 4096, 8192), (0, 4096), (0x10000, 4096)):
        with pytest.raises(ib.VerbsError) as exc:
            pd.reg_mr(addr, length, access)
        assert exc.value.errno == errno.EFAULT, (hex(addr), exc.value)


def test_work_requests_the_device_refuses_are_errors_not_crashes(ib, rc_pair, make_buffer):
    """Opcodes the provider may not support, too many SGEs, oversized inline
    data.  (Opcodes outside WROpcode never get this far: the opcode test.)"""
    src = make_buffer(256)
    qp = rc_pair.qp_a
    cases = [ib.SendWR(opcode=ib.WROpcode.TSO, sg_list=[src.mr.sge(8)],
                       send_flags=ib.SendFlags.SIGNALED),
             ib.SendWR(opcode=ib.WROpcode.DRIVER1, sg_list=[src.mr.sge(8)],
                       send_flags=ib.SendFlags.SIGNALED),
             ib.SendWR(opcode=ib.WROpcode.SEND, sg_list=[src.mr.sge(8)] * 40),
             ib.SendWR(opcode=ib.WROpcode.SEND, sg_list=[src.mr.sge(256)],
                       send_flags=ib.SendFlags.INLINE)]
    for wr in cases:
        try:
            qp.post_send(wr)
        except ib.VerbsError as exc:
            assert exc.errno != 0
        else:
            for wc in rc_pair.cq_a.poll(16):
                assert isinstance(wc.status, int)
    with pytest.raises(ib.VerbsError):
        qp.post_recv(ib.RecvWR(sg_list=[src.mr.sge(8)] * 40))


def test_an_inline_post_from_unreadable_memory_is_refused(ib, rc_pair, make_buffer):
    """With INLINE the provider copies the bytes in this process: an SGE
    built from a bad integer address would crash it there.  Unmapped and
    PROT_NONE ranges are refused with ValueError before posting, in a
    SendWR and in a PostList (built or updated); readable memory, even
    unregistered, is posted and lands."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    page = mmap.PAGESIZE
    no_access = libc.mmap(None, page, 0,  # PROT_NONE
                          mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert no_access not in (None, ctypes.c_void_p(-1).value)
    dst = make_buffer(64)
    readable = ctypes.create_string_buffer(b"\x2a" * 32, 32)       # not registered
    flags = ib.SendFlags.INLINE | ib.SendFlags.SIGNALED

    def wr(addr, length=32):
        return ib.SendWR(wr_id=5, opcode=ib.WROpcode.RDMA_WRITE, sg_list=[ib.SGE(addr, length)],
                         send_flags=flags, remote_addr=dst.addr, rkey=dst.mr.rkey)
    try:
        unmapped = libc.mmap(None, page, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                             -1, 0)
        libc.munmap(ctypes.c_void_p(unmapped), page)
        for bad in (0x10, no_access, unmapped):
            with pytest.raises(ValueError, match="not readable"):
                rc_pair.qp_a.post_send(wr(bad))
            with pytest.raises(ValueError, match="not readable"):
                ib.PostList([wr(bad)])
        # A range that starts readable and runs into the PROT_NONE page.
        with pytest.raises(ValueError, match="not readable"):
            rc_pair.qp_a.post_send(wr(no_access - 16, 32))
        assert rc_pair.cq_a.poll(16) == []

        plist = ib.PostList([wr(ctypes.addressof(readable))])
        with pytest.raises(ValueError, match="not readable"):
            plist[0].addr = 0x10
        assert plist[0].addr == ctypes.addressof(readable)
        with pytest.raises(ValueError, match="not readable"):
            noinline = ib.PostList([ib.SendWR(wr_id=6, opcode=ib.WROpcode.RDMA_WRITE,
                                              sg_list=[ib.SGE(0x10, 32)])])
            noinline[0].send_flags = flags                 # turning INLINE on checks too
        rc_pair.qp_a.post_send(plist)
        (wc,) = poll_until(rc_pair.cq_a, 1)
        wc.raise_for_status()
        assert wc.wr_id == 5 and bytes(dst.array[:32]) == b"\x2a" * 32
    finally:
        libc.munmap(ctypes.c_void_p(no_access), page)


def test_a_work_request_opcode_the_kernel_cannot_take_is_refused_before_posting(ib):
    """Never posted here: posting 2**31 took the whole (virtual) machine down
    (rxe indexes a table with it as a signed int).  Only WROpcode values
    (and the two newer ones, 14 and 15) are taken."""
    for opcode in ib.WROpcode:
        assert ib.SendWR(opcode=opcode).opcode == opcode
    for opcode in (12, 13, 16, 255, 2**31, 2**32 - 1):
        try:
            ib.SendWR(opcode=opcode)
        except ValueError:
            continue
        pytest.fail(f"SendWR(opcode={opcode:#x}) accepted")


def test_reg_mr_without_enough_arguments_names_its_two_forms(ib, pd):
    """Issue 25, point 14: not the private _reg_mr and its 'addr'."""
    for args in ((), (bytearray(64),), (0x1000, 64)):
        with pytest.raises(TypeError) as exc:
            pd.reg_mr(*args)
        assert "_reg_mr" not in str(exc.value), exc.value
    with pytest.raises(TypeError, match=r"^PD\.reg_mr\(\) takes \(addr, length, access\) or "
                                        r"\(buffer, access\), got 0 argument\(s\)$"):
        pd.reg_mr()
