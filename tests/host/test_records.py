"""The data-path types' accessors are generated (spec/datapath/records.yaml
through generator/records.py), not stamped out by hand-written macros:
no accessor macros in ibverbs/src, and one converter per C struct field
(wr_id is converted once for each of struct ibv_send_wr, ibv_recv_wr,
ibv_qp_ex and, read only, ibv_wc)."""
from __future__ import annotations

import pathlib
import re

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "ibverbs" / "src"
GENERATED = ROOT / "generated"


def _defines(text: str):
    """(name, body) of every #define, continuation lines joined."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"\s*#\s*define\s+(\w+)", lines[i])
        if not m:
            i += 1
            continue
        body = lines[i]
        while body.endswith("\\") and i + 1 < len(lines):
            i += 1
            body = body[:-1] + "\n" + lines[i]
        yield m.group(1), body
        i += 1


def _is_accessor_macro(body: str) -> bool:
    defines_function = re.search(r"\)\s*\n?\s*\{", body) and "PyObject" in body
    table_entry = re.search(r"\{\s*#\s*\w+\s*,", body)   # {#field, getter, ...}
    return bool(defines_function or table_entry)


def test_no_hand_written_accessor_macros():
    found = [f"{path.name}: #define {name}"
             for path in sorted(SRC.glob("*.[ch]"))
             for name, body in _defines(path.read_text(encoding="utf-8"))
             if _is_accessor_macro(body)]
    assert found == []


def test_the_check_finds_an_accessor_macro():
    macro = ("#define U64_FIELD(Type, field)                      \\\n"
             "    static PyObject *Type##_get_##field(PyObject *op, void *c) \\\n"
             "    {                                               \\\n"
             "        return PyLong_FromUnsignedLongLong(0);      \\\n"
             "    }\n"
             "#define GETSET(f, doc) {#f, get_##f, set_##f, doc, NULL}\n"
             "#define STACK_WRS 32\n")
    assert [name for name, body in _defines(macro) if _is_accessor_macro(body)] == [
        "U64_FIELD", "GETSET"]


def _converters(direction: str, field: str):
    text = "".join(p.read_text(encoding="utf-8") for p in sorted(GENERATED.glob("*.h")))
    return re.findall(rf"^(ibp_\w+)_{field}_{direction}\(", text, re.M)


def test_wr_id_is_converted_once_per_c_struct():
    assert sorted(_converters("from_py", "wr_id")) == ["ibp_qp_ex", "ibp_recv_wr", "ibp_send_wr"]
    assert sorted(_converters("to_py", "wr_id")) == ["ibp_qp_ex", "ibp_recv_wr", "ibp_send_wr", "ibp_wc"]


def test_only_the_converters_convert_data_path_fields():
    # every type's file (SendWR, PostListEntry, ...) calls the converters
    # of generated/records.h instead of converting a field itself
    for path in sorted(GENERATED.glob("*.c.h")):
        text = path.read_text(encoding="utf-8")
        if "spec/datapath/records.yaml" in text:
            assert "ibp_conv_u64(" not in text, path.name
    for path in sorted(SRC.glob("*.c")):
        assert not re.search(r'conv\w*\([^;]*"wr_id"', path.read_text(encoding="utf-8")), path.name


def test_a_spec_mistake_is_named_with_its_file_and_line(tmp_path):
    import pytest
    pytest.importorskip("clang.cindex", reason="libclang is not installed")
    from generator import parse, records
    from generator.spec import SpecError
    text = (ROOT / "spec" / "datapath" / "records.yaml").read_text(encoding="utf-8")
    text = text.replace("      lkey: {}\n", "      lkey: {}\n      no_such: {}\n", 1)
    (tmp_path / "datapath").mkdir()
    (tmp_path / "datapath" / "records.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(SpecError, match=r"^spec/datapath/records\.yaml:\d+: "
                                        r"struct ibv_sge has no member 'no_such'"):
        records.build(parse.parse(None), str(tmp_path))


def test_a_stub_that_is_no_signature_is_named_with_its_file_and_line(tmp_path):
    import pytest
    pytest.importorskip("clang.cindex", reason="libclang is not installed")
    from generator import parse, records
    from generator.spec import SpecError
    text = (ROOT / "spec" / "datapath" / "records.yaml").read_text(encoding="utf-8")
    text = text.replace('stub: "(self, opcode: int, /) -> int"', 'stub: "int"', 1)
    (tmp_path / "datapath").mkdir()
    (tmp_path / "datapath" / "records.yaml").write_text(text, encoding="utf-8")
    with pytest.raises(SpecError, match=r"^spec/datapath/records\.yaml:\d+: "
                                        r"WCBuffer\.count_opcode: stub must be a typed signature"):
        records.build(parse.parse(None), str(tmp_path))


def _build_changed(tmp_path, old: str, new: str):
    """records.build over the spec with old replaced by new (once)."""
    from generator import parse, records
    text = (ROOT / "spec" / "datapath" / "records.yaml").read_text(encoding="utf-8")
    assert old in text, old
    (tmp_path / "datapath").mkdir()
    (tmp_path / "datapath" / "records.yaml").write_text(text.replace(old, new, 1),
                                                        encoding="utf-8")
    return records.build(parse.parse(None), str(tmp_path))


# (spec text, its replacement, the error after "records.yaml:<line>: ")
SPEC_MISTAKES = {
    "sequence_key": ("set_item: ibp_PostList_ass_item", "set_items: ibp_PostList_ass_item",
                     r"PostList\.sequence: unknown key 'set_items'"),
    "sequence_without_item": ("item: ibp_PostList_item, ", "",
                              r"PostList\.sequence: needs length and item"),
    "hand_traverse_beside_refs": ("    traverse: ibp_PostList_traverse\n",
                                  "    traverse: ibp_PostList_traverse\n    refs: [x]\n",
                                  r"PostList: a hand-written traverse is for a collected type "
                                  r"without refs"),
    "hand_clear_without_traverse": ("    traverse: ibp_PostList_traverse\n", "",
                                    r"PostList: a hand-written clear needs a hand-written "
                                    r"traverse"),
    "field_without_storage": ("      kind: {hand: {get: ibp_PostList_get_kind}",
                              "      wr_id: {field: send_wr.wr_id}\n"
                              "      kind: {hand: {get: ibp_PostList_get_kind}",
                              r"PostList: a field attribute needs a storage"),
    "constructor_key": ("keyword_only: [release_gil]", "keyword: [release_gil]",
                        r"PostList\.new: unknown key 'keyword'"),
    "constructor_requiring_too_many": ("new: {args: [wrs], required: 1,",
                                       "new: {args: [wrs], required: 2,",
                                       r"PostList\.new: required must be 0\.\.1"),
    "constructor_naming_one_twice": ("keyword_only: [raise_on_error]", "keyword_only: [capacity]",
                                     r"WCBuffer\.new: the argument names must be distinct"),
    "union_member_in_two_unions": ("tso: {path: tso,", "rdma: {path: tso,",
                                   r"send_wr: a member name in two unions"),
    "field_in_two_unions": ("invalidate_rkey: {union: {inv: invalidate_rkey}}",
                            "invalidate_rkey: {union: {inv: invalidate_rkey, rdma: wr.rdma.rkey}}",
                            r"send_wr\.invalidate_rkey: members of two unions \(data, wr\)"),
    # a field's `convert:` names a converter kind (generator/converters/record_fields.py),
    # which says what C type it takes
    "unknown_convert": ("imm_data: {convert: be32, union", "imm_data: {convert: be23, union",
                        r"send_wr\.imm_data: unknown convert"),
    "be32_on_another_type": ("      invalidated_rkey: {}\n", "      invalidated_rkey: {convert: be32}\n",
                             r"wc\.invalidated_rkey: convert: be32 on a uint32_t"),
    # a vectorcall constructor stands in for tp_new and the generated tp_init
    "vectorcall_beside_new": ("    new: {args: [capacity], keyword_only: [raise_on_error]}",
                              "    vectorcall: true\n"
                              "    new: {args: [capacity], keyword_only: [raise_on_error]}",
                              r"WCBuffer\.vectorcall: needs `init: keywords` or an init argument "
                              r"mapping, and no `new`"),
    "vectorcall_not_a_flag": ("    init: keywords\n    vectorcall: true\n",
                              "    init: keywords\n    vectorcall: yes please\n",
                              r"SendWR\.vectorcall: true or false"),
    "field_of_no_union": ("invalidate_rkey: {union: {inv: invalidate_rkey}}",
                          "invalidate_rkey: {union: {inval: invalidate_rkey}}",
                          r"send_wr\.invalidate_rkey: inval is not a member of a union of send_wr"),
}


@pytest.mark.parametrize("case", sorted(SPEC_MISTAKES))
def test_a_type_spec_mistake_is_named_with_its_file_and_line(tmp_path, case):
    pytest.importorskip("clang.cindex", reason="libclang is not installed")
    from generator.spec import SpecError
    old, new, message = SPEC_MISTAKES[case]
    with pytest.raises(SpecError, match=r"^spec/datapath/records\.yaml:\d+: " + message):
        _build_changed(tmp_path, old, new)


def test_postlist_shell_is_generated():
    """PostList's slots and tables come from the spec, not from postlist.c."""
    text = (SRC / "postlist.c").read_text(encoding="utf-8")
    for hand in ("PyType_Slot", "PyType_Spec", "PyGetSetDef", "{Py_tp_"):
        assert hand not in text, hand
    gen = (ROOT / "generated" / "postlist.c.h").read_text(encoding="utf-8")
    assert "{Py_sq_ass_item, (void *)IBP_LOCKED(ibp_PostList_ass_item)}" in gen
    assert "Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC," in gen
    # and the constructors' argument parsing (PostList's, WCBuffer's) too
    for name in ("postlist", "wcbuffer"):
        assert "PyArg_Parse" not in (SRC / f"{name}.c").read_text(encoding="utf-8"), name
        gen = (ROOT / "generated" / f"{name}.c.h").read_text(encoding="utf-8")
        assert "_new_parser, args, kwargs, v) < 0" in gen, name


