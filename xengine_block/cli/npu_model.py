"""``xengine npu-model``: the NPU plan's predicted speed (modelled, not measured) as one JSON
object, and optionally its modelled schedule as a Chrome / Perfetto trace."""

from __future__ import annotations

import argparse
import json
import sys

from ..console import argtypes
from ..console.argtypes import UsageError
from . import command

DEVICE_NAMES = ("xdna2", "aie-ml-v2")


def _args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--design", choices=("published", "ours"), default="ours",
                   help="the published design (one 256 x 256 block, A and B read separately, "
                        "its C++ host) or ours (Hermitian block pairs, this backend's host)")
    p.add_argument("--nstream", type=argtypes.positive_int, default=256,
                   help="streams S (ours: any even S, split into 256-stream blocks)")
    p.add_argument("--bits", type=argtypes.sample_bits, default=8,
                   help="bits per re/im part on the wire: 8 (ci8) or 4 (ci4)")
    p.add_argument("--device", choices=DEVICE_NAMES, default="xdna2",
                   help="xdna2: Ryzen AI 7 350 NPU; aie-ml-v2: Versal AI Edge Gen2 2VE38xx array")
    p.add_argument("--trace", type=argtypes.output_file, default=None, metavar="FILE",
                   help="write the modelled schedule of a few kernel calls as Chrome / Perfetto "
                        "trace JSON")
    p.add_argument("--trace-calls", type=argtypes.integer(1, 4096), default=8,
                   help="kernel calls the trace shows (default 8)")
    p.add_argument("--figures", action="store_true",
                   help="print the model's table of constants (value, kind, source) instead")


@command("npu-model", "the NPU plan's predicted rate (modelled, not measured) as JSON", _args)
def run(a: argparse.Namespace) -> int:
    from ..backends.npu import predicted, tilings
    from ..npu.design.plan import build_plan
    from ..npu.model import perfmodel, perftrace

    if a.figures:
        print(json.dumps({k: vars(f) for k, f in perfmodel.FIGURES.items()}, indent=2))
        return 0
    g = argtypes.geometry({"nstream": "--nstream", "sample_bits": "--bits"},
                          nstream=a.nstream, sample_bits=a.bits)
    if a.design == "published":
        if a.nstream != g.npu_block:
            raise UsageError("--nstream", f"the published design is one {g.npu_block} x "
                                          f"{g.npu_block} block; got {a.nstream}")
        if a.bits != 8:
            raise UsageError("--bits", "the published design reads ci8 only")
        pred = perfmodel.predict(build_plan(g), a.device)  # the published host by default
    else:
        pred = predicted(g, a.device)
    result = pred.to_dict()
    result["predicted_not_measured"] = True
    result["design_changes"] = perfmodel.design_changes(pred)
    result["made_changes"] = perfmodel.made_changes(pred)
    if a.design == "ours" and a.bits == 8:
        result["tilings"] = tilings(g, a.device)
    if a.design == "published" and a.device == "xdna2":
        result["published_measured"] = perfmodel.published_comparison(pred)
        result["published_bottleneck"] = perfmodel.PUBLISHED_BOTTLENECK
    if a.trace is not None:
        a.trace.write_text(json.dumps(perftrace.chrome_trace(pred, a.trace_calls)) + "\n")
        result["trace"] = str(a.trace)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0
