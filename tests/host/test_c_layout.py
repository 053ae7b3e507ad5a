"""The hand-written C keeps the layout CONTRIBUTING describes: files named
for their object and none over 800 lines, one internal header (common.h)
for every cross-file declaration, our own prefix (ibp_/IBP_) for our
helpers, and no circles between files.  Read from the sources: no build,
no libclang.

What counts as ours: every name ibverbs/src and generated/ define.  The
only ibv_ definitions allowed are libibverbs' own exported names, whose
trampolines generated/loader.c.h carries (the table of slots lists them).
"""
from __future__ import annotations

import collections
import pathlib
import re
from typing import Dict, Iterator, List, Set, Tuple

import pytest

pytestmark = pytest.mark.tooling

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "ibverbs" / "src"
GEN = ROOT / "generated"
#: The internal headers: common.h (hand-written) and objects.h (generated
#: from the spec: the classes and the hand-written methods they name), with
#: rdmacm_objects.h its counterpart for the rdma_cm classes (rdma_cma.h).
HEADERS = {"common.h", "objects.h", "rdmacm_objects.h"}
MAX_LINES = 800
#: Files still over MAX_LINES, with the work that brings them under it.
OVERSIZED: dict = {}


def _strip(text: str) -> str:
    """Comments, string and character literals blanked (newlines kept)."""
    pattern = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                         re.S)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def _preprocessor(text: str) -> Tuple[str, List[str]]:
    """(text without preprocessor lines, those lines joined across \\)."""
    out, directives, pending = [], [], None
    for line in text.split("\n"):
        if pending is not None:
            pending += " " + line.rstrip("\\")
            if not line.endswith("\\"):
                directives.append(pending)
                pending = None
            out.append("")
        elif line.lstrip().startswith("#"):
            if line.endswith("\\"):
                pending = line.rstrip("\\")
            else:
                directives.append(line)
            out.append("")
        else:
            out.append(line)
    return "\n".join(out), directives


def _top_level(text: str) -> Iterator[Tuple[str, str]]:
    """(head, body) of each file-scope statement: head is its text outside
    the outermost braces, body what they held ('' when none)."""
    i, n, start = 0, len(text), 0
    head, body = "", ""
    while i < n:
        c = text[i]
        if c == "{":
            depth, j = 1, i + 1
            while j < n and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            head += text[start:i]
            body += text[i + 1:j - 1]
            start = i = j
            if re.search(r"\)\s*$", head):      # a function definition ends here
                yield head, body
                head, body = "", ""
            continue
        if c == ";":
            yield head + text[start:i], body
            head, body = "", ""
            start = i + 1
        i += 1


_IDENT = re.compile(r"[A-Za-z_]\w*")


def _declared(head: str, body: str) -> Tuple[str, List[str]]:
    """(kind, names) of a file-scope statement: kind is 'function' (a
    definition), 'prototype', 'macro-call' (PyDoc_STRVAR(name, ...): names
    its first argument) or 'object' (variables, types, enum constants)."""
    head = " ".join(head.split())
    names: List[str] = []
    if body and re.search(r"\b(struct|enum|union)\s+\w+\s*$", head.split("=")[0]):
        names.append(re.search(r"(\w+)\s*$", head.split("=")[0]).group(1))
    if body and re.match(r"(typedef\s+)?enum\b", head):
        names += [m.group(1) for m in re.finditer(r"(?:^|,)\s*(\w+)", body)]
    decl = head.split("=")[0]
    call = re.match(r"(\w+)\s*\(\s*(\w*)", decl)
    if call:
        return "macro-call", names + ([call.group(2)] if call.group(2) else [])
    paren = re.search(r"\(\s*\*?\s*(\w+)\s*\)\s*\(", decl)   # int (ibv_x)(...), (*slot)(...)
    func = paren or re.search(r"(\w+)\s*\(", decl)
    if func and not (paren and "*" in paren.group(0).split(")")[0]):
        kind = "function" if body and re.search(r"\)\s*$", head) else "prototype"
        return kind, names + [func.group(1)]
    for part in decl.split(","):
        ids = _IDENT.findall(part.split("[")[0].split("(")[0] if not paren else part)
        if ids and not (paren and "*" in paren.group(0)):
            names.append(ids[-1])
    if paren:
        names.append(paren.group(1))
    return "object", [n for n in names if n not in _KEYWORDS]


_KEYWORDS = {"struct", "enum", "union", "const", "volatile", "static", "extern", "typedef",
             "unsigned", "signed", "int", "char", "long", "short", "void", "double", "float"}


def _read(path: pathlib.Path) -> Tuple[str, List[str]]:
    return _preprocessor(_strip(path.read_text(encoding="utf-8")))


