"""The operator's surface: ``xengine correlate`` (a live X-engine instance), its Prometheus
metrics, and ``xengine combine`` (join instances' files along frequency).

Modules: :mod:`.config` (keys, flags, validation), :mod:`.sources` (UDP/multicast sockets),
:mod:`.correlate` (the service), :mod:`.metrics` (Prometheus), :mod:`.combine` (pyuvdata).
This module only registers the subcommands; ``docs/deploy.md`` is the operator's guide.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..cli import command
from ..tools import argtypes
from .config import KEYS, add_flags


def _correlate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=Path, nargs="?",
                   help="TOML configuration (docs/deploy.md); flags override its keys")
    add_flags(p)


@command("correlate", "live X-engine: UDP F-engine packets -> UVH5 files until SIGTERM",
         _correlate_args)
def _correlate(a: argparse.Namespace) -> int:
    from .config import ConfigError, load_config
    from .correlate import CorrelatorService, ServiceError

    where = f"{a.config}: " if a.config else ""
    try:
        cfg = load_config(a.config, {k.name: getattr(a, k.name) for k in KEYS})
    except ConfigError as exc:
        print(f"xengine correlate: {where}{exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"xengine correlate: cannot read {a.config}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    try:
        service = CorrelatorService(cfg)
    except ServiceError as exc:
        print(f"xengine correlate: {exc}", file=sys.stderr)
        return 1
    from ..runtime.pipeline import PipelineError
    try:
        service.run()
    except PipelineError as exc:  # files already written are complete and stay
        print(f"xengine correlate: {exc}", file=sys.stderr)
        return 1
    return 0


def _existing(text: str) -> Path:
    """An existing file or directory (combine takes both)."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{text!r}: no such file or directory")
    return path


def _combine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", type=_existing, nargs="+",
                   help="instances' UVH5 files, or directories holding them")
    p.add_argument("-o", "--out", type=argtypes.output_dir, required=True,
                   help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs")


@command("combine", "join X-engine instances' UVH5 files along frequency (pyuvdata)",
         _combine_args)
def _combine(a: argparse.Namespace) -> int:
    from .combine import CombineError, combine

    try:
        combine(a.inputs, a.out, overwrite=a.overwrite)
    except (CombineError, OSError) as exc:
        print(f"xengine combine: {exc}", file=sys.stderr)
        return 1
    return 0
