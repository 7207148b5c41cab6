"""Exact CPU correlator at the machine's int8 limit ("native" backend: AMX / VNNI / AVX2 / C).

The work happens in the C extension ``xengine_block._native`` (``kernels/cpu/``), built by
``pip install -e .``. It lays each chunk of frames out as 16 x 64 int8 tiles (8 streams' real
rows over their imaginary rows), so one signed int8 tile product gives a 16 x 16 int32 block
``[[rr, ri], [ir, ii]]`` and ``K = (rr + ii) + i (ir - ri)``: no int8 value is ever negated.
Only tile pairs of the Hermitian triangle are computed; accumulation is modulo 2^32, so the
int32 result is exact for ``P <= Geometry.max_npacket``. 4-bit (ci4) frames are unpacked to
int8 inside the same layout pass. See ``docs/native.md`` for the design and the measured limits.

Dispatch is at run time, best first: ``amx`` (AMX-INT8 tiles; needs the CPU, XCR0 and the
kernel's arch_prctl permission), ``avx512vnni``, ``avx2``; the portable ``scalar`` C path runs
only when forced (``isa="scalar"``), since numpy's float32 BLAS ("cpu") is faster than it.
Set ``XENGINE_NATIVE_DISABLE=amx[,avx512vnni,...]`` to treat paths as unavailable (to test the
fallbacks, or to rule a path out on a misbehaving machine).

``amx_emulated`` is the AMX path's own kernel source compiled over a software emulation of the
AMX tiles (``kernels/cpu/amx_emu.h``), fed by the real AVX-512 layout and packing code: it runs
wherever AVX-512 F/BW does, bit for bit what the AMX path computes, so the AMX path is tested
on CPUs without AMX. It is slow and is never chosen automatically, only by name.
"""

from __future__ import annotations

import logging
import os
import time
from typing import NamedTuple

import numpy as np

from .. import native_extension
from ..frames import as_frames
from ..geometry import Geometry
from ..sample_layout import SampleLayout
from .base import Backend, BackendUnavailable

log = logging.getLogger(__name__)

#: Every path of the extension (its ``ISA_NAMES``): the hardware ones in dispatch order,
#: fastest first, then the emulations.
ISAS = ("amx", "avx512vnni", "avx2", "scalar", "amx_emulated")
#: Paths that run a kernel's source over software-emulated instructions: exact but slow, to
#: verify that kernel on CPUs without its ISA; never chosen automatically, never benchmarked.
EMULATED_ISAS = ("amx_emulated",)
#: Paths ``auto`` may choose: not scalar C (numpy BLAS, "cpu", beats it), not an emulation.
AUTO_ISAS = tuple(i for i in ISAS if i != "scalar" and i not in EMULATED_ISAS)
#: Comma-separated ISA names to treat as unavailable.
DISABLE_ENV = "XENGINE_NATIVE_DISABLE"


class IsaStatus(NamedTuple):
    """One path's state here, as the extension decides it (``kernels/cpu/dispatch.c``)."""

    runnable: bool
    reason: str
    #: The CPU has the path but the OS or the kernel withholds it (XCR0 state, the AMX
    #: permission): the one kind of fallback worth a warning, since someone can act on it.
    refused: bool = False


def isa_status() -> dict[str, IsaStatus]:
    """ISA name -> its :class:`IsaStatus` here, in dispatch order, honouring
    XENGINE_NATIVE_DISABLE (a path disabled there is not runnable, and not refused)."""
    try:
        status = native_extension.native().isa_status()
    except ImportError as exc:
        return {isa: IsaStatus(False, str(exc)) for isa in ISAS}
    stale = (False, "not in this build of xengine_block._native (built from older sources): "
                    "rebuild it with `pip install -e .`")
    status = {isa: IsaStatus(*status.get(isa, stale)) for isa in ISAS}
    disabled = {s.strip() for s in os.environ.get(DISABLE_ENV, "").split(",") if s.strip()}
    for isa in disabled & set(ISAS):
        if status[isa].runnable:
            status[isa] = IsaStatus(False, f"disabled by {DISABLE_ENV}={os.environ[DISABLE_ENV]}")
    return status


class IsaChoice(NamedTuple):
    """The path :func:`select_isa` chose and why."""

    isa: str
    reason: str
    #: ``auto`` fell back past a path the OS or the kernel refuses (:attr:`IsaStatus.refused`).
    past_refused: bool = False


