"""Every key of the spec is known to the kind that reads it: a typo is an
error naming its file and line, never a silently different C file.

The test renames keys of a temporary copy of spec/ one at a time (appends
an "x": `min` -> `minx`) and loads it the way `python -m generator generate`
does.  A key at a *name* position (a class, a method, a struct field's
Python name, an enum member, ...; NAME_POSITIONS) may be accepted: a new
name is a new binding, not a typo the generator could know.  Every other
key must be refused with a SpecError naming spec/<file>:<line of the key>.

One key per kind of position (the key at its path, names as `*`) is
renamed: every key the generator reads at every level, in well under a
minute.  IBVERBS_SPEC_KEYS_ALL=1 renames every key of every file
(about 3,000; a few minutes).
"""
from __future__ import annotations

import fnmatch
import os
import pathlib
import shutil
from typing import Iterator, List, NamedTuple, Tuple

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed")
pytest.importorskip("clang.cindex", reason="libclang is not installed (pip install libclang==18.1.1)")

from generator import builder, rdmacm, records, spec, targets
from generator.paths import SPEC_DIR

pytestmark = pytest.mark.tooling

#: Where a key is a name the spec gives (glob patterns of the path of the
#: mapping holding it; M: any method).
_M = ("handles/*/methods/*", "methods/*/*", "functions/*")
NAME_POSITIONS = [
    "", "handles", "structs", "enums", "functions", "methods", "methods/*",
    "handles/*/methods", "handles/*/attributes", "handles/*/slots",
    "handles/*/hand_attributes", "handles/*/state", "handles/*/parents", "handles/*/docs",
    "structs/*/fields", "enums/*/members", "symbols/optional", "symbols/versions", "exclusions",
    "docs/arguments", "docs/methods", "docs/methods/*/args",
    # spec/docs.yaml's field texts (a class, then its fields) and the enum an
    # argument takes: names; a renamed field's text leaves the field without
    # one, which generate refuses ("no docstring")
    "docs/fields", "docs/fields/*", "docs/enums",
    # spec/gil.yaml: the kinds of verbs are names
    "gil",
    # spec/datapath/records.yaml
    "records", "records/*/fields", "records/*/unions", "records/*/unions/*",
    "records/*/fields/*/union",
    "types", "types/*/attributes", "types/*/methods", "types/*/field_methods",
    "types/*/state", "types/*/storage/reach", "types/*/stub",
    # spec/targets/targets.yaml: the targets' names
    "targets",
] + [f"{m}/{part}" for m in _M for part in ("params", "params/*/struct", "impl",
                                               "returns/parents", "returns/set")]


class Key(NamedTuple):
    file: str          # relative to spec/
    path: Tuple[str, ...]  # the keys of the mappings above it
    name: str
    line: int          # 0-based
    end: int           # the column after the key (or its closing quote)
    quoted: bool

    @property
    def at_name(self) -> bool:
        parent = "/".join(self.path)
        return any(fnmatch.fnmatchcase(parent, p) for p in NAME_POSITIONS)

    @property
    def kind(self) -> Tuple[str, str, str]:
        """The key at its position, names as `*`."""
        out: List[str] = []
        for i, part in enumerate(self.path):
            parent = "/".join(self.path[:i])
            named = any(fnmatch.fnmatchcase(parent, p) for p in NAME_POSITIONS)
            out.append("*" if named else part)
        return self.file, "/".join(out), self.name


