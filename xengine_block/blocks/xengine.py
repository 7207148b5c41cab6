"""XEngineBlock: capture frames + presence mask in, one packed-triangle frame per P packets out.

Inputs (lockstep): the capture data ring ``i8 [-1, S, C, coarse, 2, fine]`` (or ``ci4
[-1, S, C, coarse, fine]`` bytes, from the geometry in the header) and its presence
mask ring ``u8 [-1, S]`` (or ``[-1, S, G]``). Outputs: visibilities ``ci32 [-1, C, nbaseline]``
(DESIGN.md sections 3 and 5) and the exact valid spectra per baseline ``i64 [-1, G, nbaseline]``.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from ..backends import get_backend, make_backend
from ..backends.base import Backend
from ..geometry import Geometry
from ..integration import valid_counts
from ..pipeline import Block, MultiTransformBlock
from ..ring import Ring
from .headers import BASELINE_ORDER, derive_header, paired_inputs, time_scale

log = logging.getLogger(__name__)


class XEngineBlock(MultiTransformBlock):
    """Correlate each gulp of P capture frames with the chosen backend.

    Parameters
    ----------
    data, mask : the capture block (its two output rings) or the two rings.
    backend : backend name or ``"auto"`` (NPU when usable, else the fastest exact CPU backend);
        the choice and the reason are logged and put in the output header.
    geometry : the run's geometry, if known when the pipeline is built: the backend is then
        created here rather than at the first sequence, and if it can read the frames in place
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
        super().__init__(paired_inputs(data, mask), **kwargs)
        self.backend_name = backend
        self.backend_options = dict(backend_options or {})
        if self.backend_options and backend == "auto":
            raise ValueError("backend_options need a backend name, not 'auto'")
        self.backend: Backend | None = None
        self.geometry: Geometry | None = None
        if geometry is not None:
            self.backend = self._make_backend(geometry)
            self.geometry = geometry
            self._use_backend_memory(geometry)

    def _make_backend(self, g: Geometry) -> Backend:
        if self.backend_options:
            backend = make_backend(self.backend_name, g, **self.backend_options)
            backend.choice_reason = (f"requested by name with options "
                                     f"{sorted(self.backend_options)}")
        else:
            backend = get_backend(self.backend_name, g)
        log.info("%s: backend %s (%s)", self.name, backend.name, backend.choice_reason)
        return backend

    def _use_backend_memory(self, g: Geometry) -> bool:
        """Make the data ring allocate through the backend, if it can read frames in place."""
        allocate = getattr(self.backend, "allocate_host", None)
        if allocate is None or not getattr(self.backend, "zero_copy", False):
            return False
        ring = self.irings[0]
        if ring.total_bytes:
            log.info("%s: data ring %r already holds memory; frames are copied into NPU buffers "
                     "(give geometry= before the pipeline runs for zero copy)", self.name,
                     ring.name)
            return False
        ring.set_allocator(allocate)
        gulp = g.npacket
        nframe = self.buffer_nframe or math.ceil(gulp * (self.buffer_factor or 3))
        ring.resize(gulp * g.frame_bytes, nframe * g.frame_bytes)
        log.info("%s: data ring %r allocated in NPU buffer objects (zero copy)", self.name,
                 ring.name)
        return True

    def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
        hdr = iseqs[0].header
        g = Geometry.from_dict(hdr["geometry"])
        if self.backend is None or self.geometry != g:
            if self.backend is not None:
                log.warning("%s: sequence geometry differs from the backend's; new backend, and "
                            "frames are copied", self.name)
                self.backend.close()  # its BOs live on while the ring's memory uses them
            self.backend = self._make_backend(g)
            if self.irings[0].total_bytes and getattr(self.backend, "zero_copy", False):
                log.info("%s: data ring already allocated before the backend existed; frames "
                         "are copied into NPU buffers (give geometry= for zero copy)", self.name)
        self.geometry = g
        self.gulp_nframe = g.npacket  # P capture frames -> one output frame
        frame_spectra = g.npacket * g.nspectra_pkt
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
                            units=["s", "Hz", None], **common)
        valid = derive_header(hdr, name=f"{iseqs[0].name}.valid", dtype="i64",
                              shape=[-1, ngroup, g.nbaseline],
                              labels=["time", "chan_group", "baseline"],
                              scales=[tscale, None, None],
                              units=["s", None, None], **common)
        return [vis, valid]

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        return [1, 1]

    def on_data(self, ispans: list, ospans: list) -> list[int]:
        frames, mask = ispans[0].data, ispans[1].data
        self.backend.correlate(frames, out=ospans[0].data[0])
        ospans[1].data[0] = valid_counts(mask, self.geometry)
        return [1, 1]

    def on_skip(self, islices: list, ospans: list) -> list[int]:
        """Lost input (unguaranteed reading): zero visibilities with zero valid spectra."""
        for ospan in ospans:
            ospan.data[...] = 0
        return [ospan.nframe for ospan in ospans]
