"""Typed stubs: ibverbs/_ibverbs.pyi (generated from the spec, see
generator/stubs.py), the Python layer's annotations and stubs, py.typed.

mypy (pinned in the Makefile's TEST_PKGS) checks the README examples and the
test helpers with --strict, and its stubtest compares the generated stub
with the extension as built."""
from __future__ import annotations

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytest.importorskip("mypy", reason="mypy is installed by `make venv` (DEV_PKGS)")


def mypy(*args: str, cache: pathlib.Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if importlib.util.find_spec("torch") is None:
        # Where torch is not installed (make test-39-host installs none), the
        # examples' `import torch` finds a stub whose every name is Any.
        stubs = cache.parent / "torch-stub"
        (stubs / "torch").mkdir(parents=True, exist_ok=True)
        (stubs / "torch" / "__init__.pyi").write_text(
            "from typing import Any\n\ndef __getattr__(name: str) -> Any: ...\n")
        env["MYPYPATH"] = str(stubs)
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)


def readme_examples() -> str:
    """The python blocks of README.md and of the guides (docs/guides)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
    blocks = [b for page in pages
              for b in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)]
    assert len(blocks) > 5, "README.md and the guides have no python examples"
    return "\n\n".join(f"def example_{i}() -> None:\n" + "".join(f"    {line}\n" if line else "\n"
                                                                 for line in b.splitlines())
                       for i, b in enumerate(blocks))


def test_readme_examples_and_test_helpers_pass_mypy_strict(tmp_path):
    """Each ```python block of README.md and the guides becomes the body of
    a function."""
    examples = tmp_path / "readme_examples.py"
    examples.write_text(readme_examples())
    out = mypy("--strict", str(examples), "tests/conftest.py", "tests/rxe.py",
               # the typed Python modules of the package
               "ibverbs/aio.py", "ibverbs/_buffers.py", "ibverbs/_cli.py", "ibverbs/_cli_args.py",
               "ibverbs/_gid_table.py", "ibverbs/cm.py",
               "ibverbs/flow.py", "ibverbs/topology.py", "ibverbs/_cli_topo.py",
               cache=tmp_path / "cache")
    assert out.returncode == 0, out.stdout + out.stderr


USAGE = """
import asyncio
import ibverbs as ib
import ibverbs.cuda as cuda


def setup(ctx: ib.Context, remote_bytes: bytes) -> tuple[ib.QP, ib.MR, ib.WCBuffer]:
    pd = ctx.alloc_pd()
    channel = ctx.create_comp_channel()
    cq = ctx.create_cq(64, channel=channel, comp_vector=0)
    qp = pd.create_qp(ib.QPInitAttr(cq, cq, qp_type=ib.QPType.RC, max_send_wr=16))
    port_attr: ib.PortAttr = ctx.query_port(1)
    gid: ib.Gid = ctx.query_gid(1, 0)
    mine = ib.local_qp_info(qp, port_attr, gid, port=1, psn=0)
    ib.connect_rc(qp, ib.QPInfo.from_bytes(remote_bytes), port=1, sgid_index=0,
                  access=ib.AccessFlags.LOCAL_WRITE, local_psn=mine.psn)
    mr = pd.reg_mr(bytearray(4096), ib.AccessFlags.LOCAL_WRITE)
    plist = ib.PostList([ib.SendWR(wr_id=i, sg_list=[mr.sge(64, 64 * i)]) for i in range(4)])
    plist[0].wr_id = 7
    qp.post_send(plist)
    attrs, cap = qp.query()
    assert cap.max_send_wr >= 16 and isinstance(attrs["qp_state"], int)
    return qp, mr, ib.WCBuffer(16, raise_on_error=True)


async def drain(cq: ib.CQ, ctx: ib.Context, buf: ib.WCBuffer) -> int:
    wcs: list[ib.WC] = await cq.async_wait(8)
    n = cq.poll_into(buf) + len(wcs)
    event: ib.AsyncEvent = await ctx.async_event()
    return n + event.event_type


def gpu(pd: ib.PD, tensor: object) -> int:
    with cuda.register_tensor(pd, tensor, ib.AccessFlags.REMOTE_WRITE) as g:
        return g.rkey + g.sge().length


def run(ctx: ib.Context, cq: ib.CQ, buf: ib.WCBuffer) -> int:
    return asyncio.run(drain(cq, ctx, buf))
"""


def test_typical_use_of_the_whole_api_passes_mypy_strict(tmp_path):
    """Helpers, aio, cuda, the data path classes: typed end to end."""
    usage = tmp_path / "usage.py"
    usage.write_text(USAGE)
    out = mypy("--strict", str(usage), cache=tmp_path / "cache")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_catches_a_wrong_call(tmp_path):
    """The stubs are precise enough to reject misuse (the check above can fail)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import ibverbs as ib\n"
                   "ctx = ib.get_device_list()[0].open()\n"
                   "cq = ctx.create_cq('many')\n"
                   "wcs: list[ib.WC] = cq.poll(4)\n"
                   "wcs[0].no_such_field\n"
                   "ctx.alloc_pd().reg_mr(b'x', 1, 2, 3)\n")
    out = mypy("--strict", str(bad), cache=tmp_path / "cache")
    assert out.returncode == 1
    assert 'Argument 1 to "create_cq" of "Context" has incompatible type "str"' in out.stdout
    assert '"WC" has no attribute "no_such_field"' in out.stdout
    assert "No overload variant of \"reg_mr\"" in out.stdout


PRECISE = """
import ibverbs as ib


def handle(cq: ib.CQ, mr: ib.MR) -> None:
    try:
        cq.wait(4, timeout=1.0)
    except ib.WaitTimeoutError as e:
        reveal_type(e.completions)
    except ib.CompletionError as e:
        reveal_type(e.status)
        reveal_type(e.vendor_err)
        reveal_type(e.wc)
    reveal_type(mr.owner)
    t: TimeoutError = ib.WaitTimeoutError("late")
"""


def test_error_attributes_and_mr_owner_are_typed(tmp_path):
    """Issue 25, point 15: not Any. WaitTimeoutError is a TimeoutError whose
    completions is a list of WC; CompletionError's status and vendor_err
    are ints, its wc a WC; MR.owner any object (object, not Any)."""
    usage = tmp_path / "precise.py"
    usage.write_text(PRECISE)
    out = mypy("--strict", str(usage), cache=tmp_path / "cache")
    revealed = [t.replace("builtins.", "")
                for t in re.findall(r'Revealed type is "([^"]+)"', out.stdout)]
    assert revealed == ["list[ibverbs._ibverbs.WC]", "int", "int", "ibverbs._ibverbs.WC",
                        "object"], out.stdout
    assert "error:" not in out.stdout.replace("note:", ""), out.stdout


def test_generated_stub_matches_the_extension(tmp_path):
    """mypy's stubtest: every class, method, attribute and signature of the
    built extension is in _ibverbs.pyi, and nothing else (and the same for
    the hand-written stubs of helpers.py and cuda.py)."""
    out = subprocess.run([sys.executable, "-m", "mypy.stubtest", "--ignore-disjoint-bases",
                          "ibverbs._ibverbs", "ibverbs.helpers", "ibverbs.cuda"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr


def test_stubs_ship_with_the_package():
    stub = ROOT / "ibverbs" / "_ibverbs.pyi"
    assert stub.resolve() == (ROOT / "generated" / "_ibverbs.pyi").resolve()
    assert (ROOT / "ibverbs" / "py.typed").exists()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'ibverbs = \[[^\]]*"py.typed"[^\]]*"\*.pyi"', pyproject)


@pytest.fixture(scope="module")
def generator_ir():
    pytest.importorskip("clang.cindex", reason="libclang is not installed")
    import os

    from generator import parse
    return parse.parse(os.environ.get("RDMA_CORE") or None)


def stub_of(ir, spec_dir) -> str:
    """The stub made from the spec set in spec_dir (the verbs spec, the
    data-path types' and rdma_cm's)."""
    import os

    from generator import builder, rdmacm, records, spec
    from generator.cli import TEMPLATE_DIR
    cm = rdmacm.load(os.environ.get("RDMA_CORE") or None, str(spec_dir))
    from generator import render
    from generator.model import Model
    return render.render(Model(verbs=builder.build(ir, spec.load(str(spec_dir))),
                               records=records.build(ir, str(spec_dir)), rdmacm=cm),
                         TEMPLATE_DIR)["_ibverbs.pyi"]


def class_body(stub: str, cls: str) -> str:
    # "class QP:", or "class QPEx(QP):" for a subclass handle (spec base:)
    parts = re.split(rf"\nclass {cls}(?:\((\w+)\))?:", stub, maxsplit=1)
    assert len(parts) == 3, f"no stub for {cls}"
    return re.split(r"\n(?:@final\n)?class ", parts[2], maxsplit=1)[0]


def test_a_verb_added_to_the_spec_gets_a_typed_stub(tmp_path, generator_ir):
    """What another spec change adds (a class, a verb) is typed on the next
    generate, with no stub edit: argument and result types follow the spec."""
    import shutil
    spec_dir = tmp_path / "spec"
    shutil.copytree(ROOT / "spec", spec_dir)
    ctx_yaml = spec_dir / "context.yaml"
    text = ctx_yaml.read_text()
    text = text.replace("    methods:\n", "    methods:\n"
                        "      query_port_again:\n"
                        "        verb: ibv_query_port\n"
                        "        params: {context: self, port_num: {arg: port, default: 1}, port_attr: out}\n"
                        "        errors: errno\n"
                        "        doc: The port's attributes again.\n"
                        "      create_cq_again:\n"
                        "        verb: ibv_create_cq\n"
                        "        params: {context: self, cqe: cqe, cq_context: {value: \"NULL\"},\n"
                        "                 channel: {arg: channel, default: None, convert: \"handle:CompChannel\"},\n"
                        "                 comp_vector: {value: \"0\"}}\n"
                        "        errors: \"null\"\n"
                        "        doc: Another CQ.\n"
                        "        returns: {new: CQ, parents: {context: self, channel: channel}}\n", 1)
    ctx_yaml.write_text(text)
    body = class_body(stub_of(generator_ir, spec_dir), "Context")
    assert "    def query_port_again(self, port: int = ...) -> PortAttr:\n" in body
    assert "    def create_cq_again(self, cqe: int, channel: CompChannel | None = ...) -> CQ:\n" in body
    assert '        """Another CQ.\n' in body


def test_every_bound_method_has_a_stub(generator_ir):
    from generator import builder, spec
    from generator.cli import SPEC_DIR
    built = builder.build(generator_ir, spec.load(SPEC_DIR))
    stub = stub_of(generator_ir, SPEC_DIR)
    for h in built.handles:
        body = class_body(stub, h.name)
        for m in h.methods:
            assert f"    def {m.name}(" in body, f"{h.name}.{m.name} has no stub"
    for s in built.structs:
        body = class_body(stub, s.name)
        for f in s.fields:
            assert f" {f.name}" in body, f"{s.name}.{f.name} has no stub"


def test_subclass_handles_derive_from_their_base():
    """spec `base:` (both forms) -> `class Sub(Base)` in the stub, with only
    what the subclass adds; its base is no longer @final; hand_attributes
    are typed by their `stub:` key."""
    stub = (ROOT / "generated" / "_ibverbs.pyi").read_text()
    for sub, base in (("QPEx", "QP"), ("CQEx", "CQ"), ("ImportedPD", "PD"), ("ImportedMR", "MR")):
        assert f"\n@final\nclass {sub}({base}):" in stub
        assert f"\n\nclass {base}:" in stub
        assert "def close(" not in class_body(stub, sub)
    qpex = class_body(stub, "QPEx")
    assert "    wr_id: int\n" in qpex and "    wr_flags: int\n" in qpex
    assert "def start_poll(self) -> bool:\n" in class_body(stub, "CQEx")


def test_data_path_and_rdma_cm_stubs_come_from_their_spec(tmp_path, generator_ir):
    """No class stub is written by hand: the data-path types come from
    spec/datapath/records.yaml (a field is an int, a read-only one a
    property, `stub:` types the rest), EventChannel and CMID from
    spec/rdmacm/cm.yaml, so a spec change reaches the stub."""
    import shutil
    assert not (ROOT / "templates" / "stubs").exists()
    # the template's one `class {{ c.name }}` prints the model's classes
    assert not re.search(r"^class \w", (ROOT / "templates" / "stubs.pyi.j2").read_text(), re.M)
    spec_dir = tmp_path / "spec"
    shutil.copytree(ROOT / "spec", spec_dir)
    records_yaml = spec_dir / "datapath" / "records.yaml"
    text = records_yaml.read_text().replace(
        '      sl: {field: wc.sl, doc: "Service level."}\n',
        '      sl: {field: wc.sl, doc: "Service level."}\n'
        '      sl_again: {field: wc.sl, doc: "Service level again."}\n', 1)
    records_yaml.write_text(text.replace('stub: "(self, opcode: int, /) -> int"',
                                         'stub: "(self, opcode: int, /) -> bool"', 1))
    cm_yaml = spec_dir / "rdmacm" / "cm.yaml"
    cm_yaml.write_text(cm_yaml.read_text().replace('stub: "(self, backlog: int = ...) -> None"',
                                                   'stub: "(self, backlog: int) -> int"', 1))
    stub = stub_of(generator_ir, spec_dir)
    assert '    def sl_again(self) -> int:\n        """Service level again."""\n' in class_body(stub, "WC")
    assert "    def count_opcode(self, opcode: int, /) -> bool:\n" in class_body(stub, "WCBuffer")
    assert "    def listen(self, backlog: int) -> int:\n" in class_body(stub, "CMID")
    generated = (ROOT / "generated" / "_ibverbs.pyi").read_text()
    assert "    wr_id: int\n" in class_body(generated, "SendWR")
    assert "    def sg_list(self, value: Sequence[SGE] | None) -> None: ..." in class_body(generated, "RecvWR")
    assert "    def __new__(cls, wrs: SendWR | RecvWR" in class_body(generated, "PostList")
    assert "    def qp(self) -> QP | None:\n" in class_body(generated, "CMID")
    assert "\n@final\nclass EventChannel:" in generated and "\n\nclass CMID:" in generated


def test_import_ibverbs_imports_no_asyncio_no_ctypes_and_no_typing():
    """Each costs milliseconds at import (typing ~10 ms on a loaded machine)."""
    out = subprocess.run([sys.executable, "-c", "import sys, ibverbs; "
                          "print('asyncio' in sys.modules, 'ctypes' in sys.modules, "
                          "'typing' in sys.modules)"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False", "False"], out.stderr


@pytest.mark.skipif(sys.version_info < (3, 10), reason="the generator is checked with the pinned "
                    "mypy (2.x, Python 3.10+); 1.19, the last for 3.9, narrows less")
def test_the_generator_passes_mypy_strict(tmp_path):
    """generator/ is type-checked (pyproject.toml: libclang and PyYAML are
    untyped, their values Any)."""
    out = mypy("--strict", "generator/", cache=tmp_path / "cache")
    assert out.returncode == 0, out.stdout + out.stderr
