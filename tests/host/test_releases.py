"""The generator across rdma-core releases (33.2, 44.0, 56.1, 65.0).

The spec covers the newest release; what older headers lack is skipped only
where the spec marks it newer (symbols.optional, or `since:`), and anything
else missing is still an error.  Compiling each release's output is
`make check-releases` (tools/release-check); here: the model, per release.

Releases come from tools/rdma-core's cache (~/.cache/ibverbs-rdma-core);
a release not fetched yet is skipped (`make check-releases` fetches them).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import pathlib
import shutil
import textwrap

import pytest

pytest.importorskip("clang.cindex", reason="libclang is not installed (pip install libclang==18.1.1)")

from generator import builder, model, parse, spec  # noqa: E402
from generator.cli import SPEC_DIR  # noqa: E402
from generator.spec import SpecError  # noqa: E402

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[2]
RELEASES = ("33.2", "44.0", "56.1", "65.0")
CACHE = pathlib.Path(os.environ.get("IBVERBS_RDMA_CACHE")
                     or pathlib.Path(os.environ.get("XDG_CACHE_HOME")
                                     or pathlib.Path.home() / ".cache") / "ibverbs-rdma-core")


def prefix(release: str) -> str:
    p = CACHE / release
    if not (p / ".complete").exists():
        pytest.skip(f"rdma-core {release} is not fetched (tools/rdma-core {release}, "
                    "or make check-releases)")
    return str(p)


_irs: dict = {}


def ir_of(release: str):
    if release not in _irs:
        _irs[release] = parse.parse(prefix(release))
    return _irs[release]


@pytest.fixture(scope="module")
def the_spec():
    return spec.load(SPEC_DIR)


def labels(m: model.HeaderModel):
    out = {f"{h.name}.{x.name}" for h in m.handles for x in h.methods}
    out |= {f.name for f in m.functions}
    return out


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_generates_and_the_spec_decides_every_public_function(release, the_spec):
    built = builder.build(ir_of(release), the_spec)
    unhandled = [name for name, status, _ in built.coverage if status == "unhandled"]
    assert unhandled == [], f"rdma-core {release}: bind or exclude {unhandled}"
    assert built.ir.rdma_core == release


def test_33_2_skips_exactly_what_its_headers_lack(the_spec):
    old = builder.build(ir_of("33.2"), the_spec)
    new = builder.build(ir_of("44.0"), the_spec)
    missing = labels(new) - labels(old)
    assert missing == {"PD.reg_dmabuf_mr", "QP.query_data_in_order", "is_fork_initialized",
                       "Context.import_dm", "QPEx.wr_atomic_write"}
    assert "ForkStatus" not in {e.name for e in old.enums}
    assert "ForkStatus" in {e.name for e in new.enums}
    # a struct class with `fields: all` simply has fewer fields
    fields = lambda m, cls: {f.name for s in m.structs if s.name == cls for f in s.fields}
    assert fields(new, "DeviceAttrEx") - fields(old, "DeviceAttrEx") == {"phys_port_cnt_ex"}


def test_65_0_gains_the_new_classic_verbs_and_44_0_does_not(the_spec):
    new = builder.build(ir_of("65.0"), the_spec)
    base = builder.build(ir_of("44.0"), the_spec)
    assert {"Context.query_port_speed", "wr_opcode_str"} <= labels(new)
    assert not {"Context.query_port_speed", "wr_opcode_str"} & labels(base)
    fields = {f.name for s in new.structs if s.name == "PortAttr" for f in s.fields}
    assert "active_speed_ex" in fields


def test_every_exported_symbol_newer_than_33_2_is_optional(the_spec):
    """Else an extension generated from the newer headers would refuse to
    import with rdma-core 33.2's libibverbs.so.1."""
    oldest = {f.name for f in ir_of("33.2").functions if f.storage == "exported"}
    for release in RELEASES[1:]:
        newer = {f.name for f in ir_of(release).functions
                 if f.storage == "exported"} - oldest
        assert newer - set(the_spec.optional) == set(), release


