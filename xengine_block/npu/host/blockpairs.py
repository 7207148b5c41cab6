"""Any S on the NPU: stream blocks, block-pair calls and the packed triangle
(docs/design.md, "Geometry").

The NPU computes ``npu_block x npu_block`` products of one channel group per call. For S
streams, the streams are split into ``npu_nblock`` blocks (the last zero-padded) and every block
pair (i <= j) is one call with A = block i and B = block j; Hermitian symmetry gives the rest.
Only the upper triangle of each call's output is kept, and every baseline comes from exactly
one call.

This module is the single implementation of that scheme. An *executor* differs only in how one
call runs and where its input buffers live:

- the emulator backend runs each call at once through the plan emulator;
- the pyxrt backend (and its simulated device) fills device buffers (BOs) and queues the calls
  to its sync and launch threads.

Both go through :meth:`BlockPairExecutor.submit`, which fills the inputs with
:func:`fill_inputs` and collects the outputs in a :class:`BlockPairJob`; input in any other
layout through :meth:`BlockPairExecutor.submit_layout`, whose host layout pass
(:func:`fill_inputs_layout`) writes the device's int8 input buffers straight from it.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from math import prod

import numpy as np

from ... import native_extension
from ...geometry import Geometry
from ...sample_layout import SampleLayout, gather
from ...triangle import baseline_index
from . import hostio


def frames_are_input(g: Geometry) -> bool:
    """True when ring frames already have the NPU input layout (no regrouping needed).

    A frame is ``[stream][chan][coarse][reim][fine]``; the NPU input is
    ``[packet][npu_block streams][payload]`` with payload ``[nchan_pkt][coarse][reim][fine]``.
    They coincide exactly when S equals the NPU block and the frame holds one channel group.
    """
    return g.nstream == g.npu_block and g.nchan == g.nchan_pkt


def holds_frames(buffer: np.ndarray, frames: np.ndarray) -> bool:
    """True if ``buffer`` starts at the same memory as ``frames`` (they were written in place)."""
    return buffer.size > 0 and buffer.ctypes.data == frames.ctypes.data


#: Threads the frame copy of one channel group is split over (by stream block and packets):
#: numpy's copies release the GIL.
FILL_THREADS = 4


def fill_threads(g: Geometry) -> int:
    """Threads :func:`fill_inputs` copies ``g``'s frames on."""
    return max(1, min(FILL_THREADS, g.npu_nblock * g.npacket))


@lru_cache(maxsize=1)
def _fill_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(FILL_THREADS, thread_name_prefix="npu-fill")


