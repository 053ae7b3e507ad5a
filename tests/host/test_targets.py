"""The build targets (spec/targets/targets.yaml, generator/targets.py) and
what the free-threaded one changes in the generated C: every entry of every
class's tables runs in its object's critical section (IBP_LOCKED), so no
method, attribute or slot can be reached around it."""
from __future__ import annotations

import pathlib
import re
import runpy

import pytest

from generator import targets
from generator.paths import SPEC_DIR
from generator.spec import SpecError

ROOT = pathlib.Path(__file__).resolve().parents[2]
GENERATED = ROOT / "generated"

#: slots whose function runs on an object others may share (the rest make,
#: free or collect one: nobody else holds it then)
LOCKED_SLOTS = ("Py_tp_init", "Py_tp_repr", "Py_tp_getattro", "Py_sq_length", "Py_sq_item",
                "Py_sq_ass_item")


def _tables(text: str, kind: str):
    """(table name, [entry lines]) of each static `kind` table of text."""
    for m in re.finditer(rf"static {kind} (\w+)\[\] = \{{\n(.*?)\n\}};", text, re.S):
        yield m.group(1), [line.strip() for line in m.group(2).split("\n") if line.strip()]


def _class_files():
    return [p for p in sorted(GENERATED.glob("*.c.h")) if p.name not in ("loader.c.h",
            "rdmacm_loader.c.h", "handles.c.h")]


def test_every_method_of_every_class_is_locked():
    checked = 0
    for path in _class_files():
        text = path.read_text()
        for name, rows in _tables(text, "PyMethodDef"):
            if name in ("ibp_generated_functions", "ibp_rdmacm_functions"):
                continue        # module functions: no object of their own
            for row in rows:
                if row.startswith("{NULL") or row.startswith('"'):
                    continue    # the end, or a docstring line
                if "METH_CLASS" in row:
                    continue    # self is the class
                m = re.match(r'\{"(\w+)", (?:\(PyCFunction\)\(void \(\*\)\(void\)\))?([\w()]+),', row)
                assert m, f"{path.name}: {name}: {row}"
                assert m.group(2).startswith("IBP_LOCKED("), f"{path.name}: {name}: {row}"
                checked += 1
    assert checked > 200


def test_every_attribute_of_every_class_is_locked():
    checked = 0
    for path in _class_files():
        for name, rows in _tables(path.read_text(), "PyGetSetDef"):
            for row in rows:
                m = re.match(r'\{"(\w+)", ([\w()]+), ([\w()]+),', row)
                if m is None:
                    continue    # the end, or a docstring continued
                assert m.group(2).startswith("IBP_LOCKED("), f"{path.name}: {name}: {row}"
                assert m.group(3) == "NULL" or m.group(3).startswith("IBP_LOCKED("), \
                    f"{path.name}: {name}: {row}"
                checked += 1
    assert checked > 300


def test_every_slot_on_a_shared_object_is_locked():
    checked = 0
    for path in _class_files():
        for name, rows in _tables(path.read_text(), "PyType_Slot"):
            for row in rows:
                slot = row.split(",")[0].lstrip("{")
                if slot in LOCKED_SLOTS:
                    assert "IBP_LOCKED(" in row, f"{path.name}: {name}: {row}"
                    checked += 1
    assert checked > 50


def test_each_wrapper_takes_the_critical_section_on_the_free_threaded_target_only():
    text = (GENERATED / "qp.c.h").read_text()
    start = text.index("QP_close__locked(PyObject *self, PyObject *unused)\n{")
    block = text[start:text.index("\n}\n", start)]
    assert "ibp_lock(&cs, self);" in block and "ibp_unlock(&cs);" in block
    assert "QP_close)(self, unused)" in block
    assert text.rindex("#if IBP_FREE_THREADED", 0, start) > text.rindex("#endif", 0, start)
    common = (ROOT / "ibverbs" / "src" / "common.h").read_text()
    assert "#define IBP_LOCKED(f) f##__locked" in common and "#define IBP_LOCKED(f) f\n" in common


def test_the_targets_reach_setup_py_and_the_c():
    loaded = targets.load(targets.default_path(SPEC_DIR))
    assert [t.name for t in loaded] == ["cp39-abi3", "cp314-abi3", "cp314t"]
    view = runpy.run_path(str(GENERATED / "targets.py"))["TARGETS"]
    assert [(t["name"], t["python_tag"], t["abi_tag"], t["limited_api"], t["free_threaded"])
            for t in view] == [("cp39-abi3", "cp39", "abi3", "0x03090000", False),
                               ("cp314-abi3", "cp314", "abi3", "0x030E0000", False),
                               ("cp314t", "cp314", "cp314t", None, True)]
    header = (GENERATED / "target.h").read_text()
    assert "#define Py_LIMITED_API 0x03090000" in header
    assert "#define Py_LIMITED_API 0x030E0000" in header
    assert "PyUnstable_Module_SetGIL((m), Py_MOD_GIL_NOT_USED)" in header
    # vectorcall constructors only where the Limited API has Py_tp_vectorcall
    assert [t.name for t in loaded if t.type_vectorcall] == ["cp314-abi3"]