def test_generated_c_states_no_offsets_of_the_generating_machine():
    """Generated C holds for every target it compiles for: no assertion
    compares an offsetof with a number the IR took from the host (struct
    ibv_qp_ex's wr_id is at 168 on x86_64, not on aarch64).  `make test`
    cross-builds the aarch64 wheel to prove it compiles there."""
    for path in sorted(GENERATED.glob("*.h")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"offsetof\([^()]*\)\s*==\s*\d", text), path.name
    text = (GENERATED / "records.h").read_text(encoding="utf-8")
    assert "_Generic(((struct ibv_qp_ex *)0)->wr_id, uint64_t: 1, default: 0)" in text


def test_the_field_converters_are_the_registry_s_kinds():
    """Each records.yaml field gets the converter of its `convert:` kind from
    the shared registry (none: an int): imm_data's is the be32 one, whose C
    goes through generator/ctext.py like the verb converters' be32."""
    pytest.importorskip("clang.cindex", reason="libclang is not installed")
    from generator import parse, records
    from generator.converters import RECORD_FIELDS
    from generator.paths import SPEC_DIR
    m = records.build(parse.parse(None), SPEC_DIR)
    by_key = {r.key: r for r in m.records}
    kinds = {f"{r.key}.{name}": c.kind for r in m.records for name, c in r.converters.items()}
    assert {k for k, kind in kinds.items() if kind == "be32"} == {"send_wr.imm_data",
                                                                   "wc.imm_data"}
    assert set(kinds.values()) == {"int", "be32"}
    imm = by_key["send_wr"].converters["imm_data"]
    assert isinstance(imm, RECORD_FIELDS["be32"])
    assert imm.from_py("ibp_conv_u64")[-2] == "*out = htobe32((uint32_t)x);"
    wc_imm = by_key["wc"].converters["imm_data"]
    assert "be32toh(v)" in wc_imm.to_py("ibp_count_result")[0]


