"""What a QPEx hands its provider: every ibv_qp_ex builder call (wr_start,
the operations, the wr_set_* setters, wr_complete / wr_abort) with its
arguments, and qpx->wr_id / qpx->wr_flags as they stood at each operation,
recorded by the recording provider (tests/recording/recqpex.c) and compared
with what the Python calls said.  Each body runs in a child under the
provider (the `recording` fixture, tests/host/conftest.py).

A plan is the list of Python calls a body makes on one QPEx: ("wr_id", v)
and ("wr_flags", v) assign those attributes, (name, *args) calls the method.
The expected records are computed from the same plan here, in the parent,
so the binding's converters are checked against Python's own values."""
from __future__ import annotations

import errno
import sys

import pytest

# ibv_wr_opcode (verbs.h) for each operation; the setters have none.
OPCODES = {"wr_send": 2, "wr_send_imm": 3, "wr_rdma_write": 0, "wr_rdma_write_imm": 1,
           "wr_rdma_read": 4, "wr_atomic_cmp_swp": 5, "wr_atomic_fetch_add": 6,
           "wr_local_inv": 7, "wr_send_inv": 9, "wr_send_tso": 10, "wr_atomic_write": 15}
SIGNALED, SOLICITED, FENCE = 2, 4, 1
# Every field a builder may fill; a record must have its default (0, [] or
# b"") wherever the call it stands for fills nothing.
PAYLOAD = {"wr_id": 0, "send_flags": 0, "opcode": 0, "imm_data": 0, "rdma_rkey": 0,
           "rdma_remote_addr": 0, "atomic_rkey": 0, "atomic_remote_addr": 0,
           "atomic_compare_add": 0, "atomic_swap": 0, "invalidate_rkey": 0, "ud_ah_handle": 0,
           "ud_remote_qpn": 0, "ud_remote_qkey": 0, "xrc_remote_srqn": 0, "num_sge": 0,
           "sges": [], "inline_data": b"", "inline_len": 0}


def _be32(value: int) -> int:
    """imm_data as the provider reads it: the __be32 the verb received."""
    return int.from_bytes(value.to_bytes(4, "big"), sys.byteorder)


def expected(plan, ah_handle=None):
    """The records a plan should make, one per builder call, in order."""
    wr_id = wr_flags = 0
    out = []
    for name, *args in plan:
        if name == "wr_id":
            wr_id = args[0]
            continue
        if name == "wr_flags":
            wr_flags = args[0]
            continue
        rec = {"call": name, **PAYLOAD}
        if name in OPCODES:
            rec.update(wr_id=wr_id, send_flags=wr_flags, opcode=OPCODES[name])
        if name in ("wr_rdma_write", "wr_rdma_write_imm", "wr_rdma_read"):
            rec.update(rdma_rkey=args[0], rdma_remote_addr=args[1])
        if name in ("wr_send_imm", "wr_rdma_write_imm"):
            rec["imm_data"] = _be32(args[-1])
        if name == "wr_atomic_cmp_swp":
            rec.update(atomic_rkey=args[0], atomic_remote_addr=args[1],
                       atomic_compare_add=args[2], atomic_swap=args[3])
        if name == "wr_atomic_fetch_add":
            rec.update(atomic_rkey=args[0], atomic_remote_addr=args[1],
                       atomic_compare_add=args[2])
        if name == "wr_atomic_write":
            rec.update(atomic_rkey=args[0], atomic_remote_addr=args[1], inline_data=bytes(args[2]),
                       inline_len=8)
        if name in ("wr_send_inv", "wr_local_inv"):
            rec["invalidate_rkey"] = args[0]
        if name == "wr_send_tso":
            rec.update(inline_data=bytes(args[0]), inline_len=len(args[0]))
        if name == "wr_set_xrc_srqn":
            rec["xrc_remote_srqn"] = args[0]
        if name == "wr_set_sge":
            lkey, addr, length = args
            rec.update(num_sge=1, sges=[(addr, length, lkey)])
        if name == "wr_set_sge_list":
            rec.update(num_sge=len(args[0]), sges=[(a, n, k) for a, n, k in args[0]])
        if name in ("wr_set_inline_data", "wr_set_inline_data_list"):
            buffers = [args[0]] if name == "wr_set_inline_data" else args[0]
            data = b"".join(bytes(b) for b in buffers)
            rec.update(num_sge=len(buffers), inline_data=data, inline_len=len(data))
        if name == "wr_set_ud_addr":
            rec.update(ud_ah_handle=ah_handle, ud_remote_qpn=args[1], ud_remote_qkey=args[2])
        out.append(rec)
    return out


