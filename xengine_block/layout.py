"""Conversions between natural samples and the packet / frame layout (DESIGN.md section 2).

Natural samples are ``x[stream, chan, spectrum, reim]`` int8 (re, im pairs; complex int8 has no
numpy dtype). A ring frame is one packet time for all streams:
``[stream][chan][coarse][reim][fine]`` int8, i.e. per channel 8 real parts then the same 8
imaginary parts, 60 times. Every conversion is a reshape plus one transpose: no Python loops.
"""

from __future__ import annotations

import numpy as np

from .geometry import Geometry


def _check_natural(x: np.ndarray, g: Geometry) -> int:
    if x.dtype != np.int8 or x.ndim != 4 or x.shape[3] != 2:
        raise ValueError(f"natural samples must be int8 [stream, chan, spectrum, 2]; "
                         f"got {x.dtype} {x.shape}")
    if x.shape[:2] != (g.nstream, g.nchan):
        raise ValueError(f"natural samples have (stream, chan) = {x.shape[:2]}, "
                         f"geometry expects {(g.nstream, g.nchan)}")
    if x.shape[2] % g.nspectra_pkt:
        raise ValueError(f"spectrum count {x.shape[2]} is not a multiple of "
                         f"{g.nspectra_pkt} spectra per packet")
    return x.shape[2] // g.nspectra_pkt


def natural_to_frames(x: np.ndarray, g: Geometry) -> np.ndarray:
    """``x[S, C, nspec, 2]`` -> frames ``[nframe, S, C, coarse, reim, fine]`` (new array)."""
    nframe = _check_natural(x, g)
    v = x.reshape(g.nstream, g.nchan, nframe, g.ncoarse, g.nfine, 2)
    # axes: s c f coarse fine reim -> f s c coarse reim fine
    return np.ascontiguousarray(v.transpose(2, 0, 1, 3, 5, 4))


def frames_to_natural(frames: np.ndarray, g: Geometry) -> np.ndarray:
    """Frames ``[nframe, S, C, coarse, reim, fine]`` -> ``x[S, C, nspec, 2]`` (new array)."""
    frames = as_frames(frames, g)
    nframe = frames.shape[0]
    v = frames.transpose(1, 2, 0, 3, 5, 4)  # s c f coarse fine reim
    return np.ascontiguousarray(v).reshape(g.nstream, g.nchan, nframe * g.nspectra_pkt, 2)


def as_frames(frames: np.ndarray, g: Geometry) -> np.ndarray:
    """View any contiguous int8 buffer of whole frames as ``[nframe, S, C, coarse, 2, fine]``."""
    if frames.dtype != np.int8:
        raise ValueError(f"frames must be int8, got {frames.dtype}")
    if frames.size % g.frame_bytes:
        raise ValueError(f"{frames.size} bytes is not a whole number of "
                         f"{g.frame_bytes}-byte frames")
    return frames.reshape((-1, *g.frame_shape))


def packet_payload(frame: np.ndarray, g: Geometry, stream: int, group: int) -> np.ndarray:
    """The contiguous payload bytes of (stream, channel group) inside one frame (a view)."""
    flat = frame.reshape(g.nstream, g.nchan // g.nchan_pkt, g.payload_bytes)
    return flat[stream, group]


def payload_offset(g: Geometry, stream: int, group: int) -> int:
    """Byte offset of (stream, channel group)'s payload inside a frame."""
    return stream * g.stream_bytes + group * g.payload_bytes


def to_complex(x: np.ndarray) -> np.ndarray:
    """Natural int8 ``[..., 2]`` -> complex64 (exact: int8 fits float32)."""
    return x[..., 0].astype(np.float32) + 1j * x[..., 1].astype(np.float32)
