"""IntegrateBlock: sums X-engine frames exactly (int64) into dumps of a whole number of them
(``ninteg`` frames, or ``integration_spectra`` spectra), aligned to absolute spectrum counts
(dump ``time_tag``s are multiples of the dump's spectra), so independent X-engines dump at the
same instants.

Inputs (lockstep): visibilities ``ci32 [-1, C, nbl]`` and valid counts ``i64 [-1, G, nbl]``;
or integer visibilities in the TCC or Bifrost matrix order (``xengine_block.bifrost.correlate``
with ``dtype='ci32'``, converted per frame by :func:`~xengine_block.visibility_orders.
as_triangle`), with or without valid counts (without: every spectrum counts). Float input
(``cf32``) is refused: its sums would not be exact.
Outputs: ``ci64 [-1, C, nbl]`` and ``i64 [-1, G, nbl]``, one frame per dump; header
``nspectra`` = spectra a full dump spans, ``ninteg`` = X-engine frames in it. A first dump that
starts mid-integration holds fewer frames (its valid counts say so). A trailing partial dump at
the end of a sequence has no output span to go to (Bifrost gives none after the last gulp): it
is counted in ``dropped_partial`` and logged. Align recordings and runs to whole dumps to avoid
it (``pipelines/fx.py`` does). X-engine frames lost to an unguaranteed reader
(``guarantee=False``) count as frames with no valid spectra: the dumps they fall in are emitted
all the same, each exactly once, and a dump whose every frame was lost is all zeros with zero
valid counts (flagged, nsamples 0, in UVH5).
"""

from __future__ import annotations

import logging
import numbers
from typing import Any

import numpy as np

from ..geometry import Geometry
from ..integration import Integrator
from ..runtime.pipeline import Block, MultiTransformBlock
from ..runtime.ring import Ring
from ..visibility_orders import TRIANGLE_ORDER, as_triangle, stations_pols, visibility_order
from .base import BlockLogic, common_frames, lost_frames_any
from .headers import derive_header, paired_inputs, require_keys, time_scale, visibility_frame_bytes

log = logging.getLogger(__name__)


#: Header keys the integrator reads (docs/bifrost.md).
INTEGRATE_KEYS = ("nspectra", "sync_time", "fs_hz")


