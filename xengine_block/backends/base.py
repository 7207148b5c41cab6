"""The interface every correlator backend implements, and the checks they share.

A backend turns up to ``geometry.max_npacket`` ring frames (``[P, S, C, coarse, 2, fine]`` int8,
or ci4 ``[P, S, C, coarse, fine]`` bytes) into the packed upper triangle ``[C, nbaseline, 2]``
int32 (docs/design.md, "Sign and conjugation" and "Ring headers"). Backends are peers: the
X-engine block picks one by name or ``auto``.

ci4: every backend reads the packed bytes itself: CPU backends unpack inside their own layout
pass, the NPU (and the emulator that models it) sends them packed to its compute tiles, which
unpack them (``docs/npu.md``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from ..frames import as_frames
from ..geometry import Geometry
from ..sample_layout import SampleLayout, to_packet_frames


class BackendUnavailable(RuntimeError):
    """The backend cannot run here; the message says what is missing."""


class Backend(ABC):
    """Exact complex-int8 correlator: frames in, packed triangle ci32 out."""

    #: Registry name (``xengine --backend NAME``).
    name: ClassVar[str] = ""
    #: Relative preference for ``auto`` (higher wins among available backends).
    priority: ClassVar[int] = 0

    def __init__(self, geometry: Geometry) -> None:
        self.geometry = geometry

    @classmethod
    def availability(cls, geometry: Geometry | None = None) -> tuple[bool, str]:
        """(usable, reason): why this backend can or cannot run here (for ``geometry`` if
        given: e.g. the NPU needs a build for it)."""
        return True, "pure numpy"

    def check_frames(self, frames: np.ndarray) -> np.ndarray:
        """View ``frames`` as ``[P, S, C, coarse, 2, fine]`` and check P keeps int32 exact."""
        f = as_frames(frames, self.geometry)
        if f.shape[0] > self.geometry.max_npacket:
            raise ValueError(f"{f.shape[0]} frames in one call can overflow int32; "
                             f"at most {self.geometry.max_npacket}")
        return f

    def new_output(self) -> np.ndarray:
        return np.empty(self.geometry.output_shape, dtype=np.int32)

    def overlap_gulp(self, frames: int, frame_spectra: int) -> int:
        """Frames per X-engine read when the reads should overlap a live capture, for an
        integration of ``frames`` frames of ``frame_spectra`` spectra: the whole integration
        here (the NPU's runs take P frames in place); CPU backends that gain from starting on
        a part of it early say so."""
        return frames

    @abstractmethod
    def correlate(self, frames: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Correlate whole frames; return (and fill ``out`` if given) ``[C, nbaseline, 2]``."""

    def correlate_layout(self, data: np.ndarray, layout: SampleLayout,
                         out: np.ndarray | None = None, nframe: int | None = None,
                         accumulate: bool = False,
                         extremes: np.ndarray | None = None) -> np.ndarray:
        """Correlate every spectrum of ``nframe`` frames (default: all ``data`` holds) of
        ``layout`` (:mod:`~xengine_block.sample_layout`: any input layout, any number of
        spectra); return (and fill ``out`` if given) ``[C, nbaseline, 2]`` int32. With
        ``accumulate`` the result is added to ``out`` (int32, modulo 2^32: exact while the
        caller's total stays within the int32 bound, which the X-engine's integration checks).

        Frames in this backend's own packet layout (``SampleLayout.packet(geometry)``) go to
        :meth:`correlate` as they lie (no copy: the NPU's zero copy, the native fast paths).
        Any other layout takes this default: the plain reading (:func:`~xengine_block.
        sample_layout.to_packet_frames`, zero-padded to whole packets) followed by
        :meth:`correlate`: exact, not fast. Backends with a layout pass of their own override
        it for those layouts.

        ``extremes`` (int64 ``[S]``, added to): the sample parts at the quantiser's extremes
        per stream (input health, ``xengine_block.health``); here and in backends without a
        pass that counts them, a numpy count (:meth:`add_extremes`), an extra read of the
        samples; the native backend counts them in its layout pass.
        """
        g = self.geometry
        n = self.layout_spectra(data, layout, nframe, out, accumulate) // layout.nspectra
        self.add_extremes(extremes, data, layout, n)
        if layout == SampleLayout.packet(g):
            frames = as_frames(np.asarray(data).reshape(-1).view(np.int8)[:n * g.frame_bytes], g)
        else:
            frames, _ = to_packet_frames(data, layout, g, n)
        return self.correlate_frames(frames, out, accumulate)

    @staticmethod
    def add_extremes(extremes: np.ndarray | None, data: np.ndarray, layout: SampleLayout,
                     nframe: int) -> None:
        """Add the numpy count of ``nframe`` frames' parts at the extremes to ``extremes``
        (nothing if None)."""
        if extremes is not None:
            extremes += layout.count_extremes(data, nframe)

    def layout_spectra(self, data: np.ndarray, layout: SampleLayout, nframe: int | None,
                       out: np.ndarray | None, accumulate: bool) -> int:
        """The spectra a ``correlate_layout`` call reads, after its checks (streams and
        channels, the int32 bound, ``accumulate`` with an ``out``)."""
        self.check_layout(layout)
        if accumulate and out is None:
            raise ValueError("accumulate needs an out array to add to")
        n = layout.nframes(data) if nframe is None else nframe
        layout.check_spectra(n * layout.nspectra)
        return n * layout.nspectra

    def check_layout(self, layout: SampleLayout) -> None:
        """ValueError unless ``layout`` holds this backend's streams and channels."""
        g = self.geometry
        if (layout.nstream, layout.nchan) != (g.nstream, g.nchan):
            raise ValueError(f"layout has {layout.nstream} streams x {layout.nchan} channels, "
                             f"the backend's geometry {g.nstream} x {g.nchan}")

    def frames_per_call(self) -> int:
        """Most frames one :meth:`correlate` call takes at once: ``max_npacket`` here; a device
        whose calls hold fewer (the NPU's build) splits longer ones (:meth:`correlate_frames`)."""
        return self.geometry.max_npacket

    def correlate_frames(self, frames: np.ndarray, out: np.ndarray | None = None,
                         accumulate: bool = False) -> np.ndarray:
        """:meth:`correlate` of any number of whole frames, in calls of at most
        :meth:`frames_per_call` frames, into ``out`` or added to it (``accumulate``): int32 sums
        modulo 2^32, exact while the true total fits int32 (the callers' spectrum bounds)."""
        step = self.frames_per_call()
        if out is None:
            out = self.new_output()
        if frames.shape[0] == 0 and not accumulate:
            out[...] = 0
        for p0 in range(0, frames.shape[0], step):
            if accumulate or p0:
                out += self.correlate(frames[p0:p0 + step])  # int32 wraps: exact mod 2^32
            else:
                self.correlate(frames[p0:p0 + step], out)
        return out

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release resources (device buffers, threads)."""
