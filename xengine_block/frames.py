"""Conversions between natural samples and the packet / frame layout (docs/design.md, "Packet and
frame layouts").

Natural samples are ``x[stream, chan, spectrum, reim]`` int8 (re, im pairs; complex int8 has no
numpy dtype). A ring frame is one packet time for all streams:
``[stream][chan][coarse][reim][fine]`` int8, i.e. per channel 8 real parts then the same 8
imaginary parts, 60 times. Every conversion is a reshape plus one transpose: no Python loops.

4-bit input (``ci4``, ``Geometry.sample_bits == 4``): a frame is ``[stream][chan][coarse][fine]``
bytes, each byte one complex sample as two two's-complement nibbles (-8..7), the real part in the
high nibble (``nibble_order="re_high"``, Bifrost's ``ci4``) or the low one (``"re_low"``). The
frames are held in int8 arrays like ci8 ones (raw bytes). Natural samples stay int8 ``[..., 2]``
with values in -8..7. :func:`pack_ci4`, :func:`unpack_ci4_planes` (any output planes, e.g. the
``cpu`` backend's float32 scratch) and :func:`unpack_frames` (whole frames, the NPU host path)
are the one place that knows the nibbles; everything else (F-engine, backends, Bifrost
adapter) goes through them.
"""

from __future__ import annotations

import numpy as np

from . import native_extension
from .geometry import NIBBLE_ORDERS, Geometry


def unpack_ci4_planes(b: np.ndarray, re: np.ndarray, im: np.ndarray,
                      nibble_order: str = "re_high", scratch: np.ndarray | None = None) -> None:
    """Write the real and imaginary parts of ci4 bytes ``b`` into ``re`` and ``im`` (any
    numeric dtype, any strides, ``b``'s shape).

    Two arithmetic shifts of the byte as int8 sign-extend the nibbles: ``b >> 4`` is the high
    one, ``(b << 4) >> 4`` the low one; numpy casts straight into the outputs, so a caller's
    layout pass (int8 frames, the ``cpu`` backend's float32 scratch) is the only pass over the
    data. ``scratch``: an int8 array of ``b``'s shape for ``b << 4`` (else one is allocated).
    """
    if nibble_order not in NIBBLE_ORDERS:
        raise ValueError(f"nibble_order must be one of {NIBBLE_ORDERS}, got {nibble_order!r}")
    s = np.asarray(b).view(np.int8)
    high, low = (re, im) if nibble_order == "re_high" else (im, re)
    four = np.int8(4)
    np.right_shift(s, four, out=high, casting="unsafe")
    shifted = np.left_shift(s, four, out=scratch)
    np.right_shift(shifted, four, out=low, casting="unsafe")


def pack_ci4(x: np.ndarray, nibble_order: str = "re_high") -> np.ndarray:
    """Natural int ``[..., 2]`` (re, im) in -8..7 -> ci4 bytes ``[...]`` (int8 array)."""
    if nibble_order not in NIBBLE_ORDERS:
        raise ValueError(f"nibble_order must be one of {NIBBLE_ORDERS}, got {nibble_order!r}")
    x = np.asarray(x)
    if x.shape[-1:] != (2,) or x.dtype.kind not in "iu":
        raise ValueError(f"ci4 packing needs integer [..., 2] (re, im); got {x.dtype} {x.shape}")
    if x.size and (x.min() < -8 or x.max() > 7):
        raise ValueError(f"ci4 values must be in -8..7; got {x.min()}..{x.max()}")
    u = x.astype(np.uint8) & 0xF
    re, im = u[..., 0], u[..., 1]
    high, low = (re, im) if nibble_order == "re_high" else (im, re)
    return ((high << 4) | low).view(np.int8)


def unpack_ci4(b: np.ndarray, nibble_order: str = "re_high") -> np.ndarray:
    """ci4 bytes ``[...]`` (int8 or uint8) -> natural int8 ``[..., 2]`` (re, im) in -8..7."""
    b = np.asarray(b)
    out = np.empty((*b.shape, 2), np.int8)
    unpack_ci4_planes(b, out[..., 0], out[..., 1], nibble_order)
    return out


def unpack_frames(frames: np.ndarray, g: Geometry, out: np.ndarray | None = None) -> np.ndarray:
    """ci4 frames ``[n, S, C, coarse, fine]`` -> the ci8 layout ``[n, S, C, coarse, 2, fine]``
    int8, in one pass over the bytes.

    ``nfine`` is 8, so each (coarse) row of 8 samples becomes two rows of 8 (real parts,
    imaginary parts): the C extension's ``unpack_ci4_rows`` (``kernels/cpu/host_passes.c``,
    the GIL released; numpy ufuncs on 8-byte rows are an order of magnitude slower). Outputs
    that are not contiguous take :func:`unpack_ci4_planes`.
    """
    if not g.ci4:
        raise ValueError("unpack_frames needs a ci4 geometry (sample_bits=4)")
    f = as_frames(frames, g)
    if out is None:
        out = np.empty((f.shape[0], *f.shape[1:4], 2, f.shape[4]), np.int8)
    if out.flags.c_contiguous:
        native_extension.native().unpack_ci4_rows(np.ascontiguousarray(f), out, g.nibble_order)
    else:
        unpack_ci4_planes(f, out[..., 0, :], out[..., 1, :], g.nibble_order)
    return out


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
    """``x[S, C, nspec, 2]`` -> frames ``[nframe, S, C, coarse, reim, fine]`` (new array);
    for ci4 ``[nframe, S, C, coarse, fine]`` packed bytes (values must be in -8..7)."""
    nframe = _check_natural(x, g)
    v = x.reshape(g.nstream, g.nchan, nframe, g.ncoarse, g.nfine, 2)
    if g.ci4:  # s c f coarse fine -> f s c coarse fine
        return np.ascontiguousarray(pack_ci4(v, g.nibble_order).transpose(2, 0, 1, 3, 4))
    # axes: s c f coarse fine reim -> f s c coarse reim fine
    return np.ascontiguousarray(v.transpose(2, 0, 1, 3, 5, 4))


def frames_to_natural(frames: np.ndarray, g: Geometry) -> np.ndarray:
    """Frames (``g.frame_shape``, ci8 or ci4) -> ``x[S, C, nspec, 2]`` int8 (new array)."""
    frames = as_frames(frames, g)
    nframe = frames.shape[0]
    if g.ci4:
        frames = unpack_frames(frames, g)
    v = frames.transpose(1, 2, 0, 3, 5, 4)  # s c f coarse fine reim
    return np.ascontiguousarray(v).reshape(g.nstream, g.nchan, nframe * g.nspectra_pkt, 2)


def as_frames(frames: np.ndarray, g: Geometry) -> np.ndarray:
    """View any contiguous int8 buffer of whole frames as ``[nframe, *g.frame_shape]``
    (``[nframe, S, C, coarse, 2, fine]``; ci4 ``[nframe, S, C, coarse, fine]``)."""
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
