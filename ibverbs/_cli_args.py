"""The ``ibverbs`` command's arguments and exit statuses, without the extension.

Everything here runs before a device is looked for, and without a loadable
libibverbs too (``ibverbs._no_library`` parses the command line with it, so
``--help``, ``--version`` and a usage error behave the same there). Every
value is checked here: a bad argument is exit status 2 with argparse's
message, never "no RDMA devices" and never a traceback.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any, Callable, NoReturn, Optional, Sequence, Tuple

DEFAULT_TCP_PORT = 18515      # the port ibv_rc_pingpong uses

# What the exit status says (also in `ibverbs --help`).
EXIT_OK = 0
EXIT_FAILED = 1        # a verb, the peer or the network failed; the message says which
EXIT_USAGE = 2         # bad arguments (argparse's own status)
EXIT_NO_LIBRARY = 3    # libibverbs.so.1 cannot be loaded (see ibverbs/__init__.py)
EXIT_NO_DEVICE = 4     # no RDMA device: no kernel support, no provider, none there / by that name
EXIT_NOT_BUILT = 5     # a checkout without the built extension (ibverbs._no_library.NOT_BUILT)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it)
EXIT_CODES = {EXIT_OK: "success", EXIT_FAILED: "a verb, the peer or the network failed",
              EXIT_USAGE: "bad arguments",
              EXIT_NO_LIBRARY: "libibverbs.so.1 cannot be loaded (install rdma-core)",
              EXIT_NO_DEVICE: "no RDMA device (no kernel support, no provider, or none by that name)",
              EXIT_NOT_BUILT: "the extension is not built here (a checkout: run `make build`)",
              EXIT_INTERRUPTED: "interrupted (Ctrl-C)"}

JSON_EPILOG = """\
--json: stdout is exactly one JSON document, whatever happens. On a failure
it is {"error": SENTENCE, "status": EXIT_STATUS} (the sentence also goes to
stderr); devices/info/gids without any device give their empty listing.
A ping server's "listening on" notice goes to stderr. Ctrl-C in a ping
prints the statistics so far ("interrupted": true) and exits 130."""

# ping's limits.  The size and count travel as 32-bit fields ("!II"), and
# the server allocates 2 * size bytes for what a client asks: both sides
# refuse more than MAX_SIZE, so a peer cannot make the server allocate GiBs.
MAX_SIZE = 1 << 26             # 64 MiB per message
MAX_COUNT = 1_000_000          # round trips (each one's latency is kept)
MAX_TIMEOUT = 86400.0          # seconds


def _int_in(lo: int, hi: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be {lo}..{hi}, not {value}")
        return value
    convert.__name__ = "int"
    return convert


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT):
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most {MAX_TIMEOUT:g} "
                                         f"seconds, not {text}")
    return value


def wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for --json (argparse takes a prefix:
    --js), before it is parsed: a usage error's document too."""
    return any(len(a) > 3 and "--json".startswith(a) for a in argv if a.startswith("--j"))


def json_error(message: str, status: int) -> str:
    """What --json prints for a failure: the sentence that stderr gets, and
    the exit status."""
    return json.dumps({"error": message, "status": status}, indent=2)


class _Parser(argparse.ArgumentParser):
    """argparse's, but with --json on the command line a usage error also
    prints the one JSON document (on stdout; argparse's message on stderr)."""

    json_errors = False

    def error(self, message: str) -> NoReturn:
        if self.json_errors:
            print(json_error(f"{self.prog}: error: {message}", EXIT_USAGE), flush=True)
        super().error(message)


def _version() -> str:
    from ._version import __version__
    return f"ibverbs {__version__}"


def build_parser() -> argparse.ArgumentParser:
    """The ``ibverbs`` argument parser (docs/_ext renders its help)."""
    return _parsers()[0]


