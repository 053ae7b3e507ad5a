"""The differential check of issue 35: a hypothesis state machine builds,
changes and posts SendWR, RecvWR, SGE, their lists and PostList entries,
closes and registers MRs, changes things from inside re-entrant hooks
(__index__, __iter__, __len__, finalizers) and from a second thread; after
every post, each request the provider was handed (the recording provider,
tests/recording/) must equal the one built here, from scratch, from what the
Python objects say.  The reference builder (expected_send, expected_recv)
is written from verbs.h's rules, independent of the C.

A few hundred examples in the host tier; IBVERBS_DIFF_EXAMPLES=<n> (`make
fuzz`) runs more, IBVERBS_DIFF_SEED=<n> replays one run."""
from __future__ import annotations

import gc
import os
import socket
import threading
from typing import Any, Callable, Dict, List, Optional

EXAMPLES = int(os.environ.get("IBVERBS_DIFF_EXAMPLES", "250"))
STEPS = int(os.environ.get("IBVERBS_DIFF_STEPS", "30"))
SEED = os.environ.get("IBVERBS_DIFF_SEED")

U64, U32 = 2**64 - 1, 2**32 - 1


def test_what_the_provider_receives_is_what_the_objects_say(recording):
    stats = recording(_run, EXAMPLES, STEPS, SEED, timeout=3000)
    # the machine did what it is for: posts checked, kept ones among them,
    # hooks that ran and changed things on the way
    assert stats["checked"] >= EXAMPLES, stats
    assert stats["hook_posts"] > 0 and stats["thread_posts"] > 0, stats
    assert stats["postlist_checked"] > 0, stats


def _run(rec, examples: int, steps: int, seed: Optional[str]) -> Dict[str, int]:
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test

    machine = _machine(rec)
    kwargs: Dict[str, Any] = dict(max_examples=examples, stateful_step_count=steps,
                                  deadline=None, database=None, print_blob=True,
                                  suppress_health_check=list(HealthCheck))
    if seed is None and examples <= 500:
        kwargs["derandomize"] = True        # the host tier: the same programs every run
    if seed is not None:
        from hypothesis import seed as fix_seed
        machine = fix_seed(int(seed))(machine)
    run_state_machine_as_test(machine, settings=settings(**kwargs))
    return dict(STATS)


STATS: Dict[str, int] = {"checked": 0, "hook_posts": 0, "thread_posts": 0, "postlist_checked": 0,
                         "hook_errors": 0}


# ---- the reference: a request built from what the objects say --------------

def sges_of(wr) -> List[tuple]:
    items = wr.sg_list
    return [(s.addr, s.length, s.lkey) for s in items]


def expected_send(ib, wr, sges=None) -> Dict[str, Any]:
    """verbs.h's struct ibv_send_wr for a SendWR: the union member by AH
    (wr.ud), atomic opcode (wr.atomic), else wr.rdma; invalidate_rkey in
    imm_data's place for the *_INV opcodes, imm_data in network order."""
    W = ib.WROpcode
    op = int(wr.opcode)
    sges = sges_of(wr) if sges is None else sges
    e: Dict[str, Any] = {"kind": "send", "wr_id": wr.wr_id, "opcode": op,
                         "send_flags": int(wr.send_flags), "num_sge": len(sges), "sges": sges}
    if op in (W.LOCAL_INV, W.SEND_WITH_INV):
        e["imm_data"] = wr.invalidate_rkey
    else:
        e["imm_data"] = socket.htonl(wr.imm_data)
    if wr.ah is not None:
        e.update(ud_ah_handle=wr.ah.handle, ud_remote_qpn=wr.remote_qpn,
                 ud_remote_qkey=wr.remote_qkey)
    elif op in (W.ATOMIC_CMP_AND_SWP, W.ATOMIC_FETCH_AND_ADD):
        e.update(atomic_remote_addr=wr.remote_addr, atomic_rkey=wr.rkey,
                 atomic_compare_add=wr.compare_add, atomic_swap=wr.swap)
    else:
        e.update(rdma_remote_addr=wr.remote_addr, rdma_rkey=wr.rkey)
    return e


