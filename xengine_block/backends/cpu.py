"""Exact CPU correlator on float32 BLAS ("cpu" backend).

Why float32 is exact here: int8 values convert exactly, every product term has magnitude
<= 2^14, and one packet's 480 spectra give at most 960 terms per output (re: a_re*b_re +
a_im*b_im), so every partial sum BLAS can form, in any order, is an integer of magnitude
<= 960 * 2^14 < 2^24, the largest float32 range with unit spacing. Each packet's products are
therefore exact in float32 and are summed across packets in float64 (exact below 2^53).

What is computed (the Hermitian triangle, not the whole matrix):
- re = Y Y^T with Y = [re | im] per stream (K = 960): only block pairs (i <= j) of 128-stream
  blocks, i.e. the upper triangle at block granularity;
- im = M - M^T with M = B A^T (A = re parts, B = im parts, K = 480): K_im is antisymmetric,
  so one K=480 product gives it. Together ~62 % of the flops of a full complex product at S=256.
Any other input layout (``correlate_layout``) is gathered from the input straight into the
same float32 scratch, chunk by chunk (``sample_layout.gather``: one compiled pass, ci4
unpacked and ci16 narrowed on the way), then the same products.
ci4 input is unpacked inside the same layout pass: two arithmetic shifts per byte
(``frames.unpack_ci4_planes``) write re and im straight into the float32 scratch, where ci8
converts (cheaper than ci8's strided conversion).
Channels run on a thread pool (numpy releases the GIL in BLAS and copies) with BLAS single-
threaded inside, which measured faster than threaded BLAS on small per-packet matrices.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from ..frames import unpack_ci4_planes
from ..geometry import Geometry
from ..sample_layout import SampleLayout, gather
from ..triangle import pack_triangle
from .base import Backend

#: Streams per block of the block-triangular real part.
STREAM_BLOCK = 128
#: Packets converted to float32 at once (bounds scratch memory).
PACKET_CHUNK = 8


class CpuBackend(Backend):
    """Exact numpy/BLAS correlator for any even S."""

    name = "cpu"
    priority = 10

    def __init__(self, geometry: Geometry, nthreads: int | None = None) -> None:
        super().__init__(geometry)
        g = geometry
        self.nthreads = nthreads or min(os.cpu_count() or 1, g.nchan)
        self.sb = min(STREAM_BLOCK, g.nstream)
        self.nblock = -(-g.nstream // self.sb)
        self.spad = self.nblock * self.sb
        self.pairs = [(i, j) for j in range(self.nblock) for i in range(j + 1)]
        self._pool = ThreadPoolExecutor(self.nthreads, thread_name_prefix="xcorr-cpu")
        # Per-thread scratch: float32 [packet][stream][reim][spectrum], pad streams stay zero.
        self._scratch = [np.zeros((PACKET_CHUNK, self.spad, 2, g.nspectra_pkt), np.float32)
                         for _ in range(self.nthreads)]
        # ci4: per-thread int8 scratch for the low nibble's shift.
        self._shift = [np.empty((PACKET_CHUNK, g.nstream, g.nspectra_pkt), np.int8)
                       for _ in range(self.nthreads)] if g.ci4 else None
        # The scratch as a layout (in float32 elements), for the layout pass of any input.
        k = g.nspectra_pkt
        self._scratch_layout = SampleLayout(g.nstream, 1, k, self.spad * 2 * k,
                                            tuple(s * 2 * k for s in range(g.nstream)),
                                            chan_stride=0, time_stride=1, im_offset=k)

    def _products(self, wv: np.ndarray, acc_re: np.ndarray, acc_m: np.ndarray) -> None:
        """Add the products of ``wv`` (float32 ``[pc, spad, 2, 480]``: ``pc`` packets of 480
        spectra, each exact in float32) to the float64 accumulators."""
        g, sb = self.geometry, self.sb
        pc = wv.shape[0]
        y = wv.reshape(pc, self.nblock, sb, 2 * g.nspectra_pkt)
        for q, (i, j) in enumerate(self.pairs):
            r = np.matmul(y[:, i], y[:, j].transpose(0, 2, 1))
            acc_re[q] += r.sum(axis=0, dtype=np.float64)
        m = np.matmul(wv[:, :, 1], wv[:, :, 0].transpose(0, 2, 1))
        acc_m += m.sum(axis=0, dtype=np.float64)

    def _new_acc(self) -> tuple[np.ndarray, np.ndarray]:
        return (np.zeros((len(self.pairs), self.sb, self.sb), np.float64),
                np.zeros((self.spad, self.spad), np.float64))

    def _channel(self, f: np.ndarray, c: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Channel ``c`` of packet frames ``f``, in thread ``k``'s scratch."""
        g, w = self.geometry, self._scratch[k]
        shift = self._shift[k] if self._shift else None
        acc_re, acc_m = self._new_acc()
        for p0 in range(0, f.shape[0], PACKET_CHUNK):
            src = f[p0:p0 + PACKET_CHUNK, :, c]  # [pc, S, coarse, reim, fine] or ci4 bytes
            pc = src.shape[0]
            wv = w[:pc]
            if shift is not None:  # [pc, S, coarse, fine] bytes -> re, im planes
                unpack_ci4_planes(src.reshape(pc, g.nstream, -1), wv[:, :g.nstream, 0],
                                  wv[:, :g.nstream, 1], g.nibble_order, shift[:pc])
            else:
                wv[:, :g.nstream] = src.transpose(0, 1, 3, 2, 4).reshape(pc, g.nstream, 2, -1)
            self._products(wv, acc_re, acc_m)
        return acc_re, acc_m

    def _channel_layout(self, data: np.ndarray, layout: SampleLayout, nspec: int, c: int,
                        k: int) -> tuple[np.ndarray, np.ndarray]:
        """Channel ``c`` of ``nspec`` spectra of ``data`` in ``layout``: each chunk gathered
        straight from the input into thread ``k``'s float32 scratch (one compiled pass:
        :func:`~xengine_block.sample_layout.gather`), the last packet zero-padded."""
        g, w = self.geometry, self._scratch[k]
        acc_re, acc_m = self._new_acc()
        chunk = PACKET_CHUNK * g.nspectra_pkt
        for t0 in range(0, nspec, chunk):
            n = min(chunk, nspec - t0)
            pc = -(-n // g.nspectra_pkt)
            wv = w[:pc]
            gather(data, layout, wv, self._scratch_layout, t0=t0, nspec=n, channels=(c, c + 1))
            tail = n - (pc - 1) * g.nspectra_pkt
            wv[pc - 1, :g.nstream, :, tail:] = 0
            self._products(wv, acc_re, acc_m)
        return acc_re, acc_m

    def _run(self, channel: Callable[[int, int], tuple[np.ndarray, np.ndarray]],
             out: np.ndarray | None, accumulate: bool = False) -> np.ndarray:
        """Every channel (``channel(c, thread)``) on the pool; the packed triangle."""
        g, sb = self.geometry, self.sb
        re = np.zeros((g.nchan, self.spad, self.spad), np.int64)
        im = np.zeros_like(re)

        def work(k: int) -> None:
            with threadpool_limits(1):
                for c in range(k, g.nchan, self.nthreads):
                    acc_re, acc_m = channel(c, k)
                    for q, (i, j) in enumerate(self.pairs):
                        re[c, i * sb:(i + 1) * sb, j * sb:(j + 1) * sb] = acc_re[q]
                    im[c] = acc_m - acc_m.T

        for fut in [self._pool.submit(work, k) for k in range(self.nthreads)]:
            fut.result()
        tri = pack_triangle(re[:, :g.nstream, :g.nstream], im[:, :g.nstream, :g.nstream])
        if out is not None:
            if accumulate:
                out += tri.astype(np.int32)  # int32 wraps: exact modulo 2^32
            else:
                out[...] = tri
            return out
        return tri

    def correlate(self, frames: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        f = self.check_frames(frames)
        return self._run(lambda c, k: self._channel(f, c, k), out)

    def correlate_layout(self, data: np.ndarray, layout: SampleLayout,
                         out: np.ndarray | None = None, nframe: int | None = None,
                         accumulate: bool = False,
                         extremes: np.ndarray | None = None) -> np.ndarray:
        """Any layout: each chunk read from the input straight into the float32 scratch (no
        frames in between); our packet layout keeps the frame path."""
        if layout == SampleLayout.packet(self.geometry):
            return super().correlate_layout(data, layout, out, nframe, accumulate, extremes)
        nspec = self.layout_spectra(data, layout, nframe, out, accumulate)
        self.add_extremes(extremes, data, layout, nspec // layout.nspectra)
        return self._run(lambda c, k: self._channel_layout(data, layout, nspec, c, k), out,
                         accumulate)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
