"""``xengine`` command line: parses arguments and calls library code, nothing more.

One thin module per subcommand (``cli/bench.py``, ``cli/reprocess.py``, ...) declares its
options and registers ``run`` in ``COMMANDS`` (name -> (help, add_arguments, run)) with
``@command``; the library never imports this package (the command line sits on top of the
layers, not inside them). A module whose optional dependency is missing only hides its
subcommand. Options are checked with the shared argparse types of
:mod:`~xengine_block.console.argtypes`; a check that needs several options raises
:class:`~xengine_block.console.argtypes.UsageError` from ``run``, which ``main`` reports like
argparse (one line naming the option, exit status 2) before the command has done anything.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable

from ..console import argtypes

Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]
COMMANDS: dict[str, Command] = {}
#: The subcommands, in the order ``xengine --help`` lists them; each is the module of its name
#: with ``-`` as ``_`` (``npu-model``: ``cli/npu_model.py``).
SUBCOMMANDS = ("bench", "backends", "npu-model", "quicklook", "record", "reprocess", "correlate",
               "combine", "convert", "view")
#: What ``xengine --help`` opens with: what the tool does, for the people who run it.
DESCRIPTION = """\
An exact X-engine correlator for radio astronomy: the live correlator service,
reprocessing of voltage recordings into UVH5, and the tools around them."""
#: The everyday commands, listed after the subcommands by ``xengine --help``.
EVERYDAY = """\
everyday commands:
  xengine correlate x0.toml     the live correlator (SIGTERM stops, SIGHUP re-reads x0.toml)
  xengine reprocess REC -o OUT  correlate recordings (pcap, GUPPI RAW, ...) into UVH5 files
  xengine backends              which correlator backends run on this machine, and why
  xengine SUBCOMMAND --help     one subcommand's options
"""


def command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None]):
    """Decorator registering ``run(args) -> exit status`` as subcommand ``name``."""
    def register(run: Callable[[argparse.Namespace], int]):
        COMMANDS[name] = (help, add_arguments, run)
        return run
    return register


def build_parser() -> argparse.ArgumentParser:
    # Import the modules that add subcommands (a missing optional extra only hides its own).
    for module in SUBCOMMANDS:
        try:
            importlib.import_module(f"{__name__}.{module.replace('-', '_')}")
        except ImportError as exc:
            logging.getLogger(__name__).debug("subcommand module %s not loaded: %s", module, exc)
    parser = argtypes.ArgumentParser(prog="xengine", description=DESCRIPTION, epilog=EVERYDAY,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (help_, add_arguments, run) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        add_arguments(p)
        p.set_defaults(run=run, parser=p)
    return parser


def subcommand_parsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands' parsers of ``parser`` (a :func:`build_parser`), by name, in the order
    ``--help`` lists them: for what renders or checks every subcommand's help."""
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)  # argparse keeps them there, with no public accessor


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

