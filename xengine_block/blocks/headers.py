"""The header contract between blocks (docs/design.md, "Ring headers"): how a block's output
header is derived from its input's, what the frequency and time axes are, how a block takes a
paired input, and what the X-engine's data ring holds, read from its sequence header
(:func:`xengine_input`).

The X-engine's input (docs/bifrost.md, "Header contract"): the samples'
:class:`~xengine_block.sample_layout.SampleLayout`, the backend geometry that follows from it,
and the spectra one output integrates by default.

The first of these that the header has decides:

1. ``sample_layout`` (``SampleLayout.to_dict()``): authoritative, any layout; the ring's frame
   (``_tensor``) must be ``frame_bytes`` long.
2. ``_tensor`` ``labels`` that name a layout's axes (:meth:`SampleLayout.from_tensor`):
   Bifrost's ``['time', 'freq', 'station', 'pol']`` (``stand`` for ``station``), a merged
   ``stand*pol`` axis (labels ``stream`` or ``input``, or ``station``/``stand`` with no ``pol``
   axis, as Bifrost's ``correlate_dp4a`` and the LWA capture rings mean it), optional
   ``fine_time``, any axis order; dtype ``ci4``, ``ci8`` or ``ci16``. ci4 reads the real part
   from the high nibble (Bifrost, CASPER and LWA F-engines) unless the header's
   ``nibble_order`` (or its geometry's) is ``"re_low"``.
3. ``geometry`` and a ``_tensor`` in one of our own shapes: the packet layout
   ``i8 [-1, S, C, 60, 2, 8]`` / ``ci4 [-1, S, C, 60, 8]``, or natural order
   ``ci8``/``ci4 [-1, S, C, 480]``.

Anything else is refused with one line naming the header key and its value.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..geometry import NIBBLE_ORDERS, Geometry, GeometryError
from ..runtime.ring import DTYPES
from ..sample_layout import LayoutError, SampleLayout, names_layout_axes


def paired_inputs(first: Any, second: Any | None, *, optional: bool = False) -> list[Any]:
    """The two lockstep inputs of a block: given rings/blocks, or a block's two outputs
    (data + mask from the capture, visibilities + valid counts downstream). With ``optional``
    the second may be absent (a ring, or a block with one output): one input."""
    if second is not None:
        return [first, second]
    orings = getattr(first, "orings", None)
    if orings is None or (optional and len(orings) < 2):
        if optional:
            return [first if orings is None else orings[0]]
        raise ValueError(f"{first!r} is one ring; give the second input too")
    return [orings[0], orings[1]]


def visibility_frame_bytes(g: Geometry, complex_bytes: int) -> list[int]:
    """Bytes of one frame of each visibility output, ``[vis, valid]``: complex integers of
    ``complex_bytes`` (8: the X-engine's ci32, 16: the integrator's ci64) ``[C, nbaseline]``
    and int64 counts ``[G, nbaseline]`` (G: the geometry's channel groups, the most a capture's
    presence mask has) for geometry ``g``."""
    return [g.nchan * g.nbaseline * complex_bytes, g.nchan_group * g.nbaseline * 8]


def require_keys(hdr: dict[str, Any], keys: tuple[str, ...], who: str) -> None:
    """One clear line naming what a sequence header lacks (docs/bifrost.md: header contract)."""
    missing = [k for k in keys if k not in hdr]
    if missing:
        raise ValueError(f"{who}: sequence {hdr.get('name')!r} header lacks {missing} "
                         f"(docs/bifrost.md lists the keys each block needs)")


BASELINE_ORDER = "triangle: b = k*(k+1)/2 + j for streams j <= k; value sum x_j conj(x_k)"


def derive_header(ihdr: dict[str, Any], *, name: str, dtype: str, shape: list[int],
                  labels: list[str], scales: list, units: list, time_tag: int | None = None,
                  **fields: Any) -> dict[str, Any]:
    """A copy of ``ihdr`` with a new ``_tensor`` and extra fields (sequence metadata flows on)."""
    hdr = copy.deepcopy({k: v for k, v in ihdr.items() if k not in ("_tensor", "gulp_nframe")})
    hdr.update(fields)
    hdr["name"] = name
    if time_tag is not None:
        hdr["time_tag"] = time_tag
    hdr["_tensor"] = {"dtype": dtype, "shape": shape, "labels": labels, "scales": scales,
                      "units": units}
    return hdr


def time_scale(hdr: dict[str, Any], time_tag: int, frame_spectra: int) -> list[float]:
    """``[offset, step]`` in seconds of a frame axis starting at spectrum ``time_tag``."""
    return [frame_start_unix(hdr, time_tag), frame_spectra / hdr["fs_hz"]]


def channel_freqs(hdr: dict[str, Any]) -> np.ndarray:
    """Centre frequency (Hz) of each channel of the sequence."""
    return hdr["freq0_hz"] + hdr["chan_bw_hz"] * np.arange(hdr["nchan"])


def frame_start_unix(hdr: dict[str, Any], time_tag: int) -> float:
    """Unix time of spectrum ``time_tag``."""
    return hdr["sync_time"] + time_tag / hdr["fs_hz"]


@dataclass(frozen=True)
class XEngineInput:
    """The X-engine's view of its data ring."""

    #: Where every sample of a ring frame lies.
    layout: SampleLayout
    #: The backend's geometry: streams, channels and sample bits of the layout; for layout
    #: inputs ``nchan_pkt`` 1 unless the header's geometry has groups that divide the channels.
    geometry: Geometry
    #: Spectra per output when the block is not given ``integration_spectra``: the header
    #: geometry's P packets, None where the header has no geometry.
    default_spectra: int | None
    #: The header key that described the layout (for logs).
    source: str


