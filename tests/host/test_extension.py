"""The compiled extension on the host: how it links, how it loads, and the
checks it makes before any verb is called (no device needed)."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys

import pytest

import ibverbs as ib
from ibverbs import _ibverbs


def readelf(*args):
    return subprocess.run(["readelf", *args, _ibverbs.__file__], capture_output=True,
                          text=True, check=True).stdout


def test_only_libc_is_needed():
    needed = [line.split("[")[1].rstrip("]") for line in readelf("-d").splitlines()
              if "(NEEDED)" in line]
    assert needed == ["libc.so.6"]


def test_exports_only_the_module_init_and_leaves_no_verb_undefined():
    out = subprocess.run(["nm", "-D", _ibverbs.__file__], capture_output=True, text=True,
                         check=True).stdout
    defined = [l.split()[-1] for l in out.splitlines() if l.split()[-2:-1] != ["U"] and
               len(l.split()) == 3 and l.split()[1] in "TDBR"]
    undefined = [l.split()[-1] for l in out.splitlines() if " U " in l]
    # abi3t (PEP 803) exports PEP 793's slots; the others a PyInit
    init = "PyModExport__ibverbs" if _ibverbs._target.endswith("abi3t") else "PyInit__ibverbs"
    assert defined == [init]
    assert not [s for s in undefined if "ibv" in s]


def test_library_is_loaded_and_dmabuf_known():
    assert _ibverbs._linked() is True
    assert _ibverbs._has_dmabuf() in (True, False)
    assert isinstance(_ibverbs._missing_symbols(), list)


def test_missing_libibverbs_is_a_clean_import_error(tmp_path):
    code = "import ibverbs"
    env = dict(os.environ, IBVERBS_LIBRARY=str(tmp_path / "libibverbs.so.1"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(ib.__file__)))
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError:") and "libibverbs.so.1" in last
    assert "libibverbs1" in last and "rdma-core" in last


def test_a_library_without_required_verbs_is_refused(tmp_path):
    # libc is a loadable library with none of the verbs.
    env = dict(os.environ, IBVERBS_LIBRARY="libc.so.6")
    out = subprocess.run([sys.executable, "-c", "import ibverbs"], capture_output=True,
                         text=True, env=env, cwd=os.path.dirname(os.path.dirname(ib.__file__)))
    assert out.returncode == 1 and "lacks " in out.stderr and "rdma-core is too old" in out.stderr


def test_a_second_import_of_the_extension_gives_the_first_ones_classes():
    """The module keeps its state in globals, once per process: made again
    (after del sys.modules[...]) it has the first one's classes, as the
    interpreter gives a single-phase module's copy; abi3t's PEP 793 export
    does the same (generated/module.c.h)."""
    code = ("import sys, ibverbs._ibverbs as a; del sys.modules['ibverbs._ibverbs']; "
            "import importlib; b = importlib.import_module('ibverbs._ibverbs'); "
            "print(a is not b, b.SGE is a.SGE, b.VerbsError is a.VerbsError, "
            "b._target == a._target, sorted(b.__all__) == sorted(a.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(ib.__file__)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"] * 5


def test_the_objects_fields_sit_after_the_interpreters_object_header():
    """abi3t (PEP 803) leaves PyObject opaque: the objects open with a head
    of IBP_OBJECT_HEAD_SIZE bytes (generated/target.h) that must cover this
    interpreter's (the import refuses otherwise); the others' is PyObject."""
    base = object.__basicsize__
    head = 32 if _ibverbs._target.endswith("abi3t") else base
    assert base <= head
    sge = _ibverbs.SGE(0x1000, 64, 7)
    assert (sge.addr, sge.length, sge.lkey) == (0x1000, 64, 7)     # stored past the head
    assert _ibverbs.SGE.__basicsize__ > head


def test_handle_classes_called_directly_give_closed_handles_as_in_the_seed():
    import errno
    for cls in (ib.Context, ib.PD, ib.MR, ib.CQ, ib.QP, ib.SRQ, ib.AH, ib.CompChannel, ib.MW):
        before = cls._open_count()
        obj = cls()
        assert cls._open_count() == before
        with pytest.raises(ib.VerbsError) as info:
            (obj.query_device() if cls is ib.Context else obj.fd if cls is ib.CompChannel else
                                       obj.handle if hasattr(cls, "handle") else obj.pd)
        assert info.value.errno == errno.EBADF
        assert info.value.strerror == f"{cls.__name__} is closed"
        obj.close()                       # harmless, like any closed handle
        with pytest.raises(TypeError, match="takes no arguments"):
            cls(1)


def test_the_seeds_public_classes_can_be_subclassed():
    seed_classes = ("Gid", "DeviceAttr", "PortAttr", "WC", "SGE", "SendWR", "RecvWR", "QPCap",
                    "QPInitAttr", "AHAttr", "Device", "Context", "AsyncEvent", "PD", "MR",
                    "CompChannel", "CQ", "QP", "AH", "SRQ", "CMID", "VerbsError", "CompletionError")
    for name in seed_classes:
        cls = getattr(ib, name)
        sub = type("My" + name, (cls,), {"extra": 1})
        assert issubclass(sub, cls) and sub.extra == 1

    class TaggedWR(ib.SendWR):
        def __init__(self, tag, **kwargs):
            super().__init__(**kwargs)
            self.tag = tag

    wr = TaggedWR("x", wr_id=5)
    assert (wr.tag, wr.wr_id, wr.sg_list) == ("x", 5, [])

    class MyQP(ib.QP):
        def __init__(self, name):
            self.name = name

    qp = MyQP("q")
    assert qp.name == "q"
    with pytest.raises(ib.VerbsError):
        qp.qp_num


def test_every_method_has_a_signature_and_docstring():
    for cls in (ib.Context, ib.PD, ib.MR, ib.CQ, ib.QP, ib.SRQ, ib.CompChannel, ib.XRCD):
        for name, member in vars(cls).items():
            if name.startswith("__") or not callable(member):
                continue
            assert member.__doc__, f"{cls.__name__}.{name} has no docstring"
            if not name.startswith("_"):
                inspect.signature(member)   # raises if the text signature is broken


def test_gid():
    raw = bytes(range(16))
    g = ib.Gid(raw)
    assert g.raw == raw and bytes(g) == raw and g == raw and g == ib.Gid(raw)
    assert g.subnet_prefix == int.from_bytes(raw[:8], "big")
    assert g.interface_id == int.from_bytes(raw[8:], "big")
    assert repr(g) == "Gid('0001:0203:0405:0607:0809:0a0b:0c0d:0e0f')"
    with pytest.raises(ValueError):
        ib.Gid(b"short")


def test_ah_attr_defaults_and_range_checks():
    a = ib.AHAttr()
    assert (a.is_global, a.port_num, a.hop_limit, a.sgid_index) == (1, 1, 1, 0)
    a = ib.AHAttr(dgid=bytes(range(16)), sgid_index=3, flow_label=0xFFFFF)
    assert a.dgid == bytes(range(16)) and a.sgid_index == 3
    with pytest.raises(ValueError, match="sgid_index"):
        ib.AHAttr(sgid_index=256)
    with pytest.raises(ValueError):
        ib.AHAttr(dgid=b"x" * 15)
    with pytest.raises(TypeError):
        ib.AHAttr(port_num="1")
    a.port_num = 2
    assert a.port_num == 2
    with pytest.raises(ValueError):
        a.port_num = -1


def test_qp_init_attr_needs_completion_queues():
    with pytest.raises(TypeError):
        ib.QPInitAttr()


class FakeCQ:
    """What users' unit tests pass where a CQ goes (the seed took it)."""