def _run_plan(rec, plan, qp_type_name="RC"):
    """Makes the plan's calls on a fresh QPEx; its records and the facts the
    parent cannot know (qp_num, the AH's handle, inline buffers' sizes)."""
    ib = rec.ib
    qp = rec.qpex(qp_type=getattr(ib.QPType, qp_type_name), max_send_sge=4,
                  max_inline_data=64)
    ah = rec.pd.create_ah(ib.AHAttr(dlid=3, is_global=0)) if qp_type_name == "UD" else None
    for name, *args in plan:
        if name in ("wr_id", "wr_flags"):
            setattr(qp, name, args[0])
        elif name == "wr_set_sge_list":
            qp.wr_set_sge_list([ib.SGE(addr, length, lkey) for addr, length, lkey in args[0]])
        elif name == "wr_set_ud_addr":
            qp.wr_set_ud_addr(ah, *args[1:])
        else:
            getattr(qp, name)(*args)
    return rec.qpex_calls_of(qp), qp.qp_num, ah.handle if ah else None


def _projected(records):
    """Each record's call and payload, the sges' lengths of an inline list
    read from the records' own lengths (their addresses are the binding's
    copies, not Python's)."""
    out = []
    for r in records:
        p = {"call": r["call"], **{k: r[k] for k in PAYLOAD}}
        if r["call"] in ("wr_set_inline_data", "wr_set_inline_data_list"):
            p["sges"] = []
        out.append(p)
    return out


def _inline_lengths(records):
    return [[length for _addr, length, _lkey in r["sges"]] for r in records
            if r["call"] in ("wr_set_inline_data", "wr_set_inline_data_list")]


def check_one_batch(records, qp_num, plan, ah_handle=None, end="wr_complete"):
    """records are exactly the plan's calls, one batch (one post number,
    indices 0.., on this QP), wr_start first and `end` last."""
    assert _projected(records) == expected(plan, ah_handle)
    assert {(r["kind"], r["target"]) for r in records} == {("qpex", qp_num)}
    assert len({r["post"] for r in records}) == 1 and records[0]["post"] > 0
    assert [r["index"] for r in records] == list(range(len(records)))
    assert records[0]["call"] == "wr_start" and records[-1]["call"] == end


# ---- each builder family ---------------------------------------------------------------

OPERATIONS = [
    ("wr_start",),
    ("wr_id", 0x1111), ("wr_flags", SIGNALED),
    ("wr_send",), ("wr_set_sge", 0x101, 0x10000, 64),
    ("wr_id", 0x2222), ("wr_flags", SIGNALED | SOLICITED),
    ("wr_send_imm", 0x12345678), ("wr_set_sge", 0x102, 0x20000, 8),
    ("wr_id", 0x3333), ("wr_flags", 0),
    ("wr_rdma_write", 0xAABBCCDD, 0xFFFF000011112222), ("wr_set_sge", 0x103, 0x30000, 4096),
    ("wr_id", 0xFFFFFFFFFFFFFFFF), ("wr_flags", FENCE | SIGNALED),
    ("wr_rdma_write_imm", 7, 0x4000, 0xDEADBEEF), ("wr_set_sge", 0x104, 0x40000, 1),
    ("wr_id", 5), ("wr_flags", SIGNALED),
    ("wr_rdma_read", 0xFFFFFFFF, 0x5000), ("wr_set_sge", 0x105, 0x50000, 16),
    ("wr_id", 6),
    ("wr_atomic_cmp_swp", 8, 0x6000, 0x0123456789ABCDEF, 0xFEDCBA9876543210),
    ("wr_set_sge", 0x106, 0x60000, 8),
    ("wr_id", 7), ("wr_flags", FENCE),
    ("wr_atomic_fetch_add", 9, 0x7000, 0xFFFFFFFFFFFFFFFF), ("wr_set_sge", 0x107, 0x70000, 8),
    ("wr_complete",),
]


