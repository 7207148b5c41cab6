"""XEngineBlock: channelised voltages (+ presence mask) in, one packed-triangle frame per
integration of N spectra out.

Inputs (lockstep): the data ring, in any layout its header describes
(:mod:`~xengine_block.blocks.headers`: a ``sample_layout``; a Bifrost ``_tensor`` such as
``ci8 [-1, nchan, nstation, 2]`` labelled ``['time', 'freq', 'station', 'pol']``, ci4 or ci16;
or, with a ``geometry``, our own frames ``i8 [-1, S, C, coarse, 2, fine]``, ``ci4
[-1, S, C, coarse, fine]`` or natural ``ci8 [-1, S, C, 480]``), read in place by the backend's
layout pass (``Backend.correlate_layout``); and optionally its presence mask ring ``u8 [-1, S]``
(or ``[-1, S, G]`` per channel group, packet input), per frame and stream; without a mask every
frame counts as present. Outputs: visibilities ``ci32 [-1, C, nbaseline]`` and the exact valid
spectra per baseline ``i64 [-1, G, nbaseline]`` (docs/design.md, "Packet and frame layouts" and
"Ring headers").

Integrations: N = ``integration_spectra`` spectra per output (default: the header geometry's P
packets, as before layouts), any whole number of frames, up to the int32 bound; aligned to
absolute spectrum counts (output ``time_tag`` a multiple of N, :class:`~xengine_block.
integration.IntegrationClock`), so every X-engine cuts at the same spectra. Gulps (``gulp_nframe``,
default one integration's frames) need not divide an integration: an integration spread over
gulps is summed (int32 modulo 2^32, exact within the bound), several in one gulp give several
outputs. Every integration is output exactly once, also when some or all of its input was lost
(unguaranteed reading): it holds what arrived and says so in its counts; a first integration
that starts before the sequence is partial the same way. A sequence that ends inside an
integration outputs it (partial) when its last gulp is short; if it ends on a gulp boundary no
span is left to write it to: it is counted in ``dropped_partial`` and logged.
"""

from __future__ import annotations

import functools
import logging
import math
import numbers
import threading
from typing import Any

import numpy as np

from ..backends import get_backend, make_backend
from ..backends.base import Backend
from ..geometry import Geometry
from ..integration import IntegrationClock, valid_counts
from ..runtime.pipeline import Block, MultiTransformBlock
from ..runtime.ring import Ring
from ..sample_layout import LayoutError, SampleLayout
from .base import BlockLogic, common_frames, lost_frames_any
from .headers import (
    BASELINE_ORDER,
    derive_header,
    paired_inputs,
    require_keys,
    time_scale,
    visibility_frame_bytes,
    xengine_input,
)

log = logging.getLogger(__name__)

#: Header keys the X-engine reads in every case (docs/bifrost.md); the layout's keys
#: (``sample_layout``, ``geometry``) are xengine_input's; the rest flows on to later blocks.
XENGINE_KEYS = ("_tensor", "sync_time", "fs_hz")


