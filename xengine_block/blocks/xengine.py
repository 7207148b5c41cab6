"""XEngineBlock: capture frames + presence mask in, one packed-triangle frame per P packets out.

Inputs (lockstep): the capture data ring ``i8 [-1, S, C, coarse, 2, fine]`` and its presence
mask ring ``u8 [-1, S]`` (or ``[-1, S, G]``). Outputs: visibilities ``ci32 [-1, C, nbaseline]``
(DESIGN.md sections 3 and 5) and the exact valid spectra per baseline ``i64 [-1, G, nbaseline]``.
"""

from __future__ import annotations

import logging
from typing import Any

from ..backends import get_backend
from ..backends.base import Backend
from ..geometry import Geometry
from ..integration import valid_counts
from ..pipeline import Block, MultiTransformBlock
from ..ring import Ring
from .headers import BASELINE_ORDER, derive_header, time_scale

log = logging.getLogger(__name__)


class XEngineBlock(MultiTransformBlock):
    """Correlate each gulp of P capture frames with the chosen backend.

    Parameters
    ----------
    data, mask : the capture block (its two output rings) or the two rings.
    backend : backend name or ``"auto"`` (NPU when usable, else the fastest exact CPU backend);
        the choice and the reason are logged and put in the output header.
    """

    def __init__(self, data: Block | Ring, mask: Block | Ring | None = None, *,
                 backend: str = "auto", **kwargs: Any) -> None:
        if mask is None:  # a capture block: its two outputs
            mask = data.orings[1]  # type: ignore[union-attr]
            data = data.orings[0]  # type: ignore[union-attr]
        super().__init__([data, mask], **kwargs)
        self.backend_name = backend
        self.backend: Backend | None = None
        self.geometry: Geometry | None = None

    def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
        hdr = iseqs[0].header
        g = Geometry.from_dict(hdr["geometry"])
        if self.backend is None or self.geometry != g:
            if self.backend is not None:
                self.backend.close()
            self.backend = get_backend(self.backend_name, g)
            log.info("%s: backend %s (%s)", self.name, self.backend.name,
                     self.backend.choice_reason)
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
