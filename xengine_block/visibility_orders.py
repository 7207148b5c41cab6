"""Visibility orders of the outside world, to and from our packed triangle
(docs/design.md, "Sign and conjugation" and "Formats of the outside world").

Ours (:mod:`~xengine_block.triangle`): per channel, streams ``j <= k`` at ``b = k*(k+1)//2 + j``,
value ``K[j, k] = sum x_j conj(x_k)``. Streams are ``s = npol * station + pol`` (``npol`` 2:
our ``2 * antenna + pol``; ``npol`` 1: one stream per station). The others, each checked
against the upstream file named:

- **Bifrost correlate** (``python/bifrost/blocks/correlate.py`` and ``test/test_pipeline.py``
  ``test_correlate`` of Bifrost 0.10): ``[freq, station_i, pol_i, station_j, pol_j]`` (per
  output frame), ``V[i, j] = sum conj(x_i) x_j`` with ``i = npol * station_i + pol_i`` the slow
  axis, only the lower triangle ``i >= j`` filled (``matrix_fill_mode: 'lower'``; the upper
  triangle is left as the ring memory held it). ``V[i, j] = K[j, i]`` for ``j <= i``, and the
  lower triangle read row by row is exactly our packed order: no conjugation, a scatter.
- **TCC wrapper** (``ledatelescope/bifrost_tcc_wrapper`` ``bifrost/test/test_btcc.py``
  ``compute_gold``, also the LWA COR order of ``src/formats/cor.hpp``): ``[freq,
  nbaseline * npol * npol]``, stations ``i <= j`` row-major (``k`` counts them), entry
  ``npol*npol*k + npol*p0 + p1 = sum x[i, p0] conj(x[j, p1])`` = ``K[npol*i + p0, npol*j + p1]``:
  our value where that stream pair is in order, else its conjugate (the Y-X product of an
  autocorrelation station pair).

Values are ``[..., n, 2]`` integer (re, im) arrays like the triangle, or complex arrays.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .triangle import baseline_index, nbaseline

#: ``matrix_fill_mode`` of Bifrost's correlate output (the lower triangle holds the data).
BIFROST_FILL_MODE = "lower"
#: Our header value naming the TCC order (``visibility_order``); the triangle is ours.
TCC_ORDER = "tcc"
BIFROST_MATRIX_ORDER = "bifrost_matrix"
TRIANGLE_ORDER = "triangle"


def _conj_parts(v: np.ndarray, conj: np.ndarray) -> np.ndarray:
    """``v`` (``[..., n, 2]`` integers or ``[..., n]`` complex) with entries ``conj`` conjugated."""
    out = v.copy()
    if np.iscomplexobj(out):
        out[..., conj] = np.conj(out[..., conj])
    else:
        out[..., conj, 1] = -out[..., conj, 1]
    return out


# ------------------------------------------------------------------------------ TCC
@lru_cache(maxsize=16)
def tcc_map(nstation: int, npol: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """For each TCC entry, (our triangle index, whether to conjugate it); read-only arrays."""
    i, j = np.triu_indices(nstation)  # row-major i <= j: the TCC's k
    p0, p1 = np.divmod(np.arange(npol * npol), npol)
    a = (npol * i[:, None] + p0[None, :]).ravel()
    b = (npol * j[:, None] + p1[None, :]).ravel()
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    index, conj = baseline_index(lo, hi), a > b  # K[a, b] = conj(K[b, a])
    index.flags.writeable = conj.flags.writeable = False
    return index, conj


def triangle_to_tcc(tri: np.ndarray, nstation: int, npol: int = 2) -> np.ndarray:
    """Our triangle ``[..., nbaseline(S), 2]`` -> the TCC order ``[..., nbl * npol**2, 2]``."""
    _check_streams(tri, nstation * npol, "triangle")
    index, conj = tcc_map(nstation, npol)
    return _conj_parts(_take(tri, index), conj)


def tcc_to_triangle(tcc: np.ndarray, nstation: int, npol: int = 2) -> np.ndarray:
    """The TCC order ``[..., nbl * npol**2, 2]`` -> our triangle ``[..., nbaseline(S), 2]``."""
    index, conj = tcc_map(nstation, npol)
    n = tcc.shape[-2] if not np.iscomplexobj(tcc) else tcc.shape[-1]
    if n != index.size:
        raise ValueError(f"TCC visibilities have {n} entries per channel; {nstation} stations "
                         f"x {npol} pols need {index.size}")
    # Every triangle entry appears at least once, unconjugated where the stream pair is in
    # order; take those (the autocorrelation Y-X entry is the only conjugated duplicate).
    first = np.zeros(nbaseline(nstation * npol), np.intp)
    keep = ~conj
    first[index[keep]] = np.flatnonzero(keep)
    return _take(tcc, first)


# --------------------------------------------------------------------- Bifrost matrix
def _tril(nstream: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-major lower triangle ``(i, j)``, ``j <= i``: the packed order (b = i(i+1)/2 + j)."""
    return np.tril_indices(nstream)


