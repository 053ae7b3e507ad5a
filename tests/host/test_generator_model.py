"""The generator's shape (issue #38): the spec is read once into typed
objects that the later stages read alone, one model root holds verbs.h's
classes, the data-path types and rdma_cm's as parts of one family, one
render entry writes every generated file, and the model dumps to stable
JSON."""
from __future__ import annotations

import dataclasses
import inspect
import json
import os
import shutil
import textwrap

import pytest

pytest.importorskip("clang.cindex", reason="libclang is not installed (pip install libclang==18.1.1)")

from generator import assemble, model as gmodel, model_json, rdmacm, render, spec, stubs  # noqa: E402
from generator.model_base import PartModel  # noqa: E402
from generator.paths import GENERATED_DIR, SPEC_DIR, TEMPLATE_DIR  # noqa: E402
from generator.spec_types import ParamSpec  # noqa: E402

pytestmark = pytest.mark.tooling


@pytest.fixture(scope="module")
def whole(irs):
    return assemble.build(irs, SPEC_DIR)


# --- one model root, one family -------------------------------------------------


def test_the_model_has_one_root_holding_every_part(whole):
    assert type(whole) is gmodel.Model
    assert isinstance(whole.verbs, gmodel.HeaderModel)
    assert isinstance(whole.rdmacm, gmodel.HeaderModel)
    assert type(whole.records).__name__ == "RecordsModel"
    assert whole.targets and all(dataclasses.is_dataclass(t) for t in whole.targets)
    # the parts are one family: each names its IR and spec files the same way
    assert all(isinstance(p, PartModel) for p in whole.parts) and len(whole.parts) == 3
    for part in whole.parts:
        assert part.ir.source and len(part.spec.sha256) == 64 and part.spec.files
    assert whole.records.spec.files == ["spec/datapath/records.yaml"]
    assert whole.rdmacm.spec.files[0].startswith("spec/rdmacm/")


def test_there_is_one_public_render_entry():
    public = [name for name, fn in inspect.getmembers(render, inspect.isfunction)
              if name.startswith("render") and fn.__module__ == render.__name__]
    assert public == ["render"]
    assert list(inspect.signature(render.render).parameters)[0] == "model"
    # the stub module makes data; the render entry renders it with the rest
    assert not hasattr(stubs, "render")


def test_the_one_entry_renders_every_committed_file(whole, irs):
    if irs[0].sha256 not in open(os.path.join(GENERATED_DIR, "loader.c.h")).read():
        pytest.skip("these headers are not the baseline generated/ was made from")
    files = render.render(whole, TEMPLATE_DIR)
    on_disk = {n for n in os.listdir(GENERATED_DIR) if n.endswith((".c.h", ".h", ".py", ".pyi"))}
    assert set(files) == on_disk
    for name, text in files.items():
        assert open(os.path.join(GENERATED_DIR, name), encoding="utf-8").read() == text, name


def test_a_part_renders_its_own_files_alone(whole):
    verbs_only = render.render(gmodel.Model(verbs=whole.verbs), TEMPLATE_DIR)
    cm_only = render.render(gmodel.Model(rdmacm=whole.rdmacm), TEMPLATE_DIR)
    records_only = render.render(gmodel.Model(records=whole.records), TEMPLATE_DIR)
    assert "loader.c.h" in verbs_only and "_ibverbs.pyi" not in verbs_only
    assert set(cm_only) == {"rdmacm_enums.py", "rdmacm_loader.c.h", "rdmacm_methods.c.h",
                            "rdmacm_objects.h"}
    assert "records.h" in records_only and "sge.c.h" in records_only
    everything = render.render(whole, TEMPLATE_DIR)
    assert set(verbs_only) | set(cm_only) | set(records_only) | {
        "_ibverbs.pyi", "target.h", "targets.py"} == set(everything)


# --- the spec is read once ----------------------------------------------------------


def _no_mapping_of_the_loader(obj, path, seen):
    """Paths under obj where a loaded YAML mapping (spec.Node) survives."""
    if id(obj) in seen or obj is None or isinstance(obj, (str, int, float, bool)):
        return []
    seen.add(id(obj))
    if isinstance(obj, spec.Node):
        return [path]
    found = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            found += _no_mapping_of_the_loader(v, f"{path}[{k!r}]", seen)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found += _no_mapping_of_the_loader(v, f"{path}[{i}]", seen)
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            found += _no_mapping_of_the_loader(getattr(obj, f.name), f"{path}.{f.name}", seen)
    return found


