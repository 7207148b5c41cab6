"""``xengine`` command line: parses arguments and calls library code, nothing more.

Subcommands register themselves in ``COMMANDS`` (name -> (help, add_arguments, run)), so each
feature keeps its options next to its code. Options are checked with the shared argparse types
of :mod:`~xengine_block.tools.argtypes`; a check that needs several options raises
:class:`~xengine_block.tools.argtypes.UsageError` from ``run``, which ``main`` reports like argparse
(one line naming the option, exit status 2) before the command has done anything.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable

from .tools import argtypes
from .tools.argtypes import UsageError

Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
COMMANDS: dict[str, Command] = {}


def command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None]):
    """Decorator registering ``run(args) -> exit status`` as subcommand ``name``."""
    def register(run: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = (help, add_arguments, run)
        return run
    return register


def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", type=argtypes.backend_name, default="auto",
                   help="backend name or 'auto'")
    p.add_argument("--nstream", type=argtypes.positive_int, default=256)
    p.add_argument("--nchan", type=argtypes.positive_int, default=9)
    p.add_argument("--npacket", type=argtypes.positive_int, default=136)
    p.add_argument("--repeat", type=argtypes.positive_int, default=2)


@command("bench", "measure a correlator backend against numpy peers (JSON)", _bench_args)
def _bench(a: argparse.Namespace) -> int:
    from .backends import BackendUnavailable, choose_backend
    from .tools import benchmarking
    g = argtypes.geometry({"nstream": "--nstream", "nchan": "--nchan", "npacket": "--npacket"},
                          nstream=a.nstream, nchan=a.nchan, npacket=a.npacket)
    try:
        choose_backend(a.backend, g)
    except BackendUnavailable as exc:
        raise UsageError("--backend", str(exc)) from None
    result = benchmarking.run(a.backend, a.nstream, a.nchan, a.npacket, a.repeat,
                              with_scaling=False)  # the sweep: benchmarks/bench_correlator.py
    print(json.dumps(result, indent=2))
    return 0 if result["exact"] else 1


@command("backends", "list correlator backends and whether they can run here", lambda p: None)
def _backends(a: argparse.Namespace) -> int:
    from .backends import availability, choose_backend
    for name, (ok, reason) in availability().items():
        print(f"{name:10s} {'yes' if ok else 'no ':3s}  {reason}")
    print("auto ->", *choose_backend("auto"))
    return 0


def build_parser() -> argparse.ArgumentParser:
    # Import modules that add subcommands (kept optional so a missing extra only hides them).
    for module in ("outputs.quicklook", "tools.reprocess", "capture.record", "service"):
        try:
            __import__(f"xengine_block.{module}")
        except ImportError:
            pass
    parser = argtypes.ArgumentParser(prog="xengine", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_, add_arguments, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        add_arguments(p)
        p.set_defaults(run=run, parser=p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        with argtypes.usage_errors(args.parser):
            return args.run(args)
    except KeyboardInterrupt:  # finished outputs are kept; a rerun resumes after them
        print(f"xengine {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # Run as ``python -m xengine_block.cli`` this file is ``__main__``, but subcommands register
    # in ``xengine_block.cli``: use that module, so both entry points see every subcommand.
    from xengine_block.cli import main as _main
    sys.exit(_main())
