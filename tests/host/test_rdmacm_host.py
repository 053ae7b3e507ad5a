"""rdma_cm without a device: the second header in the generator (rdma/rdma_cma.h
with spec/rdmacm/), and the extension without librdmacm.

Headers come from tools/rdma-core's cache (a release not fetched is skipped,
as in test_releases.py); the device behaviour is tests/device/test_rdmacm.py.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RELEASES = ("33.2", "44.0", "56.1", "65.0")
#: generated/ comes from the vendored headers (third_party/rdma-core/VERSION).
BASELINE = "baseline"
CACHE = pathlib.Path(os.environ.get("IBVERBS_RDMA_CACHE")
                     or pathlib.Path(os.environ.get("XDG_CACHE_HOME")
                                     or pathlib.Path.home() / ".cache") / "ibverbs-rdma-core")


def prefix(release: str) -> str:
    if release == BASELINE:
        return str(ROOT / "third_party" / "rdma-core")
    p = CACHE / release
    if not (p / ".complete").exists():
        pytest.skip(f"rdma-core {release} is not fetched (tools/rdma-core {release})")
    if not (p / "usr" / "include" / "rdma" / "rdma_cma.h").exists():
        pytest.skip(f"rdma-core {release} was fetched without librdmacm-dev")
    return str(p)


@pytest.fixture(scope="module")
def generator():
    pytest.importorskip("clang.cindex", reason="libclang is not installed")
    from generator import builder, parse, rdmacm, render, spec
    from generator.cli import SPEC_DIR, TEMPLATE_DIR
    from generator.model import Model
    return dict(builder=builder, parse=parse, rdmacm=rdmacm, render=render, spec=spec, Model=Model,
                SPEC_DIR=SPEC_DIR, TEMPLATE_DIR=TEMPLATE_DIR)


_models: dict = {}


def cm_model(g, release):
    if release not in _models:
        _models[release] = g["rdmacm"].load(prefix(release), g["SPEC_DIR"])
    return _models[release]


@pytest.mark.parametrize("release", RELEASES)
def test_every_public_rdma_cma_function_is_bound_or_excluded(generator, release):
    m = cm_model(generator, release)
    rows = {name: status for name, status, _ in m.coverage}
    assert [n for n, s in rows.items() if s == "unhandled"] == []
    for name in ("rdma_create_event_channel", "rdma_create_id", "rdma_resolve_addr",
                 "rdma_resolve_route", "rdma_connect", "rdma_listen", "rdma_accept",
                 "rdma_reject", "rdma_disconnect", "rdma_get_cm_event", "rdma_ack_cm_event",
                 "rdma_create_qp", "rdma_destroy_id", "rdma_migrate_id"):
        assert rows[name] == "bound", name
    # only rdma_cma.h's own functions are listed, never verbs.h's
    assert all(name.startswith("rdma_") for name in rows)


def test_every_exclusion_names_a_reason_and_a_real_function(generator):
    m65 = cm_model(generator, "65.0")
    names = {f.name for f in m65.ir.functions if f.header == m65.ir.source}
    for name, reason in m65.spec.exclusions.items():
        assert name in names, f"spec/rdmacm excludes {name}, which rdma_cma.h 65.0 lacks"
        assert len(reason) > 20


def test_loader_carries_exactly_the_bound_functions(generator):
    m = cm_model(generator, BASELINE)
    bound = {name for name, status, _ in m.coverage if status == "bound"}
    inline = {f.name for f in m.ir.functions if f.storage != "exported"}
    assert {s.name for s in m.symbols} == bound - inline
    text = generator["render"].render(generator["Model"](rdmacm=m), generator["TEMPLATE_DIR"])["rdmacm_loader.c.h"]
    for s in m.symbols:
        assert f'{{"{s.name}", (void **)&cm_slot_{s.name}' in text
        assert f"int ({s.name})(" in text or f"({s.name})(" in text
    # no ibv_* trampoline here: those are loader.c.h's (one definition each)
    assert "(ibv_" not in text


def test_rdmacm_files_are_fresh_and_headed_by_their_header(generator):
    m = cm_model(generator, BASELINE)
    files = generator["render"].render(generator["Model"](rdmacm=m), generator["TEMPLATE_DIR"])
    assert sorted(files) == ["rdmacm_enums.py", "rdmacm_loader.c.h", "rdmacm_methods.c.h",
                            "rdmacm_objects.h"]
    assert m.ir.sha256 in files["rdmacm_loader.c.h"]    # the headers, said once
    for name, text in files.items():
        head = "\n".join(text.splitlines()[:4])
        assert "from rdma/rdma_cma.h and spec/" in head, name
        assert (ROOT / "generated" / name).read_text() == text, f"generated/{name} is stale"


def test_the_verbs_output_does_not_change(generator):
    """The second header adds files; the verbs model renders exactly what it
    rendered before (no rdmacm_ file, the verbs spec hash unchanged)."""
    g = generator
    vspec = g["spec"].load(g["SPEC_DIR"])
    assert not any("rdmacm" in f for f in vspec.files)
    built = g["builder"].build(g["parse"].parse(prefix(BASELINE)), vspec)
    files = g["render"].render(g["Model"](verbs=built), g["TEMPLATE_DIR"])
    assert not any(name.startswith("rdmacm_") for name in files)
    for name, text in files.items():
        assert (ROOT / "generated" / name).read_text() == text, f"generated/{name} is stale"


def test_enums_come_from_the_header(generator):
    m = cm_model(generator, BASELINE)
    enums = {e.name: {n: v for n, v, _ in e.members} for e in m.enums}
    assert enums["CMEventType"]["CONNECT_REQUEST"] == 4
    assert enums["CMEventType"]["TIMEWAIT_EXIT"] == 15
    assert enums["PortSpace"] == {"IPOIB": 0x2, "TCP": 0x106, "UDP": 0x111, "IB": 0x13F}


def test_a_generated_method_in_the_rdmacm_spec_is_refused(generator, tmp_path):
    g = generator
    spec_root = tmp_path / "spec"
    shutil.copytree(g["SPEC_DIR"], spec_root)
    path = spec_root / "rdmacm" / "cm.yaml"
    text = path.read_text().replace(
        '      disconnect:\n        hand: "disconnect()"\n        impl: {}\n'
        '        verbs: [rdma_disconnect]\n        holds: [self.qp, self.channel]\n'
        '        stub: "(self) -> None"\n',
        "      disconnect:\n        verb: rdma_disconnect\n        params: {id: self}\n"
        "        errors: errno\n")
    path.write_text(text)
    with pytest.raises(g["spec"].SpecError, match=r"cm.yaml:\d+: CMID.disconnect: .*hand"):
        g["rdmacm"].load(prefix(BASELINE), str(spec_root))


def test_an_unknown_function_in_the_rdmacm_spec_names_its_line(generator, tmp_path):
    g = generator
    spec_root = tmp_path / "spec"
    shutil.copytree(g["SPEC_DIR"], spec_root)
    path = spec_root / "rdmacm" / "cm.yaml"
    path.write_text(path.read_text().replace("verbs: [rdma_listen]", "verbs: [rdma_lisen]"))
    with pytest.raises(g["spec"].SpecError, match=r"cm.yaml:\d+: CMID.listen: no function rdma_lisen"):
        g["rdmacm"].load(prefix(BASELINE), str(spec_root))


def test_ir_and_coverage_commands_take_the_second_header(generator):
    env = dict(os.environ, RDMA_CORE=prefix(BASELINE))
    out = subprocess.run([sys.executable, "-m", "generator", "ir", "--json",
                          "--header", "rdma/rdma_cma.h"], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True)
    ir = json.loads(out.stdout)
    assert ir["source"] == "rdma/rdma_cma.h"
    assert any(f["name"] == "rdma_connect" for f in ir["functions"])
    out = subprocess.run([sys.executable, "-m", "generator", "coverage", "--rdmacm"],
                         cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[-1].startswith("coverage: bound=") and lines[-1].endswith("unhandled=0")
    assert any(line.split()[:2] == ["rdma_getaddrinfo", "excluded"] for line in lines)
    assert not any(line.startswith("ibv_") for line in lines)


def _run_python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                          env=dict(os.environ, **env), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120)


def test_import_works_without_librdmacm_and_only_rdma_cm_fails():
    result = _run_python("""
        import ibverbs
        from ibverbs import cm
        assert ibverbs._ibverbs._linked()
        assert not cm.available()
        try:
            cm.create_event_channel()
        except RuntimeError as exc:
            print("error:", exc)
        else:
            raise SystemExit("create_event_channel worked without librdmacm")
        try:
            ibverbs.cm_event_str(0)
        except RuntimeError as exc:
            print("error2:", exc)
        print(ibverbs.CMID, ibverbs.EventChannel, cm.CMEventType.ESTABLISHED.value)
    """, IBVERBS_RDMACM_LIBRARY="/nonexistent/librdmacm.so.1")
    assert result.returncode == 0, result.stderr
    assert "error: rdma_cm is unavailable: /nonexistent/librdmacm.so.1 could not be loaded" \
        in result.stdout
    assert "librdmacm1" in result.stdout
    assert "error2: rdma_cm is unavailable" in result.stdout
    assert "<class 'ibverbs.CMID'> <class 'ibverbs.EventChannel'> 9" in result.stdout


def test_a_library_lacking_the_symbols_is_refused_cleanly():
    # libibverbs loads but exports no rdma_* function
    lib = next((p for p in ("/usr/lib/x86_64-linux-gnu/libibverbs.so.1",
                            "/lib/x86_64-linux-gnu/libibverbs.so.1") if os.path.exists(p)), None)
    if lib is None:
        pytest.skip("no libibverbs.so.1 at the usual path")
    result = _run_python("""
        from ibverbs import cm
        try:
            cm.create_event_channel()
        except RuntimeError as exc:
            print("error:", exc)
        print(cm.available())
    """, IBVERBS_RDMACM_LIBRARY=lib)
    assert result.returncode == 0, result.stderr
    assert "lacks rdma_" in result.stdout and "False" in result.stdout


def test_classes_are_not_constructible_and_documented():
    import ibverbs
    from ibverbs import cm
    with pytest.raises(TypeError):
        ibverbs.CMID()
    with pytest.raises(TypeError):
        ibverbs.EventChannel()
    assert ibverbs._ibverbs.CMID.connect.__text_signature__.startswith("($self, /, private_data=b''")
    assert "rdma_connect" in ibverbs.CMID.connect.__doc__
    assert cm.CMEventType.REJECTED == 8 and cm.PortSpace.TCP == 0x106


def test_events_are_built_from_the_copied_fields():
    from ibverbs import cm
    ev = cm._make_event(4, 0, None, None, b"hi", dict(
        responder_resources=1, initiator_depth=2, flow_control=1, retry_count=7,
        rnr_retry_count=7, srq=0, qp_num=17))
    assert ev.event is cm.CMEventType.CONNECT_REQUEST
    assert ev.param == cm.ConnParam(1, 2, 1, 7, 7, 0, 17) and ev.private_data == b"hi"
    ev = cm._make_event(99, -5, None, None, None, None)     # an event newer than the enum
    assert ev.event == 99 and ev.param is None


def test_librdmacm_is_not_linked():
    """Its functions are trampolines (hidden) filled by dlsym: the extension
    neither needs librdmacm nor leaves an rdma_* symbol to the loader."""
    import ibverbs._ibverbs as ext
    if shutil.which("nm") is None or shutil.which("readelf") is None:
        pytest.skip("binutils (nm, readelf) not installed")
    needed = subprocess.run(["readelf", "-d", ext.__file__], stdout=subprocess.PIPE,
                            text=True, check=True).stdout
    assert "librdmacm" not in needed
    symbols = subprocess.run(["nm", "-D", ext.__file__], stdout=subprocess.PIPE,
                             text=True, check=True).stdout
    assert [line for line in symbols.splitlines() if "rdma_" in line] == []


def test_import_does_not_load_librdmacm():
    result = _run_python("""
        import ibverbs, ibverbs.cm
        maps = open("/proc/self/maps").read()
        print("before", "librdmacm" in maps)
        ibverbs.cm.available()
        print("after", "librdmacm" in open("/proc/self/maps").read())
    """)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[0] == "before False"
    if ibverbs_cm_available():
        assert lines[1] == "after True"


def ibverbs_cm_available() -> bool:
    from ibverbs import cm
    return cm.available()


# --- the seed's blocking API: argument checks (the seed's tests/test_cm.py) ------

def test_rdmacm_is_optional_but_discoverable():
    import ibverbs as ib
    assert isinstance(ib._ibverbs._has_rdmacm(), bool)


@pytest.mark.parametrize("host, port", [("", 4420), ("localhost", 0), ("localhost", 65536)])
def test_cmid_resolve_validates_the_address(host, port):
    import ibverbs as ib
    with pytest.raises(ValueError):
        ib.CMID.resolve(host, port)


@pytest.mark.parametrize("source", ["", "bad\x00source", 42])
def test_cmid_resolve_validates_the_source_address(source):
    import ibverbs as ib
    with pytest.raises(ValueError):
        ib.CMID.resolve("localhost", source=source)


def test_cmid_is_the_c_class_with_the_blocking_api():
    import inspect

    import ibverbs as ib
    from ibverbs import cm
    assert ib.CMID is cm.CMID and issubclass(ib.CMID, ib._ibverbs.CMID)
    assert repr(ib.CMID) == "<class 'ibverbs.CMID'>"
    # the blocking connect/accept take the C methods' parameters, in their
    # order, by position or by name (the C signature is the reference)
    c_order = ["private_data", "responder_resources", "initiator_depth", "flow_control",
               "retry_count", "rnr_retry_count"]
    for name in ("connect", "accept"):
        c_params = list(inspect.signature(getattr(ib._ibverbs.CMID, name)).parameters)
        params = inspect.signature(getattr(ib.CMID, name)).parameters
        assert c_params == ["self"] + c_order and list(params) == ["self"] + c_order
        assert params["private_data"].default == b""
        assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params.values())
    assert list(inspect.signature(ib.CMID.resolve).parameters)[:3] == ["host", "port", "source"]
    assert inspect.signature(ib.CMID.resolve).parameters["port"].default == 4420


# --- the classes come from the handle templates (issue #16) ----------------------

def test_the_cm_classes_are_generated_through_the_handle_template(generator):
    m = cm_model(generator, BASELINE)
    text = generator["render"].render(generator["Model"](rdmacm=m), generator["TEMPLATE_DIR"])["rdmacm_methods.c.h"]
    for name in ("EventChannel", "CMID"):
        for part in ("_wrap(", "_destroy(", "_close(", "_dealloc(", "_getset[]", "_spec = {"):
            assert f"{name}{part}" in text, name + part
    # GC through the slots (qp, context); getters from struct rdma_cm_id's fields
    assert "CMID_traverse(" in text and "EventChannel_traverse(" not in text
    assert "(self_ptr->port_num)" in text and "(self_ptr->ps)" in text
    assert "ibp_sockaddr_to_py(&self_ptr->route.addr.src_addr)" in text
    assert "ibp_sockaddr_to_py(&self_ptr->route.addr.dst_addr)" in text
    # librdmacm's rules are the spec's hooks
    for hook in ("ibp_cmid_detach(self)", "ibp_cmid_before_destroy(self)",
                 "ibp_cmid_before_close((struct CMIDObject *)op)",
                 "(void *)IBP_LOCKED(ibp_hand_EventChannel_repr)"):
        assert hook in text, hook
    # and nothing of a type shell is written by hand any more
    for path in (ROOT / "ibverbs" / "src").glob("cm*.c"):
        source = path.read_text()
        assert "PyType_Spec" not in source and "PyGetSetDef" not in source, path.name
        assert len(source.splitlines()) <= 800, path.name


def _cm_spec_with(tmp_path, g, old, new):
    spec_root = tmp_path / "spec"
    shutil.copytree(g["SPEC_DIR"], spec_root)
    path = spec_root / "rdmacm" / "cm.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return str(spec_root)


def test_a_sockaddr_getter_on_another_member_names_its_line(generator, tmp_path):
    g = generator
    root = _cm_spec_with(tmp_path, g, "{path: route.addr.src_addr, convert: sockaddr}",
                         "{path: port_num, convert: sockaddr}")
    with pytest.raises(g["spec"].SpecError,
                       match=r"cm.yaml:\d+: CMID.local_addr: port_num is a uint8_t, not a struct sockaddr"):
        g["rdmacm"].load(prefix(BASELINE), root)


def test_docs_of_an_unknown_getter_name_their_line(generator, tmp_path):
    g = generator
    root = _cm_spec_with(tmp_path, g, "      port_num: The device port", "      port_nr: The device port")
    with pytest.raises(g["spec"].SpecError, match=r"cm.yaml:\d+: CMID: docs for port_nr"):
        g["rdmacm"].load(prefix(BASELINE), root)


# --- the CM methods' arguments are parsed by generated code (spec impl:) ----------

CM_IMPL_METHODS = ("bind_addr", "resolve_addr", "resolve_route", "listen", "connect", "accept",
                   "reject", "create_qp", "migrate", "set_option")


def test_the_cm_methods_arguments_are_converted_by_the_generated_parsers(generator):
    m = cm_model(generator, BASELINE)
    text = generator["render"].render(generator["Model"](rdmacm=m), generator["TEMPLATE_DIR"])["rdmacm_methods.c.h"]
    for part in ('ibp_cm_conv_addr(dst_obj, "dst", &dst_c, 0, &dst_c_set)',
                 'ibp_cm_conv_addr(src_obj, "src", &src_c, 1, &src_c_set)',
                 'ibp_conv_handle(pd_obj, "pd", PD_Type, 0, &pd_c)',
                 'ibp_conv_handle(channel_obj, "channel", EventChannel_Type, 0, &channel_c)',
                 '"init_attr must be a QPInitAttr, not %s"',
                 "if (private_data_obj != NULL && private_data_obj != Py_None) {",
                 "bytes (the transport allows less: 56 for connect, 196 for accept",
                 'ibp_conv_signed(retry_count_obj, "retry_count", 0, INT32_MAX, &v)',
                 'ibp_conv_signed(timeout_ms_obj, "timeout_ms", 1, INT32_MAX, &v)',
                 'ibp_conv_signed(backlog_obj, "backlog", 0, INT32_MAX, &v)',
                 "int ps_c = RDMA_PS_TCP;", "int timeout_ms_c = 2000;", "int backlog_c = 16;",
                 "return_value = ibp_hand_EventChannel_create_id_impl(self, ps_c);"):
        assert part in text, part
    for name in CM_IMPL_METHODS:
        assert f"return_value = ibp_hand_CMID_{name}_impl(self, " in text, name
    # no hand-written C parses the arguments of an rdma_cm method any more
    for path in (ROOT / "ibverbs" / "src").glob("cm*.c"):
        assert "PyArg_Parse" not in path.read_text(), path.name


def test_the_cm_methods_keep_their_python_signatures():
    import ibverbs
    CMID = ibverbs._ibverbs.CMID
    assert CMID.resolve_addr.__text_signature__ == "($self, /, dst, src=None, timeout_ms=2000)"
    assert CMID.reject.__text_signature__ == "($self, /, private_data=b'')"
    assert CMID.listen.__text_signature__ == "($self, /, backlog=16)"
    assert CMID.set_option.__text_signature__ == "($self, /, optname, value)"
    assert CMID.create_qp.__text_signature__ == "($self, /, pd, init_attr)"
    # a default the spec gives by name shows its number: inspect evaluates it
    create_id = ibverbs._ibverbs.EventChannel.create_id
    assert create_id.__text_signature__ == "($self, /, ps=262)"
    import inspect
    import ibverbs.cm as cm
    assert inspect.signature(create_id).parameters["ps"].default == cm.PortSpace.TCP == 262
    assert "PortSpace (TCP, the default" in create_id.__doc__


def test_a_default_shown_by_name_needs_its_c_value(generator, tmp_path):
    g = generator
    root = _cm_spec_with(tmp_path, g, "{ps: {ctype: int, c_default: RDMA_PS_TCP}}", "{ps: {ctype: int}}")
    with pytest.raises(g["spec"].SpecError, match=r"cm.yaml:\d+: EventChannel.create_id: impl: ps: "
                                                  r"the default PortSpace.TCP is a name"):
        g["rdmacm"].load(prefix(BASELINE), root)
    root = _cm_spec_with(tmp_path / "2", g, "timeout_ms: {ctype: int, min: 1}}",
                         "timeout_ms: {ctype: int, min: 1, c_default: 7}}")
    with pytest.raises(g["spec"].SpecError, match=r"cm.yaml:\d+: CMID.resolve_addr: impl: timeout_ms: "
                                                  r"c_default is only for a default shown by name"):
        g["rdmacm"].load(prefix(BASELINE), root)
    # the text signature shows the constant's number: one the headers lack is named
    root = _cm_spec_with(tmp_path / "3", g, "c_default: RDMA_PS_TCP", "c_default: RDMA_PS_NONE")
    with pytest.raises(g["spec"].SpecError, match=r"cm.yaml:\d+: impl: ps: c_default RDMA_PS_NONE "
                                                  r"is no enum constant of"):
        g["rdmacm"].load(prefix(BASELINE), root)


def test_the_rdma_cm_modules_import_each_other_one_way():
    """ibverbs.cm imports ibverbs._cmid (CMID) and both import what they
    share (CMEvent, the fd wait) from ibverbs._cmevents, which imports
    neither: no circle, counting every import (typing-only ones and those
    inside functions too)."""
    import ast
    names = {"cm", "_cmid", "_cmevents"}
    graph = {}
    for name in names:
        tree = ast.parse((ROOT / "ibverbs" / f"{name}.py").read_text())
        graph[name] = {node.module for node in ast.walk(tree)
                       if isinstance(node, ast.ImportFrom) and node.level == 1
                       and node.module in names}
    assert graph == {"cm": {"_cmid", "_cmevents"}, "_cmid": {"_cmevents"}, "_cmevents": set()}


def test_a_failed_rdma_destroy_id_leaves_the_cmid_on_its_qp():
    """CMID_destroy lets the QP map go only once rdma_destroy_id succeeded
    (or the ID is a fork parent's): before, it detached first and set
    id->qp = NULL, so a destroy that failed (a GC clear then keeps the CMID)
    left an open CMID whose QP librdmacm no longer drove.  Dealloc, whose
    object goes regardless, detaches on failure too."""
    text = (ROOT / "generated" / "rdmacm_methods.c.h").read_text()
    destroy = text[text.index("\nCMID_destroy(struct CMIDObject *self"):]
    destroy = destroy[:destroy.index("\n}\n")]
    assert destroy.count("ibp_cmid_detach(self)") == 1
    assert destroy.index("rc = rdma_destroy_id(") < destroy.index("forget:") \
        < destroy.index("ibp_cmid_detach(self)")
    dealloc = text[text.index("CMID_dealloc(PyObject *op)\n{"):]
    dealloc = dealloc[:dealloc.index("\n}\n")]
    failed = dealloc[dealloc.index("if (err != 0)"):]
    assert "ibp_cmid_detach(self)" in failed
    source = (ROOT / "ibverbs" / "src" / "cm_id.c").read_text()
    before = source[source.index("int ibp_cmid_before_destroy("):]
    before = before[:before.index("\n}\n")]
    assert "->qp = NULL" not in before


def test_the_waits_poll_a_channel_fd_above_1023():
    """cm.wait_event and the blocking CMID's wait (_cmid._wait) on an fd of
    1024 or more, as a server with a thousand connections has: poll(), not
    select() (which raised ValueError: filedescriptor out of range)."""
    import errno
    import fcntl
    import resource

    import ibverbs as ib
    from ibverbs import _cmid, cm

    class Channel:              # the two calls the waits make of an EventChannel
        def __init__(self, fd):
            self.fd = fd

        def get_cm_event(self):
            return cm._make_event(int(cm.CMEventType.ADDR_RESOLVED), 0, None, None, None, None)

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"RLIMIT_NOFILE's hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    r, w = os.pipe()
    high = fcntl.fcntl(r, fcntl.F_DUPFD, 1100)
    try:
        channel = Channel(high)
        with pytest.raises(TimeoutError):
            cm.wait_event(channel, timeout=0.05)
        with pytest.raises(ib.VerbsError) as late:
            _cmid._wait(channel, (cm.CMEventType.ADDR_RESOLVED,), "rdma_resolve_addr", 0.05)
        assert late.value.errno == errno.ETIMEDOUT
        os.write(w, b"x")           # readable: both go on to get_cm_event
        assert cm.wait_event(channel, cm.CMEventType.ADDR_RESOLVED, 1.0).event == \
            cm.CMEventType.ADDR_RESOLVED
        assert _cmid._wait(channel, (cm.CMEventType.ADDR_RESOLVED,), "x", 1.0).status == 0
    finally:
        for fd in (r, w, high):
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_blocking_api_looks_host_names_up():
    """CMID.resolve / listen_on take a host name, as the seed did
    (tests/cluster resolves "node1"); rdma_cm itself takes numbers only."""
    import errno
    import socket

    import ibverbs as ib
    from ibverbs import _cmid
    try:
        socket.getaddrinfo("localhost", None)
    except OSError:
        pytest.skip("this root resolves no host name (no /etc/hosts: the aarch64 chroot)")
    assert _cmid._numeric("localhost", "rdma_resolve_addr") in ("127.0.0.1", "::1")
    assert _cmid._numeric("10.0.1.2", "rdma_resolve_addr") == "10.0.1.2"
    assert _cmid._numeric("fe80::1", "rdma_resolve_addr") == "fe80::1"
    with pytest.raises(ib.VerbsError) as unknown:
        _cmid._numeric("no-such-host.invalid", "rdma_resolve_addr")
    assert unknown.value.errno == errno.ENOENT and "no-such-host.invalid" in str(unknown.value)