@pytest.mark.parametrize("spec_dir", [SPEC_DIR, rdmacm.spec_dir(SPEC_DIR)])
def test_handles_methods_and_docs_are_typed_objects_after_load(spec_dir):
    loaded = spec.load(spec_dir)
    assert loaded.handles and all(type(h) is spec.Handle for h in loaded.handles)
    methods = loaded.all_methods()
    assert methods and all(type(m) is spec.Method for m in methods)
    assert not any(hasattr(x, "node") for x in loaded.handles + methods)
    params = [p for m in methods for p in (m.params or {}).values() if not isinstance(p, str)]
    if spec_dir == SPEC_DIR:
        assert params and all(type(p) is ParamSpec for p in params)
        assert loaded.doc_methods and all(dataclasses.is_dataclass(e)
                                          for e in loaded.doc_methods.values())
    # no YAML mapping is left anywhere under the handles and methods
    assert _no_mapping_of_the_loader(loaded.handles + loaded.functions, "spec", set()) == []


def test_the_data_path_types_spec_is_read_once_into_typed_objects(whole):
    """spec/datapath/records.yaml has no loader of its own beside the model
    stage any more: generator/records_spec.py reads it, records.py builds."""
    from generator import records_spec
    loaded = records_spec.load(SPEC_DIR)
    assert isinstance(loaded, spec.SpecFiles) and loaded.files == ["spec/datapath/records.yaml"]
    assert loaded.records and loaded.types
    assert all(dataclasses.is_dataclass(x) for x in loaded.records + loaded.types)
    assert _no_mapping_of_the_loader(loaded, "records", set()) == []
    assert whole.records.spec.sha256 == loaded.sha256
    send_wr = next(r for r in loaded.records if r.key == "send_wr")
    assert send_wr.ctype == "struct ibv_send_wr" and send_wr.location.line > 0


def test_a_typed_handle_keeps_what_the_spec_says(whole):
    loaded = whole.verbs.spec
    qp = loaded.handle("QP")
    assert qp.ctype == "struct ibv_qp" and qp.destroy == "ibv_destroy_qp"
    assert {p.name: (p.cls, p.optional) for p in qp.parents}["pd"] == ("PD", False)
    qpex = loaded.handle("QPEx")
    assert qpex.base is not None and qpex.base.cls == "QP" and qpex.base.upcast is None
    cqex = loaded.handle("CQEx")
    assert cqex.base.cls == "CQ" and cqex.base.upcast == "ibv_cq_ex_to_cq"
    post_send = next(m for m in qp.methods if m.name == "post_send")
    assert post_send.location.file == "spec/qp.yaml" and post_send.location.line > 0


def _spec_copy(tmp_path, extra):
    d = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, d)
    (d / "zz.yaml").write_text(textwrap.dedent(extra))
    return str(d)


def test_a_mistake_in_a_handle_is_named_by_file_and_line_after_load(tmp_path, irs):
    from generator import builder
    d = _spec_copy(tmp_path, """\
        handles:
          Odd:
            ctype: struct ibv_pd
            parents:
              pd: NoSuchClass
        """)
    loaded = spec.load(d)         # the shape is fine: the builder finds the class unknown
    with pytest.raises(spec.SpecError, match=r"spec/zz\.yaml:5: Odd: unknown parent class NoSuchClass"):
        builder.build(irs[0], loaded)


def test_a_mistake_in_a_method_return_is_named_by_file_and_line_at_load(tmp_path):
    d = _spec_copy(tmp_path, """\
        functions:
          odd:
            verb: ibv_get_device_list
            params: {num_devices: scratch}
            errors: "null"
            returns: {new: PD, parnets: {}}
        """)
    with pytest.raises(spec.SpecError, match=r"spec/zz\.yaml:6: odd: returns: unknown key 'parnets'"):
        spec.load(d)


def test_a_mistake_in_a_parameter_is_named_by_its_own_line(tmp_path, irs):
    from generator import builder
    d = _spec_copy(tmp_path, """\
        methods:
          PD:
            odd_alloc:
              verb: ibv_alloc_mw
              params:
                pd: self
                type:
                  arg: mw_type
                  hint: 7
              errors: "null"
              doc: odd
        """)
    with pytest.raises(spec.SpecError, match=r"spec/zz\.yaml:9: PD\.odd_alloc: parameter type \(int\): "
                                             r"unknown key 'hint'"):
        builder.build(irs[0], spec.load(d))


# --- the model as JSON ----------------------------------------------------------------


