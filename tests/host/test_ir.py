"""Parse stage: IR facts, determinism and JSON round-trip.

Host-only; skips cleanly when libclang (PyPI ``libclang``) is missing.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ci = pytest.importorskip(
    "clang.cindex",
    reason="libclang is not installed (pip install libclang==18.1.1)")
try:
    ci.Index.create()
except Exception as e:  # pragma: no cover - broken libclang install
    pytest.skip(f"libclang cannot be loaded: {e}", allow_module_level=True)

from generator import irjson  # noqa: E402
from generator.ir import IR, UNKNOWN  # noqa: E402
from generator.parse import ParseError, main_ir, parse  # noqa: E402

pytestmark = pytest.mark.tooling

SYSTEM_VERBS = Path("/usr/include/infiniband/verbs.h")
needs_system = pytest.mark.skipif(
    not SYSTEM_VERBS.is_file(),
    reason="system rdma-core headers missing (apt-get install libibverbs-dev)")


@pytest.fixture(scope="module")
def ir() -> IR:
    if not SYSTEM_VERBS.is_file():
        pytest.skip("system rdma-core headers missing "
                    "(apt-get install libibverbs-dev)")
    return parse()


# --------------------------------------------------------------------------
# real headers
# --------------------------------------------------------------------------

@needs_system
def test_deterministic_and_fast():
    t0 = time.monotonic()
    a = irjson.dump(parse())
    elapsed = time.monotonic() - t0
    b = irjson.dump(parse())
    assert a == b
    assert elapsed < 5, f"parse took {elapsed:.2f}s"


def test_round_trip(ir):
    text = irjson.dump(ir)
    back = irjson.load(text)
    assert back == ir
    assert irjson.dump(back) == text


def test_dump_has_no_paths_or_locations(ir):
    text = irjson.dump(ir)
    assert "/usr/" not in text and str(Path.home()) not in text
    assert "(unnamed" not in text and " at /" not in text
    d = json.loads(text)
    assert d["source"] == "infiniband/verbs.h"
    assert len(d["sha256"]) == 64


def test_sorted(ir):
    for seq in (ir.functions, ir.records, ir.enums, ir.typedefs, ir.macros):
        names = [x.name for x in seq]
        assert names == sorted(names)
        assert len(names) == len(set(names))


def test_headers_are_rdma_core(ir):
    for seq in (ir.functions, ir.records, ir.enums, ir.typedefs, ir.macros):
        for x in seq:
            assert x.header.startswith(("infiniband/", "rdma/")), x


def test_release(ir):
    # libibverbs.pc says 1.<abi>.<release>
    assert ir.rdma_core is None or ir.rdma_core[0].isdigit()


def test_functions(ir):
    reg = ir.function("ibv_reg_mr")
    # declared as an exported function *and* shadowed by a macro
    assert reg.macro_target == "__ibv_reg_mr"
    assert reg.storage in ("exported", "macro")
    assert [p.name for p in reg.params] == ["pd", "addr", "length", "access"]
    assert reg.result.spelling == "struct ibv_mr *"
    assert ir.macro("ibv_reg_mr").params == ["pd", "addr", "length", "access"]
    assert ir.macro("ibv_reg_mr").tokens.startswith("__ibv_reg_mr (")
    assert ir.function("__ibv_reg_mr").storage == "inline"

    qp = ir.function("ibv_query_port")
    assert qp.storage == "exported"
    assert qp.macro_target == "___ibv_query_port"
    assert ir.function("___ibv_query_port").storage == "inline"
    assert ir.function("___ibv_query_port").params[2].type.spelling == \
        "struct ibv_port_attr *"

    ps = ir.function("ibv_post_send")
    assert ps.storage == "inline" and ps.macro_target is None
    assert [p.type.spelling for p in ps.params] == [
        "struct ibv_qp *", "struct ibv_send_wr *", "struct ibv_send_wr **"]
    assert ps.result.kind == "int" and ps.result.signed

    gdl = ir.function("ibv_get_device_list")
    assert gdl.storage == "exported" and not gdl.variadic
    assert gdl.result.spelling == "struct ibv_device **"
    assert gdl.result.pointee.pointee.decl == "struct ibv_device"
    assert gdl.params[0].type.pointee.kind == "int"

    name = ir.function("ibv_get_device_name")
    assert name.result.spelling == "const char *"
    assert name.result.pointee.const and not name.result.const

    for f in ir.functions:
        assert f.storage in ("exported", "inline", "macro")
        if f.storage == "macro":
            assert f.macro_target


def test_enums(ir):
    qpt = ir.enum("enum ibv_qp_type")
    vals = {m.name: m.value for m in qpt.members}
    assert vals["IBV_QPT_RC"] == 2
    assert vals["IBV_QPT_UD"] == 4
    assert qpt.size == 4 and not qpt.signed
    # anonymous enums get a name from their first member
    sysfs = ir.enum("enum (anonymous at member IBV_SYSFS_NAME_MAX)")
    assert {m.name: m.value for m in sysfs.members}["IBV_SYSFS_NAME_MAX"] == 64
    # negative enumerators -> signed underlying type
    node = ir.enum("enum ibv_node_type")
    assert node.signed and node.members[0].value == -1


def test_records(ir):
    cap = ir.record("struct ibv_qp_cap")
    assert cap.complete and cap.kind == "struct"
    assert [(f.name, f.offset, f.type.spelling) for f in cap.fields] == [
        ("max_send_wr", 0, "uint32_t"), ("max_recv_wr", 4, "uint32_t"),
        ("max_send_sge", 8, "uint32_t"), ("max_recv_sge", 12, "uint32_t"),
        ("max_inline_data", 16, "uint32_t")]
    assert cap.size == 20 and cap.align == 4
    assert all(f.type.kind == "int" and f.type.size == 4 and
               f.type.signed is False for f in cap.fields)

    gid = ir.record("union ibv_gid")
    assert gid.kind == "union" and gid.size == 16
    raw = gid.fields[0]
    assert raw.name == "raw" and raw.type.kind == "array"
    assert raw.type.count == 16 and raw.type.element.spelling == "uint8_t"
    glob = gid.fields[1]
    assert glob.name == "global" and glob.type.decl == "struct ibv_gid::global"
    assert ir.record("struct ibv_gid::global").size == 16

    ctx = ir.record("struct ibv_context")
    ops = next(f for f in ctx.fields if f.name == "ops")
    assert ops.type.decl == "struct ibv_context_ops"
    fp = next(f for f in ir.record("struct ibv_context_ops").fields
              if f.name == "poll_cq")
    assert fp.type.kind == "pointer" and fp.type.pointee.kind == "function"

    for r in ir.records:
        if r.complete:
            assert r.size is not None and r.align is not None
            for f in r.fields:
                assert f.bit_width is None or f.bit_offset is not None
        else:
            assert r.size is None and r.fields == []


def test_anonymous_union_in_wc(ir):
    wc = ir.record("struct ibv_wc")
    anon = [f for f in wc.fields if f.name == ""]
    assert len(anon) == 1
    u = anon[0]
    assert u.type.kind == "union"
    assert u.type.decl == "union ibv_wc::(anonymous at field imm_data)"
    assert u.type.spelling == u.type.decl
    rec = ir.record(u.type.decl)
    assert rec.kind == "union" and rec.size == 4
    assert [f.name for f in rec.fields] == ["imm_data", "invalidated_rkey"]
    assert all(f.offset == 0 for f in rec.fields)
    byte_len = next(f for f in wc.fields if f.name == "byte_len")
    assert u.offset == byte_len.offset + 4
    assert ir.record("struct ibv_wc").size == 48


def test_nested_union_in_send_wr(ir):
    swr = ir.record("struct ibv_send_wr")
    wr = next(f for f in swr.fields if f.name == "wr")
    assert wr.type.kind == "union"
    assert wr.type.decl == "union ibv_send_wr::wr"
    u = ir.record("union ibv_send_wr::wr")
    assert [f.name for f in u.fields] == ["rdma", "atomic", "ud"]
    rdma = ir.record("struct ibv_send_wr::wr::rdma")
    assert [(f.name, f.offset) for f in rdma.fields] == [
        ("remote_addr", 0), ("rkey", 8)]
    ud = ir.record("struct ibv_send_wr::wr::ud")
    assert ud.fields[0].type.spelling == "struct ibv_ah *"
    # anonymous unions around imm_data and bind_mw/tso
    anon = [f.type.decl for f in swr.fields if f.name == ""]
    assert anon == ["union ibv_send_wr::(anonymous at field imm_data)",
                    "union ibv_send_wr::(anonymous at field bind_mw)"]


def test_incomplete_records(ir):
    compat = ir.record("struct _compat_ibv_port_attr")
    assert compat is not None and not compat.complete


def test_object_macros(ir):
    m = ir.macro("IBV_DEVICE_RAW_SCATTER_FCS")
    assert m.params is None and m.tokens == "( 1ULL << 34 )"
    assert all(x.name.startswith(("ibv_", "IBV_", "_ibv", "__ibv", "___ibv",
                                  "rdma_", "RDMA_")) for x in ir.macros)


@pytest.mark.skipif(not Path("/usr/include/infiniband/arch.h").is_file(),
                    reason="system has no infiniband/arch.h")
def test_deprecated_from_arch_h():
    arch = parse("/usr", header="infiniband/arch.h")
    assert arch.function("htonll").deprecated
    assert arch.function("htonll").storage == "inline"


@needs_system
def test_cli_json(capsys):
    assert main_ir(["--json"]) == 0
    out = capsys.readouterr().out
    assert irjson.load(out).function("ibv_post_send") is not None


@needs_system
def test_cli_module():
    out = subprocess.run([sys.executable, "-m", "generator", "ir", "--json"],
                         cwd=ROOT, stdout=subprocess.PIPE, text=True,
                         check=True).stdout
    assert json.loads(out)["source"] == "infiniband/verbs.h"


# --------------------------------------------------------------------------
# synthetic headers: constructs verbs.h does not (yet) use
# --------------------------------------------------------------------------

FIXTURE = textwrap.dedent("""\
    #include <stdint.h>
    #include <stddef.h>
    struct ibv_bits { uint32_t a:3; uint32_t b:5; uint8_t c; uint32_t d:20; };
    struct ibv_flex { int n; uint64_t data[]; };
    typedef struct { int x; } ibv_anon_t;
    typedef unsigned long ibv_handle_t;
    struct ibv_x { int a; };
    struct ibv_opaque;
    struct ibv_nest { struct { int p; union { short q; int r; }; }; int z; };
    static inline int __ibv_thing(struct ibv_x *x, int flags, int extra)
    { return x->a + flags + extra; }
    #define ibv_thing(x, flags) __ibv_thing(x, flags, 1)
    #define ibv_chain(x) ibv_thing(x, 0)
    #define ibv_ghost(a, ...) no_such_function(a, __VA_ARGS__)
    int ibv_old(struct ibv_opaque *o) __attribute__((deprecated));
    int ibv_var(int n, ...);
    #define IBV_FOO 3
    #define OTHER_MACRO 4
    enum { IBV_ANON_A = -1, IBV_ANON_B = 5 };
    """)


@pytest.fixture(scope="module")
def fixture_prefix(tmp_path_factory):
    root = tmp_path_factory.mktemp("rdma")
    inc = root / "usr" / "include" / "infiniband"
    inc.mkdir(parents=True)
    (inc / "verbs.h").write_text(FIXTURE)
    pc = root / "usr" / "lib" / "x86_64-linux-gnu" / "pkgconfig"
    pc.mkdir(parents=True)
    (pc / "libibverbs.pc").write_text("Name: libibverbs\nVersion: 1.14.99.1\n")
    return str(root)


def test_fixture(fixture_prefix):
    ir = parse(fixture_prefix)
    assert ir.rdma_core == "99.1"

    bits = ir.record("struct ibv_bits")
    got = [(f.name, f.offset, f.bit_offset, f.bit_width) for f in bits.fields]
    assert got == [("a", 0, 0, 3), ("b", 0, 3, 5), ("c", 1, None, None),
                   ("d", 4, 32, 20)]
    assert bits.size == 8

    flex = ir.record("struct ibv_flex")
    data = flex.fields[1]
    assert data.type.kind == "array" and data.type.count is None
    assert data.type.size is None and data.offset == 8 and flex.size == 8

    anon_t = ir.record("ibv_anon_t")
    assert anon_t is not None and anon_t.complete
    assert ir.typedef("ibv_anon_t").target.decl == "ibv_anon_t"
    h = ir.typedef("ibv_handle_t").target
    assert h.kind == "int" and h.size == 8 and h.signed is False

    nest = ir.record("struct ibv_nest")
    s = nest.fields[0]
    assert s.name == "" and s.type.decl == \
        "struct ibv_nest::(anonymous at field p)"
    inner = ir.record(s.type.decl)
    assert inner.fields[1].name == ""
    assert inner.fields[1].type.decl == \
        "union ibv_nest::(anonymous at field p)::(anonymous at field q)"
    assert inner.fields[1].offset == 4

    assert not ir.record("struct ibv_opaque").complete

    thing = ir.function("ibv_thing")
    assert thing.storage == "macro" and thing.macro_target == "__ibv_thing"
    assert [(p.name, p.type.spelling) for p in thing.params] == [
        ("x", "struct ibv_x *"), ("flags", "int")]
    assert thing.result.spelling == "int"
    chain = ir.function("ibv_chain")
    assert chain.macro_target == "ibv_thing"
    assert chain.params[0].type.spelling == "struct ibv_x *"
    ghost = ir.function("ibv_ghost")
    assert ghost.storage == "macro" and ghost.variadic
    assert ghost.params[0].type == UNKNOWN and ghost.result == UNKNOWN
    assert ir.macro("ibv_ghost").params == ["a", "..."]

    assert ir.function("ibv_old").deprecated
    assert ir.function("ibv_old").storage == "exported"
    assert ir.function("ibv_var").variadic
    assert ir.macro("IBV_FOO").tokens == "3"
    assert ir.macro("OTHER_MACRO") is None

    anon = ir.enum("enum (anonymous at member IBV_ANON_A)")
    assert anon.signed and [m.value for m in anon.members] == [-1, 5]
    # round trip of the odd bits too
    assert irjson.load(irjson.dump(ir)) == ir


def test_missing_prefix(tmp_path):
    with pytest.raises(ParseError, match="does not exist"):
        parse(str(tmp_path / "nope"))
    (tmp_path / "include" / "infiniband").mkdir(parents=True)
    with pytest.raises(ParseError, match="verbs.h"):
        parse(str(tmp_path))


def test_clang_error_reported(tmp_path):
    inc = tmp_path / "include" / "infiniband"
    inc.mkdir(parents=True)
    (inc / "verbs.h").write_text("struct ibv_ok { int a; };\n"
                                 "int ibv_broken(struct ibv_ok x y);\n")
    with pytest.raises(ParseError, match=r"verbs\.h:2:"):
        parse(str(tmp_path))