def _parsers(json_errors: bool = False) -> Tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The top-level parser and ping's (whose usage a ping error shows)."""
    epilog = ("exit status:\n" + "\n".join(f"  {code}  {what}" for code, what in EXIT_CODES.items())
              + "\n\n" + JSON_EPILOG)
    parser_class = type("ArgumentParser", (_Parser,), {"json_errors": json_errors})
    ap = parser_class(prog="ibverbs", description="RDMA devices from Python "
                                 "(also: python -m ibverbs).", epilog=epilog,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=_version())
    sub = ap.add_subparsers(dest="command", required=True)
    json_help = "one JSON document (GUIDs as strings, enums as names)"
    port_num = _int_in(1, 255)
    gid_index = _int_in(0, 255)                 # ibv_global_route.sgid_index is 8-bit
    p = sub.add_parser("devices", help="list the RDMA devices and their node GUIDs (like ibv_devices)")
    p.add_argument("--json", action="store_true", help=json_help + "; [] without devices")
    p.set_defaults(func="devices")
    p = sub.add_parser("info", help="device and port attributes and GIDs (like ibv_devinfo -v)")
    p.add_argument("-d", "--device", help="only this device (default: all)")
    p.add_argument("--json", action="store_true",
                   help=json_help + '; {"devices": []} without devices')
    p.set_defaults(func="info")
    p = sub.add_parser("gids", help="GID tables: index, GID, IPv4, type, netdev (like show_gids)")
    p.add_argument("-d", "--device", help="only this device (default: all)")
    p.add_argument("-i", "--ib-port", type=port_num, help="only this port (1..255; default: all)")
    p.add_argument("--json", action="store_true", help=json_help + "; [] without devices")
    p.set_defaults(func="gids")
    p = sub.add_parser("ping", help="RC ping-pong latency (in one process, or client/server over TCP)",
                       description="Without HOST or --listen both QPs run in this process, between "
                                   "-d DEV and --peer-device DEV2 (default: the same device). "
                                   "A server (--listen) waits for its client without a time "
                                   "limit; once connected, --timeout bounds every step of the "
                                   "TCP exchange and every completion, on both sides.")
    p.add_argument("host", nargs="?", help="connect to a `ping --listen` server on HOST; with "
                                           "--listen: the address to listen on")
    p.add_argument("--listen", action="store_true", help="serve one client")
    p.add_argument("--bind", default=None, help="address to listen on (default: all; or HOST)")
    p.add_argument("-p", "--port", type=_int_in(0, 65535), default=DEFAULT_TCP_PORT,
                   help=f"TCP port for the QPInfo exchange (default {DEFAULT_TCP_PORT}; "
                        "0: any, with --listen)")
    p.add_argument("-d", "--device", help="RDMA device (default: the first)")
    p.add_argument("--peer-device", help="in-process mode: the other device (default: -d's)")
    p.add_argument("-i", "--ib-port", type=port_num, default=1, help="device port (default 1)")
    p.add_argument("-g", "--gid-index", type=gid_index,
                   help="local GID index (0..255; default: the RoCE v2 IPv4 one, else 0)")
    p.add_argument("--peer-gid-index", type=gid_index,
                   help="in-process mode: the peer device's GID index")
    p.add_argument("-n", "--count", type=_int_in(1, MAX_COUNT), default=1000,
                   help=f"round trips (1..{MAX_COUNT}; default 1000)")
    p.add_argument("-s", "--size", type=_int_in(1, MAX_SIZE), default=64,
                   help=f"message size in bytes (1..{MAX_SIZE}; default 64)")
    p.add_argument("-e", "--events", action="store_true",
                   help="sleep on a completion channel instead of busy polling (like ibv_rc_pingpong -e)")
    p.add_argument("--timeout", type=_seconds, default=10.0,
                   help=f"seconds to wait for the peer (more than 0, at most {MAX_TIMEOUT:g}; "
                        "default 10)")
    p.add_argument("--json", action="store_true", help=json_help)
    p.set_defaults(func="ping")
    _add_topo(sub, json_help)
    return ap, p


def _bus_id(text: str) -> str:
    from .topology import normalize_bus_id      # the standard library only
    try:
        return normalize_bus_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_topo(sub: Any, json_help: str) -> None:
    p = sub.add_parser("topo", help="accelerators against RDMA devices: PCIe/NUMA distance "
                                    "(like nvidia-smi topo -m)",
                       description="Every PCI display or 3D controller and processing "
                                   "accelerator (class 0x03xx, 0x1200), and each --bus-id, "
                                   "against every RDMA device port, in the classes of "
                                   "nvidia-smi topo -m (PIX, PXB, PHB, NODE, SYS), read "
                                   "from sysfs.")
    p.add_argument("-b", "--bus-id", action="append", type=_bus_id, metavar="ID",
                   help="list this PCI function too (domain:bus:device.function, "
                        "e.g. nvidia-smi --query-gpu=pci.bus_id); repeatable")
    p.add_argument("--json", action="store_true", help="one JSON document: accelerators, "
                                                       "rdma (every port's facts), matrix")
    p.set_defaults(func="topo")


def _check_ping(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What argparse cannot check one option at a time (exit status 2)."""
    if args.listen:
        if args.host is not None and args.bind is not None and args.host != args.bind:
            ap.error(f"--listen: HOST {args.host!r} and --bind {args.bind!r} differ")
        args.bind = args.bind if args.bind is not None else (args.host or "")
        args.host = None
    elif args.bind is not None:
        ap.error("--bind is for a server (--listen)")
    if not args.listen and args.port == 0:
        ap.error("--port 0 (any port) is for a server (--listen)")
    if (args.listen or args.host) and (args.peer_device or args.peer_gid_index is not None):
        ap.error("--peer-device and --peer-gid-index are for the in-process mode "
                 "(neither HOST nor --listen)")


def _subparser(ap: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in ap._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[command]
            return sub
    raise LookupError(command)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line, checked (argparse exits with status 2 on an error,
    0 after --help or --version)."""
    if argv is None:
        argv = sys.argv[1:]
    ap, ping = _parsers(json_errors=wants_json(argv))
    args = ap.parse_args(argv)
    sub = _subparser(ap, args.command)
    for action in sub._actions:
        # argparse (3.9-3.12) strips a value "--" ("-i=--") to an empty list
        # instead of converting it: refuse it as argparse refuses a missing one
        if action.nargs is None and action.option_strings \
                and getattr(args, action.dest, None) == []:
            sub.error(f"argument {'/'.join(action.option_strings)}: expected one argument")
    if args.command == "ping":
        _check_ping(ping, args)
    return args
