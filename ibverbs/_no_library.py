"""The ``ibverbs`` command without a loadable libibverbs, or without the
built extension: one line, no traceback.

``ibverbs`` (the console script, ``ibverbs._cli:main``) and ``python -m
ibverbs`` both import this package before any of the CLI's code runs, so the
extension's ImportError would end in a traceback there.  The package calls
``exit_if_command`` first; a program that imports ibverbs still gets the
ImportError.
"""
from __future__ import annotations

import os
import sys

EXIT_NO_LIBRARY = 3      # ibverbs._cli_args.EXIT_NO_LIBRARY (the same; this module stays tiny)
EXIT_NOT_BUILT = 5       # ibverbs._cli_args.EXIT_NOT_BUILT

#: What a checkout without the built extension says: Python's own words
#: ("cannot import name '_ibverbs' from partially initialized module ...
#: circular import") point nowhere near the cause.
NOT_BUILT = "the extension is not built here: run `make build`, or run outside the checkout"


def not_built_error(exc: ImportError):
    """The ImportError to raise instead of ``exc`` when the package has no
    ``_ibverbs`` extension file at all (a checkout before ``make build``, or
    an install that lost it); None when the file is there, so the error is
    the extension's own (libibverbs.so.1 missing or too old)."""
    from importlib.machinery import EXTENSION_SUFFIXES

    package = os.path.dirname(os.path.abspath(__file__))
    try:
        names = os.listdir(package)
    except OSError:
        return None
    if any(n == "_ibverbs" + suffix for n in names for suffix in EXTENSION_SUFFIXES):
        return None
    root = os.path.dirname(package)
    if os.path.exists(os.path.join(root, "setup.py")) and os.path.isdir(os.path.join(root, "generator")):
        message = NOT_BUILT
    else:
        message = (f"the extension ibverbs._ibverbs is missing from {package}: "
                   "reinstall the package (pip install --force-reinstall pyibverbs-<version>-*.whl)")
    return ImportError(message, name="ibverbs._ibverbs")


def _running_the_command() -> bool:
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "ibverbs":            # the console script
        return True
    if argv0 != "-m":           # runpy sets "-m" while it imports the module's package
        return False
    orig = getattr(sys, "orig_argv", None)              # 3.10+: which module it is
    if orig is None:
        return True
    for i, arg in enumerate(orig):
        if arg == "-m":
            return i + 1 < len(orig) and orig[i + 1] == "ibverbs"
        if arg.startswith("-m"):
            return arg[2:] == "ibverbs"
    return False


def exit_if_command(exc: ImportError, status: int = EXIT_NO_LIBRARY) -> None:
    """Exit with ``status`` (EXIT_NO_LIBRARY, or EXIT_NOT_BUILT) and the
    error on one line when the import is the command's own; return (the
    caller raises) otherwise.  The command line is parsed first, as with the
    library: ``--help`` and ``--version`` work (status 0), a bad argument is
    status 2."""
    if _running_the_command():
        from ._cli_args import json_error, parse_args, wants_json

        parse_args(sys.argv[1:])
        message = str(exc)
        if wants_json(sys.argv[1:]):        # --json: the one document, on this path too
            print(json_error(message, EXIT_NO_LIBRARY), flush=True)
        print(message if message.startswith("ibverbs ") else f"ibverbs: {message}", file=sys.stderr)
        raise SystemExit(status)
