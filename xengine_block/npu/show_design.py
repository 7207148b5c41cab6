"""Print the mlir-aie design of the X-engine for a geometry: the MLIR that aiecc compiles.

The design is generated from the same ``NpuPlan`` the emulator verifies, by
``xengine_block/npu/design.py``; this script only parses arguments::

    python -m xengine_block.npu.show_design --geometry published > design.mlir  # needs mlir_aie
    python -m xengine_block.npu.show_design --geometry small --calls  # API calls; no mlir-aie
    python -m xengine_block.npu.show_design --geometry published --report  # per-tile memory, BDs
    python -m xengine_block.npu.show_design --geometry published --bits 4 --calls  # ci4 design

:mod:`.build` runs this step and the rest of the build.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import build_plan
from .artifacts import add_geometry_arguments, arguments_geometry
from .design import MlirAieUnavailable, design_calls, format_calls, to_mlir


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_geometry_arguments(p, "published")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--calls", action="store_true",
                      help="print the recorded mlir-aie calls instead of MLIR (no mlir-aie)")
    what.add_argument("--report", action="store_true",
                      help="print the plan's per-tile resource use (no mlir-aie)")
    p.add_argument("-o", "--output", type=Path, help="write here instead of stdout")
    a = p.parse_args(argv)
    plan = build_plan(arguments_geometry(a, a.geometry))
    if a.calls:
        text = format_calls(design_calls(plan))
    elif a.report:
        text = plan.validate().summary()
    else:
        try:
            text = to_mlir(plan)
        except MlirAieUnavailable as exc:
            print(f"show_design: {exc}", file=sys.stderr)
            return 2
    if a.output:
        a.output.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
