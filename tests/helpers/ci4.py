"""4-bit (ci4) test data and an independent decoder: nibbles read with plain integer arithmetic,
never with the package's unpacking."""

from __future__ import annotations

import numpy as np

from xengine_block.geometry import Geometry

ORDERS = ("re_high", "re_low")


def nibble(v: int) -> int:
    """Two's-complement value of a 4-bit field (independent of frames.unpack_ci4_planes)."""
    return v - 16 if v >= 8 else v


def decode(byte: int, order: str) -> tuple[int, int]:
    high, low = nibble(byte >> 4), nibble(byte & 15)
    return (high, low) if order == "re_high" else (low, high)


def random_ci4_natural(g: Geometry, nframe: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (g.nstream, g.nchan, nframe * g.nspectra_pkt, 2)
    return rng.integers(-8, 8, size=shape, dtype=np.int8)
