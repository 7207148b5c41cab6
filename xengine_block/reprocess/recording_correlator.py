"""A recording's integrations, correlated in place: chunks of the file's memory map go straight
to ``Backend.correlate_layout`` (no copy, no decoding), each integration summed exactly in
int64, then written with the UVH5 writer the pipelines use.

Integrations are windows of ``nspectra`` spectra from the recording's first spectrum (any whole
number of spectra: the backends take any number per call, and chunks are cut at the window's
edges, also inside a block). Spectra the recording lacks (missing blocks) are not counted: the
window's valid count says how many were correlated (UVH5 ``nsamples``; zero: flagged). A last
window the recording does not reach the end of is not written (``dropped_spectra``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..backends import get_backend
from ..backends.base import Backend
from ..geometry import MAX_FRAME_BYTES, Geometry
from ..readers.base import Recording
from ..sample_layout import SampleLayout


def windows(start: int, end: int, nspectra: int) -> tuple[list[tuple[int, int]], int]:
    """Whole integration windows ``[t0, t0 + nspectra)`` from ``start`` within ``[start, end)``,
    and the spectra of the incomplete last one (not written)."""
    n = (end - start) // nspectra
    return ([(start + k * nspectra, start + (k + 1) * nspectra) for k in range(n)],
            end - start - n * nspectra)


def geometry_for(layout: SampleLayout) -> Geometry:
    """A backend geometry with the layout's streams, channels and sample bits (packets of up
    to 9 channels: the largest divisor of nchan that fits)."""
    nchan_pkt = max(d for d in range(1, 10) if layout.nchan % d == 0)
    return Geometry(nstream=layout.nstream, nchan=layout.nchan, nchan_pkt=nchan_pkt,
                    sample_bits=4 if layout.encoding == "ci4" else 8,
                    nibble_order=layout.nibble_order)


@lru_cache(maxsize=64)
def channel_groups(nstream: int, nchan: int, sample_bits: int = 8) -> tuple[tuple[int, int], ...]:
    """Channel ranges small enough for one backend geometry (its frame size limit); asked
    once per chunk, made once per shape."""
    per_chan = nstream * 480 * 2 * sample_bits // 8
    most = max(1, MAX_FRAME_BYTES // per_chan)
    return tuple((c, min(c + most, nchan)) for c in range(0, nchan, most))


@dataclass
class Correlated:
    """One integration: ``vis`` ``[C, nbaseline, 2]`` exact sums (packed triangle, our K; int32
    where they cannot overflow it, else int64), ``valid`` int64 ``[C]`` spectra correlated per
    channel (every stream is present or absent together in these formats)."""

    vis: np.ndarray
    valid: np.ndarray
    #: int64 ``[S]``: sample parts at the quantiser's extremes (with ``count_extremes``),
    #: counted by the backend as it reads the samples; None when not counted.
    extremes: np.ndarray | None = None


class RecordingCorrelator:
    """Correlates windows of a recording for the antennas ``antennas`` (file antenna indices,
    in the order they become streams) and recording channels ``[channels[0], channels[1])``.

    ``backend``: name or ``auto``; one backend per distinct chunk shape, made on first use.
    :attr:`count_extremes` set: also count each stream's sample parts at the quantiser's
    extremes (:attr:`Correlated.extremes`, input health).
    """

    def __init__(self, rec: Recording, antennas: Sequence[int], channels: tuple[int, int],
                 backend: str = "auto") -> None:
        self.rec, self.antennas, self.channels = rec, list(antennas), channels
        #: Count the quantiser's extremes too (set by a job that judges its inputs).
        self.count_extremes = False
        self.backend_name = backend
        self._backends: dict[tuple, Backend] = {}
        self._used: set[str] = set()  # names of the backends made (kept past close)
        self.nstream = 2 * len(self.antennas)
        self.nchan = channels[1] - channels[0]
        self.nbaseline = self.nstream * (self.nstream + 1) // 2
        self.calls = 0

    def backend(self, layout: SampleLayout) -> Backend:
        key = (layout.nstream, layout.nchan, layout.encoding, layout.nibble_order)
        b = self._backends.get(key)
        if b is None:
            b = self._backends[key] = get_backend(self.backend_name, geometry_for(layout))
            self._used.add(b.name)
        return b

    @property
    def backend_names(self) -> list[str]:
        """The backends that correlated, also after :meth:`close` (a task's summary is made
        after its writer closed the correlator)."""
        return sorted(self._used)

    def correlate(self, t0: int, t1: int, out: np.ndarray | None = None) -> Correlated:
        """Spectra ``[t0, t1)``: exact sums, added by the backend in place in int32 where no
        channel can sum more spectra than the int32 bound of every chunk's encoding (a window
        of at most ``t1 - t0`` spectra per channel), else in int64 (one output per call, added
        here). The int32 case saves an int64 array and a pass over it per integration, a few
        per cent of a fast backend's time; ``out`` (int32 ``[C, nbaseline, 2]``) then receives
        the sums, the first chunk of each channel written over, not added to (no zeroing
        pass); other outputs are fresh arrays."""
        chunks = list(self.rec.chunks(t0, t1, antennas=self.antennas, channels=self.channels))
        narrow = t1 - t0 <= min((c.layout.max_spectra for c in chunks), default=t1 - t0)
        shape = (self.nchan, self.nbaseline, 2)
        if narrow and out is not None and out.shape == shape and out.dtype == np.int32:
            vis = out
        else:
            vis = np.empty(shape, np.int32 if narrow else np.int64)
        # Per channel: nothing written to it yet; spectra correlated. Python lists: a chunk is
        # often one channel (MWAX: 32 calls an integration), where numpy's small-array calls
        # cost more than the bookkeeping itself.
        fresh = [True] * self.nchan
        valid = [0] * self.nchan
        c0 = self.channels[0]
        extremes = np.zeros(self.nstream, np.int64) if self.count_extremes else None
        for chunk in chunks:
            for a, b in channel_groups(chunk.layout.nstream, chunk.layout.nchan,
                                       8 if chunk.layout.encoding != "ci4" else 4):
                layout = chunk.layout if (a, b) == (0, chunk.layout.nchan) else \
                    chunk.layout.select(channels=range(a, b))
                lo, hi = chunk.chan0 - c0 + a, chunk.chan0 - c0 + b
                first = all(fresh[lo:hi])
                if not first and any(fresh[lo:hi]):  # groups overlapping unevenly
                    vis[lo:hi][np.array(fresh[lo:hi])] = 0
                backend = self.backend(layout)
                if narrow:  # in place, exact: this window's sums stay within int32
                    backend.correlate_layout(chunk.data, layout, out=vis[lo:hi],
                                             nframe=chunk.nframe, accumulate=not first,
                                             extremes=extremes)
                elif first:
                    vis[lo:hi] = backend.correlate_layout(chunk.data, layout,
                                                          nframe=chunk.nframe, extremes=extremes)
                else:
                    vis[lo:hi] += backend.correlate_layout(chunk.data, layout,
                                                           nframe=chunk.nframe,
                                                           extremes=extremes)
                fresh[lo:hi] = [False] * (hi - lo)
                valid[lo:hi] = [v + chunk.nspectra for v in valid[lo:hi]]
                self.calls += 1
        # channels no chunk reached (missing data): nothing correlated
        vis[np.array(fresh, bool)] = 0
        return Correlated(vis, np.array(valid, np.int64), extremes)

    def integrations(self, wins: Sequence[tuple[int, int]],
                     reuse: bool = False) -> Iterator[Correlated]:
        """Each window's :class:`Correlated`. ``reuse``: int32 sums go into two buffers in
        turn, so each result is valid until the next but one is made (a consumer that is
        done with one result before asking for the one after next, like reprocessing's
        writer, saves an allocation and its page faults per integration)."""
        bufs: list[np.ndarray] = []
        for k, (t0, t1) in enumerate(wins):
            if reuse and len(bufs) < 2:
                bufs.append(np.empty((self.nchan, self.nbaseline, 2), np.int32))
            yield self.correlate(t0, t1, bufs[k % 2] if reuse else None)

    def close(self) -> None:
        for b in self._backends.values():
            b.close()
        self._backends.clear()

