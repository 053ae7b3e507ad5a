"""The API reference (`make docs`, docs/): it builds without a warning and
lists every public name of the package (issue #15, point 1), and every
public member has a docstring (issue #25, point 5)."""
from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import pathlib
import re
import subprocess
import sys
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

pytest.importorskip("sphinx")
pytest.importorskip("furo")
pytest.importorskip("myst_parser")
ib = pytest.importorskip("ibverbs")

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
import ibverbs_api  # noqa: E402


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The HTML site `make docs` builds (-W -n: any warning fails)."""
    out = tmp_path_factory.mktemp("docs")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "--keep-going", "-q",
                           "-b", "html", str(ROOT / "docs"), str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def inventory(site):
    """{name: role} of everything the built reference documents."""
    from sphinx.util.inventory import InventoryFile

    out = site
    with open(out / "objects.inv", "rb") as f:
        inv = InventoryFile.load(f, "", lambda base, uri: uri)
    items = inv.data.items() if hasattr(inv, "data") else inv.items()
    return {name: role for role, entries in items for name in entries}


def _public_names():
    names = []
    for name in ibverbs_api.public_names():
        obj = getattr(ib, name)
        names.append(f"ibverbs.{name}")
        if isinstance(obj, type) and not issubclass(obj, BaseException):
            members = ([m.name for m in obj] if issubclass(obj, enum.Enum)
                       else [m for m in vars(obj) if not m.startswith("_")])
            names += [f"ibverbs.{name}.{m}" for m in members]
    import ibverbs.aio
    import ibverbs.cm
    import ibverbs.cuda

    names += [f"ibverbs.cm.{n}" for n in ibverbs.cm.__all__
              if not hasattr(ib, n)]                      # the C classes are at top level
    names += [f"ibverbs.aio.{n}" for n in ("wait", "completions", "async_event", "async_events")]
    names += [f"ibverbs.cuda.{n}" for n in ibverbs.cuda.__all__]
    return names


def test_every_public_name_is_in_a_group():
    assert ibverbs_api._ungrouped() == []


def test_the_reference_lists_every_public_name(inventory):
    missing = [n for n in _public_names() if n not in inventory]
    assert not missing, f"not in the reference: {missing}"


def test_there_is_a_page_per_cli_command(inventory):
    from ibverbs._cli import build_parser

    parser = build_parser()
    (sub,) = parser._subparsers._group_actions
    pages = {n for n, role in inventory.items() if role == "std:doc"}
    for command in sub.choices:
        assert f"cli/{command}" in pages
    for guide in ("guides/quickstart", "guides/safety", "guides/torch", "guides/differences",
                  "guides/chores", "examples"):
        assert guide in pages


# --- every public member has a docstring (issue #25, point 5) -----------------

_DESCRIPTORS = (property, types.FunctionType, types.BuiltinFunctionType,
                types.GetSetDescriptorType, types.MethodDescriptorType,
                types.ClassMethodDescriptorType, types.WrapperDescriptorType)


def _has_doc(obj) -> bool:
    return bool((getattr(obj, "__doc__", None) or "").strip())


@functools.lru_cache(maxsize=None)
def _attr_docs(modname: str) -> dict:
    """The ``#:`` doc-comments of a module's attributes, as Sphinx reads them."""
    from sphinx.pycode import ModuleAnalyzer

    try:
        return ModuleAnalyzer.for_module(modname).find_attr_docs()
    except Exception:     # a C module: no source
        return {}


def _in_attributes_section(klass, name: str) -> bool:
    """A Google-style ``Attributes:`` entry of the class docstring (napoleon)."""
    doc = inspect.cleandoc(klass.__doc__ or "")
    m = re.search(r"^Attributes:\n((?:[ \t]+.*\n?|\n)*)", doc, re.M)
    return bool(m and re.search(rf"^[ \t]+{re.escape(name)}( \(.*\))?:", m.group(1), re.M))


