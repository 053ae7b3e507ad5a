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

pytestmark = pytest.mark.tooling

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
    assert [t.name for t in loaded] == ["cp39-abi3", "cp314-abi3", "cp314t", "cp315-abi3t"]
    view = runpy.run_path(str(GENERATED / "targets.py"))["TARGETS"]
    assert [(t["name"], t["python_tag"], t["abi_tag"], t["limited_api"], t["free_threaded"],
             t["builds"]) for t in view] == [
        ("cp39-abi3", "cp39", "abi3", "0x03090000", False, ["gil"]),
        # compiled at 3.9's Limited API, plus 3.14's Py_tp_vectorcall (below)
        ("cp314-abi3", "cp314", "abi3", "0x03090000", False, ["gil"]),
        ("cp314t", "cp314", "cp314t", None, True, ["free-threaded"]),
        # PEP 803: one extension for both builds, the wheel tagged for both
        ("cp315-abi3t", "cp315", "abi3.abi3t", "0x030F0000", True, ["gil", "free-threaded"])]
    header = (GENERATED / "target.h").read_text()
    assert "#define Py_LIMITED_API 0x03090000" in header
    assert "PyUnstable_Module_SetGIL((m), Py_MOD_GIL_NOT_USED)" in header
    # vectorcall constructors where CPython has Py_tp_vectorcall (3.14)
    assert [t.name for t in loaded if t.type_vectorcall] == ["cp314-abi3", "cp314t", "cp315-abi3t"]


def test_cp314_abi3_is_3_9s_limited_api_plus_3_14s_vectorcall_slot():
    """Compiled as cp39-abi3 is (Py_INCREF, Py_DECREF, Py_TYPE inline: at
    3.12's Limited API and later they are calls, some 40 instructions each
    on the data path), with the one slot of 3.14's stable ABI it uses,
    which those headers hide: its values, defined before <Python.h>."""
    loaded = {t.name: t for t in targets.load(targets.default_path(SPEC_DIR))}
    assert loaded["cp314-abi3"].limited_api == "3.9"
    assert loaded["cp314-abi3"].slots == ("tp_vectorcall",)
    assert all(not t.slots for n, t in loaded.items() if n != "cp314-abi3")
    block = _target_block("CP314_ABI3")
    assert "#define Py_LIMITED_API 0x03090000\n" in block
    assert "#define IBP_STABLE_ABI 0x030E0000\n" in block
    assert "#define Py_tp_vectorcall 82\n" in block
    assert "#define PY_VECTORCALL_ARGUMENTS_OFFSET ((size_t)1 << (8 * sizeof(size_t) - 1))\n" \
        in block
    assert "#define IBP_TYPE_VECTORCALL 1\n" in block
    for name in ("CP39_ABI3", "CP314T", "CP315_ABI3T"):
        assert "Py_tp_vectorcall" not in _target_block(name)
        assert "IBP_STABLE_ABI" not in _target_block(name)


def _edited(tmp_path, target, following, old, new):
    """A copy of spec/targets/targets.yaml with old replaced by new in the
    section of *target* (the one before *following*)."""
    text = (ROOT / "spec" / "targets" / "targets.yaml").read_text()
    head, tail = text.split(f"  {target}:\n")
    section, rest = tail.split(f"  {following}:\n")
    assert old in section
    path = tmp_path / "targets.yaml"
    path.write_text(f"{head}  {target}:\n{section.replace(old, new)}  {following}:\n{rest}")
    return str(path)


@pytest.mark.parametrize("edit, message", [
    ("    slots: [tp_vectorcall]\n", "    slots: [tp_nonesuch]\n", ),
    ("    slots: [tp_vectorcall]\n", "    slots: tp_vectorcall\n"),
    ("    slots: [tp_vectorcall]\n", "    slots: [tp_vectorcall, tp_vectorcall]\n"),
    # the headers have it already
    ('    limited_api: "3.9"\n', '    limited_api: "3.14"\n'),
    # the wheel would load where the slot is not
    ('    requires_python: "3.14"\n', '    requires_python: "3.13"\n'),
])
def test_a_wrong_slot_is_refused_with_its_file_and_line(tmp_path, edit, message):
    path = _edited(tmp_path, "cp314-abi3", "cp314t", edit, message)
    with pytest.raises(SpecError, match=r"targets.yaml:\d+: target cp314-abi3: .*slot"):
        targets.load(path)