def tensor_frame_bytes(tensor: dict[str, Any]) -> int:
    """Bytes of one ring frame of ``_tensor`` (its dtype as our rings hold it)."""
    base, ncomp = DTYPES[tensor["dtype"]]
    return int(np.prod(tensor["shape"][1:], dtype=np.int64)) * base.itemsize * ncomp


def xengine_input(hdr: dict[str, Any], who: str,
                  integration_spectra: int | None = None) -> XEngineInput:
    """The layout, geometry and default integration of a sequence ``hdr``; ValueError with one
    line naming the header key and value where the X-engine cannot correlate it exactly."""
    tensor = hdr.get("_tensor")
    if not isinstance(tensor, dict) or "dtype" not in tensor or "shape" not in tensor:
        raise ValueError(f"{who}: header _tensor {tensor!r} lacks dtype and shape")
    if tensor["dtype"] not in DTYPES:
        raise ValueError(f"{who}: header _tensor dtype {tensor['dtype']!r} is not a ring dtype "
                         f"({', '.join(sorted(DTYPES))})")
    geometry = hdr.get("geometry")
    labels = tensor.get("labels")
    try:
        if "sample_layout" in hdr:
            source = "sample_layout"
            layout = SampleLayout.from_dict(hdr["sample_layout"])
            nbyte = tensor_frame_bytes(tensor)
            if layout.frame_bytes != nbyte:
                raise LayoutError(f"frame_bytes {layout.frame_bytes} differs from the ring's "
                                  f"frame of {nbyte} bytes (_tensor {tensor['dtype']} "
                                  f"{tensor['shape']})")
        elif labels and names_layout_axes(labels[1:]):
            source = "_tensor"
            layout = SampleLayout.from_tensor(tensor, nibble_order=_nibble_order(hdr, who))
        elif geometry is not None:
            g = _geometry(geometry, who)
            return XEngineInput(_packet_input(tensor, g, who), g, g.nspectra_int, "geometry")
        else:
            raise ValueError(f"{who}: header has no sample_layout or geometry, and _tensor "
                             f"labels {labels!r} name no layout (time, then freq/chan, "
                             f"station/stand/ant and pol or a merged stream/input axis, "
                             f"optional fine_time)")
    except LayoutError as exc:
        raise ValueError(f"{who}: header {source} "
                         f"{_describe(hdr[source]) if source == '_tensor' else ''}"
                         f"cannot be correlated exactly: {exc}") from None
    g = layout_geometry(layout, geometry, integration_spectra, who)
    default = g.nspectra_int if geometry is not None else None
    return XEngineInput(layout, g, default, source)


