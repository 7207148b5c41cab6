"""Where each complex sample lies in an input buffer: the one description of input layouts.

Our packet/frame layout (docs/design.md, "Geometry") is one way to hold channelised voltages; the
world's formats hold the same samples otherwise (Bifrost tensors ``[time, freq, station, pol]``,
GUPPI RAW ``[ant][chan][time][pol]``, MeerKAT F-engine heaps, MWAX subfiles ...; docs/design.md,
"Formats of the outside world").
A :class:`SampleLayout` says, for a run of equally sized *frames* in memory, at which byte the
real and imaginary parts of spectrum ``t`` of channel ``c`` of stream ``s`` lie::

    frame f, stream s, channel c, spectrum t  (0 <= t < nspectra):
        f * frame_bytes + stream_offsets[s] + c * chan_stride
          + (t // time_block) * block_stride + (t % time_block) * time_stride
    imaginary part: im_offset bytes after the real part (ci8, ci16); ci4: the same byte

Streams follow our convention (``s = 2 * antenna + pol`` in the array description's order), so
a layout whose antennas or inputs come in another order (MWAX's rf_input order, a subset of a
file's antennas) just lists other offsets. A call's spectra are its frames' spectra one after
another: spectrum ``f * nspectra + t``.

Backends consume layouts in their own layout pass (``Backend.correlate_layout``); this module
also holds the plain numpy reading of a layout (:meth:`SampleLayout.natural`), which is what
tests compare against and what a backend without its own pass falls back on
(:func:`to_packet_frames`, zero-padding to whole packets: zeros add nothing to a correlation).

Encodings: ``ci8`` (int8 re, int8 im ``im_offset`` bytes later), ``ci4`` (one byte, two's
complement nibbles, real in the high nibble unless ``nibble_order="re_low"``), ``ci16`` (int16
little endian re and im; correlated exactly only while every value lies in -128..127, which the
reading checks: wider values cannot keep int32 sums exact, and no backend here takes them).
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np

from . import native_extension
from .geometry import NIBBLE_ORDERS, Geometry, GeometryError, max_spectra_int32

#: Sample encodings a layout may declare -> bytes of one part (ci4: one byte for both parts).
ENCODING_BYTES = {"ci8": 1, "ci4": 1, "ci16": 2}
#: Bits of a real or imaginary part per encoding, for the int32 exactness bound (ci16 values
#: are checked to be int8-range, so they share ci8's bound).
ENCODING_BITS = {"ci8": 8, "ci4": 4, "ci16": 8}


#: Axis labels a layout is built from (:meth:`SampleLayout.from_axes`), and their synonyms.
AXIS_LABELS = frozenset({"station", "pol", "stream", "freq", "fine_time", "reim"})
AXIS_SYNONYMS = {"stand": "station", "ant": "station", "chan": "freq", "input": "stream"}


def names_layout_axes(labels: Sequence[str]) -> bool:
    """Whether every label is one :meth:`SampleLayout.from_axes` knows (or a synonym)."""
    return all(lab in AXIS_LABELS or lab in AXIS_SYNONYMS for lab in labels)


class LayoutError(ValueError):
    """A layout does not describe a readable buffer; the message names the field."""


@dataclass(frozen=True)
class SampleLayout:
    """A run of frames of channelised complex samples; see the module docstring.

    Parameters
    ----------
    nstream, nchan : streams (antennas x 2 pols) and channels the layout holds.
    nspectra : spectra per frame (per channel).
    frame_bytes : bytes from one frame to the next (at least the span of its samples).
    stream_offsets : byte offset of stream ``s`` in a frame (``s = 2*antenna + pol``).
    chan_stride : bytes from channel ``c`` to ``c + 1``.
    time_stride : bytes from spectrum ``t`` to ``t + 1`` within a time block.
    time_block : spectra per time block (0: the whole frame is one block).
    block_stride : bytes from one time block to the next.
    encoding : ``ci8``, ``ci4`` or ``ci16``.
    im_offset : bytes from a real part to its imaginary part (ci8, ci16; ignored for ci4).
    nibble_order : ci4 only: ``re_high`` or ``re_low``.
    """

    nstream: int
    nchan: int
    nspectra: int
    frame_bytes: int
    stream_offsets: tuple[int, ...]
    chan_stride: int
    time_stride: int
    time_block: int = 0
    block_stride: int = 0
    encoding: str = "ci8"
    im_offset: int = 1
    nibble_order: str = "re_high"

    def __post_init__(self) -> None:
        object.__setattr__(self, "stream_offsets", tuple(int(o) for o in self.stream_offsets))
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self) -> None:
        """Raise :class:`LayoutError` naming the first field that cannot be right."""
        for name in ("nstream", "nchan", "nspectra", "frame_bytes"):
            v = getattr(self, name)
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 1:
                raise LayoutError(f"{name} must be a positive integer, got {v!r}")
        for name in ("chan_stride", "time_stride", "time_block", "block_stride", "im_offset"):
            v = getattr(self, name)
            if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < 0:
                raise LayoutError(f"{name} must be a non-negative integer, got {v!r}")
        if self.encoding not in ENCODING_BYTES:
            raise LayoutError(f"encoding must be one of {sorted(ENCODING_BYTES)}, "
                              f"got {self.encoding!r}")
        if self.nibble_order not in NIBBLE_ORDERS:
            raise LayoutError(f"nibble_order must be one of {NIBBLE_ORDERS}, "
                              f"got {self.nibble_order!r}")
        if self.nstream % 2:
            raise LayoutError(f"nstream must be even (two polarisations per antenna), "
                              f"got {self.nstream}")
        if len(self.stream_offsets) != self.nstream:
            raise LayoutError(f"stream_offsets has {len(self.stream_offsets)} entries for "
                              f"{self.nstream} streams")
        if min(self.stream_offsets) < 0:
            raise LayoutError("stream_offsets must be >= 0")
        if self.time_block and self.nspectra % self.time_block:
            raise LayoutError(f"time_block ({self.time_block}) must divide nspectra "
                              f"({self.nspectra})")
        if self.encoding != "ci4" and self.im_offset == 0:
            raise LayoutError(f"{self.encoding}: im_offset must be > 0 (re and im differ)")
        if self.last_byte >= self.frame_bytes:
            raise LayoutError(f"samples reach byte {self.last_byte} of a frame of "
                              f"{self.frame_bytes} bytes (frame_bytes too small, or an offset "
                              f"or stride too large)")

    @property
    def block(self) -> int:
        """Spectra per time block (``time_block``, or the whole frame)."""
        return self.time_block or self.nspectra

    @cached_property
    def stream_offsets_i64(self) -> np.ndarray:
        """``stream_offsets`` as a read-only int64 array (what the native layout pass takes)."""
        a = np.asarray(self.stream_offsets, np.int64)
        a.flags.writeable = False
        return a

    @property
    def part_bytes(self) -> int:
        return ENCODING_BYTES[self.encoding]

    # (cached: a recording's reader and the backends ask these on every call, 512 times in
    # the 0.18 s an MWAX sub-observation at S = 64 takes to reprocess; a frozen layout never
    # changes)
    @cached_property
    def last_byte(self) -> int:
        """Largest byte offset within a frame any sample part touches."""
        t = self.nspectra - 1
        time = (t // self.block) * self.block_stride + (t % self.block) * self.time_stride
        part = 0 if self.encoding == "ci4" else self.im_offset
        return (max(self.stream_offsets) + (self.nchan - 1) * self.chan_stride + time + part
                + self.part_bytes - 1)

    @property
    def sample_bits(self) -> int:
        """Bits per part for the int32 bound (ci16 counts as 8: values are int8-range)."""
        return ENCODING_BITS[self.encoding]

    @cached_property
    def max_spectra(self) -> int:
        """Most spectra one correlation of this layout may sum and stay exact in int32."""
        return max_spectra_int32(self.sample_bits)

    def check_spectra(self, nspectra: int) -> None:
        if nspectra > self.max_spectra:
            raise LayoutError(f"{nspectra} spectra in one correlation can overflow int32 "
                              f"({self.encoding}): at most {self.max_spectra}")

    # ------------------------------------------------------------------ constructors
    @classmethod
    @lru_cache(maxsize=64)
    def packet(cls, g: Geometry) -> SampleLayout:
        """Our ring frame ``[stream][chan][coarse][reim][fine]`` (ci4: no reim axis); made
        once per geometry (every backend call on a layout compares it with this one)."""
        if g.ci4:
            return cls(g.nstream, g.nchan, g.nspectra_pkt, g.frame_bytes,
                       tuple(s * g.stream_bytes for s in range(g.nstream)), g.chan_bytes,
                       time_stride=1, encoding="ci4", nibble_order=g.nibble_order)
        return cls(g.nstream, g.nchan, g.nspectra_pkt, g.frame_bytes,
                   tuple(s * g.stream_bytes for s in range(g.nstream)), g.chan_bytes,
                   time_stride=1, time_block=g.nfine, block_stride=2 * g.nfine,
                   encoding="ci8", im_offset=g.nfine)

    @classmethod
    def from_axes(cls, axes: Sequence[tuple[str, int]], *, encoding: str = "ci8",
                  nibble_order: str = "re_high", antennas: Sequence[int] | None = None,
                  frame_bytes: int | None = None) -> SampleLayout:
        """A dense C-order frame from its axes, outermost first, after the frame (time) axis.

        ``axes``: ``(label, size)`` pairs with labels ``station`` (or ``stand``, ``ant``),
        ``pol`` (1 or 2; absent: 1), ``stream`` (or ``input``: stations and pols merged,
        ``2*station+pol``),
        ``freq`` (or ``chan``), ``fine_time`` (spectra within the frame; absent: 1) and, for
        ci8/ci16, an innermost ``reim`` of 2 (implied when absent). One pol doubles nothing:
        a single-pol input is refused (streams are antenna pairs of X and Y).
        ``antennas``: which stations of the buffer become antennas 0, 1, ... (default all, in
        order). ``frame_bytes``: a stride larger than the dense frame (padding).
        """
        dims = [(AXIS_SYNONYMS.get(lab, lab), int(n)) for lab, n in axes]
        labels = [d for d, _ in dims]
        for lab in labels:
            if lab not in AXIS_LABELS:
                raise LayoutError(f"axis {lab!r} is not one of {sorted(AXIS_LABELS)} (or "
                                  f"{', '.join(AXIS_SYNONYMS)})")
        if len(set(labels)) != len(labels):
            raise LayoutError(f"axes {labels} repeat a label")
        if encoding not in ENCODING_BYTES:
            raise LayoutError(f"encoding must be one of {sorted(ENCODING_BYTES)}, "
                              f"got {encoding!r}")
        if encoding == "ci4":
            if "reim" in labels:
                raise LayoutError("ci4 holds re and im in one byte: no reim axis")
        elif "reim" not in labels:
            dims.append(("reim", 2))
            labels.append("reim")
        if "reim" in labels and (labels[-1] != "reim" or dims[-1][1] != 2):
            raise LayoutError("reim must be the innermost axis, of size 2")
        if "stream" in labels and ("station" in labels or "pol" in labels):
            raise LayoutError("a merged stream axis excludes separate station and pol axes")
        if "stream" not in labels and "station" not in labels:
            raise LayoutError(f"axes {labels} have no station (or merged stream) axis")
        if "freq" not in labels:
            raise LayoutError(f"axes {labels} have no freq axis")
        stride, size = {}, dict(dims)
        step = ENCODING_BYTES[encoding]
        for lab, n in reversed(dims):
            stride[lab] = step
            step *= n
        dense = step
        if "stream" in labels:
            if size["stream"] % 2:
                raise LayoutError(f"merged stream axis of {size['stream']}: stations * 2 pols "
                                  f"must be even")
            nstation, npol = size["stream"] // 2, 2
            st_stride, pol_stride = 2 * stride["stream"], stride["stream"]
        else:
            nstation, npol = size["station"], size.get("pol", 1)
            st_stride, pol_stride = stride["station"], stride.get("pol", 0)
        if npol != 2:
            raise LayoutError(f"pol axis of {npol}: streams are antennas' X and Y, so npol "
                              f"must be 2")
        chosen = list(range(nstation)) if antennas is None else [int(a) for a in antennas]
        if not chosen or min(chosen) < 0 or max(chosen) >= nstation:
            raise LayoutError(f"antennas {chosen} must index the {nstation} stations")
        offsets = tuple(a * st_stride + p * pol_stride for a in chosen for p in range(2))
        nspectra = size.get("fine_time", 1)
        return cls(2 * len(chosen), size["freq"], nspectra, frame_bytes or dense, offsets,
                   stride["freq"], time_stride=stride.get("fine_time", 0), encoding=encoding,
                   im_offset=stride.get("reim", 0), nibble_order=nibble_order)

    @classmethod
    def from_tensor(cls, tensor: Mapping[str, Any], *,
                    nibble_order: str = "re_high") -> SampleLayout:
        """The layout of a ring whose Bifrost ``_tensor`` names its axes (``labels``), e.g.
        ``ci8 [-1, nchan, nstation, 2]`` labelled ``['time', 'freq', 'station', 'pol']``.

        The first axis is the frame (time) axis; the others are :meth:`from_axes` labels. dtype
        ``ci4``, ``ci8`` or ``ci16`` (also ``i8``/``i16`` with an innermost ``reim`` axis). With
        no ``pol`` axis a ``station``/``stand``/``ant`` axis is the merged ``stand*pol`` axis
        (``s = 2*station + pol``), as in Bifrost's ``correlate_dp4a`` and the LWA capture rings.
        """
        dtype = tensor.get("dtype")
        shape, labels = list(tensor.get("shape") or []), tensor.get("labels")
        encodings = {"ci4": "ci4", "ci8": "ci8", "ci16": "ci16", "i8": "ci8", "i16": "ci16"}
        if dtype not in encodings:
            raise LayoutError(f"dtype {dtype!r} is not a complex integer type (ci4, ci8 or ci16; "
                              f"i8/i16 with a reim axis): unpack or quantize it first")
        if not isinstance(labels, Sequence) or len(labels) != len(shape) or not shape:
            raise LayoutError(f"labels {labels!r} do not name the {len(shape)} axes of shape "
                              f"{shape}")
        if labels[0] != "time" or shape[0] != -1:
            raise LayoutError(f"the first axis must be the frame axis 'time' of size -1, got "
                              f"{labels[0]!r} of {shape[0]}")
        axes = list(zip(labels[1:], shape[1:], strict=True))
        if dtype.startswith("i") and (not axes or axes[-1][0] != "reim"):
            raise LayoutError(f"dtype {dtype} holds re and im in an innermost reim axis; "
                              f"labels {list(labels)} have none")
        if "pol" not in labels:
            axes = [("stream" if lab in ("station", "stand", "ant") else lab, n)
                    for lab, n in axes]
        return cls.from_axes(axes, encoding=encodings[dtype], nibble_order=nibble_order)

    def select(self, channels: Sequence[int] | None = None,
               streams: Sequence[int] | None = None) -> SampleLayout:
        """The same frames seen through a subset of channels (a contiguous run only: they are
        strided) and/or streams (any order, by stream index)."""
        offsets = self.stream_offsets
        if streams is not None:
            offsets = tuple(offsets[s] for s in streams)
        base, nchan = 0, self.nchan
        if channels is not None:
            chans = list(channels)
            if chans != list(range(chans[0], chans[0] + len(chans))):
                raise LayoutError(f"channels {chans} are not a contiguous run")
            base, nchan = chans[0] * self.chan_stride, len(chans)
        return self.replace(nstream=len(offsets), nchan=nchan,
                            stream_offsets=tuple(o + base for o in offsets))

    def is_packets(self, g: Geometry) -> bool:
        """Whether these are our packets of ``g`` with the streams anywhere: every field of
        :meth:`packet` but ``frame_bytes`` and ``stream_offsets`` (each stream's channels
        still one packet payload, ``[chan][coarse][reim][fine]``), as the records of a clean
        pcap recording hold them; the native frame path reads them in place."""
        if self.nspectra != g.nspectra_pkt or self.chan_stride != g.chan_bytes:
            return False  # most layouts differ here: a cheap answer on every backend call
        p = SampleLayout.packet(g)
        return self is p or all(getattr(self, f.name) == getattr(p, f.name)
                                for f in dataclasses.fields(self)
                                if f.name not in ("frame_bytes", "stream_offsets"))

    def replace(self, **changes: Any) -> SampleLayout:
        """A copy with some fields changed (validated; the stream offsets are not deep-copied
        as ``asdict`` would, which cost more than a reader's whole block index)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ headers
    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly (ring headers: ``hdr["sample_layout"]``)."""
        d = {k: v for k, v in asdict(self).items() if not k.startswith("_")}
        d["stream_offsets"] = list(self.stream_offsets)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SampleLayout:
        if not isinstance(d, Mapping):
            raise LayoutError(f"sample_layout must be a mapping, got {type(d).__name__}")
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__
                  and not k.startswith("_")}
        missing = {"nstream", "nchan", "nspectra", "frame_bytes", "stream_offsets",
                   "chan_stride", "time_stride"} - set(fields)
        if missing:
            raise LayoutError(f"sample_layout lacks {sorted(missing)}")
        try:
            return cls(**fields)
        except TypeError as exc:
            raise LayoutError(f"sample_layout: {exc}") from None

    # ------------------------------------------------------------------ reading
    def nframes(self, data: np.ndarray) -> int:
        """Whole frames in ``data`` (the last may end at its last sample, not frame_bytes)."""
        size = np.asarray(data).nbytes
        if size < self.last_byte + 1:
            return 0
        return (size - self.last_byte - 1) // self.frame_bytes + 1

    def _part(self, b: np.ndarray, nframe: int, shift: int, dtype: np.dtype) -> np.ndarray:
        """One part (``shift`` bytes past a sample's first byte) of every sample, as
        ``[S, C, nframe * nspectra]`` of ``dtype``: one strided view per stream."""
        nblock = self.nspectra // self.block
        out = np.empty((self.nstream, self.nchan, nframe, nblock, self.block), dtype)
        for s, off in enumerate(self.stream_offsets):
            out[s] = np.ndarray((self.nchan, nframe, nblock, self.block), dtype, buffer=b,
                                offset=off + shift,
                                strides=(self.chan_stride, self.frame_bytes, self.block_stride,
                                         self.time_stride))
        return out.reshape(self.nstream, self.nchan, nframe * self.nspectra)

    @property
    def extremes(self) -> tuple[int, int]:
        """The quantiser's extremes of a part: -128 and +127 (ci8, and ci16, whose values are
        int8-range), -8 and +7 (ci4)."""
        bits = self.sample_bits
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def count_extremes(self, data: np.ndarray, nframe: int | None = None) -> np.ndarray:
        """int64 ``[S]``: sample parts (re and im each) of ``nframe`` frames (default: all) at
        the quantiser's :attr:`extremes`, counted with numpy: the independent count the native
        layout pass is checked against, and the one of backends without a pass that counts."""
        x = self.natural(data, nframe)
        lo, hi = self.extremes
        return ((x == lo) | (x == hi)).sum(axis=(1, 2, 3), dtype=np.int64)

    def natural(self, data: np.ndarray, nframe: int | None = None) -> np.ndarray:
        """The samples as ``x[stream, chan, spectrum, reim]`` (int8 for ci8 and ci4, int16
        for ci16), ``nframe * nspectra`` spectra: the plain reading, for tests and fallbacks.
        """
        a = np.asarray(data)
        if not a.flags.c_contiguous:
            raise LayoutError("layout data must be C-contiguous")
        b = a.reshape(-1).view(np.uint8)
        n = self.nframes(b) if nframe is None else nframe
        if n and (n - 1) * self.frame_bytes + self.last_byte >= b.size:
            raise LayoutError(f"{b.size} bytes hold fewer than {n} frames of this layout")
        dtype = np.dtype("<i2") if self.encoding == "ci16" else np.dtype(np.int8)
        out = np.zeros((self.nstream, self.nchan, n * self.nspectra, 2), dtype)
        if n == 0:
            return out
        if self.encoding == "ci4":
            from .frames import unpack_ci4_planes
            unpack_ci4_planes(self._part(b, n, 0, np.int8), out[..., 0], out[..., 1],
                              self.nibble_order)
        else:
            out[..., 0] = self._part(b, n, 0, dtype)
            out[..., 1] = self._part(b, n, self.im_offset, dtype)
        return out


def spectrum_starts(layout: SampleLayout, t0: int, n: int) -> np.ndarray:
    """int64 offsets, from a sample's stream and channel part, of spectra ``t0 .. t0 + n``
    (frame, time block, spectrum in the block): the part of an address every stream shares."""
    t = np.arange(t0, t0 + n, dtype=np.int64)
    tt = t % layout.nspectra
    return ((t // layout.nspectra) * layout.frame_bytes + (tt // layout.block) * layout.block_stride
            + (tt % layout.block) * layout.time_stride)


def gather(data: np.ndarray, layout: SampleLayout, out: np.ndarray, out_layout: SampleLayout,
           *, t0: int = 0, nspec: int | None = None, streams: Sequence[int] | None = None,
           channels: tuple[int, int] | None = None) -> None:
    """The layout pass in one go: spectra ``[t0, t0 + nspec)`` of ``data`` (in ``layout``) into
    ``out`` (in ``out_layout``, counted in ``out``'s elements, e.g. int8 frames or a float32
    scratch: two parts, ``im_offset`` elements apart), spectrum ``t0 + d`` to out spectrum
    ``d``, streams ``streams`` (indices into ``layout``'s; default all) to out streams 0, 1, ...,
    channels ``[c0, c1)`` (default all) to out channels 0, 1, .... One compiled pass (the C
    extension's ``gather``, ``kernels/cpu/host_passes.c``, the GIL released), no intermediate
    copy; ci4 unpacked and ci16 narrowed on the way (a value outside -128..127 raises
    :class:`LayoutError` naming it). ``out``: int8, int16, int32, float32 or float64. A ci4
    ``out_layout`` (an NPU build that takes ci4, ``out`` int8 bytes) gets packed bytes in its
    nibble order, from ci4 in either order or from ci8 / ci16 values within -8..7 (others
    raise). Out samples not written keep their values.
    """
    src = np.asarray(data)
    if not src.flags.c_contiguous or not out.flags.c_contiguous:
        raise LayoutError("gather needs C-contiguous data and out")
    src = src.reshape(-1).view(np.uint8)
    dst = out.reshape(-1)
    if nspec is None:
        nspec = layout.nframes(src) * layout.nspectra - t0
    sel = list(range(layout.nstream)) if streams is None else [int(x) for x in streams]
    c0, c1 = (0, layout.nchan) if channels is None else channels
    if (out_layout.encoding not in ("ci8", "ci4") or len(sel) > out_layout.nstream
            or c1 - c0 > out_layout.nchan):
        raise LayoutError(f"gather writes {len(sel)} streams x {c1 - c0} channels into a ci8 "
                          f"or ci4 out layout of {out_layout.nstream} x {out_layout.nchan}")
    if nspec <= 0 or not sel or c1 <= c0:
        return
    rs, rd = spectrum_starts(layout, t0, nspec), spectrum_starts(out_layout, 0, nspec)
    soff = np.asarray(layout.stream_offsets, np.int64)[sel] + c0 * layout.chan_stride
    doff = np.asarray(out_layout.stream_offsets[:len(sel)], np.int64)
    part = 0 if layout.encoding == "ci4" else layout.im_offset
    top = int(rs[-1] + soff.max()) + (c1 - c0 - 1) * layout.chan_stride + part + \
        layout.part_bytes - 1
    if top >= src.size:
        raise LayoutError(f"{src.size} bytes hold fewer than spectrum {t0 + nspec - 1} of "
                          f"this layout")
    dci4 = out_layout.encoding == "ci4"
    dim = 0 if dci4 else out_layout.im_offset
    if int(rd[-1] + doff.max()) + (c1 - c0 - 1) * out_layout.chan_stride + dim >= dst.size:
        raise LayoutError(f"out holds {dst.size} elements, fewer than {nspec} spectra of its "
                          f"layout")
    bad = native_extension.native().gather(
        src, rs, soff, layout.chan_stride, layout.im_offset, layout.encoding,
        layout.nibble_order, dst, rd, doff, out_layout.chan_stride, dim, c1 - c0,
        out_layout.nibble_order if dci4 else None)
    if bad is not None:
        if dci4:
            raise LayoutError(f"{layout.encoding} sample value {bad} is outside -8..7: a ci4 "
                              f"device takes 4-bit values only")
        raise LayoutError(f"ci16 sample value {bad} is outside -128..127: 16-bit samples are "
                          f"correlated exactly only in the int8 range")


def narrow_ci16(x: np.ndarray) -> np.ndarray:
    """int16 natural samples -> int8, or LayoutError naming the first value out of range."""
    if x.dtype == np.int8:
        return x
    if x.size:
        lo, hi = int(x.min()), int(x.max())
        if lo < -128 or hi > 127:
            bad = lo if lo < -128 else hi
            raise LayoutError(f"ci16 sample value {bad} is outside -128..127: 16-bit samples "
                              f"are correlated exactly only in the int8 range")
    return x.astype(np.int8)


def to_packet_frames(data: np.ndarray, layout: SampleLayout, g: Geometry,
                     nframe: int | None = None) -> tuple[np.ndarray, int]:
    """The fallback layout pass: ``data`` in ``layout`` -> (frames of ``g``'s packet layout,
    spectra they hold). The spectra are zero-padded to whole packets (zeros add nothing); ``g``
    must have the layout's streams and channels. An 8-bit ``g`` gets int8 frames in one
    :func:`gather` pass; a ci4 ``g`` ci4 frames (through the natural reading and a repack)."""
    from .frames import natural_to_frames

    if (g.nstream, g.nchan) != (layout.nstream, layout.nchan):
        raise GeometryError(f"geometry has {g.nstream} streams x {g.nchan} channels, the "
                            f"layout {layout.nstream} x {layout.nchan}")
    n = layout.nframes(data) if nframe is None else nframe
    nspec = n * layout.nspectra
    if not g.ci4:
        frames = np.zeros((-(-nspec // g.nspectra_pkt), *g.frame_shape), np.int8)
        gather(data, layout, frames, SampleLayout.packet(g), nspec=nspec)
        return frames, nspec
    x = narrow_ci16(layout.natural(data, n))
    pad = -nspec % g.nspectra_pkt
    if pad:
        x = np.concatenate([x, np.zeros((*x.shape[:2], pad, 2), x.dtype)], axis=2)
    return natural_to_frames(x, g), nspec