# The operations no host test of the binding reached before: invalidations,
# TSO (its header's bytes), atomic write (its 8 bytes), the XRC SRQ setter.
OTHER_OPERATIONS = [
    ("wr_start",), ("wr_id", 71), ("wr_flags", SIGNALED),
    ("wr_send_inv", 0x1234), ("wr_set_sge", 1, 0x1000, 8), ("wr_set_xrc_srqn", 77),
    ("wr_id", 72),
    ("wr_local_inv", 0xFFFFFFFF),
    ("wr_id", 73), ("wr_flags", 0),
    ("wr_send_tso", b"\x45\x00header", 1400), ("wr_set_sge", 2, 0x2000, 9000),
    ("wr_id", 74),
    ("wr_atomic_write", 6, 0x3000, b"12345678"), ("wr_set_sge", 3, 0x3000, 8),
    ("wr_complete",),
]


def test_every_operation_reaches_the_provider_as_python_called_it(recording):
    records, qp_num, _ = recording(_run_plan, OPERATIONS)
    check_one_batch(records, qp_num, OPERATIONS)
    records, qp_num, _ = recording(_run_plan, OTHER_OPERATIONS)
    check_one_batch(records, qp_num, OTHER_OPERATIONS)
    # the plan really has every operation family, each with its own wr_id
    called = [r for r in expected(OPERATIONS + OTHER_OPERATIONS)
              if r["call"] in OPCODES]
    assert {r["call"] for r in called} == set(OPCODES)
    assert len({r["wr_id"] for r in called}) == len(OPCODES)


SGE_LISTS = [
    ("wr_start",), ("wr_id", 41), ("wr_flags", SIGNALED),
    ("wr_send",), ("wr_id", 99), ("wr_flags", FENCE),   # too late for that send
    ("wr_set_sge_list", [(0x1000, 16, 0x11), (0x2000, 32, 0x22), (0x3000, 0, 0x33)]),
    ("wr_id", 42),
    ("wr_rdma_write", 1, 0x9000), ("wr_set_sge_list", [(0xFFFFFFFFFFFFFFF0, 0xFFFFFFFF, 1)]),
    ("wr_id", 43),
    ("wr_send",), ("wr_set_sge_list", []),
    ("wr_complete",),
]


def test_sge_lists_arrive_whole_and_in_order(recording):
    records, qp_num, _ = recording(_run_plan, SGE_LISTS)
    check_one_batch(records, qp_num, SGE_LISTS)


INLINE = [
    ("wr_start",), ("wr_id", 51), ("wr_flags", SIGNALED),
    ("wr_send",), ("wr_set_inline_data", b"hello, inline"),
    ("wr_id", 52),
    ("wr_send",), ("wr_set_inline_data", bytearray(b"\x00\xff\x00")),
    ("wr_id", 53),
    ("wr_rdma_write", 3, 0x8000), ("wr_set_inline_data_list", [b"ab", bytearray(b"cde"), b"", b"f"]),
    ("wr_id", 54),
    ("wr_send",), ("wr_set_inline_data", b""),
    ("wr_complete",),
]


def test_inline_data_bytes_are_those_python_gave(recording):
    records, qp_num, _ = recording(_run_plan, INLINE)
    check_one_batch(records, qp_num, INLINE)
    assert _inline_lengths(records) == [[13], [3], [2, 3, 0, 1], [0]]


UD = [
    ("wr_start",), ("wr_id", 61), ("wr_flags", SIGNALED),
    ("wr_send",), ("wr_set_sge", 0x201, 0x1000, 8), ("wr_set_ud_addr", "AH", 0x42, 0x11111111),
    ("wr_id", 62),
    ("wr_send_imm", 1), ("wr_set_ud_addr", "AH", 0xFFFFFF, 0xFFFFFFFF),
    ("wr_set_inline_data", b"ud"),
    ("wr_complete",),
]


def test_a_ud_qpex_hands_its_ah_and_destination(recording):
    records, qp_num, ah_handle = recording(_run_plan, UD, "UD")
    check_one_batch(records, qp_num, UD, ah_handle)


# ---- batches: abort, failure, order --------------------------------------------------