def _member_documented(klass, name: str, raw) -> bool:
    if isinstance(raw, (classmethod, staticmethod)):
        return _has_doc(raw.__func__)
    if isinstance(raw, types.MemberDescriptorType):        # a __slots__ entry
        slots = getattr(klass, "__slots__", ())
        if isinstance(slots, dict) and str(slots.get(name) or "").strip():
            return True
    elif isinstance(raw, _DESCRIPTORS) or callable(raw):
        return _has_doc(raw)
    modules = {m for m in sys.modules if m == "ibverbs" or m.startswith("ibverbs.")}
    return (any((klass.__qualname__, name) in _attr_docs(m) for m in modules)
            or _in_attributes_section(klass, name))


def _public_members():
    """(label, undocumented?) of every public object of the package and every
    public member of its classes (own and inherited from ibverbs classes,
    dataclass fields included); enum members are values, not members."""
    import ibverbs.aio
    import ibverbs.cm
    import ibverbs.cuda

    objects = [(f"ibverbs.{n}", getattr(ib, n)) for n in ibverbs_api.public_names()]
    objects += [(f"ibverbs.cm.{n}", getattr(ibverbs.cm, n)) for n in ibverbs.cm.__all__
                if not hasattr(ib, n)]
    objects += [(f"ibverbs.aio.{n}", getattr(ibverbs.aio, n))
                for n in ("wait", "completions", "async_event", "async_events")]
    objects += [(f"ibverbs.cuda.{n}", getattr(ibverbs.cuda, n)) for n in ibverbs.cuda.__all__
                if callable(getattr(ibverbs.cuda, n))]
    for label, obj in objects:
        yield label, _has_doc(obj)
        if not isinstance(obj, type) or issubclass(obj, enum.Enum):
            continue
        members = {}
        for klass in reversed(obj.__mro__):
            if not klass.__module__.startswith("ibverbs"):
                continue
            for n, raw in vars(klass).items():
                if not n.startswith("_"):
                    members[n] = (klass, raw)
            if dataclasses.is_dataclass(klass):
                for f in dataclasses.fields(klass):
                    members.setdefault(f.name, (klass, None))
        for n, (klass, raw) in members.items():
            yield f"{label}.{n}", _member_documented(klass, n, raw)


def test_every_public_member_has_a_docstring():
    members = list(_public_members())
    assert len(members) > 700            # the enumeration found the API
    missing = [label for label, ok in members if not ok]
    assert not missing, f"{len(missing)} public members without a docstring: {missing}"


def test_every_struct_field_says_what_it_is():
    """The fields of the query results come from spec/docs.yaml (docs.fields)
    through the generator: a real sentence, not a placeholder."""
    for cls in (ib.PortAttr, ib.DeviceAttr, ib.DeviceAttrEx, ib.QPAttr, ib.QPCap, ib.AHAttr,
                ib.QPInitAttr, ib.SRQAttr, ib.GidEntry):
        for name, raw in vars(cls).items():
            if isinstance(raw, types.GetSetDescriptorType):
                assert len(raw.__doc__.split()) >= 3, f"{cls.__name__}.{name}: {raw.__doc__!r}"
    assert "4.096 us * 2**timeout" in ib.QPAttr.timeout.__doc__
    assert "SGE" in ib.MR.lkey.__doc__ and "peer" in ib.MR.rkey.__doc__
    assert "PortState" in ib.PortAttr.state.__doc__



# --- signatures and attribute texts as a reader sees them (issue #25, point 5) --

def _signatures(site) -> dict:
    """{object id: its signature as text} of every page of the reference."""
    import html

    sigs = {}
    for page in (site / "api").glob("*.html"):
        for m in re.finditer(r'<dt class="sig sig-object py" id="([^"]+)">(.*?)</dt>',
                             page.read_text(), re.S):
            text = html.unescape(re.sub(r"<[^>]+>", "", m.group(2)))
            sigs[m.group(1)] = " ".join(text.replace("\u00b6", "").split())
    return sigs