def _units() -> Dict[str, List[pathlib.Path]]:
    """Translation unit (a .c file) -> it and the generated .c.h it includes."""
    units = {}
    for c in sorted(SRC.glob("*.c")):
        files, todo = [c], [c]
        while todo:
            for inc in re.findall(r'#include "(\w+\.c\.h)"', todo.pop().read_text()):
                if (GEN / inc).exists() and GEN / inc not in files:
                    files.append(GEN / inc)
                    todo.append(GEN / inc)
        units[c.name] = files
    return units


def _statements(path: pathlib.Path):
    text, directives = _read(path)
    for head, body in _top_level(text):
        if head.strip() or body.strip():
            yield _declared(head, body) + (head,)


def _allowed_ibv() -> Set[str]:
    loader = (GEN / "loader.c.h").read_text()
    names = set(re.findall(r'\{"((?:ibv|IBV)_\w+)", \(void \*\*\)&', loader))
    assert len(names) > 50, "generated/loader.c.h: no symbol table found"
    return names


def test_files_stay_small():
    sizes = {p.name: len(p.read_text().splitlines())
             for p in sorted(SRC.glob("*.[ch]"))}
    over = {name: n for name, n in sizes.items() if n > MAX_LINES and name not in OVERSIZED}
    assert not over, f"over {MAX_LINES} lines (split by object): {over}"
    fixed = [name for name in OVERSIZED if sizes.get(name, 0) <= MAX_LINES]
    assert not fixed, f"{fixed} now fit: drop them from OVERSIZED"


def test_one_internal_header():
    assert sorted(p.name for p in SRC.glob("*.h")) == ["common.h"]


def _prototypes(path: pathlib.Path) -> List[str]:
    return [names[-1] for kind, names, head in _statements(path)
            if kind == "prototype" and not re.match(r"\s*(static|typedef)\b", head)]


def test_cross_file_prototypes_only_in_the_header():
    header_names = set(_prototypes(SRC / "common.h")) | set(_prototypes(GEN / "objects.h"))
    defined_in: Dict[str, str] = {}
    for unit, files in _units().items():
        for f in files:
            for kind, names, head in _statements(f):
                if kind == "function":
                    defined_in[names[-1]] = unit
    bad = []
    for unit, files in _units().items():
        for f in files:
            for name in _prototypes(f):
                if name == "PyInit__ibverbs":
                    continue   # the module's entry point, declared for -Wmissing-prototypes
                if name in header_names or defined_in.get(name, unit) != unit:
                    bad.append(f"{f.relative_to(ROOT)}: {name}")
    assert not bad, "declare these once, in ibverbs/src/common.h:\n" + "\n".join(bad)


def test_our_names_do_not_borrow_the_ibv_prefix():
    allowed = _allowed_ibv()
    bad = set()
    files = sorted(SRC.glob("*.[ch]")) + sorted(GEN.glob("*.h"))
    for f in files:
        text, directives = _read(f)
        for d in directives:
            m = re.match(r"\s*#\s*define\s+(\w+)", d)
            if m and re.match(r"(ibv|IBV)_", m.group(1)):
                bad.add(f"{f.name}: #define {m.group(1)}")
        for kind, names, head in _statements(f):
            for name in names:
                if re.match(r"(ibv|IBV)_", name) and name not in allowed:
                    bad.add(f"{f.name}: {name}")
    assert not bad, ("the ibv_ prefix is libibverbs': use ibp_/IBP_ for ours:\n"
                     + "\n".join(sorted(bad)))


def test_includes_have_no_circle():
    graph = collections.defaultdict(set)
    for f in list(SRC.glob("*.[ch]")) + list(GEN.glob("*.h")):
        for inc in re.findall(r'#include "([\w.]+)"', f.read_text()):
            graph[f.name].add(inc)
    _assert_acyclic(graph, "#include")


def test_hand_written_files_call_each_other_without_circles():
    """Who uses whom, from each file's references to names another file
    defines.  module.c is left out: it includes the generated code, the hub
    that calls every hand-written _impl and whose types and wrappers every
    hand-written file uses (Argument Clinic's shape)."""
    units = {u: fs for u, fs in _units().items() if u != "module.c"}
    owner: Dict[str, str] = {}
    for unit, files in units.items():
        for f in files:
            for kind, names, head in _statements(f):
                if re.match(r"\s*(static|typedef|extern)\b", head) or kind in ("prototype",
                                                                            "macro-call"):
                    continue
                if kind == "function" or (kind == "object" and "(" not in head):
                    owner[names[-1]] = unit
    graph = collections.defaultdict(set)
    for unit, files in units.items():
        used = set()
        for f in files:
            used |= set(_IDENT.findall(_read(f)[0]))
        for name in used:
            if owner.get(name, unit) != unit:
                graph[unit].add(owner[name])
    assert graph["post.c"] >= {"wr.c", "postlist.c"}, dict(graph)   # the scan sees calls
    _assert_acyclic(graph, "calls")