def _abort_then_complete(rec):
    ib = rec.ib
    qp = rec.qpex()
    qp.wr_start()
    qp.wr_id = 1
    qp.wr_send()
    qp.wr_set_sge(1, 0x1000, 8)
    qp.wr_abort()
    qp.wr_start()
    qp.wr_id = 2
    qp.wr_send()
    qp.wr_set_sge(1, 0x1000, 8)
    qp.wr_complete()
    return rec.qpex_calls_of(qp)


def test_an_aborted_batch_is_never_completed(recording):
    records = recording(_abort_then_complete)
    batches = {}
    for r in records:
        batches.setdefault(r["post"], []).append((r["call"], r["wr_id"]))
    assert list(batches.values()) == [
        [("wr_start", 0), ("wr_send", 1), ("wr_set_sge", 0), ("wr_abort", 0)],
        [("wr_start", 0), ("wr_send", 2), ("wr_set_sge", 0), ("wr_complete", 0)]]


def _ud_request_without_destination(rec):
    ib = rec.ib
    qp = rec.qpex(qp_type=ib.QPType.UD)
    qp.wr_start()
    qp.wr_send()
    qp.wr_set_sge(1, 0x1000, 8)
    try:
        qp.wr_complete()
    except ib.VerbsError as e:
        return rec.qpex_calls_of(qp), e.errno, str(e)
    return rec.qpex_calls_of(qp), None, ""


def test_a_ud_request_without_an_address_is_aborted_not_posted(recording):
    records, err, message = recording(_ud_request_without_destination)
    assert err == errno.EINVAL and "wr_set_ud_addr" in message
    assert [r["call"] for r in records] == ["wr_start", "wr_send", "wr_set_sge", "wr_abort"]


def _closed_with_a_batch_open(rec, how):
    import gc
    qp = rec.qpex()
    qp_num = qp.qp_num
    if how == "close":
        qp.wr_start()
        qp.wr_send()
        qp.close()
    elif how == "with":
        with qp:
            qp.wr_start()
            qp.wr_send()
    else:
        qp.wr_start()
        qp.wr_send()
        del qp
        gc.collect()
    return [r for r in rec.requests() if r["target"] == qp_num]


@pytest.mark.parametrize("how", ["close", "with", "garbage"])
def test_a_qpex_closed_with_a_batch_open_aborts_it(recording, how):
    records = recording(_closed_with_a_batch_open, how)
    assert [r["call"] for r in records] == ["wr_start", "wr_send", "wr_abort"]


def _complete_fails(rec, rc):
    ib = rec.ib
    qp = rec.qpex()
    qp.wr_start()
    qp.wr_send()
    rec.fail_next_post(rc)
    try:
        qp.wr_complete()
        err = None
    except ib.VerbsError as e:
        err = e.errno
    qp.wr_start()              # the failed batch is over: a new one may start
    qp.wr_abort()
    return rec.qpex_calls_of(qp), err


@pytest.mark.parametrize("rc", [errno.ENOMEM, -errno.ENOMEM], ids=["positive", "negated"])
def test_a_failed_wr_complete_raises_its_errno_and_ends_the_batch(recording, rc):
    records, err = recording(_complete_fails, rc)
    assert err == errno.ENOMEM
    assert [(r["call"], r["index"]) for r in records] == [
        ("wr_start", 0), ("wr_send", 1), ("wr_complete", 2), ("wr_start", 0), ("wr_abort", 1)]


def _misuse(rec):
    ib = rec.ib
    qp = rec.qpex(send_ops_flags=ib.QPCreateSendOps.SEND)
    errors = []

    def attempt(call, *args):
        try:
            getattr(qp, call)(*args)
        except ib.VerbsError as e:
            errors.append((call, e.errno))

    attempt("wr_send")                          # no batch open
    attempt("wr_complete")
    attempt("wr_start")
    attempt("wr_set_sge", 1, 0x1000, 8)         # no operation yet
    attempt("wr_start")                         # a batch is open
    attempt("wr_rdma_write", 1, 0x1000)         # not in send_ops_flags
    attempt("wr_send")
    attempt("wr_set_ud_addr", rec.pd.create_ah(ib.AHAttr(dlid=1)), 1, 1)  # an RC QP
    try:
        qp.post_send(ib.SendWR(wr_id=1, opcode=ib.WROpcode.SEND))
    except ib.VerbsError as e:
        errors.append(("post_send", e.errno))
    attempt("wr_abort")
    return rec.requests(), errors


