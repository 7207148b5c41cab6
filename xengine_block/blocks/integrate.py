"""IntegrateBlock: sums k X-engine frames exactly (int64) into dumps aligned to time_tag
multiples of k * P * 480 spectra, so independent X-engines dump at the same instants.

Inputs (lockstep): visibilities ``ci32 [-1, C, nbl]`` and valid counts ``i64 [-1, G, nbl]``.
Outputs: ``ci64 [-1, C, nbl]`` and ``i64 [-1, G, nbl]``, one frame per dump; header
``nspectra`` = spectra a full dump spans. A first dump that starts mid-integration holds fewer
frames (its valid counts say so). A trailing partial dump at the end of a sequence has no output
span to go to (Bifrost gives none after the last gulp): it is counted in ``dropped_partial`` and
logged. Align recordings and runs to whole dumps to avoid it (``pipelines/fx.py`` does).
"""

from __future__ import annotations

import logging
from typing import Any

from ..integration import Integrator
from ..pipeline import Block, MultiTransformBlock
from ..ring import Ring
from .headers import derive_header, paired_inputs, time_scale

log = logging.getLogger(__name__)


class IntegrateBlock(MultiTransformBlock):
    """Exact accumulation of ``ninteg`` X-engine frames per dump."""

    def __init__(self, vis: Block | Ring, valid: Block | Ring | None = None, *, ninteg: int,
                 **kwargs: Any) -> None:
        super().__init__(paired_inputs(vis, valid), gulp_nframe=1, **kwargs)
        if ninteg < 1:
            raise ValueError(f"ninteg must be >= 1 X-engine frame, got {ninteg}")
        self.ninteg = ninteg
        self.dropped_partial = 0
        self.dumps = 0
        #: Dumps missing some spectra of some baseline (lost packets, gaps, a partial first dump).
        self.dumps_with_gaps = 0

    def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
        hdr = iseqs[0].header
        self.frame_spectra = int(hdr["nspectra"])
        self.integrator = Integrator(self.ninteg, self.frame_spectra)
        self.t0 = iseqs[0].time_tag
        span = self.integrator.span
        start = self.t0 - self.t0 % span
        common = {"nspectra": span, "ninteg": self.ninteg, "gulp_nframe": 1}
        vshape = iseqs[0].header["_tensor"]["shape"]
        cshape = iseqs[1].header["_tensor"]["shape"]
        vis = derive_header(hdr, name=f"{iseqs[0].name}.int{self.ninteg}", dtype="ci64",
                            shape=vshape, labels=["time", "freq", "baseline"],
                            scales=[time_scale(hdr, start, span), None, None],
                            units=["s", "Hz", None], time_tag=start, **common)
        valid = derive_header(iseqs[1].header, name=f"{iseqs[1].name}.int{self.ninteg}",
                              dtype="i64", shape=cshape,
                              labels=["time", "chan_group", "baseline"],
                              scales=[time_scale(hdr, start, span), None, None],
                              units=["s", None, None], time_tag=start, **common)
        return [vis, valid]

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        # a gap can finish two dumps at once
        return [2, 2]

    def on_data(self, ispans: list, ospans: list) -> list[int]:
        n = 0
        for i in range(ispans[0].nframe):
            time_tag = self.t0 + (ispans[0].frame_offset + i) * self.frame_spectra
            for dump in self.integrator.add(time_tag, ispans[0].data[i], ispans[1].data[i]):
                ospans[0].data[n] = dump.vis
                ospans[1].data[n] = dump.valid
                self.dumps_with_gaps += bool((dump.valid < dump.nspectra).any())
                n += 1
        self.dumps += n
        return [n, n]

    def on_sequence_end(self, iseqs: list) -> None:
        for dump in self.integrator.flush():
            self.dropped_partial += 1
            log.warning("%s: end of sequence inside an integration: %d of %d X-engine frames "
                        "at time_tag %d not written", self.name, dump.ninput, self.ninteg,
                        dump.time_tag)
