"""Print the mlir-aie design of the X-engine for a geometry: the MLIR that aiecc compiles.

The design is generated from the same ``NpuPlan`` the emulator verifies, by
``xengine_block/npu/design/mlir.py``; this script only parses arguments::

    S=xengine_block.npu.design.show_design
    python -m $S --geometry published > design.mlir         # needs mlir_aie
    python -m $S --geometry small --calls                   # API calls; no mlir-aie
    python -m $S --geometry published --report              # per-tile memory, BDs
    python -m $S --geometry published --bits 4 --calls      # ci4 design

``aie/design.py`` (the mlir-aie design's entry point beside its ``Makefile``) is this script.

:mod:`.build` runs this step and the rest of the build.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .artifacts import add_geometry_arguments, arguments_geometry
from .mlir import MlirAieUnavailable, design_calls, format_calls, to_mlir
from .plan import build_plan
from .validate import validate_plan


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
        text = validate_plan(plan).summary()
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
