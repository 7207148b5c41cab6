"""The AMD Ryzen AI NPU (AIE2P) correlator: dataflow plan, validator, host layouts, emulator.

- :mod:`.plan`: the array as data (``build_plan(geometry) -> NpuPlan``);
- :mod:`.validate`: hardware limits (``PlanError``, ``PlanReport``), numbers in :mod:`.limits`;
- :mod:`.hostio`: the DDR input and output layouts the host must use;
- :mod:`.emulate`: runs a plan on numpy arrays with :mod:`.kernel_model`;
- :mod:`.hostkernel`: compiles the kernel source (``kernel/xcorr.cc``, package data) with g++
  for tests;
- :mod:`.build`: the mlir-aie build of the design (``python -m xengine_block.npu.build``), its
  outputs in the user cache (:mod:`.cache`).
"""

from .plan import NpuPlan, build_plan
from .validate import PlanError, PlanReport, validate_plan

__all__ = ["NpuPlan", "PlanError", "PlanReport", "build_plan", "validate_plan"]
