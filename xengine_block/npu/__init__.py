"""The AMD Ryzen AI NPU (AIE2P) correlator, by role:

- :mod:`.design`: the dataflow plan as data (``build_plan(geometry) -> NpuPlan``), its
  validator against the hardware limits, the mlir-aie design generated from it and the build
  of the xclbin (``python -m xengine_block.npu.design.build``, or ``make -C aie``);
- :mod:`.model`: the performance model of a plan (``xengine npu-model``) and its trace;
- :mod:`.host`: what runs on the host: the DDR layouts, the bit-exact emulator of a plan, the
  kernel source compiled with g++ for tests, the native ring loop and the simulated device.

The design imports neither of the others; the model and the host import the design only.
"""

from .design.dataflow import NpuPlan
from .design.plan import build_plan
from .design.validate import PlanError, PlanReport, validate_plan

__all__ = ["NpuPlan", "PlanError", "PlanReport", "build_plan", "validate_plan"]
