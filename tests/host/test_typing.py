"""Typed stubs: ibverbs/_ibverbs.pyi (generated from the spec, see
generator/stubs.py), the Python layer's annotations and stubs, py.typed.

mypy (pinned in the Makefile's DEV_PKGS) checks the README examples and the
test helpers with --strict, and its stubtest compares the generated stub
with the extension as built."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytest.importorskip("mypy", reason="mypy is installed by `make venv` (DEV_PKGS)")


def mypy(*args: str, cache: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def readme_examples() -> str:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert blocks, "README.md has no python examples"
    return "\n\n".join(f"def example_{i}() -> None:\n" + "".join(f"    {line}\n" if line else "\n"
                                                                 for line in b.splitlines())
                       for i, b in enumerate(blocks))


def test_readme_examples_and_test_helpers_pass_mypy_strict(tmp_path):
    """Each ```python block of README.md becomes the body of a function."""
    examples = tmp_path / "readme_examples.py"
    examples.write_text(readme_examples())
    out = mypy("--strict", str(examples), "tests/conftest.py", "tests/rxe.py",
               # the typed Python modules of the package
               "ibverbs/aio.py", "ibverbs/_buffers.py", "ibverbs/_cli.py", cache=tmp_path / "cache")
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


def test_generated_stub_matches_the_extension(tmp_path):
    """mypy's stubtest: every class, method, attribute and signature of the
    built extension is in _ibverbs.pyi, and nothing else."""
    out = subprocess.run([sys.executable, "-m", "mypy.stubtest", "--ignore-disjoint-bases",
                          "--mypy-config-file", "/dev/null", "ibverbs._ibverbs"],
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
    from generator import model, render, spec
    from generator.cli import TEMPLATE_DIR
    return render.render(model.build(ir, spec.load(str(spec_dir))), TEMPLATE_DIR)["_ibverbs.pyi"]


def class_body(stub: str, cls: str) -> str:
    parts = stub.split(f"\nclass {cls}:", 1)
    assert len(parts) == 2, f"no stub for {cls}"
    return parts[1].split("\n@final", 1)[0]


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
                        "      create_cq_again:\n"
                        "        verb: ibv_create_cq\n"
                        "        params: {context: self, cqe: cqe, cq_context: {value: \"NULL\"},\n"
                        "                 channel: {arg: channel, default: None, convert: \"handle:CompChannel\"},\n"
                        "                 comp_vector: {value: \"0\"}}\n"
                        "        errors: \"null\"\n"
                        "        returns: {new: CQ, parents: {context: self, channel: channel}}\n", 1)
    ctx_yaml.write_text(text)
    body = class_body(stub_of(generator_ir, spec_dir), "Context")
    assert "    def query_port_again(self, port: int = ...) -> PortAttr: ..." in body
    assert "    def create_cq_again(self, cqe: int, channel: CompChannel | None = ...) -> CQ: ..." in body


def test_every_bound_method_has_a_stub(generator_ir):
    from generator import model, spec
    from generator.cli import SPEC_DIR
    built = model.build(generator_ir, spec.load(SPEC_DIR))
    stub = stub_of(generator_ir, SPEC_DIR)
    for h in built.handles:
        body = class_body(stub, h.name)
        for m in h.methods:
            assert f"    def {m.name}(" in body, f"{h.name}.{m.name} has no stub"
    for s in built.structs:
        body = class_body(stub, s.name)
        for f in s.fields:
            assert f" {f.name}" in body, f"{s.name}.{f.name} has no stub"


def test_import_ibverbs_imports_no_asyncio_and_no_ctypes():
    out = subprocess.run([sys.executable, "-c", "import sys, ibverbs; "
                          "print('asyncio' in sys.modules, 'ctypes' in sys.modules)"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "False"], out.stderr
