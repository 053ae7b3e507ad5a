"""Check the IR's layout facts against gcc.

For every complete record of the IR one generated C probe asserts, with
``_Static_assert``, ``sizeof``/``_Alignof`` of the record and ``offsetof`` and
``sizeof`` of every named, non-bit-field field at every nesting level that is
reachable by name (the fields of an anonymous member are reached through its
parent; records named by a field, such as ``union ibv_send_wr::wr``, through
``__typeof__``).  The same probe checks every enumerator's value, the size of
named enums and typedefs, and the prototype of every exported and inline
function (``__builtin_types_compatible_p`` with the IR's spellings).  One probe
file, one ``gcc -fsyntax-only`` call per rdma-core tree.

The trees: ``$IBVERBS_RDMA_PREFIXES`` (colon separated prefixes, e.g. from
``tools/rdma-core 33.2`` ...) when set, else the system headers.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List, Optional, Set

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

from generator.ir import IR, Record, Type  # noqa: E402
from generator.parse import include_dir, parse  # noqa: E402

GCC = shutil.which("gcc") or shutil.which("cc")


def _prefixes() -> List[Optional[str]]:
    env = os.environ.get("IBVERBS_RDMA_PREFIXES", "").strip()
    if env:
        return [p for p in env.split(":") if p]
    return [None]


def _id(p: Optional[str]) -> str:
    return "system" if p is None else os.path.basename(p.rstrip("/")) or p


def _nameable(name: str) -> bool:
    """Can the record name be written as a C type as it stands?"""
    return "::" not in name and "(anonymous" not in name


def _csafe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.:\[\] ]", "_", s)


class Probe:
    def __init__(self, ir: IR):
        self.ir = ir
        self.records: Dict[str, Record] = {r.name: r for r in ir.records}
        self.lines: List[str] = []
        self.covered: Set[str] = set()
        self.n = 0

    def check(self, cond: str, what: str) -> None:
        self.n += 1
        self.lines.append(f'_Static_assert({cond}, "{_csafe(what)}");')

    def record(self, top: str) -> None:
        rec = self.records[top]
        self.covered.add(top)
        self.check(f"sizeof({top}) == {rec.size}", f"sizeof {top}")
        self.check(f"_Alignof({top}) == {rec.align}", f"alignof {top}")
        self.walk(top, rec, "", 0)

    def walk(self, top: str, rec: Record, path: str, base: int) -> None:
        for f in rec.fields:
            sub = self._anon_record(f.type)
            if not f.name:
                # anonymous member: its fields are reached through the parent
                assert sub is not None, (rec.name, f)
                self.covered.add(sub.name)
                self.walk(top, sub, path, base + f.offset)
                continue
            if f.bit_width is not None:
                continue  # offsetof/sizeof do not apply to bit-fields
            p = path + f.name
            where = f"{top}.{p}"
            self.check(f"offsetof({top}, {p}) == {base + f.offset}",
                       f"offsetof {where}")
            member = f"(({top} *)0)->{p}"
            if f.type.size is not None:
                self.check(f"sizeof({member}) == {f.type.size}",
                           f"sizeof {where}")
            elem = self._anon_record(f.type.element) \
                if f.type.kind == "array" and f.type.element else None
            if elem is not None:
                # array of an anonymous record: reach it through element 0
                sub, p, member = elem, p + "[0]", member + "[0]"
            if sub is not None:
                # a record named after this field (e.g. union ibv_send_wr::wr)
                self.covered.add(sub.name)
                self.check(f"sizeof(__typeof__({member})) == {sub.size}",
                           f"sizeof {sub.name}")
                self.check(f"_Alignof(__typeof__({member})) == {sub.align}",
                           f"alignof {sub.name}")
                self.walk(top, sub, p + ".", base + f.offset)

    def _anon_record(self, t: Type) -> Optional[Record]:
        if t.kind in ("struct", "union") and t.decl and \
                not _nameable(t.decl):
            return self.records.get(t.decl)
        return None

    def enums(self) -> None:
        for e in self.ir.enums:
            if _nameable(e.name):
                self.check(f"sizeof({e.name}) == {e.size}",
                           f"sizeof {e.name}")
            for m in e.members:
                v = m.value
                lit = f"{v}LL" if v < 0 else f"{v}ULL"
                self.check(f"({m.name}) == {lit}", f"{m.name} == {v}")

    def typedefs(self) -> None:
        for t in self.ir.typedefs:
            if t.target.size is not None:
                self.check(f"sizeof({t.name}) == {t.target.size}",
                           f"sizeof {t.name}")

    def functions(self) -> int:
        n = 0
        for f in self.ir.functions:
            if f.storage == "macro":
                continue
            types = [f.result] + [p.type for p in f.params]
            if any(not t.spelling or "(anonymous" in t.spelling or
                   "::" in t.spelling for t in types):
                continue
            args = [f"__typeof__({p.type.spelling})" for p in f.params]
            if f.variadic:
                args.append("...")
            sig = (f"__typeof__({f.result.spelling}) "
                   f"({', '.join(args) if args else 'void'})")
            # __typeof__(name) is not a macro invocation: it names the
            # function even where a same-named function-like macro exists
            self.check(f"__builtin_types_compatible_p(__typeof__({f.name}), "
                       f"{sig})", f"prototype {f.name}")
            n += 1
        return n

    def source(self) -> str:
        head = ("#include <stddef.h>\n"
                f"#include <{self.ir.source}>\n")
        return head + "\n".join(self.lines) + "\n"


def build_probe(ir: IR) -> Probe:
    probe = Probe(ir)
    for r in ir.records:
        if r.complete and _nameable(r.name):
            probe.record(r.name)
    probe.enums()
    probe.typedefs()
    probe.functions()
    missing = sorted(r.name for r in ir.records
                     if r.complete and r.name not in probe.covered)
    assert not missing, f"records not reachable by the probe: {missing}"
    return probe


def run_gcc(probe: Probe, prefix: Optional[str], tmp_path: Path) -> None:
    src = tmp_path / "probe.c"
    src.write_text(probe.source())
    cmd = [GCC, "-fsyntax-only", "-std=gnu11", "-Wno-deprecated-declarations"]
    inc = include_dir(prefix)
    if inc != "/usr/include":
        cmd += ["-I", inc]
    cmd.append(str(src))
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    if r.returncode != 0:
        errs = [ln for ln in r.stdout.splitlines() if "error" in ln]
        pytest.fail(f"gcc rejected the layout probe ({len(errs)} errors; "
                    f"{src}):\n" + "\n".join(errs[:40]))


@pytest.mark.skipif(GCC is None, reason="gcc not installed")
@pytest.mark.parametrize("prefix", _prefixes(), ids=_id)
def test_layout_matches_gcc(prefix, tmp_path):
    if prefix is None and not Path("/usr/include/infiniband/verbs.h").is_file():
        pytest.skip("system rdma-core headers missing "
                    "(apt-get install libibverbs-dev)")
    ir = parse(prefix)
    probe = build_probe(ir)
    assert probe.n > 1000  # sanity: verbs.h has hundreds of fields
    run_gcc(probe, prefix, tmp_path)


FIXTURE = textwrap.dedent("""\
    #include <stdint.h>
    struct ibv_bits { uint32_t a:3; uint32_t b:5; uint8_t c; uint32_t d:20; };
    struct ibv_flex { int n; uint64_t data[]; };
    typedef struct { int x; char y; } ibv_anon_t;
    struct ibv_nest {
        char lead;
        struct { int p; union { short q; long r; }; };
        union { char s[3]; struct { char t; int u; } named; } un;
        int z;
    };
    struct ibv_arr { struct { short a; } items[3]; int tail; };
    struct ibv_outer { struct ibv_inner { int x; char c; } in; int y; };
    enum ibv_e { IBV_E_A = -3, IBV_E_B = 1 };
    enum { IBV_BIG = 0x100000000ULL };
    int ibv_fn(const char *name, struct ibv_nest *n, ...);
    """)


@pytest.mark.skipif(GCC is None, reason="gcc not installed")
def test_layout_fixture(tmp_path):
    inc = tmp_path / "root" / "include" / "infiniband"
    inc.mkdir(parents=True)
    (inc / "verbs.h").write_text(FIXTURE)
    ir = parse(str(tmp_path / "root"))
    probe = build_probe(ir)
    assert "union ibv_nest::un" in probe.covered
    assert "struct ibv_nest::un::named" in probe.covered
    assert "union ibv_nest::(anonymous at field p)::(anonymous at field q)" \
        in probe.covered
    assert "struct ibv_arr::items" in {r.name for r in ir.records}
    assert ir.record("struct ibv_inner").size == 8
    assert any("IBV_BIG" in ln for ln in probe.lines)
    run_gcc(probe, str(tmp_path / "root"), tmp_path)


@pytest.mark.skipif(GCC is None, reason="gcc not installed")
def test_probe_catches_a_wrong_offset(tmp_path):
    """The probe is not vacuous: a corrupted IR makes gcc fail."""
    inc = tmp_path / "root" / "include" / "infiniband"
    inc.mkdir(parents=True)
    (inc / "verbs.h").write_text("struct ibv_s { int a; long b; };\n")
    ir = parse(str(tmp_path / "root"))
    ir.record("struct ibv_s").fields[1].offset = 4
    probe = build_probe(ir)
    with pytest.raises(pytest.fail.Exception, match="offsetof struct ibv_s.b"):
        run_gcc(probe, str(tmp_path / "root"), tmp_path)
