"""``xengine convert``: UVH5 files as a Measurement Set (``.ms``) or UVFITS (``.uvfits``),
phased to a phase centre."""

from __future__ import annotations

import argparse
import sys

from ..console import argtypes
from . import command


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", type=argtypes.input_file,
                   help="unprojected UVH5 files of one array and band, in time order")
    p.add_argument("-o", "--out", type=argtypes.output_file, required=True,
                   help="OUT.ms (a Measurement Set, written a dump at a time) or OUT.uvfits "
                        "(pyuvdata's writer)")
    p.add_argument("--phase-centre", type=argtypes.phase_centre, default="zenith",
                   help="'zenith' (at the first dump) or 'RA,DEC' in degrees (ICRS)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")


@command("convert", "write UVH5 files as a Measurement Set (.ms) or UVFITS (.uvfits), phased",
         _args)
def run(a: argparse.Namespace) -> int:
    from ..outputs.convert import CONVERSIONS, convert
    from ..outputs.errors import OutputWriteError

    suffix = a.out.suffix.lower()
    if suffix not in CONVERSIONS:
        raise argtypes.UsageError("-o/--out", f"{a.out}: must end in "
                                              f"{' or '.join(CONVERSIONS)}")
    if suffix == ".ms":
        problem = argtypes.measurement_sets_available()
        if problem:
            raise argtypes.UsageError("-o/--out", problem)
    if any(a.out.resolve() == f.resolve() for f in a.inputs):
        raise argtypes.UsageError("-o/--out", f"{a.out} is one of the inputs")
    try:
        print(convert(a.inputs, a.out, a.phase_centre, overwrite=a.overwrite))
    except FileExistsError as exc:
        raise argtypes.UsageError("-o/--out", str(exc)) from None
    except (ValueError, KeyError) as exc:
        raise argtypes.UsageError("inputs", str(exc)) from None
    except OutputWriteError as exc:
        print(f"xengine convert: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # not HDF5, unreadable
        raise argtypes.UsageError("inputs", f"{exc}") from None
    return 0
