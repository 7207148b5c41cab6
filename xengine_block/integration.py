"""Pure pieces of the X-engine and integration blocks: valid-spectra counts and exact sums.

Kept apart from the blocks so they are tested without a pipeline (STYLE.md: blocks are thin
adapters over pure functions).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .geometry import Geometry
from .triangle import triangle_streams


def valid_counts(mask: np.ndarray, g: Geometry | int,
                 frame_spectra: int | None = None) -> np.ndarray:
    """Valid spectra per baseline from a presence mask.

    ``mask`` is ``[F, S]`` (stream s's data of frame f arrived) or ``[F, S, G]`` (per
    channel group); ``g`` the geometry (or just S), ``frame_spectra`` the spectra of one frame
    (default: a packet's, ``g.nspectra_pkt``; layout inputs: ``SampleLayout.nspectra``).
    Returns ``[G, nbaseline]`` int64 (G = 1 for a per-stream mask): for baseline (j, k),
    ``frame_spectra * sum_f mask[f, j] * mask[f, k]``: both streams must be present for a
    frame's spectra to count; missing data were zero-filled, so they add nothing to the sum
    either.
    """
    nstream = g if isinstance(g, int) else g.nstream
    if frame_spectra is None:
        if isinstance(g, int):
            raise TypeError("valid_counts(mask, nstream) needs frame_spectra")
        frame_spectra = g.nspectra_pkt
    m = np.asarray(mask)
    if m.ndim == 2:
        m = m[:, :, None]
    if m.ndim != 3 or m.shape[1] != nstream:
        raise ValueError(f"mask must be [P, {nstream}] or [P, {nstream}, G]; got {m.shape}")
    # Frames in which every stream arrived count for every baseline; only the others need the
    # pair products. Those use einsum's own integer loops, not BLAS: a BLAS matmul per gulp left
    # OpenBLAS's threads spinning (~0.05 CPU-s per dump) on the cores the X-engine needs.
    j, k = triangle_streams(nstream)
    out = np.empty((m.shape[2], j.size), np.int64)
    for gi in range(m.shape[2]):
        mg = m[:, :, gi] != 0  # [P, S]
        whole = mg.all(axis=1)
        out[gi] = int(whole.sum())
        if not whole.all():
            part = mg[~whole].astype(np.int32)
            out[gi] += np.einsum("ps,pt->st", part, part)[j, k]
    return out * frame_spectra


def counts_per_channel(counts: np.ndarray, g: Geometry) -> np.ndarray:
    """Expand ``[G, nbl]`` group counts to ``[C, nbl]`` (G = 1 broadcasts to all channels)."""
    reps = g.nchan // counts.shape[0]
    return np.repeat(counts, reps, axis=0)


@dataclass(frozen=True)
class IntegrationClock:
    """Integrations of ``integration_spectra`` (N) spectra aligned to absolute spectrum counts
    (integration k spans spectra ``[k N, (k + 1) N)``), over a sequence whose frames hold
    ``frame_spectra`` spectra each, frame 0 starting at spectrum ``time_tag``.

    Every X-engine (and integrator) cuts at the same spectra whatever its sequence's start: the
    first integration of a sequence that starts inside one is partial (its valid counts say
    so). Integrations and frames are numbered from the sequence's first (relative indices):
    output frame ``i`` is integration ``i``, starting at spectrum ``start_tag + i * N``.
    """

    time_tag: int
    frame_spectra: int
    integration_spectra: int

    def __post_init__(self) -> None:
        ns, n, t = self.frame_spectra, self.integration_spectra, self.time_tag
        for name, v in (("frame_spectra", ns), ("integration_spectra", n)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if n % ns:
            raise ValueError(f"integration_spectra {n} is not a whole number of frames of "
                             f"{ns} spectra")
        if not isinstance(t, numbers.Integral) or isinstance(t, bool) or t < 0 or t % ns:
            raise ValueError(f"time_tag {t!r} is not a spectrum count that is a multiple of "
                             f"the frame's {ns} spectra: integrations aligned to multiples of "
                             f"{n} spectra would cut frames")

    @property
    def frames_per_integration(self) -> int:
        return self.integration_spectra // self.frame_spectra

    @property
    def _first(self) -> tuple[int, int]:
        """(absolute frame index of frame 0, absolute integration index of integration 0)."""
        f0 = self.time_tag // self.frame_spectra
        return f0, f0 // self.frames_per_integration

    @property
    def start_tag(self) -> int:
        """Spectrum index of integration 0's aligned start (at or before ``time_tag``)."""
        return self._first[1] * self.integration_spectra

    def integration(self, frame: int) -> int:
        """The integration frame ``frame`` belongs to."""
        f0, k0 = self._first
        return (f0 + frame) // self.frames_per_integration - k0

    def frames(self, k: int) -> tuple[int, int]:
        """Frames ``[fa, fb)`` of integration ``k`` (fa clipped at the sequence's start)."""
        f0, k0 = self._first
        per = self.frames_per_integration
        return max((k0 + k) * per - f0, 0), (k0 + k + 1) * per - f0

    def segments(self, lo: int, hi: int) -> list[tuple[int, int, int]]:
        """Frames ``[lo, hi)`` cut at integration boundaries: ``(k, fa, fb)`` in order."""
        out = []
        while lo < hi:
            k = self.integration(lo)
            fb = min(self.frames(k)[1], hi)
            out.append((k, lo, fb))
            lo = fb
        return out


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

    ``reuse``: the sums are kept in int64 buffers made at the first dump and used again and again,
    instead of a fresh pair per dump, whose pages the kernel can fault in again each time (on a
    virtual machine that can cost more than the sum itself). Two pairs, taken in turn, since one
    ``add`` can finish two dumps; a :class:`Dump` then holds views of them, valid until the next
    ``add``. With ``ninteg`` 1 a dump holds the frame given, as it is (its dtype): no buffer, no
    copy. (Made at the first dump rather
    than up front: faulting pages in before the sequence starts would hold up the whole
    pipeline's start, and the first dump writes every byte of them anyway.)
    """

    def __init__(self, ninteg: int, frame_spectra: int, reuse: bool = False) -> None:
        if ninteg < 1:
            raise ValueError(f"integration length must be >= 1 X-engine frame, got {ninteg}")
        self.ninteg, self.frame_spectra = ninteg, frame_spectra
        self.span = ninteg * frame_spectra
        self._start: int | None = None
        self._vis: np.ndarray | None = None
        self._valid: np.ndarray | None = None
        self._n = 0
        self.reuse = reuse
        self._buffers: list[tuple[np.ndarray, np.ndarray]] = []

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
            if self.reuse and self.ninteg == 1:
                self._vis, self._valid = vis, valid  # a dump is a frame: nothing to sum
            elif self.reuse:
                self._vis, self._valid = self._next_buffers(vis.shape, valid.shape)
                np.copyto(self._vis, vis)
                np.copyto(self._valid, valid)
            else:
                self._vis = vis.astype(np.int64)
                self._valid = valid.astype(np.int64)
        else:
            self._vis += vis  # int64 += int32/int64: exact
            self._valid += valid
        self._n += 1
        if time_tag + self.frame_spectra == start + self.span:
            done.append(self._finish())
        return done

    def _next_buffers(self, vshape: tuple[int, ...],
                      cshape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The pair of sums not held by the last dump (two pairs, made at first use or when
        the frames change shape)."""
        if not self._buffers or (self._buffers[0][0].shape, self._buffers[0][1].shape) != (
                vshape, cshape):
            self._buffers = [(np.empty(vshape, np.int64), np.empty(cshape, np.int64))
                             for _ in range(2)]
        self._buffers.reverse()
        return self._buffers[0]

    def flush(self) -> list[Dump]:
        """The partial dump in progress (at end of data), if any."""
        return [self._finish()] if self._start is not None else []

    def _finish(self) -> Dump:
        dump = Dump(self._start, self._vis, self._valid, self.span, self._n)
        self._start, self._vis, self._valid, self._n = None, None, None, 0
        return dump
