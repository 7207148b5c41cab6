"""Baseline ordering of the X-engine output: the packed upper triangle
(docs/design.md, "Packet and frame layouts"; values as in "Sign and conjugation").

For streams j <= k the baseline index is ``b = k*(k+1)//2 + j`` (TCC / xGPU triangular order)
and the value is ``K[j, k] = sum_n x_j[n] * conj(x_k[n])``. Autocorrelations are included.
This module is the single source of that convention.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


def nbaseline(nstream: int) -> int:
    return nstream * (nstream + 1) // 2


def full_int8_tops(msps: float, nstream_a: int, nstream_b: int | None = None) -> float:
    """int8 TOPS of every product of an ``nstream_a`` x ``nstream_b`` block (default square) at
    ``msps`` million sample times a second: 8 ops per complex product (4 real MACs of 2 ops)."""
    return 8 * nstream_a * (nstream_a if nstream_b is None else nstream_b) * msps / 1e6


def triangle_int8_tops(msps: float, nstream: int) -> float:
    """Useful int8 TOPS of the Hermitian triangle, autocorrelations included: 8 S(S+1)/2 ops per
    sample time, the ops an exact triangle correlator cannot avoid."""
    return 8 * nbaseline(nstream) * msps / 1e6


def baseline_index(j: int | np.ndarray, k: int | np.ndarray) -> int | np.ndarray:
    """Index of stream pair (j, k), j <= k, in the packed triangle."""
    return k * (k + 1) // 2 + j


@lru_cache(maxsize=16)
def triangle_streams(nstream: int) -> tuple[np.ndarray, np.ndarray]:
    """(j, k) for every baseline in packed order; read-only arrays."""
    k = np.repeat(np.arange(nstream), np.arange(1, nstream + 1))
    j = np.arange(k.size) - baseline_index(0, k)
    j.flags.writeable = False
    k.flags.writeable = False
    return j, k


def pack_triangle(full_re: np.ndarray, full_im: np.ndarray, out_dtype=np.int32) -> np.ndarray:
    """Full ``[..., S, S]`` re/im matrices -> packed ``[..., nbaseline, 2]`` (K[j, k], j <= k)."""
    s = full_re.shape[-1]
    j, k = triangle_streams(s)
    out = np.empty((*full_re.shape[:-2], j.size, 2), dtype=out_dtype)
    out[..., 0] = full_re[..., j, k]
    out[..., 1] = full_im[..., j, k]
    return out


def unpack_triangle(tri: np.ndarray, nstream: int) -> np.ndarray:
    """Packed ``[..., nbaseline, 2]`` -> full Hermitian complex128 ``[..., S, S]`` matrix."""
    j, k = triangle_streams(nstream)
    full = np.zeros((*tri.shape[:-2], nstream, nstream), dtype=np.complex128)
    vals = tri[..., 0].astype(np.float64) + 1j * tri[..., 1].astype(np.float64)
    full[..., j, k] = vals
    full[..., k, j] = np.conj(vals)
    return full
