"""A hypothesis state machine on Soft-RoCE: create, close, drop, modify,
post and poll in random order, with valid and invalid arguments.

Properties checked at every step:

* only Python exceptions (ValueError, TypeError, VerbsError) - never a
  crash, never OverflowError or SystemError;
* close() follows the lifetime rules exactly as a model predicts them: a
  closed object raises EBADF, closing twice is harmless, closing an object
  with live children raises EBUSY and changes nothing; dropping the last
  reference (including through an MR <-> owner cycle) frees an object once
  its children are gone, in whatever order;
* the open objects of each class (`X._open_count()`) are what the model
  says;
* Python code run inside a C call (an argument's `__index__` that replaces
  the PostList entry it is assigned to, or closes the object called or
  another; a finalizer, of an object put into a list poll() returned, that
  polls, posts or closes when a later poll reuses the list) and a second
  thread closing objects while a `release_gil` PostList is posted get
  EBUSY or EBADF, never a freed object nor another caller's list;
* list and tuple subclasses whose `__len__` and `__iter__` disagree with
  their storage get what iteration gave posted or built; UD QPs are
  drawn with and without AHs (a UD send without one is a ValueError);
and after every example, once everything is closed: the process and the
kernel (`rdma resource show` counts) hold exactly what they held before.

`make test` runs a short derandomized pass (IBVERBS_FUZZ_EXAMPLES, default
40); `make fuzz` runs 2,000 examples with a fresh seed (IBVERBS_FUZZ_SEED
reproduces a run).

Work requests take any 32-bit opcode (SendWR refuses those outside
WROpcode: 2**31 and above crashed the guest kernel's rdma_rxe) and SGEs
with addresses nowhere (an INLINE post refuses them: the provider would
read them in this process); see test_bad_input.py.
"""
from __future__ import annotations

import errno
import fcntl
import gc
import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from conftest import kernel_counts, open_device, process_counts

ALLOWED = None        # (ValueError, TypeError, ib.VerbsError), set by the fixture
SHARED = {}           # ib, ctx, ctx2, port, gid_index: opened once for all examples
STATS = {"examples": 0, "steps": 0}

EXAMPLES = int(os.environ.get("IBVERBS_FUZZ_EXAMPLES", "40"))
SEED = os.environ.get("IBVERBS_FUZZ_SEED")
STEPS = int(os.environ.get("IBVERBS_FUZZ_STEPS", "30"))

U32 = 2**32 - 1
BAD_INTS = [-1, -2**31 - 1, 2**31, 2**32, 2**63, 2**64, 2**100]


def ints(lo, hi, bad=True):
    """Mostly valid integers, sometimes far out of range."""
    valid = st.integers(lo, hi)
    return st.one_of(valid, valid, valid, st.sampled_from(BAD_INTS)) if bad else valid


class Node:
    """What the model knows about one verbs object."""
    __slots__ = ("cls", "obj", "parents", "children", "closed", "dropped", "freed", "serial",
                 "cycle")

    def __init__(self, cls, obj, parents, serial):
        self.cls, self.obj, self.parents, self.serial = cls, obj, parents, serial
        self.children = []
        self.closed = self.dropped = self.freed = self.cycle = False

    @property
    def live(self):
        return not self.closed and not self.freed


def refused(exc_type, fn, *args):
    """fn(*args) must raise exc_type; its errno (or None).

    Not pytest.raises inside the rules: `with pytest.raises(...) as e`
    makes a reference cycle (the rule's frame -> e -> traceback -> frame)
    that keeps every object the rule touched alive until the cyclic
    collector runs, and the model expects them freed at once."""
    try:
        fn(*args)
    except exc_type as exc:
        return getattr(exc, "errno", None)
    raise AssertionError(f"{fn} did not raise {exc_type.__name__}")


def expect(allowed_exc, fn, *args, **kwargs):
    """Call fn; return (result, None) or (None, exception), where the
    exception must be one of the allowed Python exceptions."""
    try:
        return fn(*args, **kwargs), None
    except ALLOWED as exc:
        assert isinstance(exc, allowed_exc), f"{fn}: unexpected {type(exc).__name__}: {exc}"
        # Without its traceback: its frames link back (f_back) to the rule
        # that keeps the exception - a cycle holding every object the rule
        # touched until the cyclic collector runs.
        exc.__traceback__ = None
        return None, exc


class VerbsMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.ib = SHARED["ib"]
        self.nodes = {}           # id(obj) -> Node (of objects the model still references)
        self.all_nodes = []       # every Node, for the counts
        self.buffers = []         # every array registered: kept alive until teardown
        self.base_open = process_counts(self.ib)
        self.base_kernel = SHARED["kernel"]
        self.serial = 0
        self.sent = []            # work requests posted (or refused) before: repost's
        STATS["examples"] += 1

    # ---- model ---------------------------------------------------------------------

    def node(self, obj):
        return self.nodes[id(obj)]

    def add(self, cls, obj, parents):
        n = Node(cls, obj, [p for p in parents if p is not None], self.serial)
        self.serial += 1
        for p in n.parents:
            p.children.append(n)
        self.nodes[id(obj)] = n
        self.all_nodes.append(n)
        return n

    def settle(self):
        """Dropped objects are freed once nothing refers to them: no child
        object exists any more (closed children still hold their parents)."""
        changed = True
        while changed:
            changed = False
            for n in self.all_nodes:
                if n.dropped and not n.freed and all(c.freed for c in n.children):
                    n.freed = True
                    changed = True

    def parent_node(self, obj):
        return None if obj is None else self.nodes.get(id(obj))

    def pick(self, data, cls, label, open_only=False):
        """One of the model's objects of class cls (drawn as an index, so
        that hypothesis keeps no reference to it), or None."""
        objs = [n.obj for n in sorted(self.nodes.values(), key=lambda n: n.serial)
                if n.cls == cls and n.obj is not None and not (open_only and n.closed)]
        if not objs:
            return None
        return objs[data.draw(st.integers(0, len(objs) - 1), label=label)]

    # ---- creating ------------------------------------------------------------------

    @rule(other_device=st.booleans())
    def alloc_pd(self, other_device):
        ctx = SHARED["ctx2"] if other_device and SHARED["ctx2"] is not None else SHARED["ctx"]
        self.add("PD", ctx.alloc_pd(), [])

    @rule()
    def create_channel(self):
        self.add("CompChannel", SHARED["ctx"].create_comp_channel(), [])

    @rule(cqe=ints(1, 300), comp_vector=st.sampled_from([0, 0, 0, 1, -1, 2**40]),
          data=st.data())
    def create_cq(self, cqe, comp_vector, data):
        channel = None
        if data.draw(st.booleans(), label="with channel"):
            channel = self.pick(data, "CompChannel", "channel")
        ctx = SHARED["ctx"]
        cq, exc = expect((ValueError, self.ib.VerbsError), ctx.create_cq, cqe, channel=channel,
                         comp_vector=comp_vector)
        if exc is not None:
            bad_cqe = not 1 <= cqe <= 2**31 - 1
            if bad_cqe:
                assert isinstance(exc, ValueError)
            elif channel is not None and self.node(channel).closed:
                assert isinstance(exc, self.ib.VerbsError) and exc.errno == errno.EBADF
            return
        assert 1 <= cqe <= 2**31 - 1 and 0 <= comp_vector < ctx.num_comp_vectors
        assert channel is None or not self.node(channel).closed
        self.add("CQ", cq, [self.parent_node(channel)])

    @rule(size=st.integers(1, 8192),
          access=st.one_of(st.sampled_from([1, 3, 7, 15, 0, 6, 0x1F]), ints(-2**31, 2**31 - 1)),
          cycle=st.booleans(), data=st.data())
    def reg_mr(self, size, access, cycle, data):
        ib = self.ib
        pd = self.pick(data, "PD", "pd")
        if pd is None:
            return
        arr = np.zeros(size, dtype=np.uint8)
        self.buffers.append(arr)
        if cycle:      # an MR whose owner refers back to it: only the collector frees it
            mr, exc = expect((ValueError, ib.VerbsError), pd.reg_mr, arr.ctypes.data, size, access)
        else:
            mr, exc = expect((ValueError, ib.VerbsError), ib.reg_tensor, pd, arr, access)
        if exc is not None:
            if self.node(pd).closed:
                assert getattr(exc, "errno", None) == errno.EBADF or isinstance(exc, ValueError)
            return
        assert not self.node(pd).closed and -2**31 <= access < 2**31
        if cycle:
            holder = Holder()
            holder.arr, holder.mr = arr, mr
            mr.owner = holder
            holder.self = holder
        # An open MR's owner can be neither cleared nor replaced.
        refused(ValueError, setattr, mr, "owner", None)
        self.add("MR", mr, [self.node(pd)]).cycle = cycle

    @rule(kind=st.sampled_from([1, 2, 2, 0, 3, -1, 2**40]), data=st.data())
    def alloc_mw(self, kind, data):
        pd = self.pick(data, "PD", "pd")
        if pd is None:
            return
        mw, exc = expect((ValueError, self.ib.VerbsError), pd.alloc_mw, kind)
        if exc is not None:
            return
        self.add("MW", mw, [self.node(pd)])

    @rule(sgid_index=st.sampled_from([0, 1, 2, 255, 256, -1]),
          port=st.sampled_from([1, 1, 2, 0, 256]), hop_limit=ints(0, 255),
          own_gid=st.booleans(), data=st.data())
    def create_ah(self, sgid_index, port, hop_limit, own_gid, data):
        ib = self.ib
        pd = self.pick(data, "PD", "pd")
        if pd is None:
            return
        dgid = (SHARED["ctx"].query_gid(SHARED["port"], SHARED["gid_index"]) if own_gid
                else data.draw(st.binary(min_size=16, max_size=16), label="dgid"))
        attr, exc = expect(ValueError, ib.AHAttr, dgid=dgid, sgid_index=sgid_index,
                           port_num=port, is_global=1, hop_limit=hop_limit)
        if exc is not None:
            return
        ah, exc = expect((ValueError, ib.VerbsError), pd.create_ah, attr)
        if exc is not None:
            return
        self.add("AH", ah, [self.node(pd)])

    @rule(max_wr=ints(1, 64), max_sge=ints(1, 4), limit=ints(0, 8), data=st.data())
    def create_srq(self, max_wr, max_sge, limit, data):
        pd = self.pick(data, "PD", "pd")
        if pd is None:
            return
        srq, exc = expect((ValueError, self.ib.VerbsError), pd.create_srq, max_wr=max_wr,
                          max_sge=max_sge, srq_limit=limit)
        if exc is not None:
            return
        self.add("SRQ", srq, [self.node(pd)])

    @rule(qp_type=st.sampled_from([2, 2, 3, 4, 0, 9, 2**40]), max_wr=ints(1, 64),
          max_sge=ints(1, 4), inline=st.sampled_from([0, 0, 64, 256, 2**20]), data=st.data())
    def create_qp(self, qp_type, max_wr, max_sge, inline, data):
        ib = self.ib
        pd = self.pick(data, "PD", "pd")
        send_cq = self.pick(data, "CQ", "send_cq")
        recv_cq = send_cq if data.draw(st.booleans(), label="one cq") else \
            self.pick(data, "CQ", "recv_cq")
        if pd is None or send_cq is None:
            return
        srq = None
        if data.draw(st.booleans(), label="with srq"):
            srq = self.pick(data, "SRQ", "srq")
        attr, exc = expect((ValueError, ib.VerbsError), ib.QPInitAttr, send_cq, recv_cq,
                           qp_type=qp_type, max_send_wr=max_wr, max_recv_wr=max_wr,
                           max_send_sge=max_sge, max_recv_sge=max_sge, max_inline_data=inline,
                           srq=srq)
        if exc is not None:
            closed = [o for o in (send_cq, recv_cq, srq) if o is not None and self.node(o).closed]
            assert isinstance(exc, ValueError) or (closed and exc.errno == errno.EBADF), exc
            return
        other_context = any(c.context is not pd.context for c in (send_cq, recv_cq))
        qp, exc = expect((ValueError, ib.VerbsError), pd.create_qp, attr)
        del attr
        if exc is not None:
            if self.node(pd).closed:
                assert isinstance(exc, ib.VerbsError) and exc.errno == errno.EBADF
            elif other_context:
                # Both wrongs may hold at once; the first check made names its own.
                closed = [o for o in (send_cq, recv_cq, srq)
                          if o is not None and self.node(o).closed]
                assert (isinstance(exc, ValueError) and "another context" in str(exc)) or \
                    (closed and isinstance(exc, ib.VerbsError) and exc.errno == errno.EBADF), exc
            return
        assert not other_context
        for o in (pd, send_cq, recv_cq, srq):
            assert o is None or not self.node(o).closed
        self.add("QP", qp, [self.node(pd), self.node(send_cq), self.node(recv_cq),
                                   self.parent_node(srq)])

    # ---- lifetimes -----------------------------------------------------------------

    @rule(data=st.data())
    def close(self, data):
        objs = [n.obj for n in sorted(self.nodes.values(), key=lambda n: n.serial)
                if n.obj is not None]
        if not objs:
            return
        obj = objs[data.draw(st.integers(0, len(objs) - 1), label="close")]
        n = self.node(obj)
        busy = any(c.live for c in n.children)
        if n.closed:
            obj.close()                               # harmless
        elif busy:
            assert refused(self.ib.VerbsError, obj.close) == errno.EBUSY and not obj.closed
        else:
            obj.close()
            n.closed = True
        assert obj.closed == n.closed

    @rule(cls=st.sampled_from(["MR", "MR", "QP", "CQ", "PD", "AH", "SRQ", "MW", "CompChannel"]),
          data=st.data())
    def drop(self, cls, data):
        """Let go of an object without closing it: garbage collection frees
        it once its children are gone (an MR in an owner cycle needs the
        cyclic collector)."""
        obj = self.pick(data, cls, "drop")
        if obj is None:
            return
        n = self.node(obj)
        self.sent = []        # their SGEs and AHs would keep it alive
        if os.environ.get("IBVERBS_FUZZ_DEBUG"):
            for r in gc.get_referrers(obj):
                print("referrer of", obj, type(r), repr(r)[:300])
        del self.nodes[id(obj)], obj
        n.obj = None
        n.dropped = True
        self.settle()
        if getattr(n, "cycle", False):
            gc.collect()

    @rule(data=st.data())
    def use_if_closed(self, data):
        """Every closed object answers EBADF."""
        objs = [n.obj for n in sorted(self.nodes.values(), key=lambda n: n.serial) if n.closed]
        if not objs:
            return
        obj = objs[data.draw(st.integers(0, len(objs) - 1), label="closed object")]
        ib = self.ib
        call = {"PD": lambda: obj.alloc_mw(), "CQ": lambda: obj.poll(1),
                "MR": lambda: obj.sge(), "QP": lambda: obj.post_recv(ib.RecvWR()),
                "SRQ": lambda: obj.query(), "MW": lambda: obj.rkey, "AH": lambda: obj.handle,
                "CompChannel": lambda: obj.fd}[self.node(obj).cls]
        assert refused(ib.VerbsError, call) == errno.EBADF

    # ---- QP states -----------------------------------------------------------------

    @rule(step=st.sampled_from(["init", "rtr", "rts", "reset", "err", "raw"]),
          state=ints(0, 6), mask=st.one_of(st.sampled_from([1, 0x1 | 0x10 | 0x20 | 0x8]),
                                           ints(0, 2**21)),
          data=st.data())
    def modify_qp(self, step, state, mask, data):
        ib = self.ib
        qp = self.pick(data, "QP", "qp")
        peer = self.pick(data, "QP", "peer")
        if qp is None:
            return
        port, gid = SHARED["port"], SHARED["gid_index"]
        A = ib.AccessFlags

        def do():
            if step == "init":
                qp.to_init(port, A.LOCAL_WRITE | A.REMOTE_WRITE | A.REMOTE_READ, qkey=0x1111)
            elif step == "rtr":
                if peer is None or self.node(peer).closed or qp.qp_type == ib.QPType.UD:
                    qp.to_rtr(None, gid)
                else:
                    ctx = SHARED["ctx"]
                    info = ib.local_qp_info(peer, ctx.query_port(port), ctx.query_gid(port, gid),
                                            port=port)
                    qp.to_rtr(info, gid)
            elif step == "rts":
                qp.to_rts(0)
            elif step == "reset":
                qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.RESET)
            elif step == "err":
                qp.modify(ib.QPAttrMask.STATE, qp_state=ib.QPState.ERR)
            else:
                qp.modify(mask, qp_state=state)
        expect((ValueError, TypeError, ib.VerbsError), do)

    @rule(data=st.data())
    def connect(self, data):
        ib = self.ib
        a, b = self.pick(data, "QP", "a"), self.pick(data, "QP", "b")
        if a is None:
            return
        port = SHARED["port"]
        A = ib.AccessFlags
        access = A.LOCAL_WRITE | A.REMOTE_WRITE | A.REMOTE_READ | A.REMOTE_ATOMIC

        def do():
            for x, y in ((a, b), (b, a)):
                ctx = x.pd.context
                peer_ctx = y.pd.context
                g = SHARED["gid_index"] if ctx is SHARED["ctx"] else SHARED["gid_index2"]
                gy = SHARED["gid_index"] if peer_ctx is SHARED["ctx"] else SHARED["gid_index2"]
                info = ib.local_qp_info(y, peer_ctx.query_port(port), peer_ctx.query_gid(port, gy),
                                        port=port)
                ib.connect_rc(x, info, port=port, sgid_index=g, access=access)
        expect((ValueError, TypeError, ib.VerbsError), do)

    # ---- data path -----------------------------------------------------------------

    def sges(self, data, count):
        """SGEs over registered buffers: MR slices, or raw addresses inside
        a live buffer with a real, wrong or zero lkey."""
        ib = self.ib
        out = []
        for _ in range(count):
            mr = self.pick(data, "MR", "sge mr")
            if mr is None:
                break
            if self.node(mr).closed:
                assert refused(ib.VerbsError, mr.sge) == errno.EBADF
                continue
            size = mr.length
            off = data.draw(st.integers(0, size - 1), label="offset")
            length = data.draw(st.integers(0, size - off), label="length")
            if data.draw(st.booleans(), label="raw"):
                lkey = data.draw(st.sampled_from([mr.lkey, 0, mr.lkey ^ 0x100, U32]), label="lkey")
                # Mostly inside the buffer; sometimes nowhere (INLINE must refuse it).
                addr = data.draw(st.sampled_from([mr.addr + off] * 3 + [0x10, 0, 2**64 - 8]),
                                 label="addr")
                out.append(ib.SGE(addr, length, lkey=lkey))
            else:
                out.append(mr.sge(length, offset=off))
        return out

    @rule(n=st.integers(1, 20), data=st.data())
    def post_send(self, n, data):
        ib = self.ib
        qp = self.pick(data, "QP", "qp")
        if qp is None:
            return
        wrs = []
        for i in range(n):
            opcode = data.draw(st.one_of(st.sampled_from([0, 1, 2, 3, 4, 5, 6]),
                                         st.integers(0, U32)), label="opcode")
            flags = data.draw(st.sampled_from([0, 2, 2, 2 | 8, 8, 4, 1, 2 | 4, 0xF0, 2**31]),
                              label="send_flags")
            wr, exc = expect(ValueError, ib.SendWR, wr_id=i, opcode=opcode, send_flags=flags,
                             sg_list=self.sges(data, data.draw(st.integers(0, 3), label="nsge")),
                             imm_data=data.draw(ints(0, U32, bad=False), label="imm"))
            if wr is None:
                assert opcode > 15 or opcode in (12, 13), (opcode, exc)
                continue
            target = self.pick(data, "MR", "remote", open_only=True)
            if target is not None and data.draw(st.booleans(), label="remote mr"):
                wr.remote_addr = target.addr + data.draw(st.integers(0, 64), label="roff")
                wr.rkey = target.rkey if data.draw(st.booleans(), label="good rkey") else 0x1234
            ah = self.pick(data, "AH", "ah")
            if ah is not None and data.draw(st.booleans(), label="with ah"):
                wr.ah = ah
                wr.remote_qpn = data.draw(ints(0, 2**24 - 1, bad=False), label="qpn")
                wr.remote_qkey = 0x1111
            wrs.append(wr)
        if wrs:
            expect((ValueError, ib.VerbsError), qp.post_send, wrs if len(wrs) > 1 else wrs[0])
            self.sent = (self.sent + wrs)[-32:]

    @rule(target_is_srq=st.booleans(), n=st.integers(1, 20), data=st.data())
    def post_recv(self, target_is_srq, n, data):
        ib = self.ib
        target = self.pick(data, "SRQ" if target_is_srq else "QP", "recv target")
        if target is None:
            return
        wrs = [ib.RecvWR(wr_id=i, sg_list=self.sges(data, data.draw(st.integers(0, 3),
                                                                    label="nsge")))
               for i in range(n)]
        expect(ib.VerbsError, target.post_recv, wrs)
        self.sent = (self.sent + wrs)[-32:]

    @rule(data=st.data())
    def repost(self, data):
        """Requests of the post rules posted again, to any queue, some changed
        first: a post sends the request it kept only while nothing of it
        changed, and checks the queue every time (ibverbs/src/wr.c)."""
        ib = self.ib
        if not self.sent:
            return
        # indices: hypothesis keeps no reference to a request (it holds MRs, AHs)
        picks = data.draw(st.lists(st.integers(0, len(self.sent) - 1), min_size=1, max_size=4),
                          label="again")
        again = [self.sent[i] for i in picks]
        wr = again[0]
        change = data.draw(st.sampled_from(["none", "none", "sge", "list", "append", "flags",
                                            "init"]), label="change")
        if change == "sge" and wr.sg_list:
            sge = wr.sg_list[0]
            sge.length = data.draw(st.integers(0, 2**32 - 1), label="length")
            sge.addr = data.draw(st.sampled_from([sge.addr, sge.addr + 8, 0]), label="addr")
        elif change == "list":
            wr.sg_list = self.sges(data, data.draw(st.integers(0, 3), label="nsge"))
        elif change == "append":
            wr.sg_list.extend(self.sges(data, 1))
        elif change == "flags" and isinstance(wr, ib.SendWR):
            wr.send_flags = data.draw(st.sampled_from([0, 2, 2 | 8, 8]), label="send_flags")
        elif change == "init":
            wr.__init__(wr_id=7, sg_list=self.sges(data, data.draw(st.integers(0, 2),
                                                                   label="nsge")))
        kinds = {type(w) for w in again}
        if ib.SendWR in kinds and ib.RecvWR in kinds:
            again = [w for w in again if type(w) is type(wr)]
        one = again if len(again) > 1 else again[0]
        if isinstance(wr, ib.SendWR):
            qp = self.pick(data, "QP", "qp")
            if qp is not None:
                expect((ValueError, ib.VerbsError), qp.post_send, one)
        else:
            target = self.pick(data, data.draw(st.sampled_from(["QP", "SRQ"]), label="to"),
                               "recv target")
            if target is not None:
                expect(ib.VerbsError, target.post_recv, one)

    @rule(n=st.one_of(st.integers(1, 64), st.sampled_from([0, -1, 2**31, 1000])), data=st.data())
    def poll(self, n, data):
        ib = self.ib
        cq = self.pick(data, "CQ", "cq")
        if cq is None:
            return
        wcs, exc = expect((ValueError, ib.VerbsError), cq.poll, n)
        if exc is not None:
            assert isinstance(exc, ValueError) == (not 1 <= n <= 2**31 - 1) or self.node(cq).closed
            return
        assert len(wcs) <= n
        for wc in wcs:
            repr(wc)
            wc.status_str
            if not wc.is_success:
                refused(ib.CompletionError, wc.raise_for_status)

    @rule(solicited=st.booleans(), n=ints(0, 3), data=st.data())
    def notify_and_ack(self, solicited, n, data):
        ib = self.ib
        cq = self.pick(data, "CQ", "cq")
        if cq is None:
            return
        expect(ib.VerbsError, cq.req_notify, solicited)
        expect((ValueError, ib.VerbsError), cq.ack_events, n)

    @rule(cqe=ints(1, 512), data=st.data())
    def resize_cq(self, cqe, data):
        cq = self.pick(data, "CQ", "cq")
        if cq is None:
            return
        expect((ValueError, self.ib.VerbsError), cq.resize, cqe)

    @rule(max_wr=st.one_of(st.none(), ints(1, 128)), limit=st.one_of(st.none(), ints(0, 16)),
          data=st.data())
    def modify_srq(self, max_wr, limit, data):
        ib = self.ib
        srq = self.pick(data, "SRQ", "srq")
        if srq is None:
            return
        expect((ValueError, ib.VerbsError), srq.modify, max_wr=max_wr, srq_limit=limit)
        expect(ib.VerbsError, srq.query)

    @rule(data=st.data())
    def query_qp(self, data):
        ib = self.ib
        qp = self.pick(data, "QP", "qp")
        if qp is None:
            return
        result, exc = expect(ib.VerbsError, qp.query)
        if exc is None:
            attr, cap = result
            assert attr["qp_state"] in range(0, 7)

    @rule(port=st.sampled_from([1, 1, 0, 2, 255, 256, -1]), index=ints(0, 3))
    def query_device(self, port, index):
        ib = self.ib
        ctx = SHARED["ctx"]
        expect((ValueError, ib.VerbsError), ctx.query_port, port)
        expect((ValueError, ib.VerbsError), ctx.query_gid, port, index)
        expect((ValueError, ib.VerbsError), ctx.query_pkey, port, index)

    @rule()
    def async_events(self):
        """The async fd is non-blocking here: an event or EAGAIN."""
        ib = self.ib
        ev, exc = expect(ib.VerbsError, SHARED["ctx"].get_async_event)
        if exc is not None:
            assert exc.errno == errno.EAGAIN
        else:
            repr(ev)
            SHARED["ctx"].ack_async_event(ev)

    # ---- Python code inside C calls; a second thread ------------------------------------

    def any_object(self, data, label):
        objs = [n.obj for n in sorted(self.nodes.values(), key=lambda n: n.serial)
                if n.obj is not None]
        if not objs:
            return None
        return objs[data.draw(st.integers(0, len(objs) - 1), label=label)]

    def closer(self, victim, outcomes):
        """A function closing victim: done, or refused with EBUSY (children,
        or a call in flight on it); anything else lands in outcomes."""
        def close():
            try:
                victim.close()
            except self.ib.VerbsError as exc:
                if exc.errno != errno.EBUSY:
                    outcomes.append(f"close of {victim!r}: errno {exc.errno}")
                exc.__traceback__ = None
        return close

    def sync_closed(self, *objs):
        """The model follows closes made from callbacks and threads."""
        for obj in objs:
            if obj is None or id(obj) not in self.nodes:
                continue
            n = self.node(obj)
            if obj.closed and not n.closed:
                assert not any(c.live for c in n.children), f"{obj!r} closed with live children"
                n.closed = True
            assert obj.closed == n.closed

    @rule(field=st.sampled_from(["wr_id", "rkey", "remote_addr", "compare_add", "swap",
                                 "remote_qpn", "remote_qkey", "send_flags", "imm_data", "addr",
                                 "length", "lkey"]),
          first=st.sampled_from(["rdma", "atomic", "ud", "nosge"]),
          swap_in=st.sampled_from(["none", "rdma", "atomic", "ud", "nosge"]),
          value=ints(0, U32), close_victim=st.booleans(), data=st.data())
    def index_mutates_a_postlist_entry(self, field, first, swap_in, value, close_victim, data):
        """An __index__ that replaces the entry it is assigned to (and may
        close an object): the value lands in the field of the entry found
        after it ran, or the assignment is refused."""
        ib = self.ib
        W = ib.WROpcode
        ah = self.pick(data, "AH", "ah", open_only=True)
        kinds = {"rdma": dict(opcode=W.RDMA_WRITE, sg_list=[ib.SGE(0x1000, 8)], remote_addr=1, rkey=2),
                 "atomic": dict(opcode=W.ATOMIC_FETCH_AND_ADD, sg_list=[ib.SGE(0x1000, 8)],
                                remote_addr=6, rkey=7, compare_add=3, swap=8),
                 "ud": dict(opcode=W.SEND, sg_list=[ib.SGE(0x1000, 8)], ah=ah, remote_qpn=4,
                            remote_qkey=5),
                 "nosge": dict(opcode=W.SEND)}
        pl = ib.PostList([ib.SendWR(**kinds[first])])
        victim = self.any_object(data, "victim") if close_victim else None
        outcomes = []
        close = self.closer(victim, outcomes) if victim is not None else None

        def action():
            if swap_in != "none":
                pl[0] = ib.SendWR(**kinds[swap_in])
            if close is not None:
                close()
        try:
            setattr(pl[0], field, Index(value, action))
        except (ValueError, AttributeError, ib.VerbsError) as exc:
            exc.__traceback__ = None
        else:
            assert getattr(pl[0], field) == value, (field, first, swap_in)
        assert not outcomes, outcomes
        del pl, action, close
        self.sync_closed(victim)

    @rule(method=st.sampled_from(["poll", "sge_length", "sge_offset", "qp_modify", "srq_modify",
                                  "resize"]),
          value=ints(0, 64), self_victim=st.booleans(), data=st.data())
    def index_closes_an_object(self, method, value, self_victim, data):
        """Arguments whose __index__ closes the very object called (or
        another): refused with EBUSY or EBADF, never a freed object used."""
        ib = self.ib
        cls = {"poll": "CQ", "resize": "CQ", "sge_length": "MR", "sge_offset": "MR",
               "qp_modify": "QP", "srq_modify": "SRQ"}[method]
        obj = self.pick(data, cls, "called")
        if obj is None:
            return
        victim = obj if self_victim else self.any_object(data, "victim")
        outcomes = []
        arg = Index(value, self.closer(victim, outcomes))
        call = {"poll": lambda: obj.poll(arg), "resize": lambda: obj.resize(arg),
                "sge_length": lambda: obj.sge(arg), "sge_offset": lambda: obj.sge(None, arg),
                "qp_modify": lambda: obj.modify(ib.QPAttrMask.QKEY, qkey=arg),
                "srq_modify": lambda: obj.modify(srq_limit=arg)}[method]
        expect((ValueError, TypeError, ib.VerbsError), call)
        assert not outcomes, outcomes
        del arg, call
        self.sync_closed(obj, victim)

    @rule(n=st.integers(1, 8), posts=st.integers(1, 6), closes=st.integers(1, 4),
          data=st.data())
    def post_while_another_thread_closes(self, n, posts, closes, data):
        """A release_gil PostList posted while another thread closes objects
        (the QP, the AHs and MRs it reads, anything): EBUSY while in flight."""
        import threading
        ib = self.ib
        qp = self.pick(data, "QP", "qp", open_only=True)
        if qp is None:
            return
        wrs = []
        for i in range(n):
            wr = ib.SendWR(wr_id=i, opcode=ib.WROpcode.SEND,
                           send_flags=data.draw(st.sampled_from([0, 2, 2 | 8]), label="flags"),
                           sg_list=self.sges(data, data.draw(st.integers(0, 2), label="nsge")))
            ah = self.pick(data, "AH", "ah")
            if ah is not None and data.draw(st.booleans(), label="with ah"):
                wr.ah, wr.remote_qpn, wr.remote_qkey = ah, 1, 0x1111
            wrs.append(wr)
        pl, exc = expect((ValueError, ib.VerbsError), ib.PostList, wrs, release_gil=True)
        if pl is None:
            return
        victims = [self.any_object(data, "victim") for _ in range(closes)]
        outcomes = []
        closers = [self.closer(v, outcomes) for v in victims if v is not None]

        def close_all():
            for close in closers:
                time.sleep(0)
                close()
        t = threading.Thread(target=close_all)
        t.start()
        try:
            for _ in range(posts):
                expect((ValueError, ib.VerbsError), qp.post_send, pl)
        finally:
            t.join()
        assert not outcomes, outcomes
        del pl, wrs, closers
        self.sync_closed(qp, *victims)

    @rule(use=st.sampled_from(["post_send", "post_recv", "postlist", "sg_list"]),
          base=st.sampled_from([list, tuple]), stored=st.integers(0, 4),
          iterated=st.integers(0, 4), length=st.sampled_from([None, 0, 1, 1000]),
          data=st.data())
    def lying_sequence(self, use, base, stored, iterated, length, data):
        """A list or tuple subclass whose __len__ and __iter__ disagree with
        its storage: what is posted (or built) is what iteration gave."""
        ib = self.ib
        recv = use == "post_recv"
        sg_target = use == "sg_list"

        def item(i):
            if sg_target:
                sges = self.sges(data, 1)
                return sges[0] if sges else ib.SGE(0x1000, 8)
            sg_list = self.sges(data, data.draw(st.integers(0, 2), label="nsge"))
            return (ib.RecvWR(wr_id=i, sg_list=sg_list) if recv else
                    ib.SendWR(wr_id=i, opcode=ib.WROpcode.SEND, sg_list=sg_list))
        given = [item(100 + i) for i in range(iterated)]
        body = {"__iter__": lambda s: iter(given)}
        if length is not None:
            body["__len__"] = lambda s: length
        seq = type("Lying", (base,), body)([item(i) for i in range(stored)])
        if sg_target:
            wr = ib.SendWR(sg_list=seq)
            assert list(wr.sg_list) == given
        elif use == "postlist":
            pl, exc = expect(ValueError, ib.PostList, seq)
            assert (pl is None) == (iterated == 0), (pl, exc)
            if pl is not None:
                assert len(pl) == iterated and [e.wr_id for e in pl] == [w.wr_id for w in given]
                qp = self.pick(data, "QP", "qp", open_only=True)
                if qp is not None:
                    expect((ValueError, ib.VerbsError), qp.post_send, pl)
        else:
            qp = self.pick(data, "QP", "qp")
            if qp is not None:
                expect((ValueError, ib.VerbsError), getattr(qp, use), seq)

    @rule(action=st.sampled_from(["poll", "poll_clear", "poll_into", "post", "close"]),
          planted=st.sampled_from(["item", "append"]), data=st.data())
    def finalizer_calls_back_during_poll(self, action, planted, data):
        """An object the program put into a list poll() returned, whose
        finalizer polls (and clears what it got), posts or closes an object
        when a later poll reuses that list: each caller gets a list of its
        own, closes get EBUSY or succeed, and nothing crashes."""
        ib = self.ib
        cq = self.pick(data, "CQ", "cq", open_only=True)
        if cq is None:
            return
        other = self.pick(data, "CQ", "other cq", open_only=True)
        victim = self.any_object(data, "victim") if action == "close" else None
        qp = self.pick(data, "QP", "qp", open_only=True) if action == "post" else None
        outcomes, inner = [], []
        close = self.closer(victim, outcomes) if victim is not None else None
        armed = [True]

        def callback():
            if not armed:
                return
            armed.clear()
            if action in ("poll", "poll_clear"):
                got, _ = expect(ib.VerbsError, other.poll, 4)
                if got is not None:
                    inner.append(got)
                    if action == "poll_clear":
                        got.clear()
            elif action == "poll_into":
                expect(ib.VerbsError, other.poll_into, ib.WCBuffer(4))
            elif action == "post" and qp is not None:
                expect((ValueError, ib.VerbsError), qp.post_send,
                       ib.SendWR(opcode=ib.WROpcode.SEND))
            elif close is not None:
                close()

        n = data.draw(st.integers(1, 16), label="n")
        got, exc = expect(ib.VerbsError, cq.poll, n)
        if got is not None:
            if planted == "item" and got:
                got[0] = Finalizer(callback)
            else:
                got.append(Finalizer(callback))
            del got
        wcs, exc = expect(ib.VerbsError, cq.poll, n)
        if wcs is not None:
            assert all(type(wc) is ib.WC for wc in wcs)
            assert all(wcs is not x for x in inner)
        armed.clear()
        assert not outcomes, outcomes
        del wcs, callback, close, inner
        gc.collect()
        self.sync_closed(cq, other, victim)

    # ---- invariants and cleanup ------------------------------------------------------

    @invariant()
    def open_counts_match_the_model(self):
        STATS["steps"] += 1
        counts = process_counts(self.ib)
        for cls in ("PD", "CQ", "CompChannel", "QP", "SRQ", "MR", "MW", "AH"):
            expected = self.base_open[cls] + sum(1 for n in self.all_nodes if n.cls == cls and n.live)
            assert counts[cls] == expected, (cls, counts[cls], expected)

    def teardown(self):
        """Close what the model still holds, children first, letting go of
        each at once (a dropped parent kept alive only by it goes too);
        then nothing may be left, in this process or in the kernel."""
        self.sent = []        # their SGEs would keep MRs (and their parents) alive
        try:
            for n in sorted(self.all_nodes, key=lambda n: -n.serial):
                if n.obj is not None:
                    obj, n.obj = n.obj, None
                    obj.close()
                    del obj
        finally:
            self.nodes.clear()
            for n in self.all_nodes:
                n.obj = None
            self.all_nodes.clear()
            gc.collect()
            self.buffers.clear()
        assert process_counts(self.ib) == self.base_open
        assert kernel_counts() == self.base_kernel