class IntegrateLogic(BlockLogic):
    """Exact accumulation of X-engine frames into dumps.

    Parameters
    ----------
    vis, valid : the X-engine block (its two outputs), or its two rings.
    ninteg : X-engine frames per dump.
    integration_spectra : instead of ``ninteg``, spectra per dump: a whole number of the
        X-engine's frames (its header's ``nspectra``; checked at each sequence, one line if
        not). The service's ``correlator.integration_spectra``.
    geometry : the run's geometry, if known when the pipeline is built: the output rings are
        then faulted in now rather than when the writer opens its first sequence
        (:meth:`~.base.BlockLogic.size_output_rings`).
    """

    def __init__(self, vis: Block | Ring, valid: Block | Ring | None = None, *,
                 ninteg: int | None = None, integration_spectra: int | None = None,
                 geometry: Geometry | None = None, **kwargs: Any) -> None:
        super().__init__(paired_inputs(vis, valid, optional=True), gulp_nframe=1, **kwargs)
        if len(self.irings) == 1:  # no valid-counts input: still two outputs
            self.orings = [self.create_ring(space=self.irings[0].space) for _ in range(2)]
        if (ninteg is None) == (integration_spectra is None):
            raise ValueError("give the dump length as ninteg (X-engine frames) or "
                             "integration_spectra (spectra), one of them")
        for name, v in (("ninteg", ninteg), ("integration_spectra", integration_spectra)):
            if v is not None and (not isinstance(v, numbers.Integral) or isinstance(v, bool)
                                  or v < 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.ninteg = ninteg
        self.integration_spectra = integration_spectra
        if geometry is not None:  # one input frame a gulp: 2 output frames reserved at most
            self.size_output_rings(visibility_frame_bytes(geometry, 16), 2)
        self.dropped_partial = 0
        self.dumps = 0
        #: Dumps missing some spectra of some baseline (lost packets, gaps, a partial first dump).
        self.dumps_with_gaps = 0

    def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
        hdr = iseqs[0].header
        require_keys(hdr, INTEGRATE_KEYS, self.name)
        self.frame_spectra = int(hdr["nspectra"])
        if self.integration_spectra is not None:
            if self.integration_spectra % self.frame_spectra:
                raise ValueError(f"{self.name}: integration_spectra {self.integration_spectra} "
                                 f"is not a whole number of the X-engine's frames of "
                                 f"{self.frame_spectra} spectra (header nspectra)")
            self.ninteg = self.integration_spectra // self.frame_spectra
        # Dumps are copied into the output ring at once: the sums can live in buffers used
        # again for every dump (Integrator, ``reuse``).
        self.integrator = Integrator(self.ninteg, self.frame_spectra, reuse=True)
        self.t0 = iseqs[0].time_tag
        self.order = visibility_order(hdr)
        dtype = hdr["_tensor"]["dtype"]
        if not dtype.startswith("ci"):
            raise ValueError(f"{self.name}: visibilities of dtype {dtype!r} cannot be integrated "
                             f"exactly; give integer ones (ci32: correlate(dtype='ci32'))")
        self._added = 0  # next input frame to add (those before it were added or lost)
        span = self.integrator.span
        start = self.t0 - self.t0 % span
        common = {"nspectra": span, "ninteg": self.ninteg, "gulp_nframe": 1}
        vshape = list(hdr["_tensor"]["shape"])
        if self.order != TRIANGLE_ORDER:  # TCC / matrix in, our triangle out
            nstation, npol = stations_pols(hdr)
            s = nstation * npol
            vshape = [-1, int(vshape[1]), s * (s + 1) // 2]
        cshape = (list(iseqs[1].header["_tensor"]["shape"]) if len(iseqs) > 1
                  else [-1, 1, vshape[2]])
        vhdr = {k: v for k, v in hdr.items() if k not in ("visibility_order", "matrix_fill_mode")}
        self._zeros = (np.zeros(vshape[1:] + [2], np.int64), np.zeros(cshape[1:], np.int64))
        self._full = np.full(cshape[1:], self.frame_spectra, np.int64)
        self.hdr = hdr
        vis = derive_header(vhdr, name=f"{iseqs[0].name}.int{self.ninteg}", dtype="ci64",
                            shape=vshape, labels=["time", "freq", "baseline"],
                            scales=[time_scale(hdr, start, span), None, None],
                            units=["s", "Hz", None], time_tag=start, **common)
        valid = derive_header(iseqs[1].header if len(iseqs) > 1 else vhdr,
                              name=(f"{iseqs[1].name}.int{self.ninteg}" if len(iseqs) > 1
                                    else f"{iseqs[0].name}.valid.int{self.ninteg}"),
                              dtype="i64", shape=cshape,
                              labels=["time", "chan_group", "baseline"],
                              scales=[time_scale(hdr, start, span), None, None],
                              units=["s", None, None], time_tag=start, **common)
        return [vis, valid]

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        # n frames complete at most ceil(n / ninteg) dumps, plus one left open before a gap.
        # No more: Bifrost's writer reserving more than its readers' rings hold beyond their
        # gulp deadlocks lockstep readers (one input waits for data, the other holds space).
        n = -(-max(input_nframes) // self.ninteg) + 1
        return [n, n]

    def _add(self, frame: int, vis: np.ndarray, valid: np.ndarray, outs: tuple, n: int) -> int:
        """Add input frame number ``frame``; write the dumps it completes at ``outs[.][n:]``."""
        time_tag = self.t0 + frame * self.frame_spectra
        for dump in self.integrator.add(time_tag, vis, valid):
            outs[0][n] = dump.vis
            outs[1][n] = dump.valid
            if not dump.valid.any():
                self.nodata_outputs += 1
            self.dumps_with_gaps += bool((dump.valid < dump.nspectra).any())
            n += 1
        self._added = frame + 1
        return n

    def on_data(self, ispans: list, ospans: list) -> list[int]:
        lo, hi = common_frames(ispans)
        vis = self.array(ispans[0])
        frames = [(self._triangle(vis[f - ispans[0].frame_offset]), self._valid(ispans, f))
                  for f in range(max(lo, self._added), hi)]
        if not self.guarantee:  # copy first, then check the writer did not come back
            frames = [(v.copy(), c.copy()) for v, c in frames]
            if self.overwritten(ispans):
                frames = [self._zeros] * len(frames)
                self.lost_frames += len(frames)
        outs, n = (self.array(ospans[0]), self.array(ospans[1])), 0
        for f, (v, c) in zip(range(max(lo, self._added), hi), frames, strict=True):
            n = self._add(f, v, c, outs, n)
        self.dumps += n
        return [n, n]

    def _triangle(self, vis: np.ndarray) -> np.ndarray:
        """One input frame in our triangle order (a view of ours; a conversion of the others)."""
        return vis if self.order == TRIANGLE_ORDER else as_triangle(vis, self.hdr)

    def _valid(self, ispans: list, f: int) -> np.ndarray:
        """Valid counts of input frame ``f``: its input, or every spectrum without one."""
        if len(ispans) < 2:
            return self._full
        return self.array(ispans[1])[f - ispans[1].frame_offset]

    def on_skip(self, lost: list[slice], ospans: list) -> list[int]:
        """Lost X-engine frames add nothing but still end the dumps they fall in."""
        outs, n = (self.array(ospans[0]), self.array(ospans[1])), 0
        for f in lost_frames_any(lost):
            if f >= self._added:
                n = self._add(f, *self._zeros, outs, n)
        self.dumps += n
        return [n, n]

    def on_sequence_end(self, iseqs: list) -> None:
        for dump in self.integrator.flush():
            self.dropped_partial += 1
            log.warning("%s: end of sequence inside an integration: %d of %d X-engine frames "
                        "at time_tag %d not written", self.name, dump.ninput, self.ninteg,
                        dump.time_tag)


class IntegrateBlock(IntegrateLogic, MultiTransformBlock):
    __doc__ = IntegrateLogic.__doc__