def test_what_the_guard_refuses_never_reaches_the_provider(recording):
    records, errors = recording(_misuse)
    assert errors == [("wr_send", errno.EINVAL), ("wr_complete", errno.EINVAL),
                      ("wr_set_sge", errno.EINVAL), ("wr_start", errno.EBUSY),
                      ("wr_rdma_write", errno.EOPNOTSUPP), ("wr_set_ud_addr", errno.EINVAL),
                      ("post_send", errno.EBUSY)]
    assert [(r["kind"], r.get("call"), r["index"]) for r in records] == [
        ("qpex", "wr_start", 0), ("qpex", "wr_send", 1), ("qpex", "wr_abort", 2)]


def _plain_qp_has_no_builders(rec):
    ib = rec.ib
    qp = rec.pd.create_qp_ex(rec.cq, rec.cq)     # no send_ops_flags: a plain QP
    try:
        qp.wr_start()
    except ib.VerbsError as e:
        return e.errno, rec.requests()
    return None, rec.requests()


def test_a_qpex_without_send_ops_has_no_extended_post_api(recording):
    assert recording(_plain_qp_has_no_builders) == (errno.EOPNOTSUPP, [])


# ---- re-entrant values -----------------------------------------------------------------

def _reentrant(rec, scenario):
    """A value whose __index__ calls back into the same QPEx while the
    binding converts it; the records and what Python saw."""
    ib = rec.ib
    qp = rec.qpex()
    seen = []

    class Sneaky:
        def __init__(self, value, action):
            self.value, self.action = value, action

        def __index__(self):
            try:
                self.action()
            except ib.VerbsError as e:
                seen.append(("inner", e.errno))
            return self.value

    def outer(fn):
        try:
            fn()
            seen.append(("outer", None))
        except ib.VerbsError as e:
            seen.append(("outer", e.errno))

    qp.wr_start()
    qp.wr_id = 10
    if scenario == "wr_id starts a batch":
        outer(lambda: setattr(qp, "wr_id", Sneaky(20, qp.wr_start)))
    elif scenario == "wr_id adds an operation":
        outer(lambda: setattr(qp, "wr_id", Sneaky(20, qp.wr_send)))
    elif scenario == "wr_id sets wr_id":
        outer(lambda: setattr(qp, "wr_id", Sneaky(20, lambda: setattr(qp, "wr_id", 30))))
    elif scenario == "wr_flags sets wr_flags":
        outer(lambda: setattr(qp, "wr_flags", Sneaky(SIGNALED, lambda: setattr(qp, "wr_flags", FENCE))))
    elif scenario == "rkey aborts the batch":
        outer(lambda: qp.wr_rdma_write(Sneaky(5, qp.wr_abort), 0x1000))
    elif scenario == "lkey completes the batch":
        qp.wr_send()
        outer(lambda: qp.wr_set_sge(Sneaky(5, qp.wr_complete), 0x1000, 8))
    elif scenario == "remote_addr closes the QP":
        outer(lambda: qp.wr_rdma_write(5, Sneaky(0x1000, qp.close)))
    elif scenario == "wr_id closes the QP":
        outer(lambda: setattr(qp, "wr_id", Sneaky(20, qp.close)))
        return rec.requests(), seen, None
    seen.append(("wr_id", qp.wr_id, "wr_flags", qp.wr_flags))
    # whatever the batch now is, one more request shows which wr_id/wr_flags it gets
    try:
        qp.wr_send()
        qp.wr_abort()
    except ib.VerbsError as e:
        seen.append(("after", e.errno))
    return rec.requests(), seen, qp.qp_num


def calls(records):
    return [(r["call"], r["post"] > 0, r["wr_id"], r["send_flags"]) for r in records]


