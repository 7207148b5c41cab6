"""``xengine combine``: join X-engine instances' UVH5 files along frequency (pyuvdata)."""

from __future__ import annotations

import argparse
import sys

from ..console import argtypes
from . import command


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", type=argtypes.input_path, nargs="+",
                   help="instances' UVH5 files, or directories holding them")
    p.add_argument("-o", "--out", type=argtypes.output_dir, required=True,
                   help="output directory")
    p.add_argument("--overwrite", action="store_true", help="replace existing outputs")


@command("combine", "join X-engine instances' UVH5 files along frequency (pyuvdata)", _args)
def run(a: argparse.Namespace) -> int:
    from ..service.combine import CombineError, combine

    try:
        combine(a.inputs, a.out, overwrite=a.overwrite)
    except (CombineError, OSError) as exc:
        print(f"xengine combine: {exc}", file=sys.stderr)
        return 1
    return 0
