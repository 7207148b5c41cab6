"""MeerKAT CBF SPEAD formats: the one source of truth for their item ids and layouts.

The MeerKAT CBF-Data Subscribers ICD as implemented by katgpucbf (github ska-sa/katgpucbf,
checked at commit 1e38bdc). Each fact below names the file it was read from:

- Items (``src/katgpucbf/spead.py``): ``timestamp`` 0x1600 (ADC samples since the sync epoch),
  ``feng_id`` 0x4101, ``frequency`` 0x4103 (the *first channel* of the heap), ``feng_raw``
  0x4300, ``xeng_raw`` 0x1800; flavour SPEAD-64-48, immediates 48-bit.
- F-engine heaps (``fgpu/send.py`` ``make_item_group``, ``Batch``, ``make_streams``): one heap
  per F-engine (one antenna, both pols) per ``spectra_per_heap`` spectra per channel substream,
  items timestamp, feng_id, frequency, feng_raw in that order, ``repeat_pointers``, data heaps
  without descriptors; ``feng_raw`` is int8 ``[channels][spectra][pol][re, im]`` (real first,
  pol 0 first); packets of 8192 payload bytes plus a 72-byte preamble (header + 8 item
  pointers); heap counters ``set_cnt_sequence(feng_id, n_ants)``, so ``cnt % n_ants ==
  feng_id``; a heap whose input was incomplete is not sent (``Chunk.send``).
- Timestamps (``fgpu/send.py`` ``Chunk``, ``xbgpu/recv.py``): heap timestamps step by
  ``spectra_per_heap * samples_between_spectra`` and are multiples of it;
  ``samples_between_spectra`` is ``2 * channels`` for wideband F-engines (``fsim/main.py``).
- Receiving (``xbgpu/recv.py`` ``Layout._chunk_place``, ``make_stream``): a heap is dropped
  when its size is not the heap's, its timestamp or feng_id absent (descriptors), the timestamp
  misaligned or ``feng_id >= n_ants``; heaps are assembled per substream ``cnt % n_ants``;
  ``feng_id`` is the antenna index.

The capture places these heaps with the same callback and time policy as ours
(:class:`.placement.HeapGrid`): a frame is one heap time of every antenna,
``[ant][chan][spectra][pol][re, im]`` int8, described for the X-engine by a
:class:`~xengine_block.sample_layout.SampleLayout` in the ring header.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..geometry import MAX_FRAME_BYTES, max_spectra_int32
from ..sample_layout import SampleLayout
from .placement import HeapGrid
from .spead import FLAVOUR, ItemSpec

#: Items (``src/katgpucbf/spead.py``; descriptions from ``fgpu/send.py`` and ``xbgpu/xsend.py``).
TIMESTAMP = ItemSpec(0x1600, "timestamp", "Timestamp provided by the MeerKAT digitisers and "
                     "scaled to the digitiser sampling rate.")
FENG_ID = ItemSpec(0x4101, "feng_id", "Uniquely identifies the F-Engine source for the data.")
FREQUENCY = ItemSpec(0x4103, "frequency", "Identifies the first channel in the band of "
                     "frequencies in the SPEAD heap.")
FENG_RAW = ItemSpec(0x4300, "feng_raw", "Channelised complex data from both polarisations of "
                    "digitiser associated with F-Engine.")
XENG_RAW = ItemSpec(0x1800, "xeng_raw", "Integrated baseline correlation products.")
#: The F-engine data heap's items, in katgpucbf's order.
FENG_ITEMS = (TIMESTAMP, FENG_ID, FREQUENCY, FENG_RAW)
#: The X-engine (baseline-correlation-products) heap's items, in katgpucbf's order.
XENG_ITEMS = (TIMESTAMP, FREQUENCY, XENG_RAW)

#: SPEAD-64-48, as ours (``spead.py`` FLAVOUR).
MEERKAT_FLAVOUR = FLAVOUR
#: Polarisations per F-engine heap.
N_POLS = 2
#: Packet payload bytes (``__init__.py`` DEFAULT_PACKET_PAYLOAD_BYTES).
PACKET_PAYLOAD_BYTES = 8192
#: Bytes before an F-engine packet's payload: header + 8 item pointers (``fgpu/send.py``).
FENG_PREAMBLE_BYTES = 72
#: Bytes before an X-engine packet's payload: header + 7 item pointers (``xbgpu/xsend.py``).
XENG_PREAMBLE_BYTES = 64
#: Spectra per F-engine heap for 4096 channels (``DEFAULT_JONES_PER_BATCH`` 2**20 / channels).
DEFAULT_SPECTRA_PER_HEAP = 256
#: Seconds between descriptor heaps (``__init__.py`` SPEAD_DESCRIPTOR_INTERVAL_S).
DESCRIPTOR_INTERVAL_S = 5.0
#: Timestamps are 48-bit immediates.
MAX_TIMESTAMP = (1 << FLAVOUR.heap_address_bits) - 1
#: The capture formats a capture block understands: ours (docs/design.md, "SPEAD items") and
#: MeerKAT's.
CAPTURE_FORMATS = ("xengine", "meerkat")


class FormatError(ValueError):
    """A MeerKAT format parameter that cannot work; ``field`` names it."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class MeerkatFormat:
    """The F-engine heaps one X-engine receives (its channel substream), and their frames.

    Parameters
    ----------
    n_ants : F-engines (antennas); ``feng_id`` is the antenna's index in the array description.
    nchan : channels of the substream (of this X-engine), i.e. of every heap.
    spectra_per_heap : spectra per channel per heap.
    samples_between_spectra : ADC samples from one spectrum to the next (``2 * channels`` of
        the whole band for wideband F-engines); converts timestamps to spectrum indices.
    """

    n_ants: int
    nchan: int
    samples_between_spectra: int
    spectra_per_heap: int = DEFAULT_SPECTRA_PER_HEAP

    def __post_init__(self) -> None:
        for name in ("n_ants", "nchan", "samples_between_spectra", "spectra_per_heap"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise FormatError(f"{name} must be a positive integer, got {v!r}", name)
        if self.spectra_per_heap > max_spectra_int32(8):
            raise FormatError(f"spectra_per_heap {self.spectra_per_heap}: one heap time can "
                              f"overflow an int32 correlation (at most "
                              f"{max_spectra_int32(8)} spectra)", "spectra_per_heap")
        if self.frame_bytes > MAX_FRAME_BYTES:
            raise FormatError(f"{self.n_ants} antennas x {self.nchan} channels x "
                              f"{self.spectra_per_heap} spectra: a frame of "
                              f"{self.frame_bytes / 2**30:.1f} GiB exceeds the "
                              f"{MAX_FRAME_BYTES / 2**30:.0f} GiB limit", "nchan")
        if self.timestamp_step > MAX_TIMESTAMP:
            raise FormatError(f"spectra_per_heap * samples_between_spectra = "
                              f"{self.timestamp_step} does not fit a 48-bit timestamp",
                              "samples_between_spectra")

    # ---- sizes
    @property
    def nstream(self) -> int:
        return N_POLS * self.n_ants

    @property
    def heap_bytes(self) -> int:
        """``feng_raw`` bytes: ``[nchan][spectra_per_heap][pol][re, im]`` int8."""
        return self.nchan * self.spectra_per_heap * N_POLS * 2

    @property
    def feng_raw_shape(self) -> tuple[int, int, int, int]:
        return (self.nchan, self.spectra_per_heap, N_POLS, 2)

    @property
    def timestamp_step(self) -> int:
        """ADC samples from one heap to the next (timestamps are multiples of it)."""
        return self.spectra_per_heap * self.samples_between_spectra

    @property
    def frame_shape(self) -> tuple[int, ...]:
        """A frame (one heap time of every antenna): ``[ant][chan][spectra][pol][re, im]``."""
        return (self.n_ants, *self.feng_raw_shape)

    @property
    def frame_bytes(self) -> int:
        return self.n_ants * self.heap_bytes

    def packets_per_heap(self, payload: int = PACKET_PAYLOAD_BYTES) -> int:
        return -(-self.heap_bytes // payload)

    # ---- time
    def spectrum(self, timestamp: int) -> int:
        """Spectrum index of an ADC-sample timestamp."""
        return timestamp // self.samples_between_spectra

    def timestamp(self, spectrum: int) -> int:
        """ADC-sample timestamp of spectrum index ``spectrum``."""
        return spectrum * self.samples_between_spectra

    # ---- what the capture and the X-engine need
    def heap_grid(self) -> HeapGrid:
        """Placement: source id = feng_id, one heap per antenna per frame, whose first channel
        must be the capture's chan0."""
        return HeapGrid(nsource=self.n_ants, ngroup=1, nchan_heap=self.nchan,
                        heap_bytes=self.heap_bytes, timestamp_step=self.timestamp_step,
                        frame_spectra=self.spectra_per_heap, pols_per_source=N_POLS,
                        frame_shape=self.frame_shape, default_align=1)

    def stream_config_kw(self) -> dict[str, Any]:
        """spead2 assembles heaps per substream ``cnt % n_ants`` (one per F-engine), as
        katgpucbf's ``xbgpu/recv.py``: interleaved heaps of many F-engines never evict each
        other (spead2's ``max_heaps`` is per substream)."""
        return {"substreams": self.n_ants}

    @property
    def sample_layout(self) -> SampleLayout:
        """Where each sample of a frame lies (streams ``2 * antenna + pol``)."""
        return SampleLayout.from_axes([("station", self.n_ants), ("freq", self.nchan),
                                       ("fine_time", self.spectra_per_heap), ("pol", N_POLS)])

    def tensor(self, time_scale: list[float], freq0_hz: float,
               chan_bw_hz: float) -> dict[str, Any]:
        """The frames ring's ``_tensor``: ci8 ``[-1, ant, chan, spectra, pol]``."""
        return {"dtype": "ci8", "shape": [-1, self.n_ants, self.nchan, self.spectra_per_heap,
                                          N_POLS],
                "labels": ["time", "station", "freq", "fine_time", "pol"],
                "scales": [time_scale, None, [freq0_hz, chan_bw_hz], None, None],
                "units": ["s", None, "Hz", None, None]}

    def header_fields(self) -> dict[str, Any]:
        """What a MeerKAT capture adds to its ring headers (the header contract's
        ``sample_layout``, and what turns spectrum indices back into ADC timestamps)."""
        return {"capture_format": "meerkat", "sample_layout": self.sample_layout.to_dict(),
                "spectra_per_heap": self.spectra_per_heap,
                "samples_between_spectra": self.samples_between_spectra}