def expected_recv(wr, kind="recv") -> Dict[str, Any]:
    sges = sges_of(wr)
    return {"kind": kind, "wr_id": wr.wr_id, "num_sge": len(sges), "sges": sges}


def differs(expected: Dict[str, Any], got: Dict[str, Any]) -> Dict[str, Any]:
    return {k: (v, got.get(k)) for k, v in expected.items() if got.get(k) != v}


# ---- hooks: Python code the binding runs in the middle of a change ----------

class HookIndex:
    """An int whose conversion (__index__) first runs an action."""

    def __init__(self, value: int, action: Callable[[], None]):
        self.value, self.action = value, action

    def __index__(self) -> int:
        self.action()
        return self.value


class HookSeq:
    """A sequence (not a list) whose __iter__ or __len__ runs an action."""

    def __init__(self, items: list, action: Callable[[], None], on: str):
        self.items, self.action, self.on = items, action, on

    def __iter__(self):
        if self.on == "iter":
            self.action()
        return iter(list(self.items))

    def __len__(self) -> int:
        if self.on == "len":
            self.action()
        return len(self.items)


def _machine(rec):
    import hypothesis.strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

    ib = rec.ib
    W, F = ib.WROpcode, ib.SendFlags
    OPCODES = [W.RDMA_WRITE, W.RDMA_WRITE_WITH_IMM, W.SEND, W.SEND_WITH_IMM, W.RDMA_READ,
               W.ATOMIC_CMP_AND_SWP, W.ATOMIC_FETCH_AND_ADD, W.LOCAL_INV, W.SEND_WITH_INV]
    FLAGS = st.sampled_from([0, int(F.SIGNALED), int(F.SIGNALED | F.SOLICITED), int(F.FENCE)])
    SEND_FIELDS = {"wr_id": st.integers(0, U64), "remote_addr": st.integers(0, U64),
                   "rkey": st.integers(0, U32), "imm_data": st.integers(0, U32),
                   "compare_add": st.integers(0, U64), "swap": st.integers(0, U64),
                   "remote_qpn": st.integers(0, 2**24 - 1), "remote_qkey": st.integers(0, U32),
                   "invalidate_rkey": st.integers(0, U32), "opcode": st.sampled_from(OPCODES),
                   "send_flags": FLAGS}
    SGE_FIELDS = {"addr": st.integers(0, U64), "length": st.integers(0, U32),
                  "lkey": st.integers(0, U32)}
    HOOKS = st.sampled_from(["post", "post_other", "thread_post", "set_sge", "append", "assign",
                             "collect"])
    pick = st.integers(0, 1 << 16)

    class DyingSGE(ib.SGE):
        """An SGE that runs an action when it dies (in the middle of the
        list change that drops it).  Not exactly an SGE: never kept."""
        action: Optional[Callable[[], None]] = None

        def __del__(self):
            if self.action is not None:
                self.action()

    class DataPathMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.qp = rec.qp(max_send_wr=1 << 20, max_recv_wr=1 << 20)
            self.ud = rec.qp(ib.QPType.UD, max_send_wr=1 << 20, max_recv_wr=1 << 20)
            self.srq = rec.pd.create_srq(max_wr=1 << 16, max_sge=8)
            self.ahs = [rec.pd.create_ah(ib.AHAttr(dlid=i + 1, is_global=0)) for i in range(2)]
            self.mrs = [rec.mr(4096)[0]]
            self.sges = [self.mrs[0].sge(8)]
            self.swrs: List[Any] = []
            self.rwrs: List[Any] = []
            self.postlists: List[Any] = []      # (PostList, kind, model entries)
            self.in_hook = 0

        def teardown(self):
            self.postlists.clear()
            self.swrs.clear()
            self.rwrs.clear()
            self.sges.clear()
            for obj in [self.qp, self.ud, self.srq, *self.ahs, *self.mrs]:
                if not obj.closed:
                    obj.close()

        # -- helpers -----------------------------------------------------
        def any_wr(self, i):
            wrs = self.swrs + self.rwrs
            return wrs[i % len(wrs)] if wrs else None

        def post_of(self, wr):
            if isinstance(wr, ib.SendWR):
                return (self.ud if wr.ah is not None else self.qp).post_send
            return self.qp.post_recv

        def action(self, kind: str, i: int, value: int) -> Callable[[], None]:
            """What a hook does when the binding runs it."""
            def run():
                if self.in_hook > 3:
                    return
                self.in_hook += 1
                try:
                    wr = self.any_wr(i)
                    if kind in ("post", "post_other") and wr is not None:
                        STATS["hook_posts"] += 1
                        self.post_of(wr)(wr)
                    elif kind == "thread_post" and wr is not None:
                        def post():
                            try:
                                self.post_of(wr)(wr)
                                STATS["thread_posts"] += 1
                            except Exception:
                                STATS["hook_errors"] += 1
                        t = threading.Thread(target=post)
                        t.start()
                        t.join()
                    elif kind == "set_sge" and self.sges:
                        self.sges[i % len(self.sges)].addr = value
                    elif kind == "append" and wr is not None and self.sges:
                        wr.sg_list.append(self.sges[value % len(self.sges)])
                    elif kind == "assign" and wr is not None and self.sges:
                        wr.sg_list = [self.sges[value % len(self.sges)]]
                    elif kind == "collect":
                        gc.collect(0)
                except (ValueError, TypeError, OSError, RuntimeError):
                    STATS["hook_errors"] += 1
                finally:
                    self.in_hook -= 1
            return run

        def maybe_hooked(self, value, data, hooked: bool):
            if not hooked:
                return value
            return HookIndex(value, self.action(data.draw(HOOKS), data.draw(pick),
                                                data.draw(st.integers(0, U64))))

        def check(self, expected: List[Dict[str, Any]]):
            got = rec.requests()
            last = max((r["post"] for r in got), default=None)
            got = [r for r in got if r["post"] == last]
            assert len(got) == len(expected), (expected, got)
            for i, (e, g) in enumerate(zip(expected, got)):
                assert not differs(e, g), (i, differs(e, g))
            STATS["checked"] += 1

        def expected(self, wr):
            return expected_send(ib, wr) if isinstance(wr, ib.SendWR) else expected_recv(wr)

        # -- memory and SGEs ---------------------------------------------
        @rule()
        def register_mr(self):
            if len(self.mrs) < 6:
                self.mrs.append(rec.mr(4096)[0])

        @rule(i=pick)
        def close_mr(self, i):
            mr = self.mrs[i % len(self.mrs)]
            if not mr.closed:
                mr.close()

        @rule(i=pick, length=st.integers(0, 4096), offset=st.integers(0, 4096), dying=st.booleans(),
              data=st.data())
        def new_sge(self, i, length, offset, dying, data):
            open_mrs = [m for m in self.mrs if not m.closed]
            if dying:
                sge = DyingSGE(data.draw(st.integers(0, U64)), length % 64, 7)
                sge.action = self.action(data.draw(HOOKS), data.draw(pick), data.draw(pick))
            elif open_mrs and length + offset <= 4096:
                sge = open_mrs[i % len(open_mrs)].sge(length, offset)
            else:
                sge = ib.SGE(data.draw(st.integers(0, U64)), length, data.draw(st.integers(0, U32)))
            if len(self.sges) >= 24:
                self.sges.pop(0)
            self.sges.append(sge)

        @rule(i=pick, field=st.sampled_from(sorted(SGE_FIELDS)), hooked=st.booleans(),
              data=st.data())
        def set_sge_field(self, i, field, hooked, data):
            sge = self.sges[i % len(self.sges)]
            value = data.draw(SGE_FIELDS[field])
            setattr(sge, field, self.maybe_hooked(value, data, hooked))

        @rule(i=pick, j=pick, length=st.integers(0, 2048), offset=st.integers(0, 2048))
        def reinit_sge(self, i, j, length, offset):
            sge = self.sges[i % len(self.sges)]
            mr = self.mrs[j % len(self.mrs)]
            if mr.closed:
                sge.__init__(0x1000 + offset, length, 5)
            else:
                sge.__init__(mr, length, offset=offset)

        # -- requests ----------------------------------------------------
        def draw_sges(self, data, most=5):
            n = data.draw(st.integers(0, most))
            return [self.sges[data.draw(pick) % len(self.sges)] for _ in range(n)]

        @rule(opcode=st.sampled_from(OPCODES), flags=FLAGS, hooked=st.booleans(), data=st.data())
        def new_send_wr(self, opcode, flags, hooked, data):
            kw = {f: data.draw(SEND_FIELDS[f]) for f in ("remote_addr", "rkey", "imm_data",
                                                         "compare_add", "swap", "remote_qpn",
                                                         "remote_qkey", "invalidate_rkey")}
            wr = ib.SendWR(wr_id=self.maybe_hooked(data.draw(st.integers(0, U64)), data, hooked),
                           sg_list=self.draw_sges(data), opcode=opcode, send_flags=flags, **kw)
            if len(self.swrs) >= 8:
                self.swrs.pop(0)
            self.swrs.append(wr)

        @rule(hooked=st.booleans(), data=st.data())
        def new_recv_wr(self, hooked, data):
            wr = ib.RecvWR(wr_id=self.maybe_hooked(data.draw(st.integers(0, U64)), data, hooked),
                           sg_list=self.draw_sges(data))
            if len(self.rwrs) >= 8:
                self.rwrs.pop(0)
            self.rwrs.append(wr)

        @precondition(lambda self: self.swrs)
        @rule(i=pick, field=st.sampled_from(sorted(SEND_FIELDS)), hooked=st.booleans(),
              data=st.data())
        def set_send_field(self, i, field, hooked, data):
            wr = self.swrs[i % len(self.swrs)]
            value = data.draw(SEND_FIELDS[field])
            if field not in ("opcode", "send_flags"):
                value = self.maybe_hooked(value, data, hooked)
            setattr(wr, field, value)

        @precondition(lambda self: self.rwrs)
        @rule(i=pick, hooked=st.booleans(), data=st.data())
        def set_recv_wr_id(self, i, hooked, data):
            self.rwrs[i % len(self.rwrs)].wr_id = self.maybe_hooked(
                data.draw(st.integers(0, U64)), data, hooked)

        @precondition(lambda self: self.swrs)
        @rule(i=pick, j=pick, set_it=st.booleans())
        def set_ah(self, i, j, set_it):
            self.swrs[i % len(self.swrs)].ah = self.ahs[j % 2] if set_it else None

        @precondition(lambda self: self.swrs or self.rwrs)
        @rule(i=pick, form=st.sampled_from(["list", "tuple", "iter", "len", "none", "shared"]),
              data=st.data())
        def assign_list(self, i, form, data):
            wr = self.any_wr(i)
            items = self.draw_sges(data)
            if form == "list":
                wr.sg_list = items
            elif form == "tuple":
                wr.sg_list = tuple(items)
            elif form == "none":
                wr.sg_list = None
            elif form == "shared":
                wr.sg_list = self.any_wr(data.draw(pick)).sg_list
            else:
                wr.sg_list = HookSeq(items, self.action(data.draw(HOOKS), data.draw(pick),
                                                        data.draw(pick)), form)

        @precondition(lambda self: self.swrs or self.rwrs)
        @rule(i=pick, op=st.sampled_from(["append", "replace", "delete", "clear", "insert"]),
              through=st.sampled_from(["getter", "collector"]), j=pick)
        def change_list_in_place(self, i, op, through, j):
            wr = self.any_wr(i)
            if through == "getter":
                lst = wr.sg_list
            else:
                lists = [r for r in gc.get_referents(wr) if type(r) is list]
                if not lists:
                    return
                (lst,) = lists
            sge = self.sges[j % len(self.sges)]
            if op == "append":
                lst.append(sge)
            elif op == "insert":
                lst.insert(j % (len(lst) + 1), sge)
            elif op == "clear":
                lst.clear()
            elif lst and op == "replace":
                lst[j % len(lst)] = sge
            elif lst:
                del lst[j % len(lst)]
            del lst                              # let go before the next post

        @precondition(lambda self: self.swrs or self.rwrs)
        @rule(i=pick, hooked=st.booleans(), data=st.data())
        def reinit_wr(self, i, hooked, data):
            wr = self.any_wr(i)
            wr_id = self.maybe_hooked(data.draw(st.integers(0, U64)), data, hooked)
            if isinstance(wr, ib.SendWR):
                wr.__init__(wr_id=wr_id, sg_list=self.draw_sges(data),
                            opcode=data.draw(st.sampled_from(OPCODES)),
                            remote_addr=data.draw(SEND_FIELDS["remote_addr"]),
                            rkey=data.draw(SEND_FIELDS["rkey"]))
            else:
                wr.__init__(wr_id=wr_id, sg_list=self.draw_sges(data))

        @rule(i=pick)
        def drop_sge(self, i):
            if len(self.sges) > 1:
                self.sges.pop(i % len(self.sges))

        @rule()
        def collect(self):
            gc.collect(0)       # the youngest generation: what the rules just made

        # -- posts, each checked -----------------------------------------
        @precondition(lambda self: self.swrs or self.rwrs)
        @rule(i=pick, times=st.integers(1, 3), as_list=st.booleans())
        def post_one(self, i, times, as_list):
            wr = self.any_wr(i)
            for _ in range(times):              # the second and third: kept requests
                rec.clear()
                self.post_of(wr)([wr] if as_list else wr)
                self.check([self.expected(wr)])

        @precondition(lambda self: self.rwrs)
        @rule(i=pick)
        def post_srq(self, i):
            wr = self.rwrs[i % len(self.rwrs)]
            rec.clear()
            self.srq.post_recv(wr)
            self.check([expected_recv(wr, "srq_recv")])

        @precondition(lambda self: self.swrs or self.rwrs)
        @rule(idx=st.lists(pick, min_size=1, max_size=6), form=st.sampled_from([list, tuple]),
              data=st.data())
        def post_chain(self, idx, form, data):
            send = data.draw(st.booleans()) if self.swrs and self.rwrs else bool(self.swrs)
            if send:
                ud = data.draw(st.booleans())
                pool = [w for w in self.swrs if (w.ah is not None) == ud]
                if not pool:
                    return
                wrs = [pool[k % len(pool)] for k in idx]
                rec.clear()
                (self.ud if ud else self.qp).post_send(form(wrs))
            else:
                wrs = [self.rwrs[k % len(self.rwrs)] for k in idx]
                rec.clear()
                self.qp.post_recv(form(wrs))
            self.check([self.expected(w) for w in wrs])

        @precondition(lambda self: self.swrs or self.rwrs)
        @rule(i=pick, times=st.integers(10, 60), hook=HOOKS, j=pick, value=pick)
        def post_from_another_thread_while_changing(self, i, times, hook, j, value):
            """A second thread posts the request over and over while this
            one changes it (the GIL handed over every 10 us); after the
            join, the next post sends what the request says."""
            import sys
            wr = self.any_wr(i)
            post = self.post_of(wr)
            stop = threading.Event()

            def poster():
                while not stop.is_set():
                    try:
                        post(wr)
                        STATS["thread_posts"] += 1
                    except Exception:
                        STATS["hook_errors"] += 1

            old = sys.getswitchinterval()
            sys.setswitchinterval(1e-5)
            t = threading.Thread(target=poster)
            t.start()
            try:
                act = self.action(hook, j, value)
                for k in range(times):
                    if k % 3 == 0 and self.sges:
                        items = [self.sges[(j + k) % len(self.sges)]]
                        wr.sg_list = HookSeq(items, act, "iter")
                    elif self.sges:
                        self.sges[(j + k) % len(self.sges)].length = (value + k) % 4096
            finally:
                stop.set()
                t.join()
                sys.setswitchinterval(old)
            wr = self.any_wr(i)
            rec.clear()
            self.post_of(wr)(wr)
            self.check([self.expected(wr)])

        # -- PostList: a snapshot, changed through its entries -----------
        @precondition(lambda self: self.swrs or self.rwrs)
        @rule(idx=st.lists(pick, min_size=1, max_size=4), send=st.booleans())
        def new_postlist(self, idx, send):
            if send and any(w.ah is None for w in self.swrs):
                pool = [w for w in self.swrs if w.ah is None]
                wrs = [pool[k % len(pool)] for k in idx]
                model = [expected_send(ib, w) for w in wrs]
            elif self.rwrs:
                wrs = [self.rwrs[k % len(self.rwrs)] for k in idx]
                model = [expected_recv(w) for w in wrs]
            else:
                return
            rooms = [len(m["sges"]) for m in model]
            if len(self.postlists) >= 3:
                self.postlists.pop(0)
            self.postlists.append((ib.PostList(wrs), model, rooms))

        @precondition(lambda self: self.postlists)
        @rule(i=pick, k=pick, field=st.sampled_from(["wr_id", "send_flags", "remote_addr", "rkey",
                                                     "compare_add", "swap", "imm_data",
                                                     "invalidate_rkey", "addr", "length", "lkey"]),
              data=st.data())
        def set_entry(self, i, k, field, data):
            pl, model, rooms = self.postlists[i % len(self.postlists)]
            n = k % len(model)
            m = model[n]
            strategy = SGE_FIELDS[field] if field in SGE_FIELDS else SEND_FIELDS[field]
            value = data.draw(strategy)
            send = m["kind"] == "send"
            op = m.get("opcode")
            inv = op in (W.LOCAL_INV, W.SEND_WITH_INV)
            atomic = "atomic_rkey" in m
            if field == "wr_id":
                m["wr_id"] = value
            elif field in ("addr", "length", "lkey"):
                if not m["sges"]:
                    return
                s = list(m["sges"][0])
                s[("addr", "length", "lkey").index(field)] = value
                m["sges"][0] = tuple(s)
            elif not send:
                return
            elif field == "send_flags":
                m["send_flags"] = value
            elif field == "imm_data" and not inv:
                m["imm_data"] = socket.htonl(value)
            elif field == "invalidate_rkey" and inv:
                m["imm_data"] = value
            elif field in ("remote_addr", "rkey"):
                m[("atomic_" if atomic else "rdma_") + field] = value
            elif field in ("compare_add", "swap") and atomic:
                m["atomic_" + field] = value
            else:
                return                              # not the entry's: AttributeError
            setattr(pl[n], field, value)

        @precondition(lambda self: self.postlists)
        @rule(i=pick, k=pick, j=pick)
        def assign_entry(self, i, k, j):
            pl, model, rooms = self.postlists[i % len(self.postlists)]
            n = k % len(model)
            send = model[n]["kind"] == "send"
            pool = [w for w in self.swrs if w.ah is None] if send else self.rwrs
            if not pool:
                return
            wr = pool[j % len(pool)]
            new = expected_send(ib, wr) if send else expected_recv(wr)
            if len(new["sges"]) > rooms[n]:
                return                              # ValueError: no room
            pl[n] = wr
            model[n] = new

        @precondition(lambda self: self.postlists)
        @rule(i=pick)
        def post_postlist(self, i):
            pl, model, rooms = self.postlists[i % len(self.postlists)]
            rec.clear()
            if model[0]["kind"] == "send":
                self.qp.post_send(pl)
            else:
                self.qp.post_recv(pl)
            self.check([dict(m) for m in model])
            STATS["postlist_checked"] += 1

        @invariant()
        def no_hook_left_running(self):
            assert self.in_hook == 0

    return DataPathMachine