def output_nframes(nframe: int, frames_per_integration: int) -> int:
    """Output frames ``nframe`` input frames (a gulp, or a skip report, which can be longer)
    can make: the ceil(nframe / frames per integration) integrations they complete at most,
    plus the partial one a short last gulp outputs."""
    return -(-nframe // frames_per_integration) + 1


class XEngineLogic(BlockLogic):
    """Correlate each integration of N spectra with the chosen backend.

    Parameters
    ----------
    data, mask : the capture block (its two output rings), the two rings, or one data ring or
        one-output block (no presence mask: every frame present).
    backend : backend name or ``"auto"`` (NPU when usable, else the fastest exact CPU backend);
        the choice and the reason are logged and put in the output header.
    integration_spectra : N, spectra per output frame: a whole number of the input's frames
        (1 spectrum each for Bifrost's tensors, 480 for our packets), at most the int32 bound
        (65,535 spectra for ci8 and ci16, 16,777,215 for ci4). Default: the header geometry's
        P packets (``geometry.npacket * 480``); a layout input without a geometry needs it.
    gulp_nframe : input frames per gulp (default: one integration's frames); any number.
    geometry : the run's geometry, if known when the pipeline is built (packet input): the
        backend is then created here rather than at the first sequence, the data ring is sized
        for this block's reads (its pages faulted in: :func:`~xengine_block.runtime.memory.
        populate`) before any packet arrives, and if the backend can read the frames in place
        (the NPU backend with S == npu_block and one channel group: ``backend.zero_copy``) its
        ``allocate_host`` becomes the data ring's allocator, so the capture block writes frames
        straight into NPU buffer objects and ``correlate`` copies nothing (see below).
    backend_options : keyword arguments for the backend's constructor (e.g. ``xrt=``,
        ``build_dir=``, ``nring=``, ``nthreads=``); needs a backend name, not ``"auto"``.
    overlap_capture : with ``geometry`` and no ``gulp_nframe``: read each integration in the
        backend's parts (:meth:`~xengine_block.backends.base.Backend.overlap_gulp`: a quarter
        for ``native``), so that its correlation runs while the capture is still placing the
        rest: a live chain's X-engine starts a quarter of an integration after the first
        packet rather than a whole one, and each dump is out that much sooner after its last
        packet. The ring stays ``buffer_factor`` integrations deep. The price: a sequence that
        ends inside an integration on such a part's boundary has no span left to output it
        (``dropped_partial``), so recordings are read in whole integrations (the default).

    Why the geometry is given up front: the data ring allocates its memory when its writer
    begins the first sequence (and grows when this block sizes its reads), which happens before
    :meth:`on_sequence` could create the backend, and an allocator can only be installed before
    the first allocation. A lazy allocator asking for the backend later cannot help either:
    building the backend needs the geometry, which is in the sequence header the ring does not
    have yet when it allocates. So the backend is made and the allocator installed in the
    constructor, and the ring is sized there for this block's reads (gulps of one integration,
    ``buffer_nframe`` or ``buffer_factor`` (3) gulps deep), so that it allocates once. If the
    ring already holds memory, or a sequence's geometry differs from the one given (a new
    backend then takes over), frames are copied as before and the log says why.
    """

    #: Integrations a sequence ended inside of, on a gulp boundary (nothing left to write to).
    dropped_partial: int = 0

    def __init__(self, data: Block | Ring, mask: Block | Ring | None = None, *,
                 backend: str = "auto", geometry: Geometry | None = None,
                 integration_spectra: int | None = None,
                 backend_options: dict[str, Any] | None = None, overlap_capture: bool = False,
                 count_extremes: bool = False, **kwargs: Any) -> None:
        super().__init__(paired_inputs(data, mask, optional=True), **kwargs)
        #: Count each stream's sample parts at the quantiser's extremes as the backend reads
        #: them (input health): per integration, by its first spectrum, until a health block
        #: takes them (:meth:`take_extremes`). They travel beside the rings, not in them: a
        #: count per stream and integration, read by the block judging the dumps.
        self.count_extremes = count_extremes
        self._extremes: dict[int, np.ndarray] = {}
        self._extremes_lock = threading.Lock()
        if len(self.irings) == 1:  # no mask input: still two outputs
            self.orings = [self.create_ring(space=self.irings[0].space) for _ in range(2)]
        if integration_spectra is not None and (
                not isinstance(integration_spectra, numbers.Integral)
                or isinstance(integration_spectra, bool) or integration_spectra < 1):
            raise ValueError(f"integration_spectra must be a positive whole number of spectra, "
                             f"got {integration_spectra!r}")
        self.integration_spectra = integration_spectra
        self._gulp_request = self.gulp_nframe  # the caller's gulp_nframe, if any
        self.backend_name = backend
        self.backend_options = dict(backend_options or {})
        if self.backend_options and backend == "auto":
            raise ValueError("backend_options need a backend name, not 'auto'")
        self.backend: Backend | None = None
        self.geometry: Geometry | None = None
        self.layout: SampleLayout | None = None
        if geometry is not None:
            self.backend = self._make_backend(geometry)
            self.geometry = geometry
            if overlap_capture and not self._gulp_request:
                self._overlap_gulps(geometry)
            self._size_input_ring(geometry)
            self._size_output_rings(geometry)

    def _integration_frames(self, g: Geometry) -> int:
        """Packet frames per integration for geometry ``g`` (before a sequence's clock says)."""
        return max((self.integration_spectra or g.nspectra_int) // g.nspectra_pkt, 1)

    def _overlap_gulps(self, g: Geometry) -> None:
        """Gulps of the backend's part of an integration, the ring as deep as before (whole
        integrations: ``buffer_factor`` of them, unless ``buffer_nframe`` says otherwise)."""
        frames = self._integration_frames(g)
        self._gulp_request = self.backend.overlap_gulp(frames, g.nspectra_pkt)
        if self._gulp_request != frames:
            self.buffer_nframe = self.buffer_nframe or math.ceil(
                frames * (self.buffer_factor or 3))
            log.info("%s: gulps of %d frames, %d per integration (overlap_capture)", self.name,
                     self._gulp_request, frames)

    def _make_backend(self, g: Geometry) -> Backend:
        if self.backend_options:
            backend = make_backend(self.backend_name, g, **self.backend_options)
            backend.choice_reason = (f"requested by name with options "
                                     f"{sorted(self.backend_options)}")
        else:
            backend = get_backend(self.backend_name, g)
        log.info("%s: backend %s (%s)", self.name, backend.name, backend.choice_reason)
        return backend

    def _size_input_ring(self, g: Geometry) -> None:
        """Size the data ring for this block's reads (gulps of one integration of packet
        frames, ``buffer_nframe`` or ``buffer_factor`` (3) gulps deep) now, before data flows,
        so that it allocates (and faults its pages in) once; in the backend's memory where it
        reads frames in place."""
        ring = self.irings[0]
        zero_copy = self._zero_copy()
        if self._ring_holds_memory():
            log.info("%s: data ring %r already holds memory; it is not resized here%s", self.name,
                     ring.name, " and frames are copied into NPU buffers (give geometry= before "
                     "the pipeline runs for zero copy)" if zero_copy else "")
            return
        gulp = self._gulp_request or self._integration_frames(g)
        nframe = self.buffer_nframe or math.ceil(gulp * (self.buffer_factor or 3))
        self._allocate_input_ring(gulp * g.frame_bytes, nframe * g.frame_bytes, zero_copy)

    def _size_output_rings(self, g: Geometry) -> None:
        """Output rings faulted in now (:meth:`~.base.BlockLogic.size_output_rings`): the
        integrator would size them as it opens its first sequence, which this block waits
        for before its first gulp."""
        frames = self._integration_frames(g)
        reserve = output_nframes(self._gulp_request or frames, frames)
        self.size_output_rings(visibility_frame_bytes(g, 8), reserve)

    def _zero_copy(self) -> bool:
        """Whether the backend can lend this runtime's ring its memory (the NPU's buffers)."""
        return (getattr(self.backend, "allocate_host", None) is not None
                and getattr(self.backend, "zero_copy", False))

    def _allocate_input_ring(self, contiguous: int, total: int, zero_copy: bool) -> None:
        ring = self.irings[0]
        if zero_copy:
            ring.set_allocator(self.backend.allocate_host)
            log.info("%s: data ring %r allocated in NPU buffer objects (zero copy)", self.name,
                     ring.name)
        ring.resize(contiguous, total)  # our rings populate what they allocate

    def on_sequence(self, iseqs: list) -> list[dict[str, Any]]:
        hdr = iseqs[0].header
        require_keys(hdr, XENGINE_KEYS, self.name)
        inp = xengine_input(hdr, self.name, self.integration_spectra)
        layout, g = inp.layout, inp.geometry
        nspec = self.integration_spectra or inp.default_spectra
        if nspec is None:
            raise ValueError(f"{self.name}: the header ({inp.source}) has no geometry to take "
                             f"P from: give the block integration_spectra (spectra per output, "
                             f"a multiple of the frame's {layout.nspectra})")
        try:
            layout.check_spectra(nspec)
        except LayoutError as exc:
            raise ValueError(f"{self.name}: integration_spectra {nspec}: {exc}") from None
        try:
            clock = IntegrationClock(iseqs[0].time_tag, layout.nspectra, nspec)
        except ValueError as exc:
            raise ValueError(f"{self.name}: {exc}") from None
        if self.backend is None or self.geometry != g:
            if self.backend is not None:
                log.warning("%s: sequence geometry differs from the backend's; new backend, and "
                            "frames are copied", self.name)
                self.backend.close()  # its BOs live on while the ring's memory uses them
            self.backend = self._make_backend(g)
            if getattr(self.backend, "zero_copy", False):  # its writer has sized the ring
                log.info("%s: data ring sized before the backend existed; frames are copied "
                         "into NPU buffers (give geometry= for zero copy)", self.name)
        self.geometry, self.layout, self.clock = g, layout, clock
        ngroup = self._mask_groups(iseqs, inp.source == "geometry")
        self.gulp_nframe = self._gulp_request or clock.frames_per_integration
        # Integration state: the next to output, the one being summed, frames accounted for.
        self._k, self._open, self._pos = 0, None, 0
        self._acc = np.zeros(g.output_shape, np.int32)
        self._acc_valid = np.zeros((ngroup, g.nbaseline), np.int64)
        log.info("%s: input %s (%s, %d spectra per frame), %d spectra per output", self.name,
                 inp.source, layout.encoding, layout.nspectra, nspec)
        ihdr = {k: v for k, v in hdr.items() if k != "sample_layout"}  # it describes the input
        tscale = time_scale(hdr, clock.start_tag, nspec)
        common = {"nspectra": nspec, "xengine_backend": self.backend.name,
                  "xengine_backend_reason": self.backend.choice_reason,
                  "baseline_order": BASELINE_ORDER, "gulp_nframe": 1,
                  "geometry": g.to_dict()}
        vis = derive_header(ihdr, name=f"{iseqs[0].name}.vis", dtype="ci32",
                            shape=[-1, g.nchan, g.nbaseline],
                            labels=["time", "freq", "baseline"],
                            scales=[tscale, None, None],
                            units=["s", "Hz", None], time_tag=clock.start_tag, **common)
        valid = derive_header(ihdr, name=f"{iseqs[0].name}.valid", dtype="i64",
                              shape=[-1, ngroup, g.nbaseline],
                              labels=["time", "chan_group", "baseline"],
                              scales=[tscale, None, None],
                              units=["s", None, None], time_tag=clock.start_tag, **common)
        return [vis, valid]

    def _mask_groups(self, iseqs: list, packet: bool) -> int:
        """Channel groups of the presence mask (1 without one); one line if its shape is not
        ``[-1, S]`` (or ``[-1, S, G]`` for packet input)."""
        if len(iseqs) < 2:
            return 1
        g = self.geometry
        shape = list(iseqs[1].header["_tensor"]["shape"])
        if shape == [-1, g.nstream]:
            return 1
        if packet and shape == [-1, g.nstream, g.nchan_group]:
            return g.nchan_group
        want = f"[-1, {g.nstream}]" + (f" or [-1, {g.nstream}, {g.nchan_group}]" if packet else "")
        raise ValueError(f"{self.name}: mask header _tensor shape {shape} is not {want} "
                         f"(per frame and stream)")

    def _ring_holds_memory(self) -> bool:
        return bool(self.irings[0].total_bytes)

    def define_output_nframes(self, input_nframes: list[int]) -> list[int]:
        n = output_nframes(max(input_nframes), self.clock.frames_per_integration)
        return [n, n]

    # ---- integrations ------------------------------------------------------------------------

    def _counts(self, ispans: list, fa: int, fb: int) -> np.ndarray:
        """Valid spectra per baseline of frames ``[fa, fb)``: ``[G, nbaseline]`` int64."""
        ns = self.layout.nspectra
        if len(ispans) < 2:
            return np.full((1, self.geometry.nbaseline), (fb - fa) * ns, np.int64)
        m0 = ispans[1].frame_offset
        mask = self.array(ispans[1])[fa - m0:fb - m0]
        return valid_counts(mask, self.geometry.nstream, ns)

    def _add(self, ispans: list, k: int, fa: int, fb: int, outs: tuple, base: int) -> None:
        """Correlate frames ``[fa, fb)`` of integration ``k`` (the next to output): straight
        into its output frame when they are all of it, else summed into the open one."""
        d0 = ispans[0].frame_offset
        data = self.array(ispans[0])[fa - d0:fb - d0]
        counts = self._counts(ispans, fa, fb)
        ka, kb = self.clock.frames(k)
        correlate = functools.partial(self.backend.correlate_layout,
                                      extremes=self._extremes_of(k))
        if self._open != k and (fa, fb) == (ka, kb):
            slot = self._slot(k, base, outs)
            correlate(data, self.layout, out=outs[0][slot], nframe=fb - fa)
            outs[1][slot] = counts
            self._output_done(counts)
            return
        if self._open == k:
            correlate(data, self.layout, out=self._acc, nframe=fb - fa, accumulate=True)
            self._acc_valid += counts
        else:
            correlate(data, self.layout, out=self._acc, nframe=fb - fa)
            self._acc_valid[...] = counts
            self._open = k
        if fb == kb:
            self._emit(outs, base)

    def _extremes_of(self, k: int) -> np.ndarray | None:
        """Integration ``k``'s extremes counts (made on first use), or None if not counting."""
        if not self.count_extremes:
            return None
        tag = self.clock.start_tag + k * self.clock.integration_spectra
        with self._extremes_lock:
            return self._extremes.setdefault(tag, np.zeros(self.geometry.nstream, np.int64))

    def take_extremes(self, t0: int, t1: int) -> np.ndarray | None:
        """The extremes counts ``[S]`` of the integrations starting in spectra ``[t0, t1)``,
        summed and forgotten (with those of any earlier one); None if none was counted."""
        with self._extremes_lock:
            tags = [t for t in self._extremes if t < t1]
            counts = [self._extremes.pop(t) for t in tags if t >= t0]
            for t in tags:
                self._extremes.pop(t, None)
        return np.sum(counts, axis=0) if counts else None

    def _slot(self, k: int, base: int, outs: tuple) -> int:
        slot = k - base
        if slot >= len(outs[0]):  # define_output_nframes bounds this; a bug if it does not
            raise RuntimeError(f"{self.name}: integration {k} has no output frame "
                               f"({len(outs[0])} reserved)")
        return slot

    def _emit(self, outs: tuple, base: int) -> None:
        """Output integration ``self._k``: what was summed of it, or nothing (all lost)."""
        slot = self._slot(self._k, base, outs)
        if self._open == self._k:
            outs[0][slot] = self._acc
            outs[1][slot] = self._acc_valid
            self._open = None
            self._output_done(self._acc_valid)
        else:
            outs[0][slot] = 0
            outs[1][slot] = 0
            self._output_done(outs[1][slot])

    def _output_done(self, counts: np.ndarray) -> None:
        if not counts.any():
            self.nodata_outputs += 1
        self._k += 1

    def _emit_ended(self, frame: int, outs: tuple, base: int) -> None:
        """Output every integration that ends at or before ``frame``."""
        while self.clock.frames(self._k)[1] <= frame:
            self._emit(outs, base)

    def on_data(self, ispans: list, ospans: list) -> list[int]:
        lo, hi = common_frames(ispans)  # present on every input (none if one span is empty)
        # Frames up to the furthest any input delivered are accounted for by this gulp; those
        # outside [lo, hi) are lost (an empty span's frame_offset is where the writer is).
        end = max(s.frame_offset + s.nframe for s in ispans if s.nframe)
        lo = max(lo, self._pos)  # frames before were seen or reported lost
        outs, base = (self.array(ospans[0]), self.array(ospans[1])), self._k
        saved = None if self.guarantee else (self._k, self._open, self._acc.copy(),
                                             self._acc_valid.copy())
        for k, fa, fb in self.clock.segments(lo, hi):
            self._emit_ended(fa, outs, base)
            self._add(ispans, k, fa, fb, outs, base)
        if hi > lo and self.overwritten(ispans):
            # Read while the writer came back: not trusted. Undo, and count the frames lost.
            self._k, self._open, acc, acc_valid = saved
            self._acc[...], self._acc_valid[...] = acc, acc_valid
            self.lost_frames += hi - lo
        self._pos = max(self._pos, end)
        self._emit_ended(self._pos, outs, base)
        if self._open is not None and all(self._short(s) for s in ispans):
            self._emit(outs, base)  # a short gulp: the sequence ends here
        n = self._k - base
        return [n, n]

    def _short(self, span: Any) -> bool:
        """Whether ``span`` ends before its gulp does (only the last of a sequence does)."""
        gulp = self.gulp_nframe
        return span.frame_offset + span.nframe < (span.frame_offset // gulp + 1) * gulp

    def on_skip(self, lost: list[slice], ospans: list) -> list[int]:
        """Lost input adds nothing to its integrations; those it ends are output (all lost:
        zero valid spectra), each exactly once."""
        frames = lost_frames_any(lost)
        outs, base = (self.array(ospans[0]), self.array(ospans[1])), self._k
        if frames and frames.stop > self._pos:
            self._pos = frames.stop
            self._emit_ended(self._pos, outs, base)
        n = self._k - base
        return [n, n]

    def on_sequence_end(self, iseqs: list) -> None:
        if getattr(self, "_open", None) is not None:
            self.dropped_partial += 1
            log.warning("%s: end of sequence inside an integration: spectra from %d not "
                        "output (the sequence ended on a gulp boundary)", self.name,
                        self.clock.start_tag + self._open * self.clock.integration_spectra)
            self._open = None


class XEngineBlock(XEngineLogic, MultiTransformBlock):
    __doc__ = XEngineLogic.__doc__
