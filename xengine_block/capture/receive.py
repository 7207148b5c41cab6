"""Packet capture and reorder: SPEAD heaps -> ring frames + presence mask (DESIGN.md 5, 6).

spead2 receives in its own C++ thread and places every heap's payload straight into its frame
(a spead2 *chunk*) by the placement callback of :mod:`.placement` (which also holds the time
policy: start, head, resynchronisation, slot claims, and the counters); packets come from the
transports of :mod:`.sources`. Python only sees whole frames: :class:`Capture` turns delivered
chunks into frames (missing heaps zero-filled, the presence mask beside them) and
:class:`CaptureBlock` writes them into the pipeline's rings.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import spead2
import spead2.recv

from ..array import ArrayDescription
from ..geometry import Geometry
from ..runtime.memory import populate
from ..runtime.pipeline import SourceBlock
from ..runtime.ring import WriteSpan
from .meerkat import MeerkatFormat
from .placement import (
    _CALLBACK_STATS,
    _ITEMS,
    _NHISTORY,
    _REJECTIONS,
    _STAT_PREFIX,
    COUNTERS,
    CaptureLayout,
    _Epoch,
    _State,
)
from .sources import Source

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------- capture core
class CapturedFrame(NamedTuple):
    """One delivered frame."""

    time_tag: int  # spectrum index of its first spectrum
    frame: np.ndarray  # int8 layout.frame_shape: ours [S, C, coarse, 2, fine] (ci4 no reim
    #                    axis); MeerKAT [ant, C, spectra, pol, 2]
    mask: np.ndarray  # uint8 [S] or [S, G]: 1 where the stream's heap arrived
    new_sequence: bool  # first frame of a sequence (start, or after a resynchronisation)


class Capture:
    """A spead2 chunk stream delivering frames; iterate it for :class:`CapturedFrame`.

    Parameters
    ----------
    source : :class:`UdpSource`, :class:`PcapSource` or :class:`InprocSource`.
    layout : :class:`CaptureLayout` (or pass its wire format, a Geometry or a
        :class:`.meerkat.MeerkatFormat`, plus layout keywords).
    start_timestamp : first timestamp to deliver (rounded up to the alignment; the sequence is
        confirmed at once); None: the time policy finds the start (module docstring).
    copy : yield copies (safe to keep) instead of views valid until the next iteration.
    idle_timeout : stop after this many seconds without a frame; None waits for the source's
        end (pcap end of file, in-process queue stopped) or :meth:`stop`.
    stop_on_end_heap : end on the first SPEAD end-of-stream heap. Only for a single trusted
        sender: with many F-engines one sender's stop (or a forged one) would end the capture,
        so by default stop heaps are only counted (``stop_heaps``, :meth:`stop_heaps_by_stream`).
    spare_chunks : frames beyond spead2's window for the consumer and the delivery queue.
    """

    def __init__(self, source: Source, layout: CaptureLayout | Geometry | MeerkatFormat, *,
                 start_timestamp: int | None = None, copy: bool = False,
                 idle_timeout: float | None = None, stop_on_end_heap: bool = False,
                 spare_chunks: int = 4, **layout_kw: Any) -> None:
        if not isinstance(layout, CaptureLayout):
            layout = CaptureLayout(layout, **layout_kw)
        elif layout_kw:
            raise TypeError(f"layout keywords {sorted(layout_kw)} given with a CaptureLayout")
        self.layout, self.source = layout, source
        self.copy, self.idle_timeout = copy, idle_timeout
        self.stop_on_end_heap = stop_on_end_heap
        self._off = off = layout.offsets
        self._state = layout.new_state()
        if start_timestamp is not None:
            first = -(-start_timestamp // layout.timestamp_step)
            start = -(-first // layout.align_frames) * layout.align_frames
            self._state[off.history:off.history + 4] = (start, 0, -1, _Epoch.CONFIRMED)
            self._state[_State.NEPOCH] = 1
            self._state[[_State.STATUS, _State.START, _State.HEAD]] = (_Epoch.CONFIRMED,
                                                                        start, start - 1)
        self._bitmap = np.zeros(layout.nchunks * layout.chunk_heaps, np.uint8)
        self._cand_bitmap = np.zeros_like(self._bitmap)
        self._state[_State.BITMAP] = self._bitmap.ctypes.data
        self._state[_State.CAND_BITMAP] = self._cand_bitmap.ctypes.data
        config = layout.stream_config(memcpy=spead2.MEMCPY_NONTEMPORAL,
                                      stop_on_stop_item=stop_on_end_heap)
        self._state[_State.STATS_BASE] = config.next_stat_index()
        for name in _CALLBACK_STATS:
            config.add_stat(_STAT_PREFIX + name)
        chunk_config = spead2.recv.ChunkStreamConfig(
            items=list(_ITEMS), max_chunks=layout.nchunks, place=layout.chunk_place(self._state))
        nchunk = layout.nchunks + spare_chunks
        self.stream = spead2.recv.ChunkRingStream(
            spead2.ThreadPool(1), config, chunk_config, spead2.recv.ChunkRingbuffer(nchunk),
            spead2.recv.ChunkRingbuffer(nchunk))
        for _ in range(nchunk):
            data = np.zeros(layout.chunk_bytes, np.int8)
            populate(data)  # faulted in now, not while the first packets arrive
            self.stream.add_free_chunk(spead2.recv.Chunk(
                present=np.zeros(layout.chunk_heaps, np.uint8), data=data))
        self._py = dict.fromkeys(("heaps", "missing", "start_rejected", "frames", "sequences"),
                                 0)
        self._stopped = False
        # stop() ends the stream through this queue: a reader's end makes spead2 flush the
        # frames under construction into the ring before it stops (stream.stop() drops them).
        self._end = spead2.InprocQueue()
        self.stream.add_inproc_reader(self._end)
        source.attach(self.stream)

    # ---- counters
    def counters(self) -> dict[str, int]:
        """Every counter of :data:`COUNTERS` (spead2's stats merged with the frame counts)."""
        stats = self.stream.stats
        cb = {name: stats[_STAT_PREFIX + name] for name in _CALLBACK_STATS}
        out = dict.fromkeys(COUNTERS, 0)
        out.update(self._py)
        out.update({k: v for k, v in cb.items() if k in COUNTERS})
        out["late"] += stats["too_old_heaps"]
        out["incomplete"] = stats["incomplete_heaps_evicted"] + stats["incomplete_heaps_flushed"]
        out["packets"] = stats["packets"]
        dropped = getattr(self.source, "dropped", None)
        out["socket_drops"] = int(dropped()) if dropped is not None else 0
        # spead2 counts every heap it finished or evicted; those never offered for placement
        # have no payload. A stop heap that ended the stream is offered but not counted.
        offered = cb["placed"] + sum(cb[k] for k in _REJECTIONS)
        honoured = int(self.stop_on_end_heap and cb["stop_heaps"] > 0)
        out["bad_zero_length"] = max(0, stats["heaps"] + honoured - offered)
        out["bad_unsized"] = max(0, stats["packets"] - stats["single_packet_heaps"]
                                 - cb["partial"])
        return out

    def stop_heaps_by_stream(self) -> np.ndarray:
        """End-of-stream heaps per stream id (those carrying a valid stream id item)."""
        return self._state[self._off.stops:self._off.size].copy()

    @property
    def start_timestamp(self) -> int | None:
        """Timestamp of the first frame of the current sequence (None until there is one)."""
        if self._state[_State.STATUS] < 0:
            return None
        return int(self._state[_State.START]) * self.layout.timestamp_step

    # ---- lifetime
    def stop(self) -> None:
        """Stop receiving; frames already under construction are still delivered."""
        if not self._stopped:
            self._stopped = True
            self._end.stop()
            close = getattr(self.source, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- frames
    def _sequence_of(self, chunk_id: int) -> tuple[int, int, int] | None:
        """(record number, offset, status) of the sequence a delivered chunk belongs to, or
        None for spead2's back-fill between sequences. The callback records a sequence before
        it places any heap in it, and closes the previous one before spead2 flushes its
        chunks, so a delivered chunk's sequence is always recorded."""
        n = int(self._state[_State.NEPOCH])
        h = self._off.history
        for i in range(n - 1, max(-1, n - 1 - _NHISTORY), -1):
            rec = self._state[h + 4 * (i % _NHISTORY):h + 4 * (i % _NHISTORY) + 4]
            start_chunk, offset, end_chunk, status = (int(x) for x in rec)
            if chunk_id >= start_chunk:
                if end_chunk >= 0 and chunk_id >= end_chunk:
                    return None
                return i, offset, status
        return None

    def _next_chunk(self, poll: float = 0.1) -> spead2.recv.Chunk | None:
        ring = self.stream.data_ringbuffer
        last = time.monotonic()
        while True:
            try:
                return ring.get_nowait()
            except spead2.Stopped:
                return None
            except spead2.Empty:
                pass
            if self.idle_timeout is not None and time.monotonic() - last > self.idle_timeout:
                self.stop()  # flushes what is under construction, then the ring stops
                continue
            select.select([ring.data_fd], [], [], poll)

    def __iter__(self) -> Iterator[CapturedFrame]:
        lay = self.layout
        grid = lay.grid
        current = -1  # record number of the sequence last yielded
        try:
            while True:
                chunk = self._next_chunk()
                if chunk is None:
                    return
                try:
                    present = np.asarray(chunk.present)
                    seq = self._sequence_of(chunk.chunk_id)
                    if seq is None:  # back-fill: spead2 allocated it, nothing was placed
                        continue
                    number, offset, status = seq
                    if status == _Epoch.ABANDONED:  # a start that a quorum overruled
                        self._py["start_rejected"] += int(present.sum())
                        continue
                    if number != current and current >= 0:
                        log.warning("capture resynchronised: frame %d", chunk.chunk_id - offset)
                    new_sequence = number != current
                    current = number
                    frame_id = chunk.chunk_id - offset
                    data = np.asarray(chunk.data).reshape(lay.chunk_heaps, lay.heap_bytes)
                    nheap = int(present.sum())
                    if nheap < lay.chunk_heaps:  # zero missing heaps: no stale or partial data
                        data[present == 0] = 0
                    self._py["heaps"] += nheap
                    self._py["missing"] += lay.chunk_heaps - nheap
                    self._py["frames"] += 1
                    self._py["sequences"] += new_sequence
                    frame = data.reshape(lay.frame_shape)
                    mask = grid.mask(present)
                    if self.copy:
                        frame, mask = frame.copy(), mask.copy()
                    yield CapturedFrame(frame_id * lay.frame_spectra, frame, mask, new_sequence)
                finally:
                    self.stream.add_free_chunk(chunk)
        finally:
            self.stop()
            self.stream.stop()  # the consumer is gone: nothing left to deliver to


def capture_frames(source: Source, wire: Geometry | MeerkatFormat, **kw: Any) -> Capture:
    """Frames from ``source`` without a pipeline (tests, reprocessing pcap files).

    Returns a :class:`Capture` (iterate it; ``counters()`` afterwards). Keywords are those of
    :class:`Capture` and :class:`CaptureLayout`; ``copy`` defaults to True here.
    """
    kw.setdefault("copy", True)
    return Capture(source, wire, **kw)


# ---------------------------------------------------------------------------- the block
def capture_headers(layout: CaptureLayout, array: ArrayDescription, *, time_tag: int,
                    sync_time: float, fs_hz: float, freq0_hz: float, chan_bw_hz: float,
                    name: str) -> list[dict[str, Any]]:
    """The two output headers (frames, mask) of a capture sequence (DESIGN.md section 5; a
    MeerKAT capture's frames ring carries the ``sample_layout`` of the header contract)."""
    grid = layout.grid
    if array.nstream != grid.nstream:
        raise ValueError(f"array has {array.nstream} streams, the capture {grid.nstream}")
    tscale = [sync_time + time_tag / fs_hz, layout.frame_spectra / fs_hz]
    common = {"time_tag": time_tag, "sync_time": sync_time, "fs_hz": fs_hz,
              "chan0": layout.chan0, "nchan": grid.nchan_heap * grid.ngroup,
              "freq0_hz": freq0_hz, "chan_bw_hz": chan_bw_hz, "nstream": grid.nstream,
              "array": array.to_dict()}
    g = layout.geometry
    if g is None:  # another wire format (MeerKAT): its own tensor and sample layout
        common.update(layout.wire.header_fields())
        tensor = layout.wire.tensor(tscale, freq0_hz, chan_bw_hz)
    else:
        common["geometry"] = g.to_dict()
        tensor = {"dtype": g.frame_dtype, "shape": [-1, *g.frame_shape],
                  "labels": ["time", *g.frame_labels],
                  "scales": [tscale, None, [freq0_hz, chan_bw_hz]]
                  + [None] * (len(g.frame_shape) - 2),
                  "units": ["s", None, "Hz"] + [None] * (len(g.frame_shape) - 2)}
    frames = dict(common, name=name, _tensor=tensor)
    mask_axes = ["time", "stream"] + (["chan_group"] if len(layout.mask_shape) == 2 else [])
    mask = dict(common, name=f"{name}.mask", _tensor={
        "dtype": "u8", "shape": [-1, *layout.mask_shape], "labels": mask_axes,
        "scales": [tscale] + [None] * (len(mask_axes) - 1),
        "units": ["s"] + [None] * (len(mask_axes) - 1)})
    return [frames, mask]


class _Segment:
    """One output sequence's worth of a capture: frames until the next resynchronisation."""

    def __init__(self, frames: Iterator[CapturedFrame], first: CapturedFrame) -> None:
        self.frames, self.pending = frames, first
        self.first = first


class CaptureBlock(SourceBlock):
    """Source block: SPEAD F-engine packets -> frames ring + presence-mask ring.

    Outputs: ``orings[0]`` frames ``i8 [-1, S, C, coarse, 2, fine]`` (MeerKAT heaps: ``ci8
    [-1, ant, C, spectra, pol]`` with a ``sample_layout``), ``orings[1]`` mask ``u8 [-1, S]``
    (``[-1, S, G]`` with several channel groups); headers from
    :func:`capture_headers`. Each source is captured in turn; a resynchronisation (the
    F-engines jumped) begins a new sequence in both rings. Counters: :meth:`capture_counters`.

    Parameters
    ----------
    sources : a source or a list of sources (e.g. several pcap files).
    wire, array : the wire format (our correlator Geometry, or a
        :class:`.meerkat.MeerkatFormat` for MeerKAT F-engine heaps) and the array description.
    sync_time, fs_hz, freq0_hz, chan_bw_hz : header fields (DESIGN.md 5).
    chan0, window, align, max_ahead, quorum, resync_frames : see :class:`CaptureLayout`.
    gulp_nframe : frames per output span (default: P, one X-engine integration; MeerKAT:
        one heap time).
    start_timestamp, idle_timeout, stop_on_end_heap : see :class:`Capture` (end-of-stream
        heaps are counted, not followed, unless ``stop_on_end_heap``: single senders only).
    """

    def __init__(self, sources: Source | list[Source], wire: Geometry | MeerkatFormat,
                 array: ArrayDescription, *, sync_time: float, fs_hz: float, freq0_hz: float,
                 chan_bw_hz: float, chan0: int = 0, window: int = 8, align: int = 0,
                 max_ahead: int = 0, quorum: int = 0, resync_frames: int = 0,
                 gulp_nframe: int | None = None, start_timestamp: int | None = None,
                 idle_timeout: float | None = None, stop_on_end_heap: bool = False,
                 **kwargs: Any) -> None:
        self.sources = sources if isinstance(sources, list) else [sources]
        default_gulp = wire.npacket if isinstance(wire, Geometry) else 1
        super().__init__(self._segments(), gulp_nframe or default_gulp, **kwargs)
        self.orings = [self.create_ring(), self.create_ring()]
        self.layout = CaptureLayout(wire, chan0=chan0, window=window, align=align,
                                    max_ahead=max_ahead, quorum=quorum,
                                    resync_frames=resync_frames)
        if array.nstream != self.layout.grid.nstream:
            raise ValueError(f"array has {array.nstream} streams, "
                             f"the capture's wire format {self.layout.grid.nstream}")
        self.array = array
        self.sky = {"sync_time": float(sync_time), "fs_hz": float(fs_hz),
                    "freq0_hz": float(freq0_hz), "chan_bw_hz": float(chan_bw_hz)}
        self.start_timestamp, self.idle_timeout = start_timestamp, idle_timeout
        self.stop_on_end_heap = stop_on_end_heap
        self._capture: Capture | None = None
        self._totals = dict.fromkeys(COUNTERS, 0)
        self._stops = np.zeros(self.layout.grid.nsource, np.int64)
        #: Set once the first source's receiver is attached (its placement callback compiled
        #: and its socket read): senders in the same process wait on it so nothing is lost to
        #: start-up.
        self.receiving = threading.Event()

    def capture_counters(self) -> dict[str, int]:
        """Capture counters summed over every source so far (safe while running)."""
        out = dict(self._totals)
        cap = self._capture
        if cap is not None:
            for k, v in cap.counters().items():
                out[k] += v
        return out

    def stop_heaps_by_stream(self) -> np.ndarray:
        """End-of-stream heaps per stream id, summed over every source so far."""
        cap = self._capture
        return self._stops + (cap.stop_heaps_by_stream() if cap is not None else 0)

    def shutdown(self) -> None:
        super().shutdown()
        cap = self._capture
        if cap is not None:
            cap.stop()  # wakes a reader waiting for packets

    def _segments(self) -> Iterator[_Segment]:
        """The block's "source names": one segment per output sequence."""
        for source in self.sources:
            if self.shutdown_event.is_set():
                return
            cap = Capture(source, self.layout, start_timestamp=self.start_timestamp,
                          idle_timeout=self.idle_timeout,
                          stop_on_end_heap=self.stop_on_end_heap)
            self._capture = cap
            self.receiving.set()
            if self.shutdown_event.is_set():  # shutdown() came while the stream was built
                cap.stop()
            try:
                frames = iter(cap)
                first = next(frames, None)
                while first is not None:
                    segment = _Segment(frames, first)
                    yield segment
                    first = segment.pending  # the next sequence's first frame, or None
                    if self.shutdown_event.is_set():
                        return
            finally:
                cap.stop()
                for k, v in cap.counters().items():
                    self._totals[k] += v
                self._stops += cap.stop_heaps_by_stream()
                self._capture = None

    def create_reader(self, segment: _Segment) -> _Segment:
        return segment

    def on_sequence(self, segment: _Segment, sourcename: Any) -> list[dict[str, Any]]:
        t = segment.first.time_tag
        return capture_headers(self.layout, self.array, time_tag=t, name=f"capture-{t}",
                               **self.sky)

    def on_data(self, segment: _Segment, ospans: list[WriteSpan]) -> list[int]:
        """Copy frames until the gulp is full, the sequence ends (resync) or data end."""
        n = 0
        while n < ospans[0].nframe and segment.pending is not None:
            cf = segment.pending
            if cf.new_sequence and cf is not segment.first:
                break  # this sequence is over; the frame starts the next one
            ospans[0].data[n] = cf.frame
            ospans[1].data[n] = cf.mask
            n += 1
            segment.pending = next(segment.frames, None)  # invalidates cf's views
        return [n, n]