def _assert_acyclic(graph: Dict[str, Set[str]], what: str) -> None:
    state: Dict[str, int] = {}
    path: List[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                raise AssertionError(f"{what} circle: {' -> '.join(cycle)}")
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


#: How many consecutive lines make a repeated block (CONTRIBUTING, "The
#: hand-written C": no block of six or more lines is written twice).
BLOCK_LINES = 6
#: Identical blocks kept on purpose: (file, file) -> why, also said in a
#: comment at one of its places.  Blocks alike but for their names (what a
#: duplicate finder shows, not this test) carry such a comment where they
#: are kept: qpex.c's wr_id/wr_flags accessors, postlist.c's sequence
#: slots, repr.c's reference-counting steps, post.c's send/receive chain loops.
REPEATED_ON_PURPOSE: Dict[Tuple[str, str], str] = {}
_COMMENT_OR_STRING = re.compile(
    r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_TRIVIAL = re.compile(r"[{}();,\s]*|\} else \{|else|#.*")


def _code_lines(text: str) -> List[Tuple[int, str]]:
    """(line number, line with white space folded) of each line that says
    something: comments blanked (strings kept), blank lines, lone braces and
    preprocessor lines passed over."""
    def blank_comment(m: "re.Match[str]") -> str:
        s = m.group(0)
        return s if s[0] in "\"'" else re.sub(r"[^\n]", " ", s)
    out = []
    for no, line in enumerate(_COMMENT_OR_STRING.sub(blank_comment, text).split("\n"), 1):
        folded = " ".join(line.split())
        if not _TRIVIAL.fullmatch(folded):
            out.append((no, folded))
    return out


def _repeated_blocks(files: Dict[str, str]) -> Dict[Tuple[str, str], List[str]]:
    """(file, file) -> 'a.c:L ~ b.c:M' for each block of BLOCK_LINES code
    lines that stands, identical, at two places that do not overlap."""
    places = collections.defaultdict(list)
    for name, text in sorted(files.items()):
        lines = _code_lines(text)
        for i in range(len(lines) - BLOCK_LINES + 1):
            block = tuple(line for _, line in lines[i:i + BLOCK_LINES])
            places[block].append((name, lines[i][0], lines[i + BLOCK_LINES - 1][0]))
    found: Dict[Tuple[str, str], List[str]] = collections.defaultdict(list)
    for where in places.values():
        for k, (a, a_first, a_last) in enumerate(where):
            for b, b_first, b_last in where[k + 1:]:
                if a == b and b_first <= a_last:
                    continue     # the same lines, shifted: a run of one repeated line
                found[(a, b)].append(f"{a}:{a_first} ~ {b}:{b_first}")
    return found


def test_repeated_block_finder_finds_one():
    block = "".join(f"    call_{i}(x, \"{i}\");\n" for i in range(BLOCK_LINES))
    files = {"a.c": "int f(void)\n{\n" + block + "}\n",
             "b.c": "/* other */\nint g(void)\n{\n    y();\n" + block + "}\n",
             "c.c": "int h(void)\n{\n" + block.replace('"5"', '"6"') + "}\n"}
    assert dict(_repeated_blocks(files)) == {("a.c", "b.c"): ["a.c:3 ~ b.c:5"]}


def test_no_block_repeated_in_the_hand_written_c():
    files = {p.name: p.read_text() for p in sorted(SRC.glob("*.[ch]"))}
    found = _repeated_blocks(files)
    bad = [f"{place}" for pair, where in sorted(found.items())
           if pair not in REPEATED_ON_PURPOSE
           for place in where[:1]]
    assert not bad, (f"blocks of {BLOCK_LINES}+ lines written twice (factor them into one "
                     "function, or comment why and list them in REPEATED_ON_PURPOSE):\n"
                     + "\n".join(bad))
    stale = [pair for pair in REPEATED_ON_PURPOSE if pair not in found]
    assert not stale, f"no longer repeated: drop {stale} from REPEATED_ON_PURPOSE"


def test_every_hand_function_the_records_spec_names_is_prefixed():
    """CONTRIBUTING: our helpers carry `ibp_`; the functions that
    spec/datapath/records.yaml names (repr, dealloc, getters, reach
    functions, ...) are defined in ibverbs/src/ and called by generated code."""
    import re
    import yaml
    spec = yaml.safe_load((ROOT / "spec" / "datapath" / "records.yaml").read_text())
    names = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key not in ("doc", "stub"):
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)
        elif isinstance(node, str) and re.fullmatch(r"[A-Za-z_]\w*", node):
            names.add(node)
    walk(spec)
    source = "".join(p.read_text() for p in (ROOT / "ibverbs" / "src").glob("*.c"))
    defined = {n for n in names if re.search(rf"^\w[\w \*]*\b{n}\(", source, re.M)}
    assert len(defined) > 40
    assert sorted(n for n in defined if not n.startswith("ibp_")) == []