def triangle_to_bifrost_matrix(tri: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Write our triangle ``[..., nbaseline(S), 2]`` into the lower triangle of Bifrost's
    matrix ``out`` (``[..., S, S]`` complex, or ``[..., S, S, 2]`` integers; any station/pol
    split of ``S``, e.g. ``[..., nstation, npol, nstation, npol]``, reshaped by the caller).
    The upper triangle of ``out`` is not touched (as Bifrost's kernel)."""
    s = out.shape[-1] if np.iscomplexobj(out) else out.shape[-2]
    _check_streams(tri, s, "triangle")
    i, j = _tril(s)
    if np.iscomplexobj(out):
        out[..., i, j] = tri[..., 0] + 1j * tri[..., 1]  # exact ints, rounded once
    else:
        out[..., i, j, :] = tri
    return out


def bifrost_matrix_to_triangle(mat: np.ndarray) -> np.ndarray:
    """The lower triangle of Bifrost's matrix ``[..., S, S]`` (complex) or ``[..., S, S, 2]``
    (integers) -> our triangle (complex ``[..., nbaseline]`` or ``[..., nbaseline, 2]``)."""
    s = mat.shape[-1] if np.iscomplexobj(mat) else mat.shape[-2]
    i, j = _tril(s)
    return mat[..., i, j] if np.iscomplexobj(mat) else mat[..., i, j, :]


# ------------------------------------------------------------------------------ helpers
def _take(v: np.ndarray, index: np.ndarray) -> np.ndarray:
    return v[..., index] if np.iscomplexobj(v) else v[..., index, :]


def _check_streams(tri: np.ndarray, nstream: int, what: str) -> None:
    n = tri.shape[-1] if np.iscomplexobj(tri) else tri.shape[-2]
    if n != nbaseline(nstream):
        raise ValueError(f"{what} has {n} baselines per channel; {nstream} streams need "
                         f"{nbaseline(nstream)}")


# ------------------------------------------------------------------------ by header
#: Labels of Bifrost correlate's output tensor (``python/bifrost/blocks/correlate.py``).
MATRIX_LABELS = ["time", "freq", "station_i", "pol_i", "station_j", "pol_j"]


def visibility_order(hdr: dict) -> str:
    """The order of a visibility ring from its header: :data:`TCC_ORDER` (our TCC output:
    ``visibility_order``), :data:`BIFROST_MATRIX_ORDER` (Bifrost correlate's tensor, lower
    filled) or :data:`TRIANGLE_ORDER` (ours)."""
    if hdr.get("visibility_order") == TCC_ORDER:
        return TCC_ORDER
    tensor = hdr.get("_tensor") or {}
    if list(tensor.get("labels") or []) == MATRIX_LABELS:
        mode = hdr.get("matrix_fill_mode")
        if mode not in (BIFROST_FILL_MODE, "hermitian", "full"):
            raise ValueError(f"header matrix_fill_mode = {mode!r}: the lower triangle must "
                             f"hold the data ('lower', 'hermitian' or 'full')")
        return BIFROST_MATRIX_ORDER
    return TRIANGLE_ORDER


def stations_pols(hdr: dict) -> tuple[int, int]:
    """(stations, pols) of a visibility ring in the TCC or Bifrost matrix order."""
    if visibility_order(hdr) == TCC_ORDER:
        return int(hdr["nstand"]), int(hdr["npol"])
    shape = hdr["_tensor"]["shape"]
    return int(shape[2]), int(shape[3])


def as_triangle(vis: np.ndarray, hdr: dict) -> np.ndarray:
    """One frame (or a run of frames) of a visibility ring in our triangle order, whatever
    order its header says (:func:`visibility_order`): ``[..., C, nbaseline, 2]`` integers for
    integer input, complex ``[..., C, nbaseline]`` for float input (a Bifrost ``cf32``
    matrix or TCC ring)."""
    order = visibility_order(hdr)
    if order == TRIANGLE_ORDER:
        return vis
    nstation, npol = stations_pols(hdr)
    if order == TCC_ORDER:
        return tcc_to_triangle(vis, nstation, npol)
    s = nstation * npol
    lead = vis.shape[:vis.ndim - (4 if np.iscomplexobj(vis) else 5)]
    mat = vis.reshape(*lead, s, s, *(() if np.iscomplexobj(vis) else (2,)))
    return bifrost_matrix_to_triangle(mat)