def test_signatures_show_types_and_defaults_by_name(site):
    sigs = _signatures(site)
    assert "qp_type: QPType | int = QPType.RC" in sigs["ibverbs.QPInitAttr"]
    assert "send_cq: CQ | None" in sigs["ibverbs.QPInitAttr"]
    assert "attr_mask: QPAttrMask = QPAttrMask.STATE | QPAttrMask.CUR_STATE | " in sigs["ibverbs.QP.query"]
    assert "QPAttrMask.DEST_QPN)" in sigs["ibverbs.QP.query"]
    assert "→ tuple[dict[str, Any], QPCap]" in sigs["ibverbs.QP.query"]
    assert "qp_type: QPType = QPType.RC" in sigs["ibverbs.PD.create_qp_ex"]
    assert "send_flags: SendFlags = SendFlags.SIGNALED" in sigs["ibverbs.MWBind"]
    assert "gid_type: GIDType | None = GIDType.ROCE_V2" in sigs["ibverbs.Context.find_gid"]
    assert "CreateCQWCFlags.WITH_BYTE_LEN | " in sigs["ibverbs.Context.create_cq_ex"]
    assert "type: FlowAttrType = FlowAttrType.NORMAL" in sigs["ibverbs.FlowAttr"]
    # the docstrings (help(), the Args sections) say the same
    assert "Default: QPType.RC." in ib.PD.create_qp_ex.__doc__
    assert "Default: CreateCQWCFlags.WITH_BYTE_LEN | " in ib.Context.create_cq_ex.__doc__
    assert "qp_type=2" in ib.PD.create_qp_ex.__text_signature__   # inspect evaluates it
    # an enum or flag argument is typed with its class, not int (issue 36)
    enum_typed = [f"{oid}: {m.group(0)}" for oid, sig in sigs.items() if "(" in sig
                  for m in re.finditer(r"\b(\w+): int\b", sig.split("(", 1)[1])
                  if m.group(1) in {a.rsplit(".", 1)[-1] for a in ibverbs_api.ARG_ENUMS}
                  and ibverbs_api.enum_typed(oid.split(".")[1] if oid.count(".") > 1 else "",
                                             m.group(1), "int") != "int"]
    assert not enum_typed, enum_typed
    # no enum or flag argument keeps a bare number (0 is "none" for a flag)
    enum_args = {a.rsplit(".", 1)[-1] for a in ibverbs_api.ARG_ENUMS}
    bare = [f"{oid}: {m.group(0)}" for oid, sig in sigs.items()
            for m in re.finditer(r"\b(\w+)(?:: [^=,()]+)? = (-?\d+)\b", sig)
            if m.group(1) in enum_args and m.group(2) != "0"]
    assert not bare, bare
    # every method of a generated class shows its types (from the stubs)
    untyped = [oid for oid, sig in sigs.items() if oid.startswith(("ibverbs.QP.", "ibverbs.PD."))
               and "(" in sig and "→" not in sig and not oid.endswith("__init__")]
    assert not untyped, untyped


def test_the_named_defaults_are_the_values(site):
    """What a signature shows evaluates to the default the extension uses."""
    import os

    ns = {n: getattr(ib, n) for n in dir(ib) if not n.startswith("_")}
    ns["os"] = os
    for owner, arg, value in (("QP", "attr_mask", 0x1FFFFF), ("Context", "wc_flags", 127),
                              ("PD", "qp_type", 2), ("Context", "oflags", os.O_CREAT),
                              ("MWBind", "send_flags", 2)):
        text = ibverbs_api.named_default(owner, arg, value)
        assert text is not None and eval(text, ns) == value, (arg, text)