#: the byte-order conversions C knows, each spelled in the generator once
BYTE_ORDER = ("htobe32(", "be32toh(", "htonl(", "ntohl(")


def test_each_byte_order_conversion_is_written_once():
    """generator/ctext.py spells the be32 conversions, once each; the verb
    converters (an imm_data argument, a be32 result), the data-path field
    converters and the templates all call it, so the generated C has one
    spelling (no ntohl beside be32toh)."""
    found = {s: [] for s in BYTE_ORDER}
    sources = sorted((ROOT / "generator").rglob("*.py")) + sorted((ROOT / "templates").glob("*"))
    for path in sources:
        text = path.read_text(encoding="utf-8")
        for s in BYTE_ORDER:
            found[s] += [str(path.relative_to(ROOT))] * text.count(s)
    assert found == {"htobe32(": ["generator/ctext.py"], "be32toh(": ["generator/ctext.py"],
                     "htonl(": [], "ntohl(": []}
    for path in sorted(GENERATED.glob("*.h")):
        text = path.read_text(encoding="utf-8")
        assert "htonl(" not in text and "ntohl(" not in text, path.name


def test_each_int_to_python_conversion_is_written_once():
    """C integers become Python ints in generator/ctext.py alone (int_to_py,
    wide_int_to_py); struct getters, attributes, results and the data-path
    fields call it.  Templates spell none."""
    spellings = ("PyLong_FromLong(", "PyLong_FromUnsignedLong(", "PyLong_FromLongLong(",
                 "PyLong_FromUnsignedLongLong(")
    found = {}
    sources = sorted((ROOT / "generator").rglob("*.py")) + sorted((ROOT / "templates").glob("*"))
    for path in sources:
        text = path.read_text(encoding="utf-8")
        for s in spellings:
            if s in text:
                found.setdefault(s, []).extend([str(path.relative_to(ROOT))] * text.count(s))
    assert found == {s: ["generator/ctext.py"] for s in spellings}
