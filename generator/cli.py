"""Command line: python -m generator {ir,model,generate,check,coverage}.

RDMA_CORE (or --rdma-core) names the rdma-core headers to read: an install
prefix or an unpacked Debian package root; by default the vendored
headers in third_party/rdma-core (the baseline generated/ is made from).
"""
from __future__ import annotations

import argparse
import difflib
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from .paths import GENERATED_DIR, ROOT, SPEC_DIR, TEMPLATE_DIR  # noqa: F401 (tests import them here)


def _prefix(args: Any) -> Optional[str]:
    return args.rdma_core or os.environ.get("RDMA_CORE") or None


def _model(args: Any) -> Any:
    from . import builder, parse, spec
    ir = parse.parse(_prefix(args))
    return builder.build(ir, spec.load(SPEC_DIR))


def build_all(prefix: Optional[str], spec_root: str = SPEC_DIR,
              irs: Optional[Tuple[Any, Any]] = None) -> Any:
    """The whole model (model.Model) from the headers at prefix (None: the
    baseline).  *irs*: verbs.h's and rdma_cma.h's IR, parsed before
    (tests/host/test_spec_keys.py builds many specs)."""
    from . import assemble
    return assemble.build(irs if irs is not None else assemble.parse_headers(prefix), spec_root)


def render_all(prefix: Optional[str], spec_root: str = SPEC_DIR,
               irs: Optional[Tuple[Any, Any]] = None) -> Tuple[Dict[str, str], Any]:
    """Every generated file from the headers at prefix, and the model."""
    from . import render
    model = build_all(prefix, spec_root, irs)
    return render.render(model, TEMPLATE_DIR), model


def _render_all(args: Any) -> Dict[str, str]:
    return render_all(_prefix(args))[0]


def _emit(args: Any, text: str) -> int:
    """text to --output, or to stdout without it."""
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_ir(args: Any) -> int:
    from . import irjson, parse
    ir = parse.parse(_prefix(args), args.header)
    text = irjson.dump(ir) if args.json else parse.summary(ir) + "\n"
    return _emit(args, text)


def cmd_generate(args: Any) -> int:
    from . import render
    files = _render_all(args)
    out = args.out or GENERATED_DIR
    render.write(files, out)
    print(f"generated {len(files)} files into {os.path.relpath(out, os.getcwd())}")
    return 0


def cmd_check(args: Any) -> int:
    files = _render_all(args)
    stale: List[str] = []
    on_disk = {n for n in os.listdir(GENERATED_DIR)
               if n.endswith((".c.h", ".h", ".py"))} if os.path.isdir(GENERATED_DIR) else set()
    for name in sorted(set(files) | on_disk):
        path = os.path.join(GENERATED_DIR, name)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        new = files.get(name, "")
        if old != new:
            stale.append(name)
            diff = list(difflib.unified_diff(old.splitlines(), new.splitlines(),
                                             f"generated/{name} (committed)",
                                             f"generated/{name} (fresh)", lineterm="", n=1))
            sys.stdout.write("\n".join(diff[:40]) + "\n")
            if len(diff) > 40:
                print(f"... {len(diff) - 40} more diff lines")
    if stale:
        print(f"generated/ is stale: {', '.join(stale)} differ from a fresh run; "
              "run `make generate` and commit the result", file=sys.stderr)
        return 1
    print(f"generated/ is fresh ({len(files)} files)")
    return 0


def cmd_model(args: Any) -> int:
    """The whole model as JSON (generator/model_json.py), before any C is written."""
    from . import model_json
    text = model_json.dump(build_all(_prefix(args)))
    return _emit(args, text)


def cmd_stamps(args: Any) -> int:
    """The files' own checksums alone (generator/checksum.py): a hand edit; no libclang."""
    from . import checksum
    found = checksum.verify(GENERATED_DIR)
    for lines in found.values():
        for line in lines:
            print(line, file=sys.stderr)
    if found:
        return 1
    print("generated/: every checksum matches")
    return 0


def cmd_coverage(args: Any) -> int:
    if args.rdmacm:
        from . import rdmacm
        m = rdmacm.load(_prefix(args), SPEC_DIR)
    else:
        m = _model(args)
    counts = {"bound": 0, "excluded": 0, "unhandled": 0}
    width = max(len(name) for name, _, _ in m.coverage)
    for name, status, detail in m.coverage:
        counts[status] += 1
        if not args.quiet or status == "unhandled":
            print(f"{name:<{width}}  {status:<9}  {detail}")
    print(f"coverage: bound={counts['bound']} excluded={counts['excluded']} "
          f"unhandled={counts['unhandled']}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m generator")
    ap.add_argument("--rdma-core", metavar="PREFIX",
                    help="rdma-core headers to read (default: $RDMA_CORE, else third_party/rdma-core)")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("ir", help="print the IR (a summary, or --json)")
    p.add_argument("--json", action="store_true")
    p.add_argument("-o", "--output")
    p.add_argument("--header", default="infiniband/verbs.h",
                   help="the header to parse (rdma/rdma_cma.h for librdmacm)")
    p.set_defaults(func=cmd_ir)
    p = sub.add_parser("model", help="print the model (verbs, records, rdma_cm, targets) as JSON")
    p.add_argument("-o", "--output")
    p.set_defaults(func=cmd_model)
    p = sub.add_parser("generate", help="write generated/")
    p.add_argument("--out", help="another output directory")
    p.set_defaults(func=cmd_generate)
    p = sub.add_parser("check", help="fail when generated/ differs from a fresh run")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("stamps", help="check the checksum in each generated file's header "
                       "(a hand edit); no libclang (`check` compares with a fresh run)")
    p.set_defaults(func=cmd_stamps)
    p = sub.add_parser("coverage", help="every public function of verbs.h and its status")
    p.add_argument("-q", "--quiet", action="store_true", help="only unhandled rows and the total")
    p.add_argument("--rdmacm", action="store_true",
                   help="list rdma/rdma_cma.h (spec/rdmacm/) instead of verbs.h")
    p.set_defaults(func=cmd_coverage)
    for name, helptext in (("audit", "compare two releases' IR against the spec"),):
        try:
            from . import audit
        except ImportError:
            break
        audit.add_parser(sub)
    args = ap.parse_args(argv)
    from .parse import ParseError
    from .spec import SpecError
    try:
        return int(args.func(args))
    except (SpecError, ParseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