def test_struct_handle_attributes_take_any_object_until_used():
    """The type is checked where the struct reaches a verb (create_qp,
    post_send, bind_mw: tests/device/test_seed_compat.py); reads give back
    what was stored."""
    fake, other = FakeCQ(), FakeCQ()
    attr = ib.QPInitAttr(send_cq=fake, recv_cq=other, srq=fake)
    assert attr.send_cq is fake and attr.recv_cq is other and attr.srq is fake
    attr.recv_cq = 1
    assert attr.recv_cq == 1
    attr.srq = None
    assert attr.srq is None
    for cls in (ib.MWBindInfo, ib.MWBind):
        info = cls(mr=fake, addr=0, length=1)
        assert info.mr is fake


@pytest.mark.parametrize("make", [
    lambda fake: ib.QPInitAttr(send_cq=fake, recv_cq=fake),
    lambda fake: ib.MWBindInfo(mr=fake, addr=0, length=1),
    lambda fake: ib.MWBind(mr=fake, addr=0, length=1),
])
def test_a_struct_in_a_cycle_through_its_handle_attribute_is_collected(make):
    """Now that a handle attribute keeps any object, a test double that
    refers back to the struct makes a cycle: the struct types with handle
    fields take part in garbage collection (uncollectable before)."""
    import gc
    import weakref
    fake = FakeCQ()
    fake.attr = make(fake)
    gone = weakref.ref(fake)
    del fake
    gc.collect()
    assert gone() is None


def test_qp_init_attr_takes_the_seeds_placeholders_and_types():
    """QPInitAttr(None, None) filled in later (create_qp checks them), and
    sq_sig_all reads back as a bool, as in the seed."""
    attr = ib.QPInitAttr(send_cq=None, recv_cq=None, sq_sig_all=1)
    assert (attr.send_cq, attr.recv_cq, attr.sq_sig_all) == (None, None, True)
    assert ib.QPInitAttr(None, None).sq_sig_all is False


