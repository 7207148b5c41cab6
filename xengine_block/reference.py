"""Reference correlator: int64, written for obviousness, used as the test oracle only.

K[c, j, k] = sum_n x[j, c, n] * conj(x[k, c, n]):
re = sum(a_re*b_re + a_im*b_im), im = sum(a_im*b_re - a_re*b_im) with a = x_j, b = x_k.
Natural samples are int8 pairs for both ci8 and ci4 input (ci4 values lie in -8..7);
:func:`reference_frames` takes ring frames of either.
"""

from __future__ import annotations

import numpy as np

from .frames import frames_to_natural
from .geometry import Geometry
from .triangle import pack_triangle


def reference_full(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Natural int8 ``x[S, C, nspec, 2]`` -> (re, im) int64 ``[C, S, S]``."""
    a = np.moveaxis(x.astype(np.int64), 1, 0)  # [C, S, nspec, 2]
    ar, ai = a[..., 0], a[..., 1]
    art, ait = ar.transpose(0, 2, 1), ai.transpose(0, 2, 1)
    re = ar @ art + ai @ ait
    im = ai @ art - ar @ ait
    return re, im


def reference_triangle(x: np.ndarray) -> np.ndarray:
    """Natural int8 samples -> packed upper triangle int64 ``[C, nbaseline, 2]``."""
    re, im = reference_full(x)
    return pack_triangle(re, im, out_dtype=np.int64)


def reference_frames(frames: np.ndarray, g: Geometry) -> np.ndarray:
    """Ring frames of ``g`` (ci8 or ci4) -> packed upper triangle int64 ``[C, nbaseline, 2]``."""
    return reference_triangle(frames_to_natural(frames, g))