def test_slots_are_for_a_gil_target_of_the_stable_abi(tmp_path):
    text = (ROOT / "spec" / "targets" / "targets.yaml").read_text()
    head, tail = text.split("  cp314t:\n")
    path = tmp_path / "targets.yaml"
    path.write_text(head + "  cp314t:\n" + tail.replace(
        "    free_threaded: true\n", "    free_threaded: true\n    slots: [tp_vectorcall]\n", 1))
    with pytest.raises(SpecError, match=r"targets.yaml:\d+: target cp314t: slots are for a GIL"):
        targets.load(str(path))


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
    ((3, 14), False, "cp314-abi3"), ((3, 15), False, "cp315-abi3t"),
    ((3, 14), True, "cp314t"), ((3, 15), True, "cp315-abi3t"), ((3, 16), True, "cp315-abi3t"),
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
    path.write_text(text.replace('requires_python: "3.14"\n    limited_api: "3.9"\n    slots: '
                                 '[tp_vectorcall]', 'requires_python: "3.9"\n    limited_api: "3.9"'))
    with pytest.raises(SpecError, match=r"targets.yaml:\d+: target cp314-abi3: cp39-abi3 is for "
                                        r"the same build and requires_python"):
        targets.load(str(path))


def test_the_default_target_of_a_compile_outside_setup_py_is_by_version():
    header = (GENERATED / "target.h").read_text()
    default = header[header.index("#include <patchlevel.h>"):header.index("#if defined(IBP_TARGET_")]
    assert "#if PY_VERSION_HEX >= 0x030F0000\n#define IBP_TARGET_CP315_ABI3T 1\n" \
           "#elif PY_VERSION_HEX >= 0x030E0000\n#define IBP_TARGET_CP314_ABI3 1\n#else\n" \
           "#define IBP_TARGET_CP39_ABI3 1\n#endif" in default
    assert "#if PY_VERSION_HEX >= 0x030F0000\n#define IBP_TARGET_CP315_ABI3T 1\n#else\n" \
           "#define IBP_TARGET_CP314T 1\n#endif" in default


@pytest.mark.parametrize("edit, message", [
    ("    free_threaded: true\n", "    free_threaded: true\n    limited_api: \"3.14\"\n"),
    ("    requires_python: \"3.14\"\n", "    requires_python: \"3.x\"\n"),
    ("    abi_tag: cp314t\n", "    abi_tags: cp314t\n"),
])
def test_a_wrong_target_is_refused_with_its_file_and_line(tmp_path, edit, message):
    path = _edited(tmp_path, "cp314t", "cp315-abi3t", edit, message)
    with pytest.raises(SpecError, match=r"spec/targets/targets.yaml:\d+: target cp314t"):
        targets.load(path)


def test_an_unknown_method_kind_gets_no_wrapper():
    pytest.importorskip("jinja2", reason="Jinja2 is not installed (make venv-gen)")
    from generator.render import LockedEntries
    locked = LockedEntries()
    assert locked("f", "METH_NOARGS | METH_CLASS") == "f"
    assert locked("g", "METH_O") == "IBP_LOCKED(g)"
    with pytest.raises(ValueError, match="no locked wrapper"):
        locked("h", "METH_FASTCALL")


@pytest.mark.parametrize("edit, message", [
    ("    free_threaded: true\n", "    free_threaded: false\n"),
    ("    limited_api: \"3.15\"\n", "    limited_api: \"3.14\"\n"),
    ("    abi3t: true\n", "    abi3t: yes please\n"),
])
def test_an_abi3t_target_is_free_threaded_at_3_15_or_later(tmp_path, edit, message):
    text = (ROOT / "spec" / "targets" / "targets.yaml").read_text()
    head, tail = text.split("  cp315-abi3t:\n")
    assert edit in tail
    path = tmp_path / "targets.yaml"
    path.write_text(head + "  cp315-abi3t:\n" + tail.replace(edit, message))
    with pytest.raises(SpecError, match=r"targets.yaml:\d+: target cp315-abi3t: abi3t"):
        targets.load(str(path))


def _target_block(name: str) -> str:
    header = (GENERATED / "target.h").read_text()
    start = header.index(f"#if defined(IBP_TARGET_{name})\n/*") if f"#if defined(IBP_TARGET_{name})\n/*" \
        in header else header.index(f"#elif defined(IBP_TARGET_{name})\n/*")
    return header[start:header.index("\n#el", start)]


