"""Baseline order, polarisations and a dump's rows: one source for every visibility writer
(UVH5, Measurement Set; docs/design.md, "UVH5 conventions").

- For antennas ant_1 <= ant_2 and feeds (p1, p2) the stored visibility is
  ``conj(x[ant_1, p1]) * x[ant_2, p2] = K[s2, s1]`` with ``s = 2 * ant + pol`` and the X-engine's
  ``K[j, k] = x_j conj(x_k)``. From the packed triangle (j <= k): ``K[s2, s1] = conj(K[s1, s2])``
  when s1 <= s2, else it is stored directly (only YX of an autocorrelation).
- Polarisations XX -5, YY -6, XY -7 (x feed of ant_1, y feed of ant_2), YX -8.
- Baselines are numbered by antenna *number* (``antenna_numbers``), never index;
  ``ant_1 <= ant_2`` by number. Antenna *index* i (position in the array description) owns
  streams 2i, 2i + 1, so the file order follows the numbers and the triangle the indices.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .. import native_extension
from ..geometry import max_spectra_int32
from ..runtime.memory import host_buffer
from ..triangle import baseline_index

#: UVH5 polarisation codes in file order, with the (ant_1 feed, ant_2 feed) each means.
POLARIZATIONS: tuple[tuple[int, int, int], ...] = ((-5, 0, 0), (-6, 1, 1), (-7, 0, 1), (-8, 1, 0))


@dataclass(frozen=True)
class BaselineMap:
    """Where each (antenna pair, polarisation) of the file comes from in the packed triangle."""

    ant_1: np.ndarray  # [Nbls] antenna numbers (what the file stores)
    ant_2: np.ndarray  # [Nbls]
    idx_1: np.ndarray  # [Nbls] antenna indices (streams 2 * idx + pol; positions)
    idx_2: np.ndarray  # [Nbls]
    index: np.ndarray  # [Nbls, Npols] triangle index
    conj: np.ndarray  # [Nbls, Npols] True where the triangle value must be conjugated

    @property
    def nbls(self) -> int:
        return self.ant_1.size


def baseline_map(antenna_numbers: Sequence[int] | np.ndarray) -> BaselineMap:
    """File baseline order for antennas numbered ``antenna_numbers`` (in index order):
    ant_1 <= ant_2 by number, ant_1 major; four polarisations each."""
    numbers = np.asarray(antenna_numbers, np.int64)
    order = np.argsort(numbers, kind="stable")  # indices by increasing number
    r1, r2 = np.triu_indices(numbers.size)
    i1, i2 = order[r1], order[r2]
    feeds = np.array([(p1, p2) for _, p1, p2 in POLARIZATIONS])
    s1 = 2 * i1[:, None] + feeds[None, :, 0]
    s2 = 2 * i2[:, None] + feeds[None, :, 1]
    lo, hi = np.minimum(s1, s2), np.maximum(s1, s2)
    # wanted K[s2, s1]; the triangle holds K[lo, hi]; equal to it iff s2 == lo (s2 < s1).
    conj = ~(s2 < s1)
    return BaselineMap(numbers[i1], numbers[i2], i1, i2, baseline_index(lo, hi), conj)


class DumpRows:
    """The ``Data`` rows of one dump (``visdata``, ``flags``, ``nsamples``, each ``[Nbls, C,
    Npols]``) made from a packed triangle and its valid counts by compiled passes without the
    GIL, into buffers kept for the writer's life.

    Why: the gather and the three arrays were the writer's whole cost per dump (numpy: a
    fancy-indexed count array, a comparison, a division and a cast, each a fresh array of megabytes
    whose pages the kernel faults in again, on the core the correlator also wants); HDF5 copies the
    rows before the writer's ``append`` returns, so the same buffers serve every dump."""

    def __init__(self, bmap: BaselineMap, nfreq: int, vis_dtype: np.dtype,
                 conjugate: bool = False) -> None:
        shape = (bmap.nbls, nfreq, bmap.index.shape[1])
        self.index = np.ascontiguousarray(bmap.index, np.int64)
        self.flip = (bmap.conj != conjugate).astype(np.uint8)
        #: The order the row pass makes the rows in: the triangle's (by their first triangle
        #: index), whose rows one after another read on along the same lines of the
        #: triangle (``kernels/cpu/uvh5_rows.c``; the values are the same in any order).
        self.order = np.argsort(self.index[:, 0], kind="stable").astype(np.int64)
        # Ring memory (faulted in once per process, reused by the next file's writer once
        # this one is gone), not np.empty: the first dump of every file faulted its
        # megabytes in again.
        n = int(np.prod(shape))
        dtypes = (vis_dtype, np.dtype(bool), np.dtype(np.float32))
        raw = host_buffer(sum(n * dt.itemsize for dt in dtypes))
        starts = np.cumsum([0, *(n * dt.itemsize for dt in dtypes)])
        self.visdata, self.flags, self.nsamples = (
            raw[a:a + n * dt.itemsize].view(dt).reshape(shape)
            for a, dt in zip(starts, dtypes, strict=False))
        self._pairs = self.visdata.view(vis_dtype[0]).reshape(*shape, 2)

    def fill(self, tri: np.ndarray, valid: np.ndarray, nspectra: int,
             counts: bool = True) -> None:
        """``tri [C, nbaseline, 2]`` in the UVH5 convention (``visdata[b, c, p]`` is
        ``tri[c, index[b, p]]``, conjugated where ``flip[b, p]``); with ``counts``, ``valid
        [C or 1, nbaseline]`` spectra per baseline: ``flags`` where none, ``nsamples`` their
        fraction of ``nspectra``. Both passes are the C extension's (``uvh5_rows``,
        ``uvh5_counts``: ``kernels/cpu/uvh5_rows.c``, the GIL released)."""
        ext = native_extension.native()
        tri = np.ascontiguousarray(tri)
        if tri.dtype not in (np.int32, np.int64, np.float64):
            tri = tri.astype(np.float64 if tri.dtype.kind == "f" else np.int64)
        ext.uvh5_rows(tri, self.index, self.flip, self._pairs, self.order)
        if counts:
            ext.uvh5_counts(np.ascontiguousarray(valid, np.int64), self.index, float(nspectra),
                            self.flags, self.nsamples)


    def add_flags(self, flags: np.ndarray) -> None:
        """Flag besides the missing data (after :meth:`fill` with counts): ``flags [C or 1,
        nbaseline]`` bool in the triangle's order; ``nsamples`` stays as it is."""
        self.flags |= np.moveaxis(flags[:, self.index], 0, 1)