def spec_files(root: pathlib.Path) -> List[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.yaml"))


def keys_of(root: pathlib.Path, rel: str) -> Iterator[Key]:
    def walk(node: yaml.Node, path: Tuple[str, ...]) -> Iterator[Key]:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                yield Key(rel, path, str(k.value), k.start_mark.line, k.end_mark.column,
                          k.style in ("'", '"'))
                yield from walk(v, path + (str(k.value),))
        elif isinstance(node, yaml.SequenceNode):
            for v in node.value:
                yield from walk(v, path)
    yield from walk(yaml.compose((root / rel).read_text(encoding="utf-8")), ())


def renamed(text: str, key: Key) -> str:
    lines = text.split("\n")
    at = key.end - 1 if key.quoted else key.end
    lines[key.line] = lines[key.line][:at] + "x" + lines[key.line][at:]
    return "\n".join(lines)


def load_all(root: pathlib.Path, irs, only: str = "") -> None:
    """What `generate` reads of the spec, with the IRs parsed once; *only*:
    the set a file of spec/ belongs to (its own directory's), else all."""
    ir, cm_ir = irs
    verbs = None
    if not only or "/" not in only:
        verbs = builder.build(ir, spec.load(str(root)))
    if not only or only.startswith(rdmacm.SPEC_SUBDIR + "/"):
        structs = (verbs or builder.build(ir, spec.load(str(root)))).structs
        rdmacm.build(cm_ir, spec.load(rdmacm.spec_dir(str(root))), structs=structs)
    if not only or only.startswith("datapath/"):
        records.build(ir, str(root))
    if not only or only.startswith("targets/"):
        targets.load(targets.default_path(str(root)))


def chosen(root: pathlib.Path) -> List[Key]:
    every = [k for rel in spec_files(root) for k in keys_of(root, rel)]
    if os.environ.get("IBVERBS_SPEC_KEYS_ALL"):
        return every
    seen = set()
    out = []
    for k in every:
        if k.kind not in seen:
            seen.add(k.kind)
            out.append(k)
    return out


def test_a_renamed_key_is_refused_with_its_file_and_line(tmp_path, irs):
    root = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, root)
    load_all(root, irs)             # the copy as it is loads
    wrong = []
    tried = 0
    for key in chosen(root):
        if key.at_name:
            continue
        tried += 1
        path = root / key.file
        text = path.read_text(encoding="utf-8")
        path.write_text(renamed(text, key), encoding="utf-8")
        try:
            load_all(root, irs, key.file)
            wrong.append(f"spec/{key.file}:{key.line + 1}: {key.name!r} renamed: accepted")
        except spec.SpecError as exc:
            if f"spec/{key.file}:{key.line + 1}:" not in str(exc):
                wrong.append(f"spec/{key.file}:{key.line + 1}: {key.name!r} renamed: "
                             f"refused elsewhere: {exc}")
        except Exception as exc:  # noqa: BLE001 (a crash is a finding too)
            wrong.append(f"spec/{key.file}:{key.line + 1}: {key.name!r} renamed: "
                         f"{type(exc).__name__}: {exc}")
        finally:
            path.write_text(text, encoding="utf-8")
    assert tried > 150
    assert not wrong, "\n".join(wrong)


def test_a_converter_option_typo_is_refused(tmp_path, irs):
    """The issue's case: `cqe: {arg: cqe, min: 1}` as `mn: 1` made the range
    INT32_MIN..INT32_MAX and lost "(at least 1)" without a word."""
    root = tmp_path / "spec"
    shutil.copytree(SPEC_DIR, root)
    path = root / "context.yaml"
    text = path.read_text(encoding="utf-8")
    line = text[:text.index("cqe: {arg: cqe, min: 1}")].count("\n") + 1
    path.write_text(text.replace("cqe: {arg: cqe, min: 1}", "cqe: {arg: cqe, mn: 1}"))
    with pytest.raises(spec.SpecError, match=rf"^spec/context.yaml:{line}: .*unknown key 'mn'"):
        load_all(root, irs)


def test_each_converter_declares_its_keys():
    """A new option is one declaration: the converter's `keys`."""
    from generator.converters import FIELDS, PARAMS
    from generator.converters.args import ArgParam
    for kind, cls in PARAMS.by_kind.items():
        if issubclass(cls, ArgParam):
            assert {"arg", "default", "convert"} <= cls.keys, kind
    assert PARAMS["int"].keys >= {"min", "max"}
    assert "none_ok" in FIELDS["handle"].keys and "none_ok" not in FIELDS["int"].keys