def test_ah_attr_dgid_reads_back_as_16_bytes_from_a_gid_bytes_or_ints():
    raw = bytes(range(16))
    for given in (ib.Gid(raw), raw, bytearray(raw), list(raw)):
        dgid = ib.AHAttr(dgid=given).dgid
        assert type(dgid) is bytes and dgid == raw
    assert ib.AHAttr().dgid == bytes(16)
    with pytest.raises(ValueError):
        ib.AHAttr(dgid=[1] * 15)
    with pytest.raises(ValueError):
        ib.AHAttr(dgid=[256] * 16)


@pytest.mark.parametrize("kwargs,exc,words", [
    (dict(target=0x1000, length=2**32), ValueError, "2**32"),
    (dict(target=0x1000, length=-1), ValueError, "length"),
    (dict(target=-1, length=1), ValueError, "target"),
    (dict(target=0x1000, length=1, offset=-5), ValueError, "non-negative"),
    (dict(target=0x1000, length=1, lkey=2**32), ValueError, "lkey"),
    (dict(target="x", length=1), TypeError, "target"),
])
def test_sge_rejects_bad_input(kwargs, exc, words):
    with pytest.raises(exc) as info:
        ib.SGE(**kwargs)
    assert words in str(info.value)


def test_work_requests_hold_c_values_with_range_checks():
    sge = ib.SGE(0x1000, 8, lkey=5)
    wr = ib.SendWR(wr_id=2**64 - 1, sg_list=[sge], opcode=ib.WROpcode.RDMA_WRITE, rkey=7,
                   imm_data=0xFFFFFFFF)
    assert wr.wr_id == 2**64 - 1 and wr.sg_list == [sge] and wr.rkey == 7
    with pytest.raises(ValueError):
        wr.wr_id = 2**64
    with pytest.raises(ValueError):
        wr.imm_data = 2**32
    with pytest.raises(TypeError, match="sg_list must be a list of SGE or None"):
        wr.sg_list = 1      # items are checked at post (test_wr_doubles)
    with pytest.raises(TypeError):
        wr.ah = object()
    rwr = ib.RecvWR(wr_id=3)
    assert rwr.sg_list == [] and rwr.wr_id == 3


def test_sge_keepalive_sets_the_owner():
    owner = object()
    s = ib.SGE(0x1000, 1)
    assert s._keepalive(owner) is s and s.owner is owner


def test_device_list_is_a_list_or_enosys_without_kernel_support():
    """The seed's behaviour (issue 25, point 12): without RDMA in the kernel
    ibv_get_device_list fails with ENOSYS, and so does get_device_list."""
    import errno
    import os

    if os.path.isdir("/sys/class/infiniband"):
        assert isinstance(ib.get_device_list(), list)
        return
    with pytest.raises(ib.VerbsError) as failed:
        ib.get_device_list()
    assert failed.value.errno == errno.ENOSYS
    assert str(failed.value) == f"[Errno {errno.ENOSYS}] ibv_get_device_list failed: " \
        f"{os.strerror(errno.ENOSYS)}"


def test_version_matches_the_distribution():
    from importlib.metadata import PackageNotFoundError, version
    try:
        assert ib.__version__ == version("pyibverbs")     # the distribution's name
    except PackageNotFoundError:
        assert ib.__version__ == "0+unknown"


def test_import_is_lazy_about_enums_and_helpers():
    code = ("import sys, ibverbs; "
            "assert 'ibverbs.enums' not in sys.modules; "
            "assert 'ibverbs.helpers' not in sys.modules; "
            "ibverbs.AccessFlags; assert 'ibverbs.enums' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=os.path.dirname(os.path.dirname(ib.__file__)))


def test_the_first_lazy_name_binds_them_all_and_drops_getattr():
    """While a module has __getattr__, CPython specialises no `ibverbs.X`
    lookup (about 275 instructions more per lookup, measured with callgrind):
    the first lazy name binds every one of them and removes the hook."""
    code = ("import ibverbs; assert '__getattr__' in vars(ibverbs); "
            "ibverbs.WROpcode; assert '__getattr__' not in vars(ibverbs); "
            "names = vars(ibverbs); "
            "missing = [n for n in ibverbs.__all__ if n not in names]; "
            "assert missing == [], missing; "
            "import pytest; pytest.raises(AttributeError, getattr, ibverbs, 'no_such_name')")
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=os.path.dirname(os.path.dirname(ib.__file__)))


