"""The docstring of a generated method, from the spec, spec/docs.yaml and the IR.

Every generated verb wrapper says, in this order (Google style, which the
reference's Sphinx napoleon renders and editors show from the stubs):

* what it does: the spec's ``doc:``, else spec/docs.yaml's summary (one of
  the two is required: SpecError otherwise);
* ``Args``: each Python argument, its meaning (docs.yaml per method, else
  its ``arguments`` glossary, else what its conversion takes), its range
  (spec ``min``/``max``) and default;
* ``Returns``: the Python type the C builds (generator/pytypes.py) and what
  it is;
* ``Raises``: from the spec's error convention, the argument checks, the
  closed-object check, and RuntimeError for a verb newer than the running
  libibverbs;
* the verb it calls and the rdma-core release that added it
  (spec/symbols.yaml ``optional`` or the method's ``since:``), or that every
  supported release has it; a verb verbs.h inlines into a call of the
  provider says the provider may not implement it.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Set

from .pytypes import arg_specs

OLDEST_RELEASE = "33.2"     # the oldest rdma-core the package is tested against

_RAISES = {
    "null": "the verb failed (it returned NULL); ``errno`` says why",
    "errno": "the verb failed; ``errno`` is the error it returned",
    "negative": "the verb failed (a negative result); ``errno`` says why",
}


class DocError(Exception):
    """A generated method has no text of its own."""


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."


def _range(pspec: Any) -> str:
    if not hasattr(pspec, "get"):
        return ""
    # a bound written as C (``self_ptr->num_comp_vectors - 1``) says nothing here
    lo, hi = (v if isinstance(v, int) else None for v in (pspec.get("min"), pspec.get("max")))
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
        struct = specs["**"]["kwargs"]
        lines.append(f"    **fields: fields of {struct} by name (an unknown name: TypeError).")
    return ["Args:"] + lines if lines else []


def _returns_section(mm: Any, handles: Set[str]) -> List[str]:
    t = mm.result_pytype
    if t == "None":
        return []
    if t in handles:
        what = f"the new {t} (close() it, or use it as a context manager)"
    elif t.startswith("tuple["):
        what = "the values the verb returned, in this order"
    elif t[:1].isupper() and t not in ("Any",):
        what = f"what the verb filled in, as a {t}"
    else:
        what = "the verb's result"
    return ["Returns:", f"    {t}: {what}."]


def _raises_section(mm: Any, node: Any, errors: str, optional: Optional[str],
                    verb: str) -> List[str]:
    lines: List[str] = []
    if errors in _RAISES:
        lines.append(f"    VerbsError: {_RAISES[errors]}.")
    if mm.owner:
        lines.append("    VerbsError: EBADF when the object is closed.")
    if mm.args or "**" in arg_specs(node):
        lines.append("    TypeError, ValueError: an argument of the wrong type or out of range "
                     "(checked before the verb is called).")
    if optional:
        lines.append(f"    RuntimeError: the running libibverbs predates {verb} "
                     f"(rdma-core {optional}).")
    return ["Raises:"] + lines if lines else []


def _release_line(verb: str, optional: Optional[str], inline: bool, errors: str) -> str:
    if optional:
        text = (f"Optional: {verb} is in rdma-core {optional} and later; with an older "
                "libibverbs this method raises RuntimeError (and headers older than that "
                "do not generate it).")
    else:
        text = f"Calls {verb}, in every supported rdma-core release ({OLDEST_RELEASE} on)."
    if inline and errors != "none":
        text += (" verbs.h inlines it into a call of the provider, which may not implement "
                 "it: then VerbsError EOPNOTSUPP.")
    return text


def summary_of(label: str, node: Any, doc_methods: Dict[str, Any]) -> Optional[str]:
    """The method's own text: spec ``doc:``, else spec/docs.yaml."""
    if node.get("doc"):
        return str(node["doc"]).strip()
    entry = doc_methods.get(label)
    if isinstance(entry, str):
        return entry.strip()
    if entry is not None and entry.get("summary"):
        return str(entry["summary"]).strip()
    return None


def compose(mm: Any, label: str, node: Any, verb: str, storage: str, spec: Any,
            handles: Set[str], named_default: Any = None) -> str:
    """The docstring body (after the text signature) of a generated method."""
    summary = summary_of(label, node, spec.doc_methods)
    if summary is None:
        raise DocError(f"{label}: no docstring text: add `doc:` to its spec entry or "
                       f"`{label}:` under docs.methods in spec/docs.yaml")
    entry = spec.doc_methods.get(label)
    own = dict(entry.get("args") or {}) if hasattr(entry, "get") else {}
    optional = node.get("since") or spec.optional.get(verb)
    optional = str(optional).split(" (")[0] if optional else None
    errors = node.get("errors", "none")
    parts = [_sentence(summary) if "\n" not in summary else summary]
    for section in (_args_section(mm, node, own, spec.doc_arguments, named_default),
                    _returns_section(mm, handles),
                    _raises_section(mm, node, errors, optional, verb)):
        if section:
            parts.append("\n".join(section))
    parts.append(_release_line(verb, optional, storage == "inline", errors))
    return "\n\n".join(parts)
