"""Bit-exact NPU emulator backend ("emulator"): the NPU plan executed on numpy arrays.

Why: it runs the same dataflow plan and kernel arithmetic as the NPU (through
:mod:`xengine_block.npu.host.emulate`) so CI proves the access patterns without hardware. It is
exact but slow, hence a low priority: ``auto`` prefers the CPU backends.

Any S and any number of channel groups: :mod:`xengine_block.npu.host.blockpairs` (shared with the
pyxrt backend) splits the streams into NPU blocks, runs one call per block pair (i <= j) and
channel group, and assembles the triangle; here a call is one plan emulation. ci4 frames run
the ci4 plan (packed bytes to the compute tiles, unpacked there), in calls of at most the
build's P (``design_geometry``), as on the device.
"""

from __future__ import annotations

import numpy as np

from ..geometry import Geometry
from ..npu.design.artifacts import design_geometry
from ..npu.design.dataflow import NpuPlan
from ..npu.design.plan import build_plan
from ..npu.host.blockpairs import BlockPairExecutor, BlockPairJob, correlate_layout_calls
from ..npu.host.emulate import PlanEmulator
from ..npu.host.hostio import input_shape
from ..sample_layout import SampleLayout
from .base import Backend


class EmulatorBackend(Backend):
    """Exact correlator that emulates the NPU dataflow plan (slow; for verification)."""

    name = "emulator"
    priority = 1

    @classmethod
    def availability(cls, geometry: Geometry | None = None) -> tuple[bool, str]:
        return True, "numpy execution of the NPU dataflow plan (exact, slow: for verification)"

    def __init__(self, geometry: Geometry, plan: NpuPlan | None = None) -> None:
        super().__init__(geometry)
        self._fixed_plan = plan
        self._emulators: dict[int, PlanEmulator] = {}
        self.ncalls = 0  # NPU calls made so far (block pairs x channel groups per correlate)

    def emulator_for(self, npacket: int) -> PlanEmulator:
        """The cached emulator of the plan for ``npacket`` frames per call."""
        if npacket not in self._emulators:
            plan = self._fixed_plan
            if plan is None:
                plan = build_plan(self.geometry.replace(npacket=npacket))
            elif plan.geometry.npacket != npacket:
                raise ValueError(f"the given plan integrates {plan.geometry.npacket} packets, "
                                 f"got {npacket} frames")
            self._emulators[npacket] = PlanEmulator(plan)
        return self._emulators[npacket]

    def frames_per_call(self) -> int:
        """A device call's most packets: the P a build for this geometry has."""
        return design_geometry(self.geometry).npacket

    def correlate(self, frames: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        f = self.check_frames(frames)
        if f.shape[0] > self.frames_per_call():
            return self.correlate_frames(f, out)
        return _EmulatorExecutor(self, self.emulator_for(f.shape[0])).submit(f, out).result()

    def correlate_layout(self, data: np.ndarray, layout: SampleLayout,
                         out: np.ndarray | None = None, nframe: int | None = None,
                         accumulate: bool = False,
                         extremes: np.ndarray | None = None) -> np.ndarray:
        """Any layout through the host layout pass into the device's input
        (``blockpairs.fill_inputs_layout``), P packets of spectra per emulated call."""
        if layout == SampleLayout.packet(self.geometry):
            return super().correlate_layout(data, layout, out, nframe, accumulate, extremes)
        nspec = self.layout_spectra(data, layout, nframe, out, accumulate)
        self.add_extremes(extremes, data, layout, nspec // layout.nspectra)
        g = self.geometry

        def submit(t0: int, n: int) -> BlockPairJob:
            npk = -(-n // g.nspectra_pkt)
            return _EmulatorExecutor(self, self.emulator_for(npk)).submit_layout(data, layout,
                                                                                 t0, n)

        return correlate_layout_calls(submit, g, nspec, self.frames_per_call(),
                                      self.new_output() if out is None else out, accumulate)


class _EmulatorExecutor(BlockPairExecutor):
    """Block-pair executor whose NPU call is one run of the plan emulator, done at once."""

    def __init__(self, backend: EmulatorBackend, emu: PlanEmulator) -> None:
        self.geometry = backend.geometry
        self.backend = backend
        self.emu = emu

    def input_buffers(self, frames: np.ndarray | None,
                      npacket: int | None = None) -> list[np.ndarray]:
        shape = input_shape(self.geometry, frames.shape[0] if npacket is None else npacket)
        return [np.empty(shape, np.int8) for _ in range(self.geometry.npu_nblock)]

    def dispatch(self, job: BlockPairJob, group: int, buffers: list[np.ndarray]) -> None:
        result = np.empty(self.emu.plan.host_arg_map["out"].shape, np.int32)
        for i, j in job.pairs:
            self.emu.run({"a": buffers[i], "b": buffers[j], "out": result})
            self.backend.ncalls += 1
            job.add(group, i, j, result)
