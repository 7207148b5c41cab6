"""``xengine quicklook``: a PNG of a UVH5 file's last integration."""

from __future__ import annotations

import argparse

from ..console import argtypes
from . import command


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=argtypes.input_file, help="UVH5 file")
    p.add_argument("-o", "--output", type=argtypes.output_file,
                   help="PNG path (default: FILE with .png)")


@command("quicklook", "write a quick-look PNG of a UVH5 file's last integration", _args)
def run(a: argparse.Namespace) -> int:
    from ..outputs.quicklook_png import quicklook_uvh5

    png = a.output or a.file.with_suffix(".png")
    if png.resolve() == a.file.resolve():
        raise argtypes.UsageError("-o/--output", f"{png} would overwrite the UVH5 file")
    try:
        print(quicklook_uvh5(a.file, png))
    except (OSError, KeyError, ValueError) as exc:  # not HDF5, not UVH5, or empty
        raise argtypes.UsageError("file", f"{a.file}: no quick-look made: {exc}") from None
    return 0
