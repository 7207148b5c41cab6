"""Bit-exact NPU emulator backend ("emulator"): the NPU plan executed on numpy arrays.

Why: it runs the same dataflow plan and kernel arithmetic as the NPU (through
:mod:`xengine_block.npu.emulate`) so CI proves the access patterns without hardware. It is exact
but slow, hence a low priority: ``auto`` prefers the CPU backends.

Any S and any number of channel groups: streams are split into NPU blocks of ``npu_block`` (the
last zero-padded) and only block pairs (i <= j) are computed, each as one NPU call with A = block
i and B = block j; Hermitian symmetry gives the rest. One call per channel group of
``nchan_pkt`` channels.
"""

from __future__ import annotations

import numpy as np

from ..geometry import Geometry
from ..npu import hostio
from ..npu.emulate import PlanEmulator
from ..npu.plan import NpuPlan, build_plan
from ..triangle import pack_triangle
from .base import Backend


class EmulatorBackend(Backend):
    """Exact correlator that emulates the NPU dataflow plan (slow; for verification)."""

    name = "emulator"
    priority = 1

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

    def correlate(self, frames: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        f = self.check_frames(frames)
        g = self.geometry
        npacket, blk = f.shape[0], g.npu_block
        emu = self.emulator_for(npacket)
        args = emu.plan.host_arg_map
        spad = g.npu_nblock * blk
        re = np.zeros((g.nchan, spad, spad), np.int32)
        im = np.zeros_like(re)
        for group in range(g.nchan_group):
            inputs = [hostio.npu_input(f, g, block, group) for block in range(g.npu_nblock)]
            chans = slice(group * g.nchan_pkt, (group + 1) * g.nchan_pkt)
            for i, j in g.npu_block_pairs:
                result = np.zeros(args["out"].shape, np.int32)
                emu.run({"a": inputs[i], "b": inputs[j], "out": result})
                self.ncalls += 1
                blk_re, blk_im = hostio.npu_output_to_matrix(result, g)
                re[chans, i * blk:(i + 1) * blk, j * blk:(j + 1) * blk] = blk_re
                im[chans, i * blk:(i + 1) * blk, j * blk:(j + 1) * blk] = blk_im
        tri = pack_triangle(re[:, :g.nstream, :g.nstream], im[:, :g.nstream, :g.nstream])
        if out is not None:
            out[...] = tri
            return out
        return tri
