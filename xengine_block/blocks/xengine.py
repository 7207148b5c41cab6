"""XEngineBlock: capture frames (+ presence mask) in, one packed-triangle frame per P packets out.

Inputs (lockstep): the capture data ring ``i8 [-1, S, C, coarse, 2, fine]`` (the packet layout,
read in place; or ``ci4 [-1, S, C, coarse, fine]`` bytes, from the geometry in the header) or
``ci8 [-1, S, C, 480]`` (natural order, one spectrum after another: converted with one copy per
gulp), and optionally its presence mask ring ``u8 [-1, S]`` (or ``[-1, S, G]``); without a mask
every packet counts as present. Outputs: visibilities ``ci32 [-1, C, nbaseline]`` (DESIGN.md
sections 3 and 5) and the exact valid spectra per baseline ``i64 [-1, G, nbaseline]``. One output
frame per gulp of P input frames, also when some of them were lost (unguaranteed reading): it
holds what arrived and says so in its counts.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from ..backends import get_backend, make_backend
from ..backends.base import Backend
from ..geometry import Geometry
from ..integration import valid_counts
from ..runtime.pipeline import Block, MultiTransformBlock
from ..runtime.ring import Ring
from .base import BlockLogic, common_frames
from .headers import BASELINE_ORDER, derive_header, paired_inputs, require_keys, time_scale

log = logging.getLogger(__name__)

#: Header keys the X-engine reads (docs/bifrost.md); the rest flows on to later blocks.
XENGINE_KEYS = ("geometry", "sync_time", "fs_hz")


class XEngineLogic(BlockLogic):
    """Correlate each gulp of P capture frames with the chosen backend.

    Parameters
    ----------
    data, mask : the capture block (its two output rings), the two rings, or one data ring or
        one-output block (no presence mask: every packet present).
    backend : backend name or ``"auto"`` (NPU when usable, else the fastest exact CPU backend);
        the choice and the reason are logged and put in the output header.
    geometry : the run's geometry, if known when the pipeline is built: the backend is then
        created here rather than at the first sequence, the data ring is sized for this block's
        reads (its pages faulted in: :func:`~xengine_block.runtime.memory.populate`) before any
        packet arrives, and if the backend can read the frames in place
        (the NPU backend with S == npu_block and one channel group: ``backend.zero_copy``) its
        ``allocate_host`` becomes the data ring's allocator, so the capture block writes frames
        straight into NPU buffer objects and ``correlate`` copies nothing (see below).
    backend_options : keyword arguments for the backend's constructor (e.g. ``xrt=``,
        ``build_dir=``, ``nring=``); needs a backend name, not ``"auto"``.

    Why the geometry is given up front: the data ring allocates its memory when its writer
    begins the first sequence (and grows when this block sizes its reads), which happens before
    :meth:`on_sequence` could create the backend, and an allocator can only be installed before
    the first allocation. A lazy allocator asking for the backend later cannot help either:
    building the backend needs the geometry, which is in the sequence header the ring does not
    have yet when it allocates. So the backend is made and the allocator installed in the
    constructor, and the ring is sized there for this block's reads (gulp of P frames,
    ``buffer_nframe`` or ``buffer_factor`` (3) gulps deep), so that it allocates once. If the
    ring already holds memory, or a sequence's geometry differs from the one given (a new
    backend then takes over), frames are copied as before and the log says why.
    """

    def __init__(self, data: Block | Ring, mask: Block | Ring | None = None, *,
                 backend: str = "auto", geometry: Geometry | None = None,
                 backend_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(paired_inputs(data, mask, optional=True), **kwargs)
        if len(self.irings) == 1:  # no mask input: still two outputs
            self.orings = [self.create_ring(space=self.irings[0].space) for _ in range(2)]
        self.backend_name = backend
        self.backend_options = dict(backend_options or {})
        if self.backend_options and backend == "auto":
            raise ValueError("backend_options need a backend name, not 'auto'")
        self.backend: Backend | None = None
        self.geometry: Geometry | None = None
        if geometry is not None:
            self.backend = self._make_backend(geometry)
            self.geometry = geometry
            self._size_input_ring(geometry)

    def _make_backend(self, g: Geometry) -> Backend:
        if self.backend_options:
            backend = make_backend(self.backend_name, g, **self.backend_options)
            backend.choice_reason = (f"requested by name with options "
                                     f"{sorted(self.backend_options)}")
        else:
            backend = get_backend(self.backend_name, g)
        log.info("%s: backend %s (%s)", self.name, backend.name, backend.choice_reason)
        return backend

    def _size_input_ring(self, g: Geometry) -> None:
        """Size the data ring for this block's reads (gulps of P frames, ``buffer_nframe`` or
        ``buffer_factor`` (3) gulps deep) now, before data flows, so that it allocates (and
        faults its pages in) once; in the backend's memory where it reads frames in place."""
        ring = self.irings[0]
        zero_copy = self._zero_copy()
        if self._ring_holds_memory():
            log.info("%s: data ring %r already holds memory; it is not resized here%s", self.name,
                     ring.name, " and frames are copied into NPU buffers (give geometry= before "
                     "the pipeline runs for zero copy)" if zero_copy else "")
            return
        nframe = self.buffer_nframe or math.ceil(g.npacket * (self.buffer_factor or 3))
        self._allocate_input_ring(g.npacket * g.frame_bytes, nframe * g.frame_bytes, zero_copy)

    def _zero_copy(self) -> bool:
        """Whether the backend can lend this runtime's ring its memory (the NPU's buffers)."""
        return (getattr(self.backend, "allocate_host", None) is not None
                and getattr(self.backend, "zero_copy", False))

    def _allocate_input_ring(self, contiguous: int, total: int, zero_copy: bool) -> None:
        ring = self.irings[0]
        if zero_copy:
            ring.set_allocator(self.backend.allocate_host)
            log.info("%s: data ring %r allocated in NPU buffer objects (zero copy)", self.name,
                     ring.name)
        ring.resize(contiguous, total)  # our rings populate what they allocate

    def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
        hdr = iseqs[0].header
        require_keys(hdr, XENGINE_KEYS, self.name)
        g = Geometry.from_dict(hdr["geometry"])
        self._natural = self._input_layout(hdr["_tensor"], g)
        if self.backend is None or self.geometry != g:
            if self.backend is not None:
                log.warning("%s: sequence geometry differs from the backend's; new backend, and "
                            "frames are copied", self.name)
                self.backend.close()  # its BOs live on while the ring's memory uses them
            self.backend = self._make_backend(g)
            if self._ring_holds_memory() and getattr(self.backend, "zero_copy", False):
                log.info("%s: data ring already allocated before the backend existed; frames "
                         "are copied into NPU buffers (give geometry= for zero copy)", self.name)
        self.geometry = g
        self.gulp_nframe = g.npacket  # P capture frames -> one output frame
        self._slot, self._slot_lost = -1, [0] * len(iseqs)
        frame_spectra = g.npacket * g.nspectra_pkt
        ngroup = 1
        if len(iseqs) > 1:
            mask_shape = iseqs[1].header["_tensor"]["shape"]
            ngroup = mask_shape[2] if len(mask_shape) == 3 else 1
        tscale = time_scale(hdr, iseqs[0].time_tag, frame_spectra)
        common = {"nspectra": frame_spectra, "xengine_backend": self.backend.name,
                  "xengine_backend_reason": self.backend.choice_reason,
                  "baseline_order": BASELINE_ORDER, "gulp_nframe": 1}
        vis = derive_header(hdr, name=f"{iseqs[0].name}.vis", dtype="ci32",
                            shape=[-1, g.nchan, g.nbaseline],
                            labels=["time", "freq", "baseline"],
                            scales=[tscale, None, None],
                            units=["s", "Hz", None], time_tag=iseqs[0].time_tag, **common)
        valid = derive_header(hdr, name=f"{iseqs[0].name}.valid", dtype="i64",
                              shape=[-1, ngroup, g.nbaseline],
                              labels=["time", "chan_group", "baseline"],
                              scales=[tscale, None, None],
                              units=["s", None, None], time_tag=iseqs[0].time_tag, **common)
        return [vis, valid]

    def _input_layout(self, tensor: dict[str, Any], g: Geometry) -> bool:
        """True for natural-order ``ci8`` input (one copy per gulp), False for input read in
        place: the packet layout (``g.frame_dtype`` / ``g.frame_shape``: ``i8`` or ``ci4``),
        or ``ci4`` in natural order (``[S, C, 480]`` bytes: the same bytes as the packet
        layout, since a ci4 byte holds re and im). Else one line naming both."""
        dtype, shape = tensor["dtype"], list(tensor["shape"])[1:]
        natural = [g.nstream, g.nchan, g.nspectra_pkt]
        if dtype == g.frame_dtype and shape in (list(g.frame_shape),
                                                 *([natural] if g.ci4 else [])):
            return False
        if dtype == "ci8" and not g.ci4 and shape == natural:
            return True
        dims = ", ".join(map(str, g.frame_shape))
        if g.ci4:
            want = (f"ci4 [-1, {dims}] (packet layout) or ci4 [-1, {', '.join(map(str, natural))}]"
                    f" (natural order), as the header's geometry has sample_bits 4")
        else:
            want = (f"i8 [-1, {dims}] (packet layout) or ci8 [-1, "
                    f"{', '.join(map(str, natural))}] (natural order)"
                    + (" (ci4 input needs sample_bits 4 in the header's geometry)"
                       if dtype == "ci4" else ""))
        raise ValueError(f"{self.name}: input {dtype} {tensor['shape']} is not {want}")

    def _ring_holds_memory(self) -> bool:
        return bool(self.irings[0].total_bytes)

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return [1, 1]

    def _frames(self, span: Any, lo: int, hi: int) -> np.ndarray:
        """Input frames ``[lo, hi)`` of ``span`` in the packet layout (natural: one copy)."""
        x = self.array(span)[lo - span.frame_offset:hi - span.frame_offset]
        g = self.geometry
        if not self._natural:  # a view (ci4 [n, S, C, 480] -> [n, S, C, coarse, fine])
            return x.reshape(x.shape[0], *g.frame_shape)
        # [n, S, C, coarse*fine, 2] -> [n, S, C, coarse, 2, fine]
        x = x.reshape(x.shape[0], g.nstream, g.nchan, g.ncoarse, g.nfine, 2)
        return np.ascontiguousarray(x.transpose(0, 1, 2, 3, 5, 4))

    def on_data(self, ispans: list, ospans: list) -> list[int]:
        lo, hi = common_frames(ispans)
        vis, valid = self.array(ospans[0])[0], self.array(ospans[1])[0]
        if hi > lo:
            self.backend.correlate(self._frames(ispans[0], lo, hi), out=vis)
            if len(ispans) > 1:
                m0 = ispans[1].frame_offset
                mask = self.array(ispans[1])[lo - m0:hi - m0]
                valid[...] = valid_counts(mask, self.geometry)
            else:
                valid[...] = (hi - lo) * self.geometry.nspectra_pkt
        if hi > lo and self.overwritten(ispans):
            self.lost_frames += hi - lo  # read while the writer came back: not trusted
            hi = lo
        if hi <= lo:
            self._no_data(ospans)
        self._slot = ispans[0].frame_offset // self.gulp_nframe
        return [1, 1]

    def _no_data(self, ospans: list) -> None:
        for ospan in ospans:
            self.array(ospan)[0] = 0
        self.nodata_outputs += 1

    def on_skip(self, lost: list[slice], ospans: list) -> list[int]:
        """Lost input: the gulp's output says so (zero valid spectra) once all of it is lost;
        a gulp partly lost is output by on_data from what arrived."""
        P = self.gulp_nframe
        slot = min(sl.start for sl in lost) // P
        if slot != self._slot:
            self._slot, self._slot_lost = slot, [0] * len(lost)
        self._slot_lost = [n + sl.stop - sl.start
                           for n, sl in zip(self._slot_lost, lost, strict=True)]
        if all(n >= P for n in self._slot_lost):
            self._no_data(ospans)
            self._slot_lost = [0] * len(lost)
            return [1, 1]
        return [0, 0]


class XEngineBlock(XEngineLogic, MultiTransformBlock):
    __doc__ = XEngineLogic.__doc__
