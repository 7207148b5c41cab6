"""Packet capture and reorder: SPEAD heaps -> ring frames + presence mask (DESIGN.md 5, 6).

spead2 receives in its own C++ thread and places every heap's payload straight into its frame
(a spead2 *chunk*) through a numba ``cfunc`` placement callback built from the
:class:`CaptureLayout`; Python only sees whole frames. Per frame (chunk = one packet time x all
streams): heap index = ``stream * nchan_group + group``, offset = index * payload_bytes, so a
chunk is exactly a ring frame ``[stream][chan][coarse][reim][fine]``.

The callback also judges every heap, counting each rejection once (``_CALLBACK_STATS``, spead2
custom stream stats), in this order: missing items (descriptors, control, foreign traffic),
wrong size, timestamp not a multiple of nspectra_pkt, unknown stream, wrong channel, before the
sequence start, far ahead of the window, behind the window (late), duplicate. It keeps a little
state in a numpy array it gets as user data (it runs in spead2's single receive thread):

- start: the first frame, rounded *up* to a multiple of ``align`` packet times (default P, so
  integrations line up across X-engines); earlier heaps are "before_start". Set by the first
  well-formed heap unless ``start_timestamp`` is given (pass it when junk may arrive first).
- head: the newest accepted frame. A heap more than ``max_ahead`` frames ahead of it is
  "out_of_window" (absurd timestamps would otherwise flush every frame under construction),
  unless ``resync_heaps`` such heaps arrive in a row: then the F-engines really moved on
  (restart, outage) and the capture jumps and starts a new, again aligned, sequence.
- a presence bitmap per frame in the window, to drop and count duplicates (spead2 would
  silently place them again).

Missing heaps are zero-filled when the frame is delivered (chunks are recycled, so this is what
keeps stale or partial data out); the mask is the per-heap presence, ``[S]`` when a stream has
one channel group (the seed) and ``[S, G]`` otherwise, so no received heap is ever discarded and
valid counts stay exact per group.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import select
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, NamedTuple, Protocol

import numba
import numpy as np
import scipy
import spead2
import spead2.recv
from numba import types
from spead2.numba import intp_to_voidptr
from spead2.recv.numba import chunk_place_data

from .array import ArrayDescription
from .geometry import Geometry
from .pipeline import SourceBlock
from .ring import WriteSpan
from .spead import DEFAULT_ADDRESS, DEFAULT_PORT, FREQUENCY, STREAM_ID, TIMESTAMP

log = logging.getLogger(__name__)

#: Every capture counter, declared once: name -> description.
COUNTERS: dict[str, str] = {
    "heaps": "heaps placed in delivered frames",
    "missing": "heaps absent from delivered frames (zero-filled, mask cleared)",
    "late": "heaps for a frame already delivered (behind the reorder window)",
    "duplicate": "further copies of a heap already placed (dropped)",
    "bad_size": "heaps whose length is not payload_bytes",
    "bad_timestamp": "heaps whose timestamp is not a multiple of nspectra_pkt",
    "bad_stream": "heaps whose stream id is >= nstream",
    "bad_channel": "heaps whose first channel is not chan0 + k * nchan_pkt, k < nchan_group",
    "out_of_window": "heaps more than max_ahead frames ahead of the newest (absurd timestamps)",
    "before_start": "heaps before the first (aligned) frame of a sequence",
    "metadata": "heaps without timestamp, stream id or frequency (descriptors, foreign SPEAD)",
    "incomplete": "heaps with packets missing when their frame was delivered (spead2)",
    "packets": "SPEAD packets decoded (spead2); datagrams that are not SPEAD are dropped "
               "by spead2 before any count",
    "frames": "frames delivered",
    "sequences": "sequences begun (the first, then one per resynchronisation)",
}


class _Stat(IntEnum):
    """Counters the placement callback keeps (spead2 custom stats, in registration order)."""

    METADATA = 0
    BAD_SIZE = 1
    BAD_TIMESTAMP = 2
    BAD_STREAM = 3
    BAD_CHANNEL = 4
    BEFORE_START = 5
    OUT_OF_WINDOW = 6
    LATE = 7
    DUPLICATE = 8


_CALLBACK_STATS = tuple(s.name.lower() for s in _Stat)
_STAT_PREFIX = "xengine."


class _State(IntEnum):
    """Slots of the callback's int64 state array; the window's frame tags follow them."""

    STATS_BASE = 0  # index of the first custom stat in spead2's batch_stats
    START = 1  # first frame of the sequence (-1: not yet known)
    HEAD = 2  # newest accepted frame
    FAR_RUN = 3  # consecutive heaps beyond max_ahead
    BITMAP = 4  # address of the uint8 [window, heaps_per_frame] presence bitmap
    NSTART = 5  # sequence starts recorded so far; the last _NHISTORY follow the slots


#: Sequence starts remembered for the consumer (it may lag several resynchronisations behind).
_NHISTORY = 16
_HISTORY = len(_State)
#: Then one frame tag per window slot (which frame the slot's bitmap describes).
_TAGS = _HISTORY + _NHISTORY


@dataclass(frozen=True)
class CaptureLayout:
    """Sizes and rules of the capture, all derived from the geometry (katgpucbf-style).

    Parameters
    ----------
    geometry : the correlator geometry (streams, channels, payload).
    chan0 : first (absolute) channel of this X-engine; packets carry absolute channels.
    window : frames under construction at once (spead2 ``max_chunks``): the reorder window.
    align : the first frame of a sequence is a multiple of ``align`` packet times (0: P).
    max_ahead : heaps more than this many frames ahead of the newest are out of window (0:
        ``window``; at most ``window``, so spead2 never skips frames).
    resync_heaps : that many out-of-window heaps in a row make the capture jump (0: one
        frame's worth of heaps).
    """

    geometry: Geometry
    chan0: int = 0
    window: int = 8
    align: int = 0
    max_ahead: int = 0
    resync_heaps: int = 0

    def __post_init__(self) -> None:
        if self.chan0 < 0:
            raise ValueError(f"chan0 must be >= 0, got {self.chan0}")
        if self.window < 1:
            raise ValueError(f"window must be >= 1 frame, got {self.window}")
        if self.align < 0 or self.max_ahead < 0 or self.resync_heaps < 0:
            raise ValueError("align, max_ahead and resync_heaps must be >= 0 (0: default)")
        if self.max_ahead > self.window:
            raise ValueError(f"max_ahead ({self.max_ahead}) must be <= window ({self.window})")

    @property
    def heap_bytes(self) -> int:
        return self.geometry.payload_bytes

    @property
    def chunk_heaps(self) -> int:
        """Heaps per frame: ``nstream * nchan_group``."""
        return self.geometry.npackets_per_frame

    @property
    def chunk_bytes(self) -> int:
        return self.geometry.frame_bytes

    @property
    def timestamp_step(self) -> int:
        """Timestamp increment from one frame to the next."""
        return self.geometry.nspectra_pkt

    @property
    def align_frames(self) -> int:
        return self.align or self.geometry.npacket

    @property
    def max_ahead_frames(self) -> int:
        return self.max_ahead or self.window

    @property
    def resync_count(self) -> int:
        return self.resync_heaps or self.chunk_heaps

    @property
    def mask_shape(self) -> tuple[int, ...]:
        """Per-frame mask: ``[S]`` for one channel group per stream, else ``[S, G]``."""
        g = self.geometry
        return (g.nstream,) if g.nchan_group == 1 else (g.nstream, g.nchan_group)

    @functools.cached_property
    def _chunk_place(self) -> numba.core.ccallback.CFunc:
        return _build_place(self.geometry.nstream, self.geometry.nchan_group,
                            self.geometry.nchan_pkt, self.chan0, self.heap_bytes,
                            self.timestamp_step, self.window, self.align_frames,
                            self.max_ahead_frames, self.resync_count)

    def chunk_place(self, state: np.ndarray) -> scipy.LowLevelCallable:
        """The placement callback for spead2, with ``state`` (int64 array) as user data."""
        return scipy.LowLevelCallable(self._chunk_place.ctypes,
                                      user_data=state.ctypes.data_as(ctypes.c_void_p),
                                      signature="void (void *, size_t, void *)")


@functools.lru_cache(maxsize=16)
def _build_place(nstream: int, ngroup: int, nchan_pkt: int, chan0: int, heap_bytes: int,
                 step: int, window: int, align: int, max_ahead: int,
                 resync: int) -> numba.core.ccallback.CFunc:
    """Compile the placement callback for one layout (constants are baked in)."""
    nheap = nstream * ngroup
    nchan = ngroup * nchan_pkt
    nstat = len(_Stat)
    nstate = _TAGS + window

    @numba.cfunc(types.void(types.CPointer(chunk_place_data), types.uintp,
                            types.CPointer(types.int64)), nopython=True)
    def place(data_ptr, data_size, state_ptr):  # pragma: no cover - runs in spead2's thread
        data = numba.carray(data_ptr, 1)
        state = numba.carray(state_ptr, nstate)
        base = state[0]
        stats = numba.carray(intp_to_voidptr(data[0].batch_stats), base + nstat,
                             dtype=np.uint64)
        items = numba.carray(intp_to_voidptr(data[0].items), 4, dtype=np.int64)
        timestamp, stream, freq, length = items[0], items[1], items[2], items[3]
        if timestamp < 0 or stream < 0 or freq < 0:
            stats[base + 0] += 1  # METADATA
            return
        if length != heap_bytes:
            stats[base + 1] += 1  # BAD_SIZE
            return
        if timestamp % step != 0:
            stats[base + 2] += 1  # BAD_TIMESTAMP
            return
        if stream >= nstream:
            stats[base + 3] += 1  # BAD_STREAM
            return
        chan = freq - chan0
        if chan < 0 or chan >= nchan or chan % nchan_pkt != 0:
            stats[base + 4] += 1  # BAD_CHANNEL
            return
        frame = timestamp // step
        if state[1] < 0:  # the first well-formed heap fixes the (aligned) start
            state[1] = (frame + align - 1) // align * align
            state[2] = state[1] - 1
            state[_HISTORY + state[5] % _NHISTORY] = state[1]
            state[5] += 1
        if frame < state[1]:
            stats[base + 5] += 1  # BEFORE_START
            return
        if frame > state[2] + max_ahead:
            state[3] += 1
            if state[3] < resync:
                stats[base + 6] += 1  # OUT_OF_WINDOW
                return
            # Sustained: the senders really jumped. Follow them with a new aligned sequence.
            state[3] = 0
            state[1] = (frame + align - 1) // align * align
            state[2] = state[1] - 1
            state[_HISTORY + state[5] % _NHISTORY] = state[1]
            state[5] += 1
            if frame < state[1]:
                stats[base + 5] += 1  # BEFORE_START
                return
        state[3] = 0
        if frame <= state[2] - window:
            stats[base + 7] += 1  # LATE (spead2 would call it too old)
            return
        if frame > state[2]:
            state[2] = frame
        slot = frame % window
        bitmap = numba.carray(intp_to_voidptr(state[4]), window * nheap, dtype=np.uint8)
        if state[_TAGS + slot] != frame:  # slot reused by a newer frame: forget the old one
            state[_TAGS + slot] = frame
            bitmap[slot * nheap:(slot + 1) * nheap] = 0
        index = stream * ngroup + chan // nchan_pkt
        if bitmap[slot * nheap + index]:
            stats[base + 8] += 1  # DUPLICATE
            return
        bitmap[slot * nheap + index] = 1
        data[0].chunk_id = frame
        data[0].heap_index = index
        data[0].heap_offset = index * heap_bytes

    return place


# ---------------------------------------------------------------------------- sources
class Source(Protocol):
    """Where packets come from; ``attach`` adds the transport to a spead2 stream."""

    def attach(self, stream: spead2.recv.ChunkRingStream) -> None: ...


class UdpSource:
    """UDP on an explicit bind address and port (loopback by default).

    ``port=0`` binds an ephemeral port; :attr:`port` then holds the bound one after attach.
    ``buffer_size`` is the socket receive buffer (the kernel caps it at net.core.rmem_max).
    """

    def __init__(self, address: str = DEFAULT_ADDRESS, port: int = DEFAULT_PORT, *,
                 buffer_size: int = 64 << 20, max_size: int = 9200) -> None:
        self.address, self.port = address, port
        self.buffer_size, self.max_size = buffer_size, max_size
        self._sock: socket.socket | None = None

    def bind(self) -> int:
        """Bind now (before senders start); returns the port."""
        if self._sock is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.buffer_size)
            sock.bind((self.address, self.port))
            self._sock = sock
            self.port = sock.getsockname()[1]
        return self.port

    def attach(self, stream: spead2.recv.ChunkRingStream) -> None:
        self.bind()
        stream.add_udp_reader(self._sock, max_size=self.max_size)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()

    def __repr__(self) -> str:
        return f"UdpSource({self.address!r}, {self.port})"


@dataclass(frozen=True)
class PcapSource:
    """A pcap file of UDP datagrams (recorded traffic, or ``spead.pcap_sender``'s output)."""

    path: str
    filter: str = ""

    def attach(self, stream: spead2.recv.ChunkRingStream) -> None:
        stream.add_udp_pcap_file_reader(str(self.path), self.filter)


@dataclass(frozen=True)
class InprocSource:
    """A ``spead2.InprocQueue`` (same process; stopping the queue ends the capture)."""

    queue: spead2.InprocQueue

    def attach(self, stream: spead2.recv.ChunkRingStream) -> None:
        stream.add_inproc_reader(self.queue)


def parse_source(text: str) -> Source:
    """``udp://ADDRESS:PORT``, ``udp://:PORT`` (loopback) or ``pcap:PATH`` / ``PATH.pcap``."""
    if text.startswith("udp://"):
        host, _, port = text[len("udp://"):].rpartition(":")
        if not port.isdigit():
            raise ValueError(f"source {text!r}: expected udp://ADDRESS:PORT")
        return UdpSource(host or DEFAULT_ADDRESS, int(port))
    if text.startswith("pcap:"):
        return PcapSource(text[len("pcap:"):])
    if text.endswith((".pcap", ".pcapng")):
        return PcapSource(text)
    raise ValueError(f"source {text!r}: expected udp://ADDRESS:PORT or pcap:PATH")


# ---------------------------------------------------------------------------- capture core
class CapturedFrame(NamedTuple):
    """One delivered frame."""

    time_tag: int  # spectrum index of its first spectrum
    frame: np.ndarray  # int8 geometry.frame_shape ([S, C, coarse, 2, fine]; ci4 no reim axis)
    mask: np.ndarray  # uint8 [S] or [S, G]: 1 where the heap arrived
    new_sequence: bool  # first frame of a sequence (start, or after a resynchronisation)


class Capture:
    """A spead2 chunk stream delivering frames; iterate it for :class:`CapturedFrame`.

    Parameters
    ----------
    source : :class:`UdpSource`, :class:`PcapSource` or :class:`InprocSource`.
    layout : :class:`CaptureLayout` (or pass a Geometry plus layout keywords).
    start_timestamp : first timestamp to deliver (rounded up to the alignment); None: from
        the first well-formed heap.
    copy : yield copies (safe to keep) instead of views valid until the next iteration.
    idle_timeout : stop after this many seconds without a frame (UDP without an end-of-stream
        heap); None waits for end of stream or :meth:`stop`.
    spare_chunks : frames beyond the window for the consumer and the delivery queue.
    """

    def __init__(self, source: Source, layout: CaptureLayout | Geometry, *,
                 start_timestamp: int | None = None, copy: bool = False,
                 idle_timeout: float | None = None, spare_chunks: int = 4,
                 **layout_kw: Any) -> None:
        if isinstance(layout, Geometry):
            layout = CaptureLayout(layout, **layout_kw)
        elif layout_kw:
            raise TypeError(f"layout keywords {sorted(layout_kw)} given with a CaptureLayout")
        self.layout, self.source = layout, source
        self.copy, self.idle_timeout = copy, idle_timeout
        self._state = np.zeros(_TAGS + layout.window, np.int64)
        self._state[_TAGS:] = -1
        start = -1
        if start_timestamp is not None:
            first = -(-start_timestamp // layout.timestamp_step)
            start = -(-first // layout.align_frames) * layout.align_frames
        self._state[_State.START], self._state[_State.HEAD] = start, start - 1
        if start >= 0:
            self._state[_HISTORY] = start
            self._state[_State.NSTART] = 1
        self._bitmap = np.zeros(layout.window * layout.chunk_heaps, np.uint8)
        self._state[_State.BITMAP] = self._bitmap.ctypes.data
        config = spead2.recv.StreamConfig(memcpy=spead2.MEMCPY_NONTEMPORAL)
        self._state[_State.STATS_BASE] = config.next_stat_index()
        for name in _CALLBACK_STATS:
            config.add_stat(_STAT_PREFIX + name)
        chunk_config = spead2.recv.ChunkStreamConfig(
            items=[TIMESTAMP.id, STREAM_ID.id, FREQUENCY.id, spead2.HEAP_LENGTH_ID],
            max_chunks=layout.window, place=layout.chunk_place(self._state))
        nchunk = layout.window + spare_chunks
        self.stream = spead2.recv.ChunkRingStream(
            spead2.ThreadPool(1), config, chunk_config, spead2.recv.ChunkRingbuffer(nchunk),
            spead2.recv.ChunkRingbuffer(nchunk))
        for _ in range(nchunk):
            self.stream.add_free_chunk(spead2.recv.Chunk(
                present=np.zeros(layout.chunk_heaps, np.uint8),
                data=np.zeros(layout.chunk_bytes, np.int8)))
        self._py = dict.fromkeys(("heaps", "missing", "before_start", "frames", "sequences"), 0)
        self._stopped = False
        source.attach(self.stream)

    # ---- counters
    def counters(self) -> dict[str, int]:
        """Every counter of :data:`COUNTERS` (spead2's stats merged with the frame counts)."""
        stats = self.stream.stats
        out = dict.fromkeys(COUNTERS, 0)
        out.update({k: v for k, v in self._py.items() if k != "before_start"})
        for name in _CALLBACK_STATS:
            out[name] = stats[_STAT_PREFIX + name]
        out["before_start"] += self._py["before_start"]
        out["late"] += stats["too_old_heaps"]
        out["incomplete"] = stats["incomplete_heaps_evicted"] + stats["incomplete_heaps_flushed"]
        out["packets"] = stats["packets"]
        return out

    @property
    def start_timestamp(self) -> int | None:
        """Timestamp of the first frame (None until the first well-formed heap)."""
        start = int(self._state[_State.START])
        return None if start < 0 else start * self.layout.timestamp_step

    # ---- lifetime
    def stop(self) -> None:
        """Stop receiving; frames already under construction are still delivered."""
        if not self._stopped:
            self._stopped = True
            self.stream.stop()
            close = getattr(self.source, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> Capture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- frames
    def _start_from(self, frame: int) -> int:
        """The first sequence start at or after ``frame`` (the callback records each start
        before it places any heap of that sequence, so a delivered chunk's start is there)."""
        n = int(self._state[_State.NSTART])
        recent = self._state[_HISTORY:_HISTORY + _NHISTORY][:n] if n <= _NHISTORY else \
            self._state[_HISTORY:_HISTORY + _NHISTORY]
        later = recent[recent >= frame]
        return int(later.min()) if later.size else int(self._state[_State.START])

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
        g = lay.geometry
        expected: int | None = None  # next chunk id (spead2 delivers them consecutively)
        first = -1  # first frame of the current (or next) sequence
        in_sequence = False
        try:
            while True:
                chunk = self._next_chunk()
                if chunk is None:
                    return
                try:
                    frame_id = chunk.chunk_id
                    present = np.asarray(chunk.present)
                    if expected is None or frame_id != expected:
                        if expected is not None:  # a jump: the callback set a new start
                            log.warning("capture resynchronised: frame %d after %d",
                                        frame_id, expected - 1)
                        first = self._start_from(-1 if expected is None else expected)
                        in_sequence = False
                    expected = frame_id + 1
                    if frame_id < first:  # spead2's back-fill, or frames before realignment
                        self._py["before_start"] += int(present.sum())
                        continue
                    new_sequence = not in_sequence
                    in_sequence = True
                    data = np.asarray(chunk.data).reshape(lay.chunk_heaps, lay.heap_bytes)
                    nheap = int(present.sum())
                    if nheap < lay.chunk_heaps:  # zero missing heaps: no stale or partial data
                        data[present == 0] = 0
                    self._py["heaps"] += nheap
                    self._py["missing"] += lay.chunk_heaps - nheap
                    self._py["frames"] += 1
                    self._py["sequences"] += new_sequence
                    frame = data.reshape(g.frame_shape)
                    mask = present.reshape(lay.mask_shape)
                    if self.copy:
                        frame, mask = frame.copy(), mask.copy()
                    yield CapturedFrame(frame_id * lay.timestamp_step, frame, mask, new_sequence)
                finally:
                    self.stream.add_free_chunk(chunk)
        finally:
            self.stop()


def capture_frames(source: Source, geometry: Geometry, **kw: Any) -> Capture:
    """Frames from ``source`` without a pipeline (tests, reprocessing pcap files).

    Returns a :class:`Capture` (iterate it; ``counters()`` afterwards). Keywords are those of
    :class:`Capture` and :class:`CaptureLayout`; ``copy`` defaults to True here.
    """
    kw.setdefault("copy", True)
    return Capture(source, geometry, **kw)


# ---------------------------------------------------------------------------- the block
def capture_headers(layout: CaptureLayout, array: ArrayDescription, *, time_tag: int,
                    sync_time: float, fs_hz: float, freq0_hz: float, chan_bw_hz: float,
                    name: str) -> list[dict[str, Any]]:
    """The two output headers (frames, mask) of a capture sequence (DESIGN.md section 5)."""
    g = layout.geometry
    if array.nstream != g.nstream:
        raise ValueError(f"array has {array.nstream} streams, geometry.nstream is {g.nstream}")
    frame_s = g.nspectra_pkt / fs_hz
    tscale = [sync_time + time_tag / fs_hz, frame_s]
    common = {"time_tag": time_tag, "sync_time": sync_time, "fs_hz": fs_hz,
              "chan0": layout.chan0, "nchan": g.nchan, "freq0_hz": freq0_hz,
              "chan_bw_hz": chan_bw_hz, "nstream": g.nstream, "geometry": g.to_dict(),
              "array": array.to_dict()}
    frames = dict(common, name=name, _tensor={
        "dtype": g.frame_dtype, "shape": [-1, *g.frame_shape],
        "labels": ["time", *g.frame_labels],
        "scales": [tscale, None, [freq0_hz, chan_bw_hz]] + [None] * (len(g.frame_shape) - 2),
        "units": ["s", None, "Hz"] + [None] * (len(g.frame_shape) - 2)})
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

    Outputs: ``orings[0]`` frames ``i8 [-1, S, C, coarse, 2, fine]``, ``orings[1]`` mask
    ``u8 [-1, S]`` (``[-1, S, G]`` with several channel groups); headers from
    :func:`capture_headers`. Each source is captured in turn; a resynchronisation (the
    F-engines jumped) begins a new sequence in both rings. Counters: :meth:`capture_counters`.

    Parameters
    ----------
    sources : a source or a list of sources (e.g. several pcap files).
    geometry, array : correlator geometry and array description (header).
    sync_time, fs_hz, freq0_hz, chan_bw_hz : header fields (DESIGN.md 5).
    chan0, window, align, max_ahead, resync_heaps : see :class:`CaptureLayout`.
    gulp_nframe : frames per output span (default: P, one X-engine integration).
    start_timestamp, idle_timeout : see :class:`Capture`.
    """

    def __init__(self, sources: Source | list[Source], geometry: Geometry,
                 array: ArrayDescription, *, sync_time: float, fs_hz: float, freq0_hz: float,
                 chan_bw_hz: float, chan0: int = 0, window: int = 8, align: int = 0,
                 max_ahead: int = 0, resync_heaps: int = 0, gulp_nframe: int | None = None,
                 start_timestamp: int | None = None, idle_timeout: float | None = None,
                 **kwargs: Any) -> None:
        self.sources = sources if isinstance(sources, list) else [sources]
        super().__init__(self._segments(), gulp_nframe or geometry.npacket, **kwargs)
        self.orings = [self.create_ring(), self.create_ring()]
        self.layout = CaptureLayout(geometry, chan0=chan0, window=window, align=align,
                                    max_ahead=max_ahead, resync_heaps=resync_heaps)
        if array.nstream != geometry.nstream:
            raise ValueError(f"array has {array.nstream} streams, "
                             f"geometry.nstream is {geometry.nstream}")
        self.array = array
        self.sky = {"sync_time": float(sync_time), "fs_hz": float(fs_hz),
                    "freq0_hz": float(freq0_hz), "chan_bw_hz": float(chan_bw_hz)}
        self.start_timestamp, self.idle_timeout = start_timestamp, idle_timeout
        self._capture: Capture | None = None
        self._totals = dict.fromkeys(COUNTERS, 0)
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
                          idle_timeout=self.idle_timeout)
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
