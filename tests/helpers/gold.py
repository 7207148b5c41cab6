"""Gold visibilities written from the published formulas of Bifrost's correlators (the
bifrost_tcc_wrapper test's ``compute_gold``, Bifrost's ``linalg`` order), never from our code."""

from __future__ import annotations

import numpy as np


def complex_samples(x: np.ndarray) -> np.ndarray:
    return x[..., 0].astype(np.int64) + 1j * x[..., 1].astype(np.int64)  # [S, C, T]


def tcc_gold(x: np.ndarray, npol: int) -> np.ndarray:
    """bifrost_tcc_wrapper test_btcc.py compute_gold: stations i <= j row-major (k),
    ``out[c, npol*npol*k + npol*p0 + p1] = sum_t x[t, c, npol*i + p0] conj(x[t, c, npol*j + p1])``.
    """
    z = complex_samples(x)
    nstation = z.shape[0] // npol
    out = np.zeros((z.shape[1], nstation * (nstation + 1) // 2 * npol * npol), np.complex128)
    for c in range(z.shape[1]):
        k = 0
        for i in range(nstation):
            for j in range(i, nstation):
                for p0 in range(npol):
                    for p1 in range(npol):
                        out[c, npol * npol * k + npol * p0 + p1] = (
                            z[npol * i + p0, c] * z[npol * j + p1, c].conj()).sum()
                k += 1
    return out


def bifrost_gold(x: np.ndarray) -> np.ndarray:
    """Bifrost test_pipeline.py test_correlate: ``V[c, i, j] = sum_t conj(x_i) x_j``."""
    z = complex_samples(x)
    return np.einsum("ict,jct->cij", z.conj(), z)