def _setup_py_target(version, free_threaded=False, name=None):
    """The target setup.py's build_target() picks for an interpreter of
    *version*: the function alone, run with that interpreter's answers."""
    import ast
    source = (ROOT / "setup.py").read_text()
    tree = ast.parse(source)
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_target")
    code = compile(ast.Module(body=[func], type_ignores=[]), "setup.py", "exec")
    fake_sys = type("sys", (), {"version_info": version})
    fake_sysconfig = type("sysconfig", (), {"get_config_var": staticmethod(
        lambda v: 1 if free_threaded and v == "Py_GIL_DISABLED" else None)})
    env = {"IBVERBS_TARGET": name} if name else {}
    fake_os = type("os", (), {"environ": env, "path": __import__("os").path})
    scope = {"runpy": runpy, "os": fake_os, "sys": fake_sys, "sysconfig": fake_sysconfig,
             "HERE": str(ROOT)}
    exec(code, scope)
    return scope["build_target"]()["name"]


@pytest.mark.parametrize("version, free_threaded, expected", [
    ((3, 9), False, "cp39-abi3"), ((3, 13), False, "cp39-abi3"),
    ((3, 14), False, "cp314-abi3"), ((3, 15), False, "cp314-abi3"),
    ((3, 14), True, "cp314t"),
])
def test_setup_py_builds_the_newest_target_the_interpreter_meets(version, free_threaded, expected):
    assert _setup_py_target(version, free_threaded) == expected


def test_ibverbs_target_names_an_older_target_on_a_newer_interpreter():
    assert _setup_py_target((3, 14), name="cp39-abi3") == "cp39-abi3"


def test_ibverbs_target_refuses_a_target_newer_than_the_interpreter():
    with pytest.raises(SystemExit, match="target cp314-abi3 needs CPython 3.14 or later, not 3.11"):
        _setup_py_target((3, 11), name="cp314-abi3")


def test_two_targets_for_one_build_and_version_are_refused(tmp_path):
    text = (ROOT / "spec" / "targets" / "targets.yaml").read_text()
    path = tmp_path / "targets.yaml"
    path.write_text(text.replace('requires_python: "3.14"\n    limited_api: "3.14"',
                                 'requires_python: "3.9"\n    limited_api: "3.14"'))
    with pytest.raises(SpecError, match=r"targets.yaml:\d+: target cp314-abi3: cp39-abi3 is for "
                                        r"the same build and requires_python"):
        targets.load(str(path))


def test_the_default_target_of_a_compile_outside_setup_py_is_by_version():
    header = (GENERATED / "target.h").read_text()
    default = header[header.index("#include <patchlevel.h>"):header.index("#if defined(IBP_TARGET_")]
    assert "#if PY_VERSION_HEX >= 0x030E0000\n#define IBP_TARGET_CP314_ABI3 1\n#else\n" \
           "#define IBP_TARGET_CP39_ABI3 1\n#endif" in default


@pytest.mark.parametrize("edit, message", [
    ("    free_threaded: true\n", "    free_threaded: true\n    limited_api: \"3.14\"\n"),
    ("    requires_python: \"3.14\"\n", "    requires_python: \"3.x\"\n"),
    ("    abi_tag: cp314t\n", "    abi_tags: cp314t\n"),
])
def test_a_wrong_target_is_refused_with_its_file_and_line(tmp_path, edit, message):
    text = (ROOT / "spec" / "targets" / "targets.yaml").read_text()
    head, tail = text.split("  cp314t:\n")
    assert edit in tail
    path = tmp_path / "targets.yaml"
    path.write_text(head + "  cp314t:\n" + tail.replace(edit, message))
    with pytest.raises(SpecError, match=r"spec/targets/targets.yaml:\d+: target cp314t"):
        targets.load(str(path))


def test_an_unknown_method_kind_gets_no_wrapper():
    pytest.importorskip("jinja2", reason="Jinja2 is not installed (make venv-gen)")
    from generator.render import LockedEntries
    locked = LockedEntries()
    assert locked("f", "METH_NOARGS | METH_CLASS") == "f"
    assert locked("g", "METH_O") == "IBP_LOCKED(g)"
    with pytest.raises(ValueError, match="no locked wrapper"):
        locked("h", "METH_FASTCALL")
