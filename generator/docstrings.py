"""The docstring of a generated method, from the spec, spec/docs.yaml and the IR.

Every generated verb wrapper says, in this order (Google style, which the
reference's Sphinx napoleon renders and editors show from the stubs):

* what it does: the spec's ``doc:``, else spec/docs.yaml's summary (one of
  the two is required: SpecError otherwise);
* ``Args``: each Python argument, its meaning (docs.yaml per method, else
  its ``arguments`` glossary, else what its conversion takes), its range
  (spec ``min``/``max``) and default;
* ``Returns``: the Python type the C builds (generator/pytypes.py) and what
  it is, when there is more to say than the type the signature shows (a new
  handle, a struct, a tuple, or docs.yaml's ``returns:``);
* ``Raises``: the errors of this verb (docs.yaml's ``raises:``, errno name
  -> when, from the verb's man page), else the verb's failure by name; the
  argument checks, naming the arguments; the closed-object check, naming
  the class; EOPNOTSUPP where verbs.h inlines the verb into a call of the
  provider; RuntimeError for a verb newer than the running libibverbs;
* for a verb newer than the oldest supported rdma-core, the release that
  added it (spec/symbols.yaml ``optional`` or the method's ``since:``).

No sentence is the same on every method (tests/host/test_docstrings.py):
what holds for every verb (which rdma-core releases have it, that it
returns "the verb's result") is said once, in the reference's
introduction, not on each method.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

from .pytypes import arg_specs
from .spec_types import DocEntry, Method, ParamSpec

OLDEST_RELEASE = "33.2"     # the oldest rdma-core the package is tested against

_RAISES = {
    "null": "{verb} failed (it returned NULL); ``errno`` says why",
    "errno": "{verb} failed; ``errno`` is the error it returned",
    "negative": "{verb} failed (a negative result); ``errno`` says why",
    "code": "{verb} failed (it returned a code of its own); ``errno`` says why",
}


class DocError(Exception):
    """A generated method has no text of its own."""


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."


def _range(pspec: Any) -> str:
    if not isinstance(pspec, ParamSpec):
        return ""
    # a bound given as a rule's value says nothing here
    lo, hi = (v if isinstance(v, int) else None for v in (pspec.min, pspec.max))
    if lo is not None and hi is not None:
        return f" ({lo}..{hi})"
    if lo is not None:
        return f" (at least {lo})"
    if hi is not None:
        return f" (at most {hi})"
    return ""


def _args_section(mm: Any, node: Any, own: Dict[str, str], glossary: Dict[str, str],
                  named_default: Any = None) -> List[str]:
    specs = arg_specs(node)
    lines: List[str] = []
    for a in mm.args:
        pspec = specs.get(a.name, a.name)
        meaning = own.get(a.name) or glossary.get(a.name) or a.meaning or "an int"
        text = _sentence(meaning.rstrip(".") + _range(pspec))
        if not a.required:
            named = named_default(mm.owner, a.name, a.default_doc) if named_default else None
            text += f" Default: {named or a.default_doc}."
        lines.append(f"    {a.name}: {text}")
    if "**" in specs:
        struct = specs["**"].kwargs
        lines.append(f"    **fields: fields of {struct} by name (an unknown name: TypeError).")
    return ["Args:"] + lines if lines else []


def _returns_section(mm: Any, handles: Set[str], own: Optional[str] = None) -> List[str]:
    t = mm.result_pytype
    if t == "None":
        return []
    if own:
        what = own.rstrip(".")
    elif t in handles:
        what = f"the new {t} (close() it, or use it as a context manager)"
    elif t.startswith("tuple["):
        what = "the values the verb returned, in this order"
    elif t[:1].isupper() and t not in ("Any",):
        what = f"what the verb filled in, as a {t}"
    else:
        return []        # the signature's type says it all
    return ["Returns:", f"    {t}: {what}."]


def raises_of(label: str, doc_methods: Dict[str, DocEntry]) -> List[str]:
    """docs.yaml's ``raises:`` of a method: errno name (or exception class)
    -> when, as Raises lines."""
    entry = doc_methods.get(label)
    lines: List[str] = []
    for name, when in (entry.raises if entry is not None else {}).items():
        name = str(name)
        if name.endswith(("Error", "Exception")):
            lines.append(f"    {name}: {_sentence(str(when))}")
        else:
            lines.append(f"    VerbsError: {name} when {_sentence(str(when))}")
    return lines


def _raises_section(mm: Any, node: Any, errors: str, optional: Optional[str],
                    verb: str, own: List[str], inline: bool) -> List[str]:
    lines: List[str] = list(own)
    if errors in _RAISES and not own:
        lines.append(f"    VerbsError: {_RAISES[errors].format(verb=verb)}.")
    if inline and errors != "none":
        lines.append(f"    VerbsError: EOPNOTSUPP when the provider does not implement {verb} "
                     "(verbs.h calls the provider's operation directly).")
    if mm.owner:
        lines.append(f"    VerbsError: EBADF when this {mm.owner} is closed.")
    names = [a.name for a in mm.args] + (["a field"] if "**" in arg_specs(node) else [])
    if names:
        which = ", ".join(names)
        lines.append(f"    TypeError, ValueError: {which} of the wrong type or out of range "
                     f"(checked before {verb} is called).")
    if optional:
        lines.append(f"    RuntimeError: the running libibverbs predates {verb} "
                     f"(rdma-core {optional}).")
    return ["Raises:"] + lines if lines else []


def _release_line(verb: str, optional: Optional[str]) -> Optional[str]:
    if not optional:
        return None
    return (f"Optional: {verb} is in rdma-core {optional} and later; with an older "
            "libibverbs this method raises RuntimeError (and headers older than that "
            "do not generate it).")


def summary_of(label: str, m: Method, doc_methods: Dict[str, DocEntry]) -> Optional[str]:
    """The method's own text: spec ``doc:``, else spec/docs.yaml."""
    if m.doc:
        return str(m.doc).strip()
    entry = doc_methods.get(label)
    if entry is not None and entry.summary:
        return entry.summary.strip()
    return None


def compose(mm: Any, label: str, node: Method, verb: str, storage: str, spec: Any,
            handles: Set[str], named_default: Any = None) -> str:
    """The docstring body (after the text signature) of a generated method."""
    summary = summary_of(label, node, spec.doc_methods)
    if summary is None:
        raise DocError(f"{label}: no docstring text: add `doc:` to its spec entry or "
                       f"`{label}:` under docs.methods in spec/docs.yaml")
    entry = spec.doc_methods.get(label)
    own = dict(entry.args) if entry is not None else {}
    optional = node.since or spec.optional.get(verb)
    optional = str(optional).split(" (")[0] if optional else None
    errors = node.errors
    returns = entry.returns if entry is not None else None
    parts = [_sentence(summary) if "\n" not in summary else summary]
    for section in (_args_section(mm, node, own, spec.doc_arguments, named_default),
                    _returns_section(mm, handles, returns),
                    _raises_section(mm, node, errors, optional, verb,
                                    raises_of(label, spec.doc_methods), storage == "inline")):
        if section:
            parts.append("\n".join(section))
    release = _release_line(verb, optional)
    if release:
        parts.append(release)
    return "\n\n".join(parts)
