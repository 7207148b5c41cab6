"""The one validated description of the correlator's shape.

Every size in the project (packet bytes, ring frames, NPU buffers, output triangle) derives from a
:class:`Geometry`. Defaults are the published NPU design's geometry (docs/design.md, "Geometry"):
256 streams, 9 channels per packet, 480 spectra per packet laid out as 60 coarse x (re, im) x 8
fine, NPU tiles of 8N x 8M streams with N=8, M=4, T=15 on a 4 x 8 array, P packets per NPU
integration.

Samples are complex int8 (``sample_bits=8``) or complex int4 (``sample_bits=4``, Bifrost's ``ci4``:
one byte per complex sample, two two's-complement nibbles in -8..7, real part in the high nibble
unless ``nibble_order="re_low"``). A ci4 packet is ``[chan][coarse][fine]`` bytes (the reim axis
folds into the byte), half the bytes of ci8; the int32 bound on P follows from the value range.

Invalid combinations raise :class:`GeometryError` naming the field and the limit, before any work.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ._moved import renamed_names

#: Bits per real or imaginary part a geometry may carry: complex int8 (ci8) and int4 (ci4).
SAMPLE_BITS = (8, 4)
#: Which nibble of a ci4 byte holds the real part: "re_high" (Bifrost's ci4, CASPER and LWA
#: F-engines) or "re_low" (Bifrost's ``byte_reverse``).
NIBBLE_ORDERS = ("re_high", "re_low")


def max_product(sample_bits: int = 8) -> int:
    """Largest magnitude of one product term: the most negative value squared ((-128)^2, (-8)^2)."""
    return 1 << (2 * (sample_bits - 1))


def max_complex_term(sample_bits: int = 8) -> int:
    """Largest magnitude of re or im of one complex product term (a_re*b_re + a_im*b_im with
    every value the most negative one): 2^15 for ci8, 2 * 8 * 8 = 128 for ci4."""
    return 2 * max_product(sample_bits)


#: Largest magnitude of one int8 x int8 product term: (-128) * (-128).
MAX_PRODUCT = max_product(8)
#: Largest magnitude of the real or imaginary part of one complex int8 product term.
MAX_COMPLEX_TERM = max_complex_term(8)
INT32_MAX = (1 << 31) - 1
#: Largest SPEAD payload we accept: a 9000-byte jumbo frame less IP/UDP/SPEAD headers.
MAX_PAYLOAD_BYTES = 8800
#: The kernel works on 8 x 8 int8 blocks ([stream][sample]); the fine axis must match.
BLOCK = 8


#: Largest ring frame (one packet time of every stream and channel) and X-engine output frame. Far
#: above any real X-engine's share (the published design's are 2.2 MB and 2.4 MB; 8192 streams x 9
#: channels: 71 MB and 2.4 GB); a typo such as nchan 9e6 would otherwise ask for hundreds of GiB
#: before saying anything.
MAX_FRAME_BYTES = 1 << 30
MAX_OUTPUT_BYTES = 1 << 34


class GeometryError(ValueError):
    """A geometry field is out of range; the message names the field and the limit.

    ``field``: the offending field's name where one field is to blame (command lines map it to
    their option), else None.
    """

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def max_spectra_int32(sample_bits: int = 8) -> int:
    """Most spectra an int32 accumulator can hold for every legal input (all -128, or all -8:
    65,535 spectra for ci8, 16,777,215 for ci4)."""
    return INT32_MAX // max_complex_term(sample_bits)


@dataclass(frozen=True)
class Geometry:
    """Correlator geometry; all derived sizes are properties.

    Parameters
    ----------
    nstream : number of streams S (antennas x 2 polarisations); any even number.
    nchan : channels handled by this X-engine; a multiple of ``nchan_pkt``.
    nchan_pkt : channels carried by one packet (the published design: 9).
    ncoarse, nfine : spectra per packet = ncoarse * nfine, stored [coarse][reim][fine].
    npacket : P, packets (ring frames) per NPU integration / X-engine output frame.
    tile_n, tile_m, tile_t : NPU kernel tiling N, M, T (one call = 8T samples).
    rows, cols : NPU compute-tile array.
    sample_bits : 8 (complex int8, ``ci8``) or 4 (complex int4, ``ci4``: one byte per sample).
    nibble_order : ci4 only: ``"re_high"`` (real part in the high nibble) or ``"re_low"``.
    """

    nstream: int = 256
    nchan: int = 9
    nchan_pkt: int = 9
    ncoarse: int = 60
    nfine: int = 8
    npacket: int = 136
    tile_n: int = 8
    tile_m: int = 4
    tile_t: int = 15
    rows: int = 4
    cols: int = 8
    sample_bits: int = 8
    nibble_order: str = "re_high"

    def __post_init__(self) -> None:
        self.validate()

    # ---------------------------------------------------------------- validation
    def validate(self) -> None:
        """Raise GeometryError for the first impossible field, naming it and the limit."""
        for name in ("nstream", "nchan", "nchan_pkt", "ncoarse", "nfine", "npacket",
                     "tile_n", "tile_m", "tile_t", "rows", "cols"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise GeometryError(f"{name} must be a positive integer, got {value!r}", name)
        if (not isinstance(self.sample_bits, int) or isinstance(self.sample_bits, bool)
                or self.sample_bits not in SAMPLE_BITS):
            raise GeometryError(f"sample_bits must be one of {SAMPLE_BITS} (ci8 or ci4), "
                                f"got {self.sample_bits!r}", "sample_bits")
        if self.nibble_order not in NIBBLE_ORDERS:
            raise GeometryError(f"nibble_order must be one of {NIBBLE_ORDERS}, "
                                f"got {self.nibble_order!r}", "nibble_order")
        if self.nstream % 2:
            raise GeometryError(
                f"nstream must be even (two polarisations per antenna), got {self.nstream}",
                "nstream")
        if self.nchan % self.nchan_pkt:
            raise GeometryError(
                f"nchan ({self.nchan}) must be a multiple of nchan_pkt ({self.nchan_pkt})",
                "nchan")
        if self.nfine != BLOCK:
            raise GeometryError(
                f"nfine must be {BLOCK} (the kernel's 8x8 sample blocks), got {self.nfine}",
                "nfine")
        if self.payload_bytes > MAX_PAYLOAD_BYTES:
            raise GeometryError(
                f"packet payload nchan_pkt*ncoarse*nfine*2*sample_bits/8 = {self.payload_bytes} "
                f"bytes exceeds "
                f"the limit of {MAX_PAYLOAD_BYTES} bytes")
        if self.npacket > self.max_npacket:
            raise GeometryError(
                f"npacket P={self.npacket} can overflow int32: P * {self.nspectra_pkt} spectra * "
                f"{max_complex_term(self.sample_bits)} ({self.sample_bits}-bit samples) must be "
                f"<= {INT32_MAX}, so P <= {self.max_npacket}", "npacket")
        if self.tile_n % 2:
            raise GeometryError(
                f"tile_n N must be even (the kernel handles two rows of A at once), "
                f"got {self.tile_n}", "tile_n")
        if self.nspectra_pkt % self.kernel_samples:
            raise GeometryError(
                f"tile_t T={self.tile_t}: a packet's {self.nspectra_pkt} spectra must be a whole "
                f"number of kernel calls of 8T={self.kernel_samples} samples", "tile_t")
        for what, nbytes, limit in (("ring frame", self.frame_bytes, MAX_FRAME_BYTES),
                                    ("output frame", self.output_bytes, MAX_OUTPUT_BYTES)):
            if nbytes > limit:
                raise GeometryError(
                    f"nstream={self.nstream} x nchan={self.nchan}: one {what} would be "
                    f"{nbytes / 2**30:.1f} GiB, more than the {limit / 2**30:.0f} GiB limit",
                    "nchan" if self.nchan > self.nchan_pkt else "nstream")
        if self.npu_block_a != self.npu_block_b:
            raise GeometryError(
                f"NPU tiling is not square: 8*tile_n*rows = {self.npu_block_a} differs from "
                f"8*tile_m*cols = {self.npu_block_b}")

    # ---------------------------------------------------------------- packet / frame
    @property
    def nspectra_pkt(self) -> int:
        """Spectra per packet (per channel): 480 for the published design."""
        return self.ncoarse * self.nfine

    @property
    def ci4(self) -> bool:
        """True for 4-bit samples (one byte per complex sample)."""
        return self.sample_bits == 4

    @property
    def sample_range(self) -> tuple[int, int]:
        """(min, max) of a real or imaginary part: (-128, 127) or (-8, 7)."""
        half = 1 << (self.sample_bits - 1)
        return -half, half - 1

    @property
    def payload_bytes(self) -> int:
        """Bytes of one packet payload: nchan_pkt * 480 * 2 * sample_bits / 8 (8640 or 4320)."""
        return self.nchan_pkt * self.chan_bytes

    @property
    def chan_bytes(self) -> int:
        """Bytes of one channel's samples in one packet (contiguous)."""
        return self.ncoarse * self.nfine * 2 * self.sample_bits // 8

    @property
    def packet_shape(self) -> tuple[int, ...]:
        """One payload: ci8 ``[chan][coarse][reim][fine]`` int8, ci4 ``[chan][coarse][fine]``
        bytes (re and im in one byte)."""
        if self.ci4:
            return (self.nchan_pkt, self.ncoarse, self.nfine)
        return (self.nchan_pkt, self.ncoarse, 2, self.nfine)

    @property
    def nchan_group(self) -> int:
        """Packets per stream per packet time (channel groups)."""
        return self.nchan // self.nchan_pkt

    @property
    def stream_bytes(self) -> int:
        """Bytes of one stream in one frame: all its channel groups."""
        return self.nchan * self.chan_bytes

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """One ring frame: ci8 ``[stream][chan][coarse][reim][fine]`` int8, ci4
        ``[stream][chan][coarse][fine]`` bytes (held in int8 arrays as well)."""
        if self.ci4:
            return (self.nstream, self.nchan, self.ncoarse, self.nfine)
        return (self.nstream, self.nchan, self.ncoarse, 2, self.nfine)

    @property
    def frame_dtype(self) -> str:
        """Ring ``_tensor`` dtype of a frame: ``i8`` (re, im in the reim axis) or ``ci4``."""
        return "ci4" if self.ci4 else "i8"

    @property
    def frame_labels(self) -> list[str]:
        """Ring ``_tensor`` labels of the frame axes after ``time``."""
        if self.ci4:
            return ["stream", "freq", "coarse", "fine"]
        return ["stream", "freq", "coarse", "reim", "fine"]

    @property
    def frame_bytes(self) -> int:
        return self.nstream * self.stream_bytes

    @property
    def npackets_per_frame(self) -> int:
        """Heaps that make up one complete frame."""
        return self.nstream * self.nchan_group

    @property
    def nspectra_int(self) -> int:
        """Spectra per channel in one X-engine output (P packets)."""
        return self.npacket * self.nspectra_pkt

    @property
    def max_npacket(self) -> int:
        """Largest P for which int32 accumulation is exact for every input: 136 for the published
        design (ci8), 34,952 for ci4 (|x| <= 8: one term's re or im is at most 2*8*8 = 128)."""
        return max_spectra_int32(self.sample_bits) // self.nspectra_pkt

    # ---------------------------------------------------------------- output
    @property
    def nbaseline(self) -> int:
        """Entries of the packed upper triangle (autocorrelations included)."""
        return self.nstream * (self.nstream + 1) // 2

    @property
    def output_shape(self) -> tuple[int, int, int]:
        """X-engine output frame: [chan][baseline][re, im] int32."""
        return (self.nchan, self.nbaseline, 2)

    @property
    def output_bytes(self) -> int:
        return self.nchan * self.nbaseline * 2 * 4

    # ---------------------------------------------------------------- NPU tiling
    @property
    def kernel_samples(self) -> int:
        """Samples per kernel call: 8T."""
        return BLOCK * self.tile_t

    @property
    def npu_block_a(self) -> int:
        """A-side streams covered by the array: 8*N*rows."""
        return BLOCK * self.tile_n * self.rows

    @property
    def npu_block_b(self) -> int:
        """B-side streams covered by the array: 8*M*cols."""
        return BLOCK * self.tile_m * self.cols

    @property
    def npu_block(self) -> int:
        """Streams per NPU block (256 for the published design); larger S is split into such
        blocks."""
        return self.npu_block_a

    @property
    def npu_nblock(self) -> int:
        """Number of NPU stream blocks (the last zero-padded)."""
        return -(-self.nstream // self.npu_block)

    @property
    def npu_block_pairs(self) -> list[tuple[int, int]]:
        """Block pairs (i <= j) the NPU computes; Hermitian symmetry covers the rest."""
        n = self.npu_nblock
        return [(i, j) for j in range(n) for i in range(j + 1)]

    @property
    def npu_ncalls_per_packet(self) -> int:
        """Kernel calls per packet per channel (4 for the published design)."""
        return self.nspectra_pkt // self.kernel_samples

    @property
    def sample_block_bytes(self) -> int:
        """Bytes of one 8 x 8 block of complex samples ([stream][sample]) as the NPU's DMAs move
        it: 128 for ci8 (an 8 x 8 int8 block of real parts, then one of imaginary parts), 64 for
        ci4 (one byte per complex sample; the compute tile unpacks it)."""
        return 2 * BLOCK * BLOCK * self.sample_bits // 8

    @property
    def tile_a_bytes(self) -> int:
        """One A buffer in a compute tile as its DMA fills it: N x T sample blocks."""
        return self.tile_n * self.tile_t * self.sample_block_bytes

    @property
    def tile_b_bytes(self) -> int:
        """One B buffer in a compute tile as its DMA fills it: M x T sample blocks."""
        return self.tile_m * self.tile_t * self.sample_block_bytes

    @property
    def tile_acc_bytes(self) -> int:
        """Accumulators of one compute tile: N x M x 2 x 8 x 8 int32."""
        return self.tile_n * self.tile_m * 2 * BLOCK * BLOCK * 4

    @property
    def tile_unpack_bytes(self) -> int:
        """ci4: the int8 A and B of one kernel call, (N + M) x T x 2 x 8 x 8, which the kernel
        unpacks its ci4 buffers into before its MAC loop; 0 for ci8."""
        return (self.tile_n + self.tile_m) * self.tile_t * 2 * BLOCK * BLOCK if self.ci4 else 0

    @property
    def tile_data_bytes(self) -> int:
        """Data buffers of one compute tile: double-buffered A and B, accumulators, and for ci4
        the unpacked A and B."""
        return (2 * self.tile_a_bytes + 2 * self.tile_b_bytes + self.tile_acc_bytes
                + self.tile_unpack_bytes)

    @property
    def npu_in_bytes(self) -> int:
        """Bytes of one NPU input buffer (P packets of one 256-stream block)."""
        return self.npacket * self.npu_block * self.payload_bytes

    @property
    def npu_out_bytes(self) -> int:
        """Bytes of one NPU call's output: nchan_pkt full npu_block^2 complex int32 matrices."""
        return self.nchan_pkt * self.npu_block * self.npu_block * 2 * 4

    # ---------------------------------------------------------------- helpers
    def replace(self, **changes: int | str) -> Geometry:
        """A copy with some fields changed (validated)."""
        return Geometry(**{**asdict(self), **changes})

    def to_dict(self) -> dict[str, int | str]:
        """JSON-friendly fields (for ring headers and recording sidecars)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Geometry:
        """Inverse of ``to_dict``; absent fields take their defaults (dicts written before ci4,
        without sample_bits, are ci8), and a value that is not an integer (32.7, "32", true) is
        refused rather than truncated."""
        if not isinstance(d, Mapping):
            raise GeometryError(f"geometry must be a mapping of fields, got {type(d).__name__}")
        fields: dict[str, Any] = {}
        for k, v in d.items():
            if k not in cls.__dataclass_fields__:
                continue
            if k == "nibble_order":
                fields[k] = v  # a string, checked by the constructor
                continue
            if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                raise GeometryError(f"{k} must be an integer, got {v!r}", k)
            fields[k] = int(v)
        return cls(**fields)


#: The published design (D. Estévez, "X-engine correlator on a Ryzen NPU"): 256 streams,
#: 9 channels, P = 136.
PUBLISHED = Geometry()

#: ``SEED``, the published design's old name: :data:`PUBLISHED`, with a warning (one release).
__getattr__ = renamed_names(__name__, {"SEED": "PUBLISHED"}, globals())


def small_test_geometry(**changes: int | str) -> Geometry:
    """A small but structurally complete geometry for fast tests.

    N=2, M=1, T=15 on a 2 x 4 array gives 32-stream NPU blocks; 2 channels per packet.
    """
    base = dict(nstream=32, nchan=2, nchan_pkt=2, npacket=2, tile_n=2, tile_m=1, tile_t=15,
                rows=2, cols=4)
    base.update(changes)
    return Geometry(**base)