def visdata_dtype(max_spectra: int, sample_bits: int = 8,
                  float_visdata: bool = False) -> np.dtype:
    """int32 compound while no integration of ``max_spectra`` spectra of ``sample_bits``-bit
    samples can overflow (the geometry's bound: 65,535 spectra for ci8, 16,777,215 for ci4),
    else float64; float64 whatever the bound for ``float_visdata`` (float input, e.g.
    Bifrost's cf32)."""
    exact = not float_visdata and max_spectra <= max_spectra_int32(sample_bits)
    base = np.int32 if exact else np.float64
    return np.dtype([("r", base), ("i", base)])


def flagged_baselines(bmap: BaselineMap, flagged: np.ndarray | None) -> np.ndarray | None:
    """The baselines of ``bmap`` with a flagged antenna (``flagged``: per antenna, in the
    map's antenna order), flagged whatever their counts; None when no antenna is."""
    bad = np.zeros(0, bool) if flagged is None else np.asarray(flagged, bool)
    return (bad[bmap.idx_1] | bad[bmap.idx_2]) if bad.any() else None



def count_rows(counts: np.ndarray, nspectra: int, npol: int) -> tuple[np.ndarray, np.ndarray]:
    """``flags`` and ``nsamples`` of one baseline, ``[C, Npols]``, from its valid ``counts``
    per channel: flagged where none, the fraction of ``nspectra`` otherwise (float32 of the
    float64 quotient, as numpy's ``(n / N).astype``; the compiled row pass computes the
    same)."""
    c = np.asarray(counts, np.int64)[:, None].repeat(npol, axis=1)
    return c == 0, (c / float(nspectra)).astype(np.float32)


def uniform_counts(valid: np.ndarray) -> np.ndarray | None:
    """The per-channel counts ``[C or 1]`` when every baseline of ``valid [C or 1, nbl]`` has
    the same counts (the usual dump: nothing or whole channels missing), else None."""
    if valid.shape[1] == 0:
        return None
    first = valid[:, 0]
    if valid.strides[1] == 0 or (valid == first[:, None]).all():
        return first.copy()
    return None


def checked_dump(tri: np.ndarray, valid: np.ndarray, nfreq: int,
                 flags: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """``valid`` as ``[C or 1, nbaseline]`` for a dump ``tri [C, nbaseline, 2]`` of a file
    of ``nfreq`` channels, and the extra ``flags`` (bool, same shape rule) or None where none
    is set; ValueError naming the mismatch (every writer's ``append``)."""
    if tri.shape[0] != nfreq:
        raise ValueError(f"dump has {tri.shape[0]} channels, file has {nfreq}")
    valid = np.asarray(valid)
    valid = valid[None] if valid.ndim == 1 else valid
    if (valid.ndim != 2 or valid.shape[1] != tri.shape[1]
            or valid.shape[0] not in (1, tri.shape[0])):
        raise ValueError(f"valid counts of shape {valid.shape} for a dump of "
                         f"{tri.shape[0]} channels x {tri.shape[1]} baselines")
    extra = None if flags is None else np.asarray(flags, bool)
    if extra is not None and (extra.ndim != 2 or extra.shape[1] != tri.shape[1]
                              or extra.shape[0] not in (1, tri.shape[0])):
        raise ValueError(f"flags of shape {extra.shape} for a dump of {tri.shape[0]} "
                         f"channels x {tri.shape[1]} baselines")
    return valid, (extra if extra is not None and extra.any() else None)