def select_isa(isa: str = "auto") -> IsaChoice:
    """The forced path if runnable, else the best runnable automatic one.

    Raises BackendUnavailable naming the reason when nothing (or the forced path) can run.
    """
    status = isa_status()
    if isa != "auto":
        if isa not in status:
            raise ValueError(f"unknown isa {isa!r}; choose 'auto' or one of {ISAS}")
        if not status[isa].runnable:
            raise BackendUnavailable(f"native isa {isa!r} cannot run here: {status[isa].reason}")
        return IsaChoice(isa, f"{isa} forced: {status[isa].reason}")
    skipped = []
    for name in AUTO_ISAS:
        if status[name].runnable:
            reason = f"{name}: {status[name].reason}"
            if skipped:
                reason += "; fell back past " + "; ".join(f"{i} ({status[i].reason})"
                                                          for i in skipped)
            return IsaChoice(name, reason, any(status[i].refused for i in skipped))
        skipped.append(name)
    raise BackendUnavailable("no SIMD path runnable (numpy 'cpu' beats portable C): "
                             + "; ".join(f"{i} ({status[i].reason})" for i in skipped))


#: Spectra per K-step of the extension's tiles (16 x 64 int8: 64 spectra of a stream's samples).
KSTEP = 64
#: Spectra below which a read is too short to keep the extension's threads and tiles busy.
MIN_GULP_SPECTRA = 8192


