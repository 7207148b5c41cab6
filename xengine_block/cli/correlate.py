"""``xengine correlate``: a live X-engine instance (UDP F-engine packets -> UVH5 files) until
SIGTERM; the config keys and flags are :mod:`xengine_block.service.config`'s."""

from __future__ import annotations

import argparse
import sys

from ..console import argtypes
from ..service.config import KEYS, add_flags
from . import command


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=argtypes.input_file, nargs="?",
                   help="TOML configuration (docs/deploy.md); flags override its keys")
    add_flags(p)


@command("correlate", "live X-engine: UDP F-engine packets -> UVH5 files until SIGTERM", _args)
def run(a: argparse.Namespace) -> int:
    from ..runtime.pipeline import PipelineError, frozen_heap
    from ..service.config import ConfigError, load_config
    from ..service.live import CorrelatorService, ServiceError

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
    try:
        with frozen_heap():  # this process is the service's: its collector is ours to freeze
            service.run()
    except PipelineError as exc:  # files already written are complete and stay
        print(f"xengine correlate: {exc}", file=sys.stderr)
        return 1
    return 0