def test_a_wr_id_whose_index_starts_a_batch_gets_ebusy_and_changes_nothing(recording):
    records, seen, _ = recording(_reentrant, "wr_id starts a batch")
    # the inner wr_start is refused; the outer assignment then completes
    assert seen == [("inner", errno.EBUSY), ("outer", None), ("wr_id", 20, "wr_flags", 0)]
    assert calls(records) == [("wr_start", True, 0, 0), ("wr_send", True, 20, 0),
                              ("wr_abort", True, 0, 0)]


def test_a_wr_id_whose_index_adds_an_operation_leaves_both_as_called(recording):
    records, seen, _ = recording(_reentrant, "wr_id adds an operation")
    # the inner wr_send ran first, with the wr_id then stored; then 20 is stored
    assert seen == [("outer", None), ("wr_id", 20, "wr_flags", 0)]
    assert calls(records) == [("wr_start", True, 0, 0), ("wr_send", True, 10, 0),
                              ("wr_send", True, 20, 0), ("wr_abort", True, 0, 0)]
    assert len({r["post"] for r in records}) == 1


def test_the_outer_assignment_wins_over_one_made_by_index(recording):
    records, seen, _ = recording(_reentrant, "wr_id sets wr_id")
    assert seen[-1] == ("wr_id", 20, "wr_flags", 0)
    assert calls(records)[1] == ("wr_send", True, 20, 0)
    records, seen, _ = recording(_reentrant, "wr_flags sets wr_flags")
    assert seen[-1] == ("wr_id", 10, "wr_flags", SIGNALED)
    assert calls(records)[1] == ("wr_send", True, 10, SIGNALED)


def test_an_argument_whose_index_aborts_the_batch_posts_nothing(recording):
    records, seen, _ = recording(_reentrant, "rkey aborts the batch")
    # the operation finds no batch open: EINVAL, and the provider never sees it
    assert seen[0] == ("outer", errno.EINVAL)
    assert [r["call"] for r in records] == ["wr_start", "wr_abort"]
    assert seen[-1] == ("after", errno.EINVAL)


def test_an_argument_whose_index_completes_the_batch_sets_nothing_after_it(recording):
    records, seen, _ = recording(_reentrant, "lkey completes the batch")
    assert seen[0] == ("outer", errno.EINVAL)
    assert [r["call"] for r in records] == ["wr_start", "wr_send", "wr_complete"]


def test_an_argument_whose_index_closes_the_qp_leaves_it_open(recording):
    records, seen, _ = recording(_reentrant, "remote_addr closes the QP")
    # a method in progress holds its QP: close() is EBUSY, the operation goes on
    assert seen == [("inner", errno.EBUSY), ("outer", None), ("wr_id", 10, "wr_flags", 0)]
    assert [(r["call"], r["wr_id"], r["rdma_rkey"], r["rdma_remote_addr"]) for r in records] == [
        ("wr_start", 0, 0, 0), ("wr_rdma_write", 10, 5, 0x1000), ("wr_send", 10, 0, 0),
        ("wr_abort", 0, 0, 0)]


def test_a_wr_id_whose_index_closes_the_qp_aborts_its_batch_first(recording):
    records, seen, _ = recording(_reentrant, "wr_id closes the QP")
    # the setter holds nothing: close() goes through, dropping the open batch
    # (wr_abort before the QP is destroyed), and the assignment finds it closed
    assert seen == [("outer", errno.EBADF)]
    assert [r["call"] for r in records] == ["wr_start", "wr_abort"]


def _post_send_whose_iterable_opens_a_batch(rec):
    ib = rec.ib
    qp = rec.qpex()

    def requests():
        qp.wr_start()          # runs while post_send converts its argument
        yield ib.SendWR(wr_id=1, opcode=ib.WROpcode.SEND)

    try:
        qp.post_send(requests())
        err = None
    except ib.VerbsError as e:
        err = e.errno
    qp.wr_abort()
    return rec.requests(), err


def test_a_post_send_whose_iterable_opens_a_batch_is_refused(recording):
    records, err = recording(_post_send_whose_iterable_opens_a_batch)
    # rxe and mlx5 hold the send queue's lock from wr_start on: a post_send
    # reaching the provider then would spin for ever with the GIL held
    assert err == errno.EBUSY
    assert [(r["kind"], r.get("call") or r.get("lock_verb")) for r in records] == [
        ("qpex", "wr_start"), ("qpex", "wr_abort")]
