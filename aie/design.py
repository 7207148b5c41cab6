"""The mlir-aie design of the X-engine: prints the MLIR that ``aiecc`` compiles for a geometry.

The design is generated from the package's dataflow plan (``xengine_block.npu.design``), the
same plan the emulator runs bit for bit; this entry point only passes its arguments on::

    python aie/design.py --geometry published > design.mlir    # needs mlir-aie
    python aie/design.py --geometry small --calls              # the mlir-aie calls, no mlir-aie

``make -C aie`` builds the xclbin (kernel object, MLIR, aiecc) through the package's build
module; see the Makefile beside this file and docs/npu_hardware.md.
"""

from __future__ import annotations

import sys

from xengine_block.npu.design.show_design import main

if __name__ == "__main__":
    sys.exit(main())
