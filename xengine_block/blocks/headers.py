"""Helpers shared by the blocks (DESIGN.md section 5): how a header is derived from its
input's, what the frequency and time axes are, and how a block takes a paired input."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..geometry import Geometry


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