def test_abi3t_is_the_stable_abi_with_an_opaque_object_and_nothing_of_the_full_api():
    block = _target_block("CP315_ABI3T")
    assert "#define Py_TARGET_ABI3T 0x030F0000" in block
    assert "#define Py_LIMITED_API 0x030F0000" in block
    assert "#define IBP_FREE_THREADED 1" in block and "#define IBP_OPAQUE_OBJECT 1" in block
    # PEP 793's slot says it, not PyUnstable_Module_SetGIL (not in the ABI)
    assert "#define IBP_DECLARE_GIL(m) 0" in block
    code = re.sub(r"/\*.*?\*/", "", block, flags=re.S)
    assert "PyUnstable" not in code and "PyMutex" not in code
    assert "__atomic_exchange_n" in block
    # the free-threaded target of the full API keeps its own
    full = _target_block("CP314T")
    assert "PyUnstable_IsImmortal" in full and "#define IBP_MUTEX PyMutex" in full
    assert "#define IBP_OPAQUE_OBJECT 0" in full
    for name in ("CP39_ABI3", "CP314_ABI3"):
        assert "#define IBP_OPAQUE_OBJECT 0" in _target_block(name)
        assert "IBP_MUTEX" not in _target_block(name)


def test_the_padded_head_covers_both_3_15_builds_and_is_checked_at_import():
    loaded = {t.name: t for t in targets.load(targets.default_path(SPEC_DIR))}
    # 3.15's free-threaded PyObject, 64-bit: ob_tid 8, ob_flags 2, ob_mutex 1,
    # ob_gc_bits 1, ob_ref_local 4, ob_ref_shared 8, ob_type 8; the GIL's: 16
    assert loaded["cp315-abi3t"].object_head_size == 8 + 2 + 1 + 1 + 4 + 8 + 8
    assert {n for n, t in loaded.items() if t.object_head_size} == {"cp315-abi3t"}
    header = (GENERATED / "target.h").read_text()
    opaque = header[header.index("#if IBP_OPAQUE_OBJECT"):]
    assert "#define PyObject_HEAD " in opaque and "bytes[IBP_OBJECT_HEAD_SIZE]" in opaque
    module = (GENERATED / "module.c.h").read_text()
    export = module[module.index("#if IBP_OPAQUE_OBJECT"):]
    assert '"__basicsize__"' in export and "> IBP_OBJECT_HEAD_SIZE" in export
    assert "PyExc_ImportError" in export


def test_the_module_export_is_generated_per_target():
    module = (GENERATED / "module.c.h").read_text()
    export = module[module.index("#if IBP_OPAQUE_OBJECT"):]
    slots, legacy = export.split("\n#else\n")
    assert "PyMODEXPORT_FUNC PyModExport__ibverbs(void);" in slots
    assert "PySlot_DATA(Py_mod_gil, Py_MOD_GIL_NOT_USED)" in slots
    assert "PySlot_DATA(Py_mod_abi, &abi_info)" in slots
    assert "PyModuleDef" not in slots and "PyInit" not in slots
    assert "PyMODINIT_FUNC PyInit__ibverbs(void);" in legacy
    assert "IBP_DECLARE_GIL(module)" in legacy
    # the module's body is hand-written once, for every target
    source = (ROOT / "ibverbs" / "src" / "module.c").read_text()
    assert "static int ibp_module_exec(PyObject *module)" in source
    assert "PyInit" not in source and "PyModuleDef" not in source


def test_the_tables_keep_weak_references_on_every_free_threaded_target():
    """abi3t has no PyUnstable_TryIncRef: the tables of objects keep weak
    references there, and on cp314t too, so that the one way is tested
    under free threads (cp314t's tiers) where no 3.15t exists."""
    header = (GENERATED / "target.h").read_text()
    free = header[header.index("#if IBP_FREE_THREADED\n/* The tables"):]
    assert "#define IBP_WEAK_TABLES 1" in free[:free.index("#else")]
    assert "#define IBP_WEAK_TABLES 0" in free[free.index("#else"):free.index("#endif")]
    assert "TryIncRef" not in re.sub(r"/\*.*?\*/", "", header, flags=re.S)
