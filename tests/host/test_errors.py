"""VerbsError and CompletionError (no device, no extension needed)."""

from __future__ import annotations

import copy
import enum
import errno
import os
import pathlib
import pickle
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
try:
    import ibverbs  # noqa: F401  (the real package, once its extension is built)
except ImportError:  # not built here: load the pure-Python modules on their own
    _pkg = types.ModuleType("ibverbs")
    _pkg.__path__ = [str(ROOT / "ibverbs")]
    sys.modules["ibverbs"] = _pkg

from ibverbs.errors import CompletionError, VerbsError  # noqa: E402


class WCOpcode(enum.IntEnum):
    SEND = 0
    RDMA_WRITE = 1


class FakeWC:
    """Like the C WC: attributes only, and not picklable."""

    def __init__(self, status=12, vendor_err=0x81, wr_id=7, opcode=WCOpcode.RDMA_WRITE,
                 status_str="transport retry counter exceeded"):
        self.status = status
        self.vendor_err = vendor_err
        self.wr_id = wr_id
        self.opcode = opcode
        self.status_str = status_str
        self.qp_num = 0x123
        self.byte_len = 0

    def __reduce__(self):
        raise TypeError("cannot pickle 'WC' object")


# --- VerbsError ----------------------------------------------------------------

def test_verbs_error_is_an_oserror_with_errno_and_the_message_as_strerror():
    e = VerbsError("ibv_reg_mr", errno.EFAULT)
    assert isinstance(e, OSError)
    assert e.errno == errno.EFAULT
    assert e.strerror == f"ibv_reg_mr failed: {os.strerror(errno.EFAULT)}"
    assert e.args == (errno.EFAULT, e.strerror)
    assert e.operation == "ibv_reg_mr"
    assert e.detail is None


def test_verbs_error_message_is_the_seeds_oserror_message():
    e = VerbsError("ibv_reg_mr", errno.EFAULT)
    assert str(e) == f"[Errno {errno.EFAULT}] ibv_reg_mr failed: {os.strerror(errno.EFAULT)}"


def test_verbs_error_detail_is_the_whole_message_and_errno_stays():
    e = VerbsError("ibv_close_device", errno.EBUSY, "cannot close context with 2 open child resource(s)")
    assert str(e) == f"[Errno {errno.EBUSY}] cannot close context with 2 open child resource(s)"
    assert e.errno == errno.EBUSY
    assert e.strerror == "cannot close context with 2 open child resource(s)"
    assert e.args == (errno.EBUSY, e.strerror)
    assert e.detail == "cannot close context with 2 open child resource(s)"


def test_verbs_error_detail_by_keyword():
    e = VerbsError(operation="MR.lkey", err=errno.EBADF, detail="MR.lkey failed: the MR is closed")
    assert (e.operation, e.errno, e.strerror) == ("MR.lkey", errno.EBADF, "MR.lkey failed: the MR is closed")


def test_verbs_error_is_not_remapped_to_an_oserror_subclass():
    e = VerbsError("ibv_open_device", errno.ENOENT)
    assert type(e) is VerbsError
    assert not isinstance(e, FileNotFoundError)


def test_verbs_error_caught_by_errno_as_oserror():
    with pytest.raises(OSError) as info:
        raise VerbsError("MR.lkey", errno.EBADF)
    assert info.value.errno == errno.EBADF


def test_verbs_error_repr_is_oserrors():
    assert repr(VerbsError("x", 1, "why")) == "VerbsError(1, 'why')"


def test_verbs_error_accepts_int_like_errno():
    class Err(enum.IntEnum):
        EAGAIN = errno.EAGAIN

    e = VerbsError("get_async_event", Err.EAGAIN)
    assert e.errno == errno.EAGAIN and type(e.errno) is int


@pytest.mark.parametrize("detail", [None, "the context still has open children"])
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_verbs_error_pickles(detail, protocol):
    e = VerbsError("ibv_dealloc_pd", errno.EBUSY, detail)
    e.extra = "kept"
    back = pickle.loads(pickle.dumps(e, protocol))
    assert type(back) is VerbsError
    assert (back.operation, back.errno, back.strerror, back.detail, str(back), back.extra) == (
        e.operation, e.errno, e.strerror, e.detail, str(e), "kept")


def test_verbs_error_copies():
    e = VerbsError("ibv_reg_mr", errno.ENOMEM, "pinned memory limit")
    for c in (copy.copy(e), copy.deepcopy(e)):
        assert (c.operation, c.errno, c.detail, str(c)) == (e.operation, e.errno, e.detail, str(e))


class MyVerbsError(VerbsError):
    pass


def test_verbs_error_subclass_pickles_as_itself():
    back = pickle.loads(pickle.dumps(MyVerbsError("op", errno.EIO)))
    assert type(back) is MyVerbsError and back.errno == errno.EIO


# --- CompletionError -------------------------------------------------------------

def test_completion_error_attributes():
    wc = FakeWC()
    e = CompletionError(wc)
    assert isinstance(e, VerbsError) and isinstance(e, OSError)
    assert e.wc is wc
    assert e.status == 12
    assert e.vendor_err == 0x81
    assert e.errno == errno.EIO
    assert e.strerror.startswith("work completion failed: ")


def test_completion_error_message_is_the_seeds():
    e = CompletionError(FakeWC(wr_id=4242))
    assert e.strerror == ("work completion failed: transport retry counter exceeded "
                          "(status=12, vendor_err=0x81)")
    assert str(e) == f"[Errno {errno.EIO}] {e.strerror}"
    assert e.operation == "work completion"


def test_completion_error_with_plain_int_opcode_and_no_status_str():
    wc = FakeWC(opcode=128, status_str="")
    msg = str(CompletionError(wc))
    assert "status=12" in msg


def test_completion_error_can_be_raised_and_caught_as_verbs_error():
    with pytest.raises(VerbsError) as info:
        raise CompletionError(FakeWC())
    assert info.value.errno == errno.EIO


def test_completion_error_args_are_errno_and_message():
    e = CompletionError(FakeWC())
    assert e.args == (errno.EIO, e.strerror)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_completion_error_pickles_with_a_snapshot_of_an_unpicklable_wc(protocol):
    e = CompletionError(FakeWC(wr_id=99))
    back = pickle.loads(pickle.dumps(e, protocol))
    assert type(back) is CompletionError
    assert str(back) == str(e)
    assert (back.errno, back.status, back.vendor_err) == (errno.EIO, 12, 0x81)
    assert (back.wc.wr_id, back.wc.qp_num, back.wc.status_str) == (99, 0x123, "transport retry counter exceeded")
    assert back.wc.opcode == WCOpcode.RDMA_WRITE
