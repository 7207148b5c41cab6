"""Pure pieces of the X-engine and integration blocks: valid-spectra counts and exact sums.

Kept apart from the blocks so they are tested without a pipeline (STYLE.md: blocks are thin
adapters over pure functions).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .geometry import Geometry
from .triangle import triangle_streams


def valid_counts(mask: np.ndarray, g: Geometry) -> np.ndarray:
    """Valid spectra per baseline from the capture presence mask.

    ``mask`` is ``[P, S]`` (a stream's packet of the frame arrived) or ``[P, S, G]`` (per
    channel group). Returns ``[G, nbaseline]`` int64 (G = 1 for a per-stream mask): for
    baseline (j, k), ``nspectra_pkt * sum_p mask[p, j] * mask[p, k]``: both streams must be
    present for a frame's spectra to count; missing packets were zero-filled, so they add
    nothing to the sum either.
    """
    m = np.asarray(mask)
    if m.ndim == 2:
        m = m[:, :, None]
    if m.ndim != 3 or m.shape[1] != g.nstream:
        raise ValueError(f"mask must be [P, {g.nstream}] or [P, {g.nstream}, G]; got {m.shape}")
    # Frames in which every stream arrived count for every baseline; only the others need the
    # pair products. Those use einsum's own integer loops, not BLAS: a BLAS matmul per gulp left
    # OpenBLAS's threads spinning (~0.05 CPU-s per dump) on the cores the X-engine needs.
    j, k = triangle_streams(g.nstream)
    out = np.empty((m.shape[2], j.size), np.int64)
    for gi in range(m.shape[2]):
        mg = m[:, :, gi] != 0  # [P, S]
        whole = mg.all(axis=1)
        out[gi] = int(whole.sum())
        if not whole.all():
            part = mg[~whole].astype(np.int32)
            out[gi] += np.einsum("ps,pt->st", part, part)[j, k]
    return out * g.nspectra_pkt


def counts_per_channel(counts: np.ndarray, g: Geometry) -> np.ndarray:
    """Expand ``[G, nbl]`` group counts to ``[C, nbl]`` (G = 1 broadcasts to all channels)."""
    reps = g.nchan // counts.shape[0]
    return np.repeat(counts, reps, axis=0)


@dataclass
class Dump:
    """One finished integration."""

    time_tag: int  # spectrum index of its first spectrum (its aligned start)
    vis: np.ndarray  # [C, nbaseline, 2] int64
    valid: np.ndarray  # [G, nbaseline] int64
    nspectra: int  # spectra per channel the full integration spans
    ninput: int  # X-engine frames summed


class Integrator:
    """Sums X-engine frames exactly (int64) into dumps aligned to multiples of their length.

    A dump spans ``ninteg`` X-engine frames; it starts at time_tag multiples of
    ``ninteg * frame_spectra`` so independent X-engines dump at the same instants. Frames that
    are absent (gaps in time_tag) simply contribute nothing; their spectra are not valid.
    """

    def __init__(self, ninteg: int, frame_spectra: int) -> None:
        if ninteg < 1:
            raise ValueError(f"integration length must be >= 1 X-engine frame, got {ninteg}")
        self.ninteg, self.frame_spectra = ninteg, frame_spectra
        self.span = ninteg * frame_spectra
        self._start: int | None = None
        self._vis: np.ndarray | None = None
        self._valid: np.ndarray | None = None
        self._n = 0

    def add(self, time_tag: int, vis: np.ndarray, valid: np.ndarray) -> list[Dump]:
        """Add one X-engine frame; returns the dumps this completes (0, 1 or 2)."""
        if not (np.issubdtype(vis.dtype, np.integer) and np.issubdtype(valid.dtype, np.integer)):
            raise TypeError(f"integration is exact on integers only; got {vis.dtype}, "
                            f"{valid.dtype}")
        if time_tag % self.frame_spectra:
            raise ValueError(f"time_tag {time_tag} is not a multiple of the X-engine frame "
                             f"length {self.frame_spectra} spectra")
        start = time_tag - time_tag % self.span
        done = []
        if self._start is not None and start != self._start:
            done.append(self._finish())
        if self._start is None:
            self._start = start
            self._vis = vis.astype(np.int64)
            self._valid = valid.astype(np.int64)
        else:
            self._vis += vis  # int64 += int32/int64: exact
            self._valid += valid
        self._n += 1
        if time_tag + self.frame_spectra == start + self.span:
            done.append(self._finish())
        return done

    def flush(self) -> list[Dump]:
        """The partial dump in progress (at end of data), if any."""
        return [self._finish()] if self._start is not None else []

    def _finish(self) -> Dump:
        dump = Dump(self._start, self._vis, self._valid, self.span, self._n)
        self._start, self._vis, self._valid, self._n = None, None, None, 0
        return dump