def test_every_exclusion_names_a_public_function_of_some_release(the_spec):
    public = set()
    for release in RELEASES:
        public |= {f.name for f in builder.public_functions(ir_of(release))}
    stale = sorted(set(the_spec.exclusions) - public)
    assert stale == [], [the_spec.exclusion_where[n] for n in stale]


# --- what is skipped and what still fails ----------------------------------

def spec_with(tmp_path, text: str) -> spec.Spec:
    d = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, d)
    (d / "zz.yaml").write_text(textwrap.dedent(text))
    return spec.load(str(d))


@pytest.mark.parametrize("text", [
    # an optional symbol (symbols.optional) the headers lack
    """
    functions:
      newer: {verb: ibv_reg_dmabuf_mr, params: {}, errors: none}
    """,
    # a `since:` method
    """
    functions:
      newer: {verb: ibv_not_yet, params: {}, errors: none, since: "99"}
    """,
    # a `since:` enum
    """
    enums:
      Newer: {c: enum ibv_not_yet, kind: IntEnum, prefix: IBV_, since: "99"}
    """,
    # a `since:` struct field
    """
    structs:
      Newer:
        ctype: struct ibv_qp_cap
        fields:
          max_send_wr: max_send_wr
          later: {path: not_yet, since: "99"}
    docs:
      fields:
        Newer: {max_send_wr: "Maximum outstanding send requests."}
    """,
])
def test_what_is_marked_newer_is_skipped(tmp_path, text):
    built = builder.build(ir_of("33.2"), spec_with(tmp_path, text))
    assert "newer" not in {f.name for f in built.functions}
    assert "Newer" not in {e.name for e in built.enums}
    assert [f.name for s in built.structs if s.name == "Newer" for f in s.fields] in ([], ["max_send_wr"])


@pytest.mark.parametrize("text,message", [
    ("""
    functions:
      newer: {verb: ibv_not_yet, params: {}, errors: none}
    """, "spec/zz.yaml:3: newer: no function ibv_not_yet"),
    ("""
    enums:
      Newer: {c: enum ibv_not_yet, kind: IntEnum, prefix: IBV_}
    """, "spec/zz.yaml:3: Newer: no enum ibv_not_yet"),
    ("""
    structs:
      Newer:
        ctype: struct ibv_qp_cap
        fields:
          later: {path: not_yet}
    """, "struct ibv_qp_cap has no member 'not_yet'"),
])
def test_anything_else_missing_still_raises(tmp_path, text, message):
    with pytest.raises(SpecError) as exc:
        builder.build(ir_of("33.2"), spec_with(tmp_path, text))
    assert message in str(exc.value)


def test_since_is_a_known_spec_key(tmp_path):
    with pytest.raises(SpecError, match="unknown key 'sinse'"):
        spec_with(tmp_path, """
        functions:
          f: {verb: ibv_fork_init, params: {}, errors: errno, sinse: "35"}
        """)


# --- tools/release-check -----------------------------------------------------

def release_check():
    loader = importlib.machinery.SourceFileLoader("release_check", str(ROOT / "tools" / "release-check"))
    mod_spec = importlib.util.spec_from_loader("release_check", loader)
    mod = importlib.util.module_from_spec(mod_spec)
    loader.exec_module(mod)
    return mod


def test_release_check_compiles_with_setup_py_flags_and_werror(tmp_path):
    rc = release_check()
    flags = rc.setup_compile_args()
    assert "-Wall" in flags and "-Wextra" in flags
    cmd = rc.gcc_command(prefix("44.0"), str(tmp_path), False, str(tmp_path))
    assert "-Werror" in cmd and "-fsyntax-only" in cmd
    assert all(f in cmd for f in flags)
    assert "-DPy_LIMITED_API=0x03090000" in cmd
    sources = {os.path.basename(c) for c in cmd if c.endswith(".c")}
    assert sources == {p.name for p in (ROOT / "ibverbs" / "src").glob("*.c")}


def test_with_rdma_core_refuses_to_touch_the_host(tmp_path):
    """It copies providers into /usr/lib: only inside the throwaway VM."""
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "IBVERBS_VM"}
    r = subprocess.run([str(ROOT / "tools" / "with-rdma-core"), "33.2", "true"],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "outside the test VM" in r.stderr