def test_the_model_dumps_to_stable_json(whole, irs):
    text = model_json.dump(whole)
    again = model_json.dump(assemble.build(irs, SPEC_DIR))
    assert text == again
    plain = json.loads(text)
    assert plain["__type__"] == "Model"
    assert set(plain) == {"__type__", "verbs", "records", "rdmacm", "targets"}
    assert plain["verbs"]["ir"] == {"source": irs[0].source, "sha256": irs[0].sha256}
    qp = next(h for h in plain["verbs"]["handles"] if h["name"] == "QP")
    assert qp["ctype"] == "struct ibv_qp" and qp["__type__"] == "HandleModel"
    assert " object at 0x" not in text     # nothing printed by identity


def test_the_model_command_prints_the_json(tmp_path, whole):
    from generator.cli import main
    out = tmp_path / "model.json"
    prefix = os.environ.get("RDMA_CORE")
    assert main((["--rdma-core", prefix] if prefix else []) + ["model", "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == model_json.dump(whole)


# --- the free-threaded wrappers are data the templates render ---------------------------


def test_the_locked_wrappers_are_data_the_templates_render(whole):
    """render.py gathers what a file's tables name (a LockedFile); the
    header template declares the wrappers and _locked_file.j2 defines them
    at the end: no C text is spliced into a rendered file."""
    assert not hasattr(render.LockedEntries, "wrap")
    locked = render.LockedEntries("qp", "SendWRObject")
    assert locked("ibp_f", "METH_O") == "IBP_LOCKED(ibp_f)"
    wrappers = locked.file()
    assert wrappers == render.LockedFile((render.LockedEntry("ibp_f", "o"),), "qp", "SendWRObject")
    assert dataclasses.is_dataclass(wrappers)
    text = render.render(gmodel.Model(verbs=whole.verbs), TEMPLATE_DIR)["pd.c.h"]
    header_end = text.index("*/\n") + 3
    assert text[header_end:].startswith("\n#if IBP_FREE_THREADED\n")
    assert "static PyObject *PD_close__locked(" in text[:text.index("#endif", header_end)]
    assert text.rstrip().endswith("#endif")
    assert text.count("PD_close__locked(PyObject *self") == 2    # declared, then defined


# --- the converters know the targets their C serves -----------------------------------


def test_the_converters_context_carries_the_build_targets(whole, irs):
    """Every target is built from the same generated C: a converter is
    made knowing the whole set (ctx.targets, generator/converters/
    registry.py), and today none emits differently for it."""
    from generator import builder, methods
    assert whole.targets and any(t.free_threaded for t in whole.targets)
    b = builder.Builder(irs[0], whole.verbs.spec, whole.targets)
    post_send = next(m for m in whole.verbs.spec.handle("QP").methods if m.name == "post_send")
    ctx = methods.MethodBuilder(b, post_send, "QP.post_send", "QP_post_send")
    assert ctx.targets == tuple(whole.targets)
    without = builder.build(irs[0], whole.verbs.spec)
    assert render.render(gmodel.Model(verbs=without), TEMPLATE_DIR) == \
        render.render(gmodel.Model(verbs=whole.verbs), TEMPLATE_DIR)


def test_no_stage_after_the_loaders_reads_a_yaml_mapping(irs, monkeypatch):
    """Every read of a loaded YAML mapping (spec.Node) happens inside a
    loader (spec.load, generator/records_spec.py, generator/targets.py):
    building the whole model and rendering it read none."""
    from generator import records, records_spec, targets
    inside = {"loaders": 0}
    reads = []

    def counted(name):
        original = getattr(dict, name)

        def read(self, *args, **kwargs):
            if not inside["loaders"]:
                caller = inspect.stack()[1]
                reads.append(f"{os.path.relpath(caller.filename)}:{caller.lineno}")
            return original(self, *args, **kwargs)
        return read

    def loader(original):
        def load(*args, **kwargs):
            inside["loaders"] += 1
            try:
                return original(*args, **kwargs)
            finally:
                inside["loaders"] -= 1
        return load

    for name in ("__getitem__", "get", "__contains__", "items", "keys", "values", "__iter__"):
        monkeypatch.setattr(spec.Node, name, counted(name), raising=False)
    monkeypatch.setattr(spec, "load", loader(spec.load))
    monkeypatch.setattr(records, "load", loader(records_spec.load))
    monkeypatch.setattr(targets, "load", loader(targets.load))
    model = assemble.build(irs, SPEC_DIR)
    files = render.render(model, TEMPLATE_DIR)
    assert files and model.verbs.handles and model.records.types
    assert sorted(set(reads)) == []
