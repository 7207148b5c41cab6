"""The interface every correlator backend implements, and the checks they share.

A backend turns up to ``geometry.max_npacket`` ring frames (``[P, S, C, coarse, 2, fine]`` int8,
or ci4 ``[P, S, C, coarse, fine]`` bytes) into the packed upper triangle ``[C, nbaseline, 2]``
int32 (docs/design.md, "Sign and conjugation" and "Ring headers"). Backends are peers: the
X-engine block picks one by name or ``auto``.

ci4: CPU backends read the packed bytes themselves, unpacking inside their own layout pass. A
backend whose device reads int8 frames only (``unpacks_ci4_on_host``: the NPU, and the emulator
that models it) is wrapped in :class:`HostUnpack` by :func:`~xengine_block.backends.make_backend`:
the host unpacks the bytes into the device's int8 input (the NPU's buffer object itself when the
layouts coincide) and runs the ci8 design; ``docs/npu.md`` says why and what it costs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from ..frames import as_frames, unpack_frames
from ..geometry import Geometry, max_spectra_int32
from ..sample_layout import SampleLayout, to_packet_frames


class BackendUnavailable(RuntimeError):
    """The backend cannot run here; the message says what is missing."""


class Backend(ABC):
    """Exact complex-int8 correlator: frames in, packed triangle ci32 out."""

    #: Registry name (``xengine --backend NAME``).
    name: ClassVar[str] = ""
    #: Relative preference for ``auto`` (higher wins among available backends).
    priority: ClassVar[int] = 0
    #: True if the backend reads int8 frames only: ci4 input goes through :class:`HostUnpack`.
    unpacks_ci4_on_host: ClassVar[bool] = False

    def __init__(self, geometry: Geometry) -> None:
        if geometry.ci4 and self.unpacks_ci4_on_host:
            raise ValueError(f"{type(self).__name__} reads int8 frames; make it with "
                             f"xengine_block.backends.make_backend({self.name!r}, geometry), "
                             f"which unpacks ci4 on the host")
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
                         accumulate: bool = False) -> np.ndarray:
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
        """
        g = self.geometry
        n = self.layout_spectra(data, layout, nframe, out, accumulate) // layout.nspectra
        if layout == SampleLayout.packet(g):
            frames = as_frames(np.asarray(data).reshape(-1).view(np.int8)[:n * g.frame_bytes], g)
        else:
            frames, _ = to_packet_frames(data, layout, g, n)
        return self.correlate_frames(frames, out, accumulate)

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

    def correlate_frames(self, frames: np.ndarray, out: np.ndarray | None = None,
                         accumulate: bool = False) -> np.ndarray:
        """:meth:`correlate` of any number of whole frames, in calls of at most ``max_npacket``
        frames, into ``out`` or added to it (``accumulate``): int32 sums modulo 2^32, exact
        while the true total fits int32 (the callers' spectrum bounds)."""
        step = self.geometry.max_npacket
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


def device_geometry(g: Geometry) -> Geometry:
    """The ci8 geometry an int8-only device runs for ``g``: ``g`` itself for ci8; for ci4 the
    same shape in the int8 layout, P capped at the ci8 bound (the host sums longer calls)."""
    if not g.ci4:
        return g
    cap = max_spectra_int32(8) // g.nspectra_pkt
    return g.replace(sample_bits=8, nibble_order="re_high", npacket=min(g.npacket, cap))


class HostUnpack(Backend):
    """ci4 input for a backend whose device reads int8 frames only (NPU, emulator).

    Each call's frames are unpacked on the host (:func:`~xengine_block.frames.unpack_frames`),
    at most the device's P at a time, into the device's own input buffer when it lends one
    (``input_buffer()``: the NPU's buffer object when frames are its input layout, so the unpack
    is the only pass over the data) or else into one reused scratch buffer; the device correlates
    them with its ci8 design. A call of more frames than the device's P (ci4 allows up to
    34,952) is several device calls whose int32 results are summed in int64: exact, and the sum
    fits int32 by the ci4 bound.
    """

    def __init__(self, device_cls: type[Backend], geometry: Geometry, **kwargs) -> None:
        super().__init__(geometry)
        self.device = device_cls(device_geometry(geometry), **kwargs)
        self.name = self.device.name  # type: ignore[misc]  # reported as the device backend
        self._scratch: np.ndarray | None = None

    def _unpacked(self, f: np.ndarray) -> np.ndarray:
        """Unpack ci4 frames ``f`` (at most the device's P) into an int8 input for the device."""
        dg = self.device.geometry
        lend = getattr(self.device, "input_buffer", None)
        if lend is not None and f.shape[0]:
            from ..npu.blockpairs import frames_are_input
            if frames_are_input(dg):  # every buffer lent must then be correlated: it is
                return unpack_frames(f, self.geometry, out=lend()[:f.shape[0]])
        if self._scratch is None:
            self._scratch = np.empty((dg.npacket, *dg.frame_shape), np.int8)
        return unpack_frames(f, self.geometry, out=self._scratch[:f.shape[0]])

    def correlate(self, frames: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        f = self.check_frames(frames)
        step = self.device.geometry.npacket
        if f.shape[0] <= step:
            return self.device.correlate(self._unpacked(f), out)
        acc = np.zeros(self.geometry.output_shape, np.int64)
        for p0 in range(0, f.shape[0], step):
            acc += self.device.correlate(self._unpacked(f[p0:p0 + step]))
        if out is None:
            out = self.new_output()
        out[...] = acc  # exact: check_frames kept P within the ci4 int32 bound
        return out

    def correlate_layout(self, data: np.ndarray, layout: SampleLayout,
                         out: np.ndarray | None = None, nframe: int | None = None,
                         accumulate: bool = False) -> np.ndarray:
        """ci4 frames of our packet layout: unpacked as above. Any other layout: the device's
        own host layout pass, which unpacks ci4 on its way into the device's int8 input."""
        if layout == SampleLayout.packet(self.geometry):
            return super().correlate_layout(data, layout, out, nframe, accumulate)
        return self.device.correlate_layout(data, layout, out, nframe, accumulate)

    def close(self) -> None:
        self.device.close()
