"""Generated ``ibverbs`` command lines that know whether they are valid.

``command_lines()`` draws (argv, valid) pairs: every option of every command,
each with a value in its documented range or out of it (negative, huge,
not a number, nan/inf for the timeout), and the rules between options
(``--port 0`` only with ``--listen``, ``--bind`` only for a server, the
in-process options only without HOST/--listen).  ``valid`` is computed
from those rules, not from the parser, so a test can assert that a bad
command line is status 2 and a good one gets past argument checking.

``run(argv)`` runs ``ibverbs._cli.main`` in this process and returns
(status, stdout, stderr); an exception escaping main fails the caller.
Used by tests/host/test_cli_host.py and tests/device/test_cli.py.
"""
from __future__ import annotations

import contextlib
import io
from typing import List, Optional, Sequence, Tuple

from hypothesis import strategies as st

NAMES = st.from_regex(r"[a-z][a-z0-9_.]{0,11}", fullmatch=True)
NOT_INTS = st.sampled_from(["", "x", "1.5", "1e3", "0x10", " ", "--", "١"])  # Arabic-Indic 1


def _int_arg(lo: int, hi: int) -> st.SearchStrategy:
    """(text, valid) of an integer option whose range is lo..hi."""
    good = st.integers(lo, hi).map(lambda v: (str(v), True))
    bad = st.one_of(st.integers(max_value=lo - 1), st.integers(min_value=hi + 1),
                    st.integers(min_value=2**63, max_value=10**40)) \
        .filter(lambda v: not lo <= v <= hi).map(lambda v: (str(v), False))
    return st.one_of(good, bad, NOT_INTS.map(lambda t: (t, t.strip() != "" and _int_ok(t, lo, hi))))


def _int_ok(text: str, lo: int, hi: int) -> bool:
    try:
        return lo <= int(text) <= hi
    except ValueError:
        return False


TIMEOUTS = st.one_of(
    st.floats(min_value=0.001, max_value=86400).map(lambda v: (repr(v), True)),
    st.sampled_from(["0", "-1", "-0.5", "nan", "inf", "-inf", "1e309", "86401", "abc", ""])
    .map(lambda t: (t, False)))


@st.composite
def _options(draw, spec) -> Tuple[List[str], bool, dict]:
    """Some of ``spec``'s options, in any order: (tokens, all valid, chosen)."""
    names = draw(st.lists(st.sampled_from(sorted(spec)), unique=True, max_size=len(spec)))
    argv: List[str] = []
    ok = True
    chosen = {}
    for name in names:
        flag, values = spec[name]
        if values is None:
            argv.append(flag)
            chosen[name] = True
            continue
        text, good = draw(values)
        argv += [flag, text] if not text.startswith("-") else [f"{flag}={text}"]
        ok &= good
        chosen[name] = text
    return argv, ok, chosen


@st.composite
def command_lines(draw, devices: Sequence[str] = (), ping: bool = True):
    """(argv, valid, chosen options).  ``devices``: names to draw for -d
    besides made-up ones; ``ping``: draw ping command lines too."""
    name = NAMES if not devices else st.one_of(NAMES, st.sampled_from(list(devices)))
    text = name.map(lambda v: (v, True))
    commands = ["devices", "info", "gids"] + (["ping"] if ping else [])
    command = draw(st.sampled_from(commands))
    spec = {"json": ("--json", None)}
    if command in ("info", "gids", "ping"):
        spec["device"] = ("-d", text)
    if command == "gids":
        spec["ib_port"] = ("-i", _int_arg(1, 255))
    if command == "ping":
        spec.update(port=("-p", _int_arg(0, 65535)), ib_port=("-i", _int_arg(1, 255)),
                    gid_index=("-g", _int_arg(0, 255)),
                    peer_gid_index=("--peer-gid-index", _int_arg(0, 255)),
                    count=("-n", _int_arg(1, 1_000_000)), size=("-s", _int_arg(1, 1 << 26)),
                    timeout=("--timeout", TIMEOUTS), events=("-e", None),
                    listen=("--listen", None), peer_device=("--peer-device", text),
                    bind=("--bind", st.sampled_from(["127.0.0.1", "::1", "localhost"])
                          .map(lambda v: (v, True))))
    argv, ok, chosen = draw(_options(spec))
    host: Optional[str] = None
    if command == "ping" and draw(st.booleans()):
        host = draw(st.sampled_from(["127.0.0.1", "::1", "localhost", "peer.invalid"]))
        argv.append(host)
    if command == "ping" and ok:
        listen = "listen" in chosen
        port = chosen.get("port")
        if not listen and port is not None and int(port) == 0:
            ok = False                        # --port 0: a server's
        if "bind" in chosen and not listen:
            ok = False
        if listen and host is not None and "bind" in chosen and chosen["bind"] != host:
            ok = False
        if (listen or host is not None) and ("peer_device" in chosen or "peer_gid_index" in chosen):
            ok = False
    if draw(st.integers(0, 15)) == 0:         # now and then an option no command has
        argv.insert(draw(st.integers(0, len(argv))), "--bogus")
        ok = False
    return [command] + argv, ok, chosen


def run(argv: Sequence[str]) -> Tuple[int, str, str]:
    """``ibverbs ARGV`` in this process: (exit status, stdout, stderr)."""
    from ibverbs import _cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = _cli.main(list(argv))
        except SystemExit as exc:             # argparse: --help (0), a usage error (2)
            status = exc.code if isinstance(exc.code, int) else 1
    return status, out.getvalue(), err.getvalue()