def test_one_argument_data_path_methods_take_the_seeds_keywords():
    """poll(num_entries=), post_send(wrs=), post_recv(wrs=), ack_async_event(ev=)
    are parsed before the (closed) object is used: EBADF means the
    argument was accepted, TypeError that it was not."""
    import errno
    calls = [(ib.CQ().poll, "num_entries", 4), (ib.QP().post_send, "wrs", []),
             (ib.QP().post_recv, "wrs", []), (ib.SRQ().post_recv, "wrs", []),
             (ib.WQ().post_recv, "wrs", [])]
    for method, name, value in calls:
        for args, kwargs in (((value,), {}), ((), {name: value})):
            with pytest.raises(ib.VerbsError) as info:
                method(*args, **kwargs)
            assert info.value.errno == errno.EBADF
        with pytest.raises(TypeError, match="invalid keyword argument"):
            method(**{name + "x": value})
        with pytest.raises(TypeError, match="missing required argument"):
            method()
        with pytest.raises(TypeError, match="exactly one argument"):
            method(value, **{name: value})
    with pytest.raises(TypeError, match="AsyncEvent"):
        ib.Context().ack_async_event(ev=None)


def test_generated_parsers_word_their_errors_like_pyarg():
    """mr.sge() (METH_FASTCALL) and SGE() (tp_init) are parsed by generated
    code over one runtime (convert.c): arguments by position or keyword,
    PyArg_ParseTupleAndKeywords's messages for the rest."""
    import errno
    mr = ib.MR()
    for args, kwargs in (((), {}), ((1,), {}), ((None, 0), {}), ((), {"offset": 0})):
        with pytest.raises(ib.VerbsError) as info:
            mr.sge(*args, **kwargs)
        assert info.value.errno == errno.EBADF
    cases = [(mr.sge, (1, 2, 3), {}, r"sge\(\) takes at most 2 arguments \(3 given\)"),
             (mr.sge, (1,), {"length": 2}, r"given by name \('length'\) and position \(1\)"),
             (mr.sge, (), {"x": 1}, "'x' is an invalid keyword argument for sge()"),
             (ib.SGE, (1,), {}, r"SGE\(\) missing required argument 'length' \(pos 2\)"),
             (ib.SGE, (1, 2, 3, 4, 5), {}, r"takes at most 4 arguments \(5 given\)"),
             (ib.SGE, (1, 2), {"bogus": 1}, "'bogus' is an invalid keyword argument for SGE()")]
    for call, args, kwargs, message in cases:
        with pytest.raises(TypeError, match=message):
            call(*args, **kwargs)


SEED_NAMES = ("__version__", "AH", "CQ", "MR", "PD", "QP", "SRQ", "AHAttr", "AsyncEvent", "CompChannel",
              "Context", "Device", "DeviceAttr", "Gid", "PortAttr", "QPCap", "QPInitAttr", "RecvWR",
              "SendWR", "SGE", "VerbsError", "CompletionError", "WC", "get_device_list",
              "AccessFlags", "MTU", "NodeType", "PortState", "QPAttrMask", "QPState", "QPType",
              "SendFlags", "WCFlags", "WCOpcode", "WCStatus", "WROpcode",
              "QPInfo", "connect_rc", "local_qp_info", "reg_tensor", "tensor_addr_len", "CMID")


def test_star_import_gives_the_seeds_names_and_ours():
    assert set(SEED_NAMES) <= set(ib.__all__)
    assert {"PostList", "WCBuffer", "fork_init", "FlowAttr", "EventType"} <= set(ib.__all__)
    namespace = {}
    exec("from ibverbs import *", namespace)
    assert set(ib.__all__) <= set(namespace)
    assert namespace["CMID"] is ib.CMID and namespace["AccessFlags"] is ib.AccessFlags


def test_the_extension_module_offers_the_seeds_names():
    ext = ib._ibverbs
    assert ext.VerbsError is ib.VerbsError and ext.CompletionError is ib.CompletionError
    assert ext.Gid is ib.Gid and ext.Device is ib.Device
    assert ext.get_device_list is ib.get_device_list
    assert {"VerbsError", "CompletionError", "Gid", "Device", "get_device_list", "QP"} <= set(ext.__all__)
    assert ext._linked() is True and isinstance(ext._has_rdmacm(), bool)
    with pytest.raises(AttributeError):
        ext.no_such_name


def test_version_module_holds_the_version():
    import ibverbs._version as v
    assert v.__version__ == ib.__version__


def test_none_has_the_pool_the_short_ways_return_from():
    """The short ways return None uncounted (common.h ibp_none): on
    3.12+ None is immortal; before, the import gave it 2**61 references
    once, which must be there (or each post would take None towards its
    deallocation), and only once (a third would overflow the count)."""
    count = sys.getrefcount(None)
    if sys.version_info >= (3, 12):
        assert count < 2 ** 40           # immortal, left as it is
    else:
        assert 2 ** 61 <= count < 2 ** 61 + 2 ** 40