class NativeBackend(Backend):
    """Exact tile-based int8 correlator (C extension), any even S.

    Parameters
    ----------
    geometry : the correlator geometry.
    isa : ``auto`` (best runnable path) or one of ``ISAS`` to force a path; raises
        BackendUnavailable with the reason if that path cannot run here.
    nthreads : worker threads (default ``os.cpu_count()``); channels and chunks are shared
        out dynamically, so any count works.
    chunk_ksteps : K-steps of 64 spectra converted and correlated per chunk (0: the
        extension's default, sized so a chunk's tiles and accumulators stay in L2).
    """

    name = "native"
    priority = 20

    def __init__(self, geometry: Geometry, isa: str = "auto", nthreads: int | None = None,
                 chunk_ksteps: int = 0) -> None:
        super().__init__(geometry)
        self._ext = native_extension.native()
        self.isa, self.isa_reason, past_refused = select_isa(isa)
        # The choice is logged at INFO, fallbacks included (a CPU without AMX is no fault);
        # WARNING only where the system refuses a path this CPU has (the user can act on it);
        # a forced path that cannot run raised above.
        log.log(logging.WARNING if past_refused else logging.INFO, "native correlator path %s",
                self.isa_reason)
        self.nthreads = nthreads or os.cpu_count() or 1
        self.chunk_ksteps = chunk_ksteps
        #: CPU seconds the worker threads used in the last call (their sum): the cost of the
        #: call with time slicing by other processes taken out.
        self.last_cpu_seconds = 0.0

    def overlap_gulp(self, frames: int, frame_spectra: int) -> int:
        """A quarter (else a third, a half) of the integration, where that is whole frames and
        whole K-steps of :data:`KSTEP` spectra and at least :data:`MIN_GULP_SPECTRA`: the
        extension adds into the open integration in place, so a part costs what it would
        within the whole, and the X-engine starts when a quarter has landed, not all of it."""
        for parts in (4, 3, 2):
            n, rest = divmod(frames, parts)
            spectra = n * frame_spectra
            if not rest and not spectra % KSTEP and spectra >= MIN_GULP_SPECTRA:
                return n
        return frames

    @classmethod
    def availability(cls, geometry: Geometry | None = None) -> tuple[bool, str]:
        try:
            return True, select_isa("auto").reason
        except BackendUnavailable as exc:
            return False, str(exc)

    def _run(self, frames: np.ndarray, out: np.ndarray, mode: str,
             accumulate: bool = False, placed: SampleLayout | None = None,
             nframe: int = 0, extremes: np.ndarray | None = None) -> None:
        """The frame path; ``placed``: a layout of our packets with the streams anywhere
        (:meth:`SampleLayout.is_packets`), ``nframe`` of its frames read in place;
        ``extremes``: counted in the layout pass (the extension's, every path)."""
        g = self.geometry
        where = {} if placed is None else {
            "stream_offsets": np.asarray(placed.stream_offsets, np.int64),
            "frame_bytes": placed.frame_bytes, "nframe": nframe}
        if extremes is not None:
            where["extremes"] = extremes
        # ci4 frames ([P, S, C, coarse, fine] bytes) are unpacked inside the layout pass.
        self.last_cpu_seconds = self._ext.correlate(
            frames, out, g.nstream, g.nchan, g.ncoarse, self.isa, self.nthreads,
            self.chunk_ksteps, mode, g.sample_bits, g.nibble_order, accumulate, **where)

    def _target(self, out: np.ndarray | None, accumulate: bool) -> np.ndarray:
        """``out`` if the extension can write it in place, else a fresh int32 output (with
        ``accumulate``: holding ``out``'s values)."""
        if (out is not None and out.dtype == np.int32 and out.shape == self.geometry.output_shape
                and out.flags.c_contiguous):
            return out
        target = self.new_output()
        if accumulate:
            target[...] = out
        return target

    def correlate(self, frames: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return self.correlate_frames(self.check_frames(frames), out)

    def correlate_frames(self, frames: np.ndarray, out: np.ndarray | None = None,
                         accumulate: bool = False,
                         extremes: np.ndarray | None = None) -> np.ndarray:
        """Frames of the packet layout, any number: one call per ``max_npacket`` frames, each
        adding into the output (the extension's accumulate: no temporary); ``extremes``
        (int64 ``[S]``): the parts at the quantiser's extremes added, counted in the pass."""
        if accumulate and out is None:
            raise ValueError("accumulate needs an out array to add to")
        f = np.ascontiguousarray(self.check_frames(frames[:self.geometry.max_npacket]))
        target = self._target(out, accumulate)
        step = self.geometry.max_npacket
        self._run(f, target, "full", accumulate, extremes=extremes)
        for p0 in range(step, frames.shape[0], step):
            self._run(np.ascontiguousarray(self.check_frames(frames[p0:p0 + step])), target,
                      "full", True, extremes=extremes)
        if out is not None and target is not out:
            out[...] = target
        return target

    def correlate_layout(self, data: np.ndarray, layout: SampleLayout,
                         out: np.ndarray | None = None, nframe: int | None = None,
                         accumulate: bool = False,
                         extremes: np.ndarray | None = None) -> np.ndarray:
        """Any layout in the extension's own layout pass (``kernels/cpu/layout.c``: one pass
        from the input into the tiles, no numpy transpose); our packet layout takes the frame
        paths (:meth:`correlate_frames`), also with its streams anywhere (a pcap recording's
        records: :meth:`SampleLayout.is_packets`), where the generic pass would read the
        samples one by one. ``extremes``: counted in the extension's layout pass (every path:
        from the tiles it builds)."""
        g = self.geometry
        n = self.layout_spectra(data, layout, nframe, out, accumulate) // layout.nspectra
        if extremes is not None and (extremes.dtype != np.int64 or extremes.shape != (
                g.nstream,) or not extremes.flags.c_contiguous):
            raise ValueError(f"extremes must be a contiguous int64 array of {g.nstream}")
        if layout == SampleLayout.packet(g):
            frames = as_frames(np.asarray(data).reshape(-1).view(np.int8)[:n * g.frame_bytes], g)
            return self.correlate_frames(frames, out, accumulate, extremes)
        target = self._target(out, accumulate)
        if layout.is_packets(g):
            buf = np.asarray(data).reshape(-1).view(np.uint8)
            self._run(buf, target, "full", accumulate, layout, n, extremes)
        else:
            self._run_layout(data, layout, target, nframe, "full", accumulate, extremes)
        if out is not None and target is not out:
            out[...] = target
        return target

    def _run_layout(self, data: np.ndarray, layout: SampleLayout, out: np.ndarray,
                    nframe: int | None, mode: str, accumulate: bool = False,
                    extremes: np.ndarray | None = None) -> None:
        a = np.asarray(data)
        if not a.flags.c_contiguous:
            raise ValueError("layout data must be C-contiguous")
        buf = a.reshape(-1).view(np.uint8)
        n = self.layout_spectra(buf, layout, nframe, out, accumulate) // layout.nspectra
        self.last_cpu_seconds = self._ext.correlate_layout(
            buf, out, layout.stream_offsets_i64, layout.nchan, n,
            layout.nspectra, layout.frame_bytes, layout.chan_stride, layout.time_stride,
            layout.block, layout.block_stride, layout.encoding, layout.im_offset,
            layout.nibble_order, self.isa, self.nthreads, self.chunk_ksteps, mode, accumulate,
            extremes=extremes)

    def time_stages(self, data: np.ndarray,
                    layout: SampleLayout | None = None) -> dict[str, float]:
        """Seconds of the layout conversion alone and of the tile products alone, for frames
        of the packet layout or ``data`` in ``layout``.

        ``layout``: input -> tiles (and VNNI packing) for every chunk, no products;
        ``compute``: products over tiles converted once per thread (the result is discarded).
        Together with the full call they show what limits the rate.
        """
        out = self.new_output()
        if layout is None or layout == SampleLayout.packet(self.geometry):
            f = np.ascontiguousarray(self.check_frames(data))
            run = lambda mode: self._run(f, out, mode)  # noqa: E731
        else:
            run = lambda mode: self._run_layout(data, layout, out, None, mode)  # noqa: E731
        times = {}
        for mode in ("layout", "compute"):
            t0 = time.perf_counter()
            run(mode)
            times[mode] = time.perf_counter() - t0
        return times
