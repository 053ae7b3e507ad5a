"""The pieces of a stub class, shared by the stub builders: generator/stubs.py
(the verbs and rdma_cm models) and generator/record_stubs.py (the data-path
types of spec/datapath/records.yaml)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional


@dataclass
class StubClass:
    name: str
    doc: str
    lines: List[str] = field(default_factory=list)   # the body, unindented
    base: Optional[str] = None        # a subclass handle (spec `base:`) derives from it
    final: bool = True                # a base of another class cannot be @final


def first_line(doc: str) -> str:
    """The summary of a docstring (after the text signature)."""
    text = doc.split("\n--\n\n", 1)[-1].strip()
    line = text.split("\n", 1)[0].strip()
    return line.replace("\\", "\\\\").replace('"""', "'''")


def docstring_body(doc: str) -> List[str]:
    """A method's docstring (without its text signature) as the indented
    body of its stub, so that editors show it on hover."""
    text = doc.split("\n--\n\n", 1)[-1].strip()
    if not text:
        return []
    text = text.replace("\\", "\\\\").replace('"""', "'''")
    lines = text.split("\n")
    body = [f'    """{lines[0]}'] + [f"    {line}" if line else "" for line in lines[1:]]
    if len(lines) > 1:
        body.append('    """')
    else:
        body[0] += '"""'
    return body


def with_doc(head: str, doc: str) -> str:
    """``head`` (a def line ending in ':') with the docstring as its body."""
    body = docstring_body(doc)
    return "\n".join([head] + body) if body else f"{head} ..."


def read_only(name: str, pytype: str, doc: str = "") -> str:
    """A read-only attribute: a property, with its docstring when there is one."""
    return "@property\n" + with_doc(f"def {name}(self) -> {pytype}:", doc)