class Holder:
    pass


class Finalizer:
    """An object whose finalizer runs an action."""

    def __init__(self, action):
        self.action = action

    def __del__(self):
        self.action()


class Index:
    """An integer whose __index__ first runs an action (once)."""

    def __init__(self, value, action):
        self.value, self.action = value, action

    def __index__(self):
        action, self.action = self.action, None
        if action is not None:
            action()
        return self.value


@pytest.fixture(scope="module")
def shared(ib, device_names, port):
    import rxe
    global ALLOWED
    ALLOWED = (ValueError, TypeError, ib.VerbsError)
    ctx = open_device(ib, device_names[0])
    ctx2 = open_device(ib, device_names[1]) if device_names[1] != device_names[0] else None
    fd = ctx.async_fd
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    SHARED.update(ib=ib, ctx=ctx, ctx2=ctx2, port=port,
                  gid_index=rxe.roce_v2_ipv4_gid_index(device_names[0], port),
                  gid_index2=rxe.roce_v2_ipv4_gid_index(device_names[1], port))
    gc.collect()
    SHARED["kernel"] = kernel_counts()
    yield SHARED
    for c in (ctx2, ctx):
        if c is not None:
            c.close()
    SHARED.clear()


def test_random_verbs_programs_only_raise_python_exceptions_and_leak_nothing(shared):
    kwargs = dict(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                  database=None, print_blob=True,
                  suppress_health_check=list(HealthCheck))
    if os.environ.get("IBVERBS_FUZZ_VERBOSE"):
        from hypothesis import Verbosity
        kwargs["verbosity"] = Verbosity.verbose
    if SEED is None and EXAMPLES <= 200:
        kwargs["derandomize"] = True          # the CI pass: the same programs every run
    machine = VerbsMachine.TestCase
    machine.settings = settings(**kwargs)
    if SEED is not None:
        from hypothesis import seed
        machine = seed(int(SEED))(machine)
    if os.environ.get("IBVERBS_FUZZ_REPRODUCE"):      # the blob a failure printed
        from hypothesis import reproduce_failure
        import hypothesis
        machine = reproduce_failure(hypothesis.__version__,
                                    os.environ["IBVERBS_FUZZ_REPRODUCE"].encode())(machine)
    STATS.update(examples=0, steps=0)
    t0 = time.monotonic()
    machine().runTest()
    took = time.monotonic() - t0
    print(f"\nfuzz: {STATS['examples']} examples, {STATS['steps']} steps in {took:.1f} s")
    assert STATS["examples"] >= EXAMPLES