def _describe(tensor: dict[str, Any]) -> str:
    return f"({tensor.get('dtype')} {tensor.get('shape')} labels {tensor.get('labels')}) "


def _nibble_order(hdr: dict[str, Any], who: str) -> str:
    """ci4 nibble order of a labelled tensor: ``nibble_order``, else the geometry's."""
    key, order = "nibble_order", hdr.get("nibble_order")
    if order is None and isinstance(hdr.get("geometry"), dict):
        key, order = "geometry.nibble_order", hdr["geometry"].get("nibble_order")
    if order is None:
        return "re_high"
    if order not in NIBBLE_ORDERS:
        raise ValueError(f"{who}: header {key} {order!r} is not one of {NIBBLE_ORDERS}")
    return order


def _geometry(d: Any, who: str) -> Geometry:
    try:
        return Geometry.from_dict(d)
    except GeometryError as exc:
        raise ValueError(f"{who}: header geometry: {exc}") from None


def layout_geometry(layout: SampleLayout, geometry: dict[str, Any] | None,
                    integration_spectra: int | None, who: str) -> Geometry:
    """The backend geometry of a layout input: the layout's streams, channels and bits, other
    fields (NPU tiling, P) from the header's ``geometry`` where it has them; ``nchan_pkt`` 1
    unless the header's divides the channels; P (the device's frames of 480 spectra per call)
    enough for one integration, within the int32 bound."""
    d = {k: v for k, v in (geometry or {}).items() if k in Geometry.__dataclass_fields__}
    ci4 = layout.encoding == "ci4"
    d.update(nstream=layout.nstream, nchan=layout.nchan, sample_bits=4 if ci4 else 8,
             nibble_order=layout.nibble_order if ci4 else "re_high")
    pkt = d.get("nchan_pkt")
    if not isinstance(pkt, int) or pkt < 1 or layout.nchan % pkt:
        d["nchan_pkt"] = 1
    if "npacket" not in d:
        one = _geometry({**d, "npacket": 1}, who)
        spectra = integration_spectra or one.nspectra_pkt
        d["npacket"] = max(1, min(math.ceil(spectra / one.nspectra_pkt), one.max_npacket))
    return _geometry(d, who)


def _packet_input(tensor: dict[str, Any], g: Geometry, who: str) -> SampleLayout:
    """Our own frames: the packet layout (``g.frame_dtype`` / ``g.frame_shape``), or natural
    order ``[S, C, 480]`` (ci8; ci4, whose bytes are the packet layout's). Else one line."""
    dtype, shape = tensor["dtype"], list(tensor["shape"])[1:]
    natural = [g.nstream, g.nchan, g.nspectra_pkt]
    if dtype == g.frame_dtype and shape in (list(g.frame_shape),
                                             *([natural] if g.ci4 else [])):
        return SampleLayout.packet(g)
    if dtype == "ci8" and not g.ci4 and shape == natural:
        return SampleLayout.from_axes([("stream", g.nstream), ("freq", g.nchan),
                                       ("fine_time", g.nspectra_pkt)])
    dims = ", ".join(map(str, g.frame_shape))
    if g.ci4:
        want = (f"ci4 [-1, {dims}] (packet layout) or ci4 [-1, {', '.join(map(str, natural))}]"
                f" (natural order), as the header's geometry has sample_bits 4")
    else:
        want = (f"i8 [-1, {dims}] (packet layout) or ci8 [-1, "
                f"{', '.join(map(str, natural))}] (natural order)"
                + (" (ci4 input needs sample_bits 4 in the header's geometry)"
                   if dtype == "ci4" else ""))
    raise ValueError(f"{who}: input {dtype} {tensor['shape']} is not {want}, and the header "
                     f"has no sample_layout or _tensor labels naming a layout")