def fill_inputs(frames: np.ndarray, g: Geometry, group: int,
                buffers: list[np.ndarray]) -> None:
    """Write channel group ``group`` of ``frames`` into one input buffer per stream block,
    the blocks on :func:`fill_threads` threads (S > 256: several blocks).

    ``buffers[b]`` is ``[P_buf, npu_block, payload]`` int8 with ``P_buf >= len(frames)``;
    packets past the frames are zeroed, which adds nothing to any product (a device build for P
    packets can thus integrate fewer). A buffer that already is the frames' memory (see
    :meth:`NpuBackend.input_buffer`) is not copied onto itself.
    """
    n = frames.shape[0]
    if len(buffers) != g.npu_nblock:
        raise ValueError(f"need {g.npu_nblock} input buffers, got {len(buffers)}")
    for buf in buffers:
        if buf.shape[0] < n:
            raise ValueError(f"input buffer holds {buf.shape[0]} packets, got {n} frames")

    def fill(block: int, p0: int, p1: int) -> None:
        buf = buffers[block]
        if not (frames_are_input(g) and holds_frames(buf, frames)):
            hostio.npu_input(frames[p0:p1], g, block, group, out=buf[p0:p1])

    parts = -(-fill_threads(g) // len(buffers))  # packet ranges per block
    units = [(block, n * k // parts, n * (k + 1) // parts)
             for block in range(len(buffers)) for k in range(parts)]
    if len(units) == 1 or n == 0:
        for unit in units:
            fill(*unit)
    else:
        for done in [_fill_pool().submit(fill, *unit) for unit in units]:
            done.result()
    for buf in buffers:
        buf[n:] = 0


def fill_inputs_layout(data: np.ndarray, layout: SampleLayout, t0: int, nspec: int,
                       g: Geometry, group: int, buffers: list[np.ndarray]) -> None:
    """The host layout pass: spectra ``[t0, t0 + nspec)`` of channel group ``group`` of
    ``data`` in any ``layout`` written straight into one device input buffer per stream block
    (``[P_buf, npu_block, payload]`` int8: the packet layout of ``npu_block`` streams and one
    channel group, ci8 or, for a ci4 device, packed ci4; :func:`~xengine_block.sample_layout.
    gather`); streams past S and spectra past ``nspec`` zeroed (they add nothing)."""
    if len(buffers) != g.npu_nblock:
        raise ValueError(f"need {g.npu_nblock} input buffers, got {len(buffers)}")
    dev = SampleLayout.packet(g.replace(nstream=g.npu_block, nchan=g.nchan_pkt))
    c0 = group * g.nchan_pkt
    for block, buf in enumerate(buffers):
        if buf.shape[0] * g.nspectra_pkt < nspec:
            raise ValueError(f"input buffer holds {buf.shape[0]} packets, fewer than "
                             f"{nspec} spectra")
        s0, s1 = block * g.npu_block, min((block + 1) * g.npu_block, g.nstream)
        frames = buf.reshape(buf.shape[0], *dev_frame_shape(g))
        npk = -(-nspec // g.nspectra_pkt)
        tail = nspec - (npk - 1) * g.nspectra_pkt
        if tail < g.nspectra_pkt:  # the last packet's spectra past nspec
            last = frames[npk - 1].reshape(g.npu_block, g.nchan_pkt, -1)
            last[...] = 0
        gather(data, layout, frames, dev, t0=t0, nspec=nspec, streams=range(s0, s1),
               channels=(c0, c0 + g.nchan_pkt))
        frames[:npk, s1 - s0:] = 0
        frames[npk:] = 0


def dev_frame_shape(g: Geometry) -> tuple[int, ...]:
    """One packet of one device input buffer: ``[npu_block, nchan_pkt, coarse, 2, fine]``
    (ci4: ``[npu_block, nchan_pkt, coarse, fine]``)."""
    return (g.npu_block, *g.packet_shape)


@lru_cache(maxsize=8)
def _output_positions(g: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """Flat positions in one channel of the NPU output of (re, im) for [A stream, B stream].

    Derived by passing an index array through ``hostio.npu_output_to_matrix``, so the output
    layout is written down only there.
    """
    shape = hostio.output_shape(g)
    idx = np.arange(prod(shape), dtype=np.int64).reshape(shape)
    re, im = hostio.npu_output_to_matrix(idx, g)
    return re[0], im[0]


@lru_cache(maxsize=64)
def pair_index(g: Geometry, i: int, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(re positions, im positions, baselines) that call (i, j) contributes to the triangle.

    Keeps A stream <= B stream (the diagonal call's lower half belongs to nobody) and drops the
    zero-padding streams beyond S.
    """
    re_pos, im_pos = _output_positions(g)
    blk = g.npu_block
    a = np.arange(blk)[:, None] + i * blk
    b = np.arange(blk)[None, :] + j * blk
    keep = (a <= b) & (a < g.nstream) & (b < g.nstream)
    a2, b2 = np.broadcast_arrays(a, b)
    result = (re_pos[keep], im_pos[keep], np.asarray(baseline_index(a2[keep], b2[keep]), np.int64))
    for arr in result:  # shared through the cache
        arr.flags.writeable = False
    return result


def _usable_out(out: np.ndarray | None, g: Geometry) -> bool:
    return (out is not None and out.dtype == np.int32 and out.shape == g.output_shape
            and out.flags.c_contiguous)


class BlockPairJob:
    """One correlate call in flight: the triangle it fills and the NPU calls still due.

    Thread-safe: an executor may deliver outputs (``add``) from a worker thread while the caller
    waits in :meth:`result`.
    """

    def __init__(self, g: Geometry, npacket: int, out: np.ndarray | None = None) -> None:
        self.geometry = g
        self.npacket = npacket
        self.pairs: list[tuple[int, int]] = g.npu_block_pairs
        self._out = out
        self.triangle = out if _usable_out(out, g) else np.empty(g.output_shape, np.int32)
        self._due = g.nchan_group * len(self.pairs)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._error: BaseException | None = None

    def add(self, group: int, i: int, j: int, npu_out: np.ndarray) -> None:
        """Take the output of call (group, i, j) (any array in the NPU output layout): one
        pass of the C extension (``place_pair``, the GIL released, so a placement thread does
        not take turns with other Python work)."""
        g = self.geometry
        re_pos, im_pos, dst = pair_index(g, i, j)
        chans = slice(group * g.nchan_pkt, (group + 1) * g.nchan_pkt)
        native_extension.native().place_pair(np.ascontiguousarray(npu_out, np.int32), re_pos,
                                             im_pos, dst, self.triangle[chans])
        with self._lock:
            self._due -= 1
            if self._due == 0:
                self._done.set()

    def fail(self, exc: BaseException) -> None:
        """Abort the job; :meth:`result` re-raises ``exc``."""
        with self._lock:
            if self._error is None:
                self._error = exc
        self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def failed(self) -> bool:
        """True once :meth:`fail` was called (workers skip the job's remaining calls)."""
        return self._error is not None

    def result(self, timeout: float | None = None) -> np.ndarray:
        """Wait for every call; return the triangle (in ``out`` if one was given)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"NPU job not finished after {timeout} s")
        if self._error is not None:
            raise self._error
        if self._out is not None and self.triangle is not self._out:
            self._out[...] = self.triangle
            return self._out
        return self.triangle


class BlockPairExecutor(ABC):
    """Runs the NPU calls of block-pair jobs; subclasses say where inputs live and how calls run.

    :meth:`submit` is the one driver: per channel group it takes the input buffers, fills them,
    and dispatches the group's calls (now or on a worker thread).
    """

    geometry: Geometry

    @abstractmethod
    def input_buffers(self, frames: np.ndarray | None,
                      npacket: int | None = None) -> list[np.ndarray]:
        """Writable ``[P_buf >= len(frames), npu_block, payload]`` int8 buffers, one per block."""

    @abstractmethod
    def dispatch(self, job: BlockPairJob, group: int, buffers: list[np.ndarray]) -> None:
        """Run every pair of ``job`` for ``group`` on ``buffers`` and ``job.add`` each output."""

    def abandon(self, buffers: list[np.ndarray]) -> None:  # noqa: B027 - optional hook
        """Give back buffers taken by :meth:`input_buffers` that will not be dispatched."""

    def submit(self, frames: np.ndarray, out: np.ndarray | None = None) -> BlockPairJob:
        """Start correlating ``frames`` ``[P, S, C, coarse, 2, fine]``; returns the job."""
        return self._submit(frames.shape[0], out, frames,
                            lambda group, buffers: fill_inputs(frames, self.geometry, group,
                                                               buffers))

    def submit_layout(self, data: np.ndarray, layout: SampleLayout, t0: int, nspec: int,
                      out: np.ndarray | None = None) -> BlockPairJob:
        """Start correlating spectra ``[t0, t0 + nspec)`` of ``data`` in any ``layout``
        (at most the device's P packets of spectra), written straight into the device's input
        buffers by the host layout pass (:func:`fill_inputs_layout`)."""
        g = self.geometry
        return self._submit(-(-nspec // g.nspectra_pkt), out, None,
                            lambda group, buffers: fill_inputs_layout(data, layout, t0, nspec, g,
                                                                      group, buffers))

    def _submit(self, npacket: int, out: np.ndarray | None, frames: np.ndarray | None,
                fill: Callable[[int, list[np.ndarray]], None]) -> BlockPairJob:
        g = self.geometry
        job = BlockPairJob(g, npacket, out)
        for group in range(g.nchan_group):
            buffers = None
            try:
                buffers = self.input_buffers(frames, npacket)
                fill(group, buffers)
            except BaseException as exc:
                if buffers is not None:
                    self.abandon(buffers)
                job.fail(exc)
                raise
            self.dispatch(job, group, buffers)
        return job


def correlate_layout_calls(submit: Callable[[int, int], BlockPairJob], g: Geometry,
                           nspec: int, per_call: int, out: np.ndarray, accumulate: bool,
                           wait: Callable[[BlockPairJob], np.ndarray] = BlockPairJob.result
                           ) -> np.ndarray:
    """``nspec`` spectra in device calls of at most ``per_call`` packets (``submit(t0, n)``
    starts one), all in flight at once, their int32 triangles (``wait(job)``) summed into
    ``out`` (or added to it): modulo 2^32, exact within the caller's int32 bound."""
    step = per_call * g.nspectra_pkt
    jobs = [submit(t0, min(step, nspec - t0)) for t0 in range(0, nspec, step)]
    if not accumulate:
        out[...] = 0
    for job in jobs:
        out += wait(job)
    return out