def test_attribute_docstrings_are_not_read_as_types(site):
    """napoleon made "UD: remote Q_Key" into "TYPE: UD"; a colon in any
    attribute's first line would do the same."""
    pages = {p.name: p.read_text() for p in (site / "api").glob("*.html")}
    typed = [name for name, text in pages.items() if 'Type<span class="colon">' in text]
    assert not typed, f"napoleon turned a docstring into a type on {typed}"
    assert "The remote Q_Key of a UD send" in pages["workrequests.html"]
    assert "Remote key (32 bits): a peer puts it" in pages["resources.html"]


# --- the GPUDirect guide is the code tests/gpu runs (issue #25, point 6) -------

def test_the_gpudirect_guide_is_what_tests_gpu_runs():
    """tests/gpu/test_gpudirect_guide.py executes the guide's block; its
    extraction (run here, without a GPU) finds the guide, and the guide
    covers what a GPUDirect user must know."""
    import importlib.util

    path = ROOT / "tests" / "gpu" / "test_gpudirect_guide.py"
    source = path.read_text()
    head = source.split("\ntorch = pytest.importorskip", 1)[0]   # before the GPU checks
    module = {"__file__": str(path), "__name__": "guide"}
    exec(compile(head, str(path), "exec"), module)
    code = module["guide_code"]()
    assert "exec(compile(guide_code()" in source
    assert "def gpu_to_gpu(" in code and "ib.cuda.register_tensor(" in code
    assert "expandable_segments:True" in code and "flush_gpudirect_writes()" in code
    page = (ROOT / "docs" / "guides" / "gpudirect.md").read_text()
    assert module["GUIDE"].read_text() == page
    for topic in ("dma-buf", "reg_dmabuf_mr", "nvidia_peermem", "pd.reg_mr(", "What is kept alive",
                  "What cannot be kept", "resize_()", "flush_gpudirect_writes", "synchronize"):
        assert topic in page, topic
    assert importlib.util.find_spec("ibverbs.cuda") is not None


# --- the site is the manual (issue #25, point 4; issue 36, point 4) ----------

def test_every_guide_is_in_the_table_of_contents():
    """The guides are pages of their own (tests/host/test_readme.py checks
    that none is a slice of the README): each is reachable from the index."""
    index = (ROOT / "docs" / "index.md").read_text()
    listed = set(re.findall(r"^(guides/\w+)$", index, re.M))
    pages = {f"guides/{p.stem}" for p in (ROOT / "docs" / "guides").glob("*.md")}
    assert pages <= listed, f"guides no toctree lists: {pages - listed}"


def test_the_footer_names_the_copyright_holders(site):
    """"Copyright ©" with no name was the footer (issue 36): the holders
    are LICENSE's."""
    import html

    license_line = re.search(r"^Copyright \(c\) (\d{4}), (.+)$",
                             (ROOT / "LICENSE").read_text(), re.M)
    index = html.unescape((site / "index.html").read_text())
    footer = " ".join(re.sub(r"<[^>]+>", " ", index.split('class="copyright"', 1)[1]
                             .split("</div>", 1)[0]).split())
    assert f"{license_line.group(1)}, {license_line.group(2)}" in footer, footer


def test_the_site_has_the_install_page_and_the_contributor_part(site, inventory):
    pages = {n for n, role in inventory.items() if role == "std:doc"}
    for page in ("guides/install", "guides/setup", "guides/gpudirect", "guides/buffers",
                 "guides/asyncio", "guides/typing", "guides/cqex", "guides/ext", "guides/qpex",
                 "guides/rdmacm", "guides/newer", "contributing/index"):
        assert page in pages, page
    import html

    install = html.unescape(re.sub(r"<[^>]+>", "", (site / "guides" / "install.html").read_text()))
    assert "pip install --no-index --find-links dist pyibverbs" in install
    assert "pip install ." in install and "pyibverbs" in install
    assert "How a verb gets bound" in (site / "contributing" / "index.html").read_text()
    # the generator's internals are the contributors' part, not the user guides'
    assert "PyType_FromSpecWithBases" not in (site / "guides" / "cqex.html").read_text()
