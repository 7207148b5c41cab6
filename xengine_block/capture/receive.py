"""Packet capture and reorder: SPEAD heaps -> ring frames + presence mask
(docs/design.md, "Ring headers" and "SPEAD items").

spead2 receives in its own C++ thread and places every heap's payload straight into its frame
(a spead2 *chunk*) by the placement callback of :mod:`.placement` (which also holds the time
policy: start, head, resynchronisation, slot claims, and the counters); packets come from the
transports of :mod:`.sources`.

Zero copy: a chunk's memory *is* a slot of ``chunk_frames`` frames in the output ring, and its
presence array the mask ring's slot (:class:`CaptureSlots`;
:class:`~xengine_block.runtime.ring.SlotWriter` on our rings, the same on Bifrost's). The
capture reserves slots in ring order and gives them to spead2 as free chunks; spead2 takes free
chunks in that order and allocates chunk ids in increasing order, and delivers them in that
order, so the n-th chunk delivered is the n-th slot reserved: :meth:`Capture.deliveries` checks
that, zero-fills the missing heaps in place and has each slot committed in order, either as the
next frames of a sequence or as space between sequences (spead2's back-fill, start-up lanes that
lost). Nothing is copied, except once at a start where a candidate lane won that was not the
last one opened (its few frames move next to the frames that follow them). The Python work is
per chunk (K frames), none per heap.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any, NamedTuple, Protocol

import numpy as np
import spead2
import spead2.recv

from .._moved import RenamedAttribute
from ..array import ArrayDescription
from ..geometry import Geometry
from ..runtime.memory import populate
from ..runtime.monitor import BlockCounters
from ..runtime.pipeline import SourceBlock
from ..runtime.ring import RingWriter, SlotWriter, WriteSequence
from .meerkat import MeerkatFormat
from .placement import (
    _CALLBACK_STATS,
    _ITEMS,
    _REJECTIONS,
    _STAT_PREFIX,
    COUNTERS,
    CapturePlan,
    _State,
    chunk_frame,
    sequence_frames,
    sequence_label,
    set_label,
)
from .transports import Source

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- capture core
#: A delivered chunk resolved: (chunk, sequence record, first frame, frames of it delivered).
_Resolved = tuple[spead2.recv.Chunk, int, "int | None", int]


class CapturedFrame(NamedTuple):
    """One delivered frame."""

    time_tag: int  # spectrum index of its first spectrum
    frame: np.ndarray  # int8 plan.frame_shape: ours [S, C, coarse, 2, fine] (ci4 no reim
    #                    axis); MeerKAT [ant, C, spectra, pol, 2]
    mask: np.ndarray  # uint8 [S] or [S, G]: 1 where the stream's heap arrived
    new_sequence: bool  # first frame of a sequence (start, or after a resynchronisation)


class CaptureSlots(Protocol):
    """Where a capture's chunks live, slot by slot in order (zero copy into rings)."""

    def reserve(self) -> tuple[np.ndarray, np.ndarray]:
        """The next slot: its frames' bytes (uint8, ``chunk_bytes``: ``chunk_frames`` frames)
        and presence (uint8, ``chunk_heaps``; spead2 zeroes it when the chunk is handed over)."""
        ...

    def commit(self, nframe: int | None = None) -> None:
        """The oldest reserved slot is done (published, or space between sequences);
        ``nframe``: only its first ``nframe`` frames are, the open sequence's last (it ends
        before the next commit: a resynchronisation, or the end of the data)."""
        ...

    def cancel(self) -> None:
        """Give back every slot reserved and not committed (the capture has ended)."""
        ...


class _PoolSlots:
    """Slots of the capture's own memory (no ring: :class:`Capture` iterated directly); a
    committed slot's memory is used again."""

    def __init__(self, plan: CapturePlan) -> None:
        self.plan = plan
        self._free: deque[tuple[np.ndarray, np.ndarray]] = deque()
        self._reserved: deque[tuple[np.ndarray, np.ndarray]] = deque()

    def reserve(self) -> tuple[np.ndarray, np.ndarray]:
        if self._free:
            slot = self._free.popleft()
        else:
            data = np.empty(self.plan.chunk_bytes, np.uint8)
            populate(data)  # faulted in now, not while the first packets arrive
            slot = (data, np.zeros(self.plan.chunk_heaps, np.uint8))
        self._reserved.append(slot)
        return slot

    def commit(self, nframe: int | None = None) -> None:
        self._free.append(self._reserved.popleft())

    def cancel(self) -> None:
        self._free.extend(self._reserved)
        self._reserved.clear()


class RingSlots:
    """Slots in two rings written in lockstep: frames and presence mask (what CaptureBlock
    writes). Where a heap is a stream (ours), spead2's presence array is the mask ring's slot
    itself; where a heap carries several streams (MeerKAT's two pols) the mask slot is written
    from it when the slot is committed (a few bytes a frame)."""

    def __init__(self, plan: CapturePlan, frames: Any, mask: Any) -> None:
        self.grid = plan.grid
        self.frames, self.mask = frames, mask
        self.expand = plan.mask_bytes != plan.frame_heaps
        self.chunk_heaps = plan.chunk_heaps
        self._masks: deque[tuple[np.ndarray, np.ndarray]] = deque()

    @classmethod
    def for_rings(cls, plan: CapturePlan, writers: list[Any], gulp_nframe: int,
                  slot_writer: Any = SlotWriter) -> RingSlots:
        """Slot writers (``slot_writer``: ours, or Bifrost's) on the two rings' writers."""
        n, k = slot_count(plan), plan.chunk_frames
        return cls(plan, slot_writer(writers[0], plan.frame_bytes, n, gulp_nframe, k),
                   slot_writer(writers[1], plan.mask_bytes, n, gulp_nframe, k))

    def reserve(self) -> tuple[np.ndarray, np.ndarray]:
        data, mask = self.frames.reserve(), self.mask.reserve()
        if not self.expand:
            return data, mask
        present = np.zeros(self.chunk_heaps, np.uint8)
        self._masks.append((present, mask))
        return data, present

    def commit(self, nframe: int | None = None) -> None:
        if self.expand:
            present, mask = self._masks.popleft()
            mask[...] = self.grid.mask(present).reshape(-1)
        self.frames.commit(nframe)
        self.mask.commit(nframe)

    def cancel(self) -> None:
        self._masks.clear()
        self.frames.cancel()
        self.mask.cancel()


class Delivery(NamedTuple):
    """The oldest slot, now delivered: a frame (``frame_id`` its frame number) or nothing."""

    frame_id: int | None  # its first frame's number; None: space between sequences
    new_sequence: bool  # its first frame begins a sequence
    data: np.ndarray  # the slot's frames' bytes (uint8, chunk_frames frames)
    present: np.ndarray  # their per-heap presence (uint8, 1 = arrived)
    nframe: int  # frames of it delivered: chunk_frames, fewer in a sequence's last slot
    label: int = 0  # its sequence's label: the Capture's label at the sequence's first heap


class Capture:
    """A spead2 chunk stream delivering frames; iterate it for :class:`CapturedFrame`.

    Parameters
    ----------
    source : :class:`UdpSource`, :class:`PcapSource` or :class:`InprocSource`.
    plan : :class:`CapturePlan` (or pass its wire format, a Geometry or a
        :class:`.meerkat.MeerkatFormat`, plus CapturePlan keywords).
    start_timestamp : first timestamp to deliver (rounded up to the alignment; the sequence is
        confirmed at once); None: the time policy finds the start (module docstring).
    copy : yield copies (safe to keep) instead of views valid until the next iteration.
    idle_timeout : stop after this many seconds without a frame; None waits for the source's
        end (pcap end of file, in-process queue stopped) or :meth:`stop`.
    stop_on_end_heap : end on the first SPEAD end-of-stream heap. Only for a single trusted
        sender: with many F-engines one sender's stop (or a forged one) would end the capture,
        so by default stop heaps are only counted (``stop_heaps``, :meth:`stop_heaps_by_stream`).
    spare_chunks : slots beyond spead2's window and the start-up area, for the delivery queue.
    slots : where the chunks live (:class:`RingSlots`: the output rings, zero copy); None: the
        capture's own memory (iterate the capture).
    label : the label sequences starting from now on take (:meth:`set_label`; each
        :class:`Delivery` carries its sequence's).
    """

    #: The old name of :attr:`plan` (0.1), kept for one release.
    layout = RenamedAttribute("plan")

    def __init__(self, source: Source, plan: CapturePlan | Geometry | MeerkatFormat, *,
                 start_timestamp: int | None = None, copy: bool = False,
                 idle_timeout: float | None = None, stop_on_end_heap: bool = False,
                 spare_chunks: int = 4, slots: CaptureSlots | None = None, label: int = 0,
                 **plan_kw: Any) -> None:
        if not isinstance(plan, CapturePlan):
            plan = CapturePlan(plan, **plan_kw)
        elif plan_kw:
            raise TypeError(f"CapturePlan keywords {sorted(plan_kw)} given with a CapturePlan")
        self.plan, self.source = plan, source
        self.copy, self.idle_timeout = copy, idle_timeout
        self.stop_on_end_heap = stop_on_end_heap
        self.slots: CaptureSlots = slots if slots is not None else _PoolSlots(plan)
        self._off = plan.offsets
        self._state = plan.new_state(start_timestamp)
        set_label(self._state, label)
        self._bitmap = np.zeros(plan.nchunks * plan.frame_heaps, np.uint8)
        self._cand_bitmap = np.zeros_like(self._bitmap)
        self._state[_State.BITMAP] = self._bitmap.ctypes.data
        self._state[_State.CAND_BITMAP] = self._cand_bitmap.ctypes.data
        config = plan.stream_config(memcpy=spead2.MEMCPY_NONTEMPORAL,
                                    stop_on_stop_item=stop_on_end_heap)
        self._state[_State.STATS_BASE] = config.next_stat_index()
        for name in _CALLBACK_STATS:
            config.add_stat(_STAT_PREFIX + name)
        chunk_config = spead2.recv.ChunkStreamConfig(
            items=list(_ITEMS), max_chunks=plan.spead_chunks,
            place=plan.chunk_place(self._state))
        self.nfree = plan.spead_chunks + spare_chunks  # free chunks spead2 is kept given
        nslot = slot_count(plan, spare_chunks)
        self.stream = spead2.recv.ChunkRingStream(
            spead2.ThreadPool(1), config, chunk_config, spead2.recv.ChunkRingbuffer(nslot),
            spead2.recv.ChunkRingbuffer(nslot))
        self._pending: deque[spead2.recv.Chunk] = deque()  # handed to spead2, in slot order
        self._fast: tuple[int, int, int, int] | None = None  # (record, frame id, offset, NEPOCH)
        self._area_end = 1 << 62  # the start-up area's end, a chunk id (set at the first one)
        self._py = dict.fromkeys(("heaps", "missing", "start_rejected", "frames", "sequences",
                                  "restarts"), 0)
        self._stopped = False
        self._started = False
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
        return int(self._state[_State.START]) * self.plan.timestamp_step

    def set_label(self, label: int) -> None:
        """Sequences whose first heap arrives from now on take ``label`` (a number the caller
        gives meaning to: :class:`CaptureBlock` numbers its header fields); those already
        started keep theirs, however far behind their delivery is. Safe from any thread."""
        set_label(self._state, label)

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

    # ---- delivery
    def _add_slot(self) -> None:
        """Reserve the next slot and hand it to spead2 as a free chunk."""
        data, present = self.slots.reserve()
        chunk = spead2.recv.Chunk(present=present, data=data)
        self._pending.append(chunk)
        self.stream.add_free_chunk(chunk)

    def _next_chunk(self, poll: float = 0.1) -> spead2.recv.Chunk | None:
        ring = self.stream.data_ringbuffer
        if self.idle_timeout is None:  # wait in spead2 (no wakeup but the chunk's; stop() and
            try:                       # the source's end stop the ring)
                return ring.get()
            except spead2.Stopped:
                return None
        last = time.monotonic()
        while True:
            try:
                return ring.get_nowait()
            except spead2.Stopped:
                return None
            except spead2.Empty:
                pass
            if time.monotonic() - last > self.idle_timeout:
                self.stop()  # flushes what is under construction, then the ring stops
                continue
            select.select([ring.data_fd], [], [], poll)

    def _resolve(self, chunk: spead2.recv.Chunk) -> _Resolved:
        """(chunk, sequence record, first frame, frames of the sequence in it); record -1 and
        frame None: nothing of a sequence (spead2's back-fill, a lane that lost, a start a
        quorum overruled: what it holds was placed there, so it counts as start_rejected)."""
        cid, state = chunk.chunk_id, self._state
        fid = cid * self.plan.chunk_frames  # its first frame's id
        fast = self._fast  # the current sequence, until the callback records another
        if fast is not None and fid >= fast[1] and state[_State.NEPOCH] == fast[3]:
            return chunk, fast[0], fid - fast[2], sequence_frames(state, fast[0], fid)
        where = chunk_frame(state, cid)
        if where is None:
            self._py["start_rejected"] += int(np.count_nonzero(chunk.present))
            return chunk, -1, None, 0
        number, frame, nframe = where
        if number == int(state[_State.NEPOCH]) - 1 and cid >= self._area_end:
            self._fast = (number, fid, fid - frame, int(state[_State.NEPOCH]))
        return chunk, number, frame, nframe

    def _area(self, held: list[spead2.recv.Chunk],
              more: bool) -> list[_Resolved]:
        """The start-up area's chunks (ids 0, 1, ...) resolved, in order. When the winning lane
        is followed by other lanes and then by the frames after it (``more``), its frames move
        into the area's last slots, next to those frames (a ring sequence is one run of slots):
        the only copy, once, at a start where a lane other than the last opened won."""
        out = [self._resolve(c) for c in held]
        frames = [i for i, r in enumerate(out) if r[2] is not None]
        last = len(held) - len(frames)
        if more and frames and frames[0] != last:
            if [c.chunk_id for c in held] != list(range(len(held))):
                raise RuntimeError("spead2 skipped chunk ids of the start-up area")
            for k, i in enumerate(frames):  # the targets lie after all the sources
                dst = held[last + k]
                np.asarray(dst.data)[...] = np.asarray(held[i].data)
                np.asarray(dst.present)[...] = np.asarray(held[i].present)
            out = [(c, -1, None, 0) for c in held[:last]] + [
                (held[last + k], *out[i][1:]) for k, i in enumerate(frames)]
        return out

    def deliveries(self) -> Iterator[Delivery]:
        """Every slot in order once spead2 has delivered it: a frame (missing heaps zeroed in
        place) or space between sequences. The slot is committed when the caller asks for the
        next one (so it must be done with it, and have begun or ended sequences, by then)."""
        if self._started:
            raise RuntimeError("a Capture is delivered once")
        self._started = True
        plan = self.plan
        k = plan.chunk_frames
        current = -1  # record number of the sequence last delivered
        end = -1  # the frame after the last one delivered
        area_end = -1  # chunk id after the start-up area (known once a first chunk arrives)
        held: list[spead2.recv.Chunk] = []
        try:
            for _ in range(self.nfree):
                self._add_slot()
            while True:
                chunk = self._next_chunk()
                if chunk is not None:
                    if chunk is not self._pending[len(held)]:
                        raise RuntimeError("spead2 delivered a chunk other than the oldest it "
                                           "was given: slots would be out of ring order")
                    self._add_slot()  # spead2 keeps as many free chunks as before
                    if area_end < 0:  # final once anything is delivered (module docstring)
                        area_end = self._area_end = (int(self._state[_State.LANE_USED])
                                                     * int(self._state[_State.AHEAD]) // k)
                    if chunk.chunk_id < area_end:
                        held.append(chunk)  # until the start-up area is complete
                        continue
                batch = self._area(held, chunk is not None) if held else []
                held = []
                if chunk is not None:
                    batch.append(self._resolve(chunk))
                for c, number, frame_id, nframe in batch:
                    present = np.asarray(c.present)
                    data = np.asarray(c.data)
                    new_sequence = False
                    if nframe <= 0:
                        frame_id, nframe = None, k  # nothing of a sequence in it: space
                    if frame_id is not None:
                        new_sequence = number != current
                        if new_sequence and current >= 0:
                            restart = frame_id < end
                            self._py["restarts"] += restart
                            log.warning("capture resynchronised %s: frame %d to frame %d%s",
                                        "back" if restart else "forward", end - 1, frame_id,
                                        " (the F-engines restarted)" if restart else "")
                        current, end = number, frame_id + nframe
                        nheap = int(np.count_nonzero(present))
                        if nheap < plan.chunk_heaps:  # zero missing heaps: no stale data
                            data.reshape(plan.chunk_heaps, plan.heap_bytes)[present == 0] = 0
                        self._py["heaps"] += nheap
                        self._py["missing"] += nframe * plan.frame_heaps - nheap
                        self._py["frames"] += nframe
                        self._py["sequences"] += new_sequence
                    label = sequence_label(self._state, number) if frame_id is not None else -1
                    if label < 0:  # no heap of it arrived: the label in force now
                        label = int(self._state[_State.LABEL])
                    yield Delivery(frame_id, new_sequence, data, present, nframe, label)
                    self._pending.popleft()
                    self.slots.commit(nframe if nframe < k else None)
                if chunk is None:
                    return
        finally:
            self.stop()
            self.stream.stop()  # the consumer is gone: nothing left to deliver to
            self._pending.clear()
            self.slots.cancel()

    def __iter__(self) -> Iterator[CapturedFrame]:
        plan = self.plan
        for d in self.deliveries():
            if d.frame_id is None:
                continue
            frames = d.data.view(np.int8).reshape(-1, *plan.frame_shape)
            masks = plan.grid.mask(d.present)
            for i in range(d.nframe):
                frame, mask = frames[i], masks[i]
                if self.copy:
                    frame, mask = frame.copy(), mask.copy()
                yield CapturedFrame((d.frame_id + i) * plan.frame_spectra, frame, mask,
                                    d.new_sequence and i == 0)


def slot_pool(plan: CapturePlan) -> CaptureSlots:
    """Slots of a capture's own memory (for outputs that copy frames out of them)."""
    return _PoolSlots(plan)


def slot_count(plan: CapturePlan, spare: int = 4) -> int:
    """Slots a capture may hold reserved at once: spead2's window and ``spare`` free chunks,
    the start-up area (held until the start is decided) and the slot being delivered."""
    return (plan.spead_chunks + spare
            + plan.lanes * plan.max_ahead_frames // plan.chunk_frames + 1)


def capture_frames(source: Source, wire: Geometry | MeerkatFormat, **kw: Any) -> Capture:
    """Frames from ``source`` without a pipeline (tests, reprocessing pcap files).

    Returns a :class:`Capture` (iterate it; ``counters()`` afterwards). Keywords are those of
    :class:`Capture` and :class:`CapturePlan`; ``copy`` defaults to True here.
    """
    kw.setdefault("copy", True)
    return Capture(source, wire, **kw)


# ---------------------------------------------------------------------------- the block
def capture_headers(plan: CapturePlan, array: ArrayDescription, *, time_tag: int,
                    sync_time: float, fs_hz: float, freq0_hz: float, chan_bw_hz: float,
                    name: str) -> list[dict[str, Any]]:
    """The two output headers (frames, mask) of a capture sequence (docs/design.md, "Ring headers";
    a MeerKAT capture's frames ring carries the ``sample_layout`` of the header contract)."""
    grid = plan.grid
    if array.nstream != grid.nstream:
        raise ValueError(f"array has {array.nstream} streams, the capture {grid.nstream}")
    tscale = [sync_time + time_tag / fs_hz, plan.frame_spectra / fs_hz]
    common = {"time_tag": time_tag, "sync_time": sync_time, "fs_hz": fs_hz,
              "chan0": plan.chan0, "nchan": grid.nchan_heap * grid.ngroup,
              "freq0_hz": freq0_hz, "chan_bw_hz": chan_bw_hz, "nstream": grid.nstream,
              "array": array.to_dict()}
    g = plan.geometry
    if g is None:  # another wire format (MeerKAT): its own tensor and sample layout
        common.update(plan.wire.header_fields())
        tensor = plan.wire.tensor(tscale, freq0_hz, chan_bw_hz)
    else:
        common["geometry"] = g.to_dict()
        tensor = {"dtype": g.frame_dtype, "shape": [-1, *g.frame_shape],
                  "labels": ["time", *g.frame_labels],
                  "scales": [tscale, None, [freq0_hz, chan_bw_hz]]
                  + [None] * (len(g.frame_shape) - 2),
                  "units": ["s", None, "Hz"] + [None] * (len(g.frame_shape) - 2)}
    frames = dict(common, name=name, _tensor=tensor)
    mask_axes = ["time", "stream"] + (["chan_group"] if len(plan.mask_shape) == 2 else [])
    mask = dict(common, name=f"{name}.mask", _tensor={
        "dtype": "u8", "shape": [-1, *plan.mask_shape], "labels": mask_axes,
        "scales": [tscale] + [None] * (len(mask_axes) - 1),
        "units": ["s"] + [None] * (len(mask_axes) - 1)})
    return [frames, mask]


class CaptureOutput(Protocol):
    """Where :class:`CaptureBlock` writes: the slots of its two rings and their sequences (our
    rings: :class:`_RingOutput`; real Bifrost's: ``bifrost.blocks``)."""

    slots: CaptureSlots

    def begin(self, headers: list[dict[str, Any]]) -> None:
        """Begin a sequence in both rings: the next slot committed is its first frame."""
        ...

    def end(self) -> None:
        """End the open sequences (if any): slots committed next are space between them."""
        ...


class _RingOutput:
    """:class:`CaptureOutput` over our rings (:class:`~xengine_block.runtime.ring.SlotWriter`)."""

    def __init__(self, block: CaptureBlock, orings: list[RingWriter]) -> None:
        self.block, self.orings = block, orings
        self.slots = RingSlots.for_rings(block.plan, orings, block.gulp_nframe)
        self._stack: ExitStack | None = None

    def begin(self, headers: list[dict[str, Any]]) -> None:
        self.end()
        self._stack = ExitStack()
        self.block._name_sequences(headers)
        seqs: list[WriteSequence] = self.block.begin_sequences(self._stack, self.orings,
                                                               headers, [])
        del seqs

    def end(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()


class CaptureBlock(SourceBlock):
    """Source block: SPEAD F-engine packets -> frames ring + presence-mask ring, zero copy
    (spead2 places heaps straight into the rings' slots; module docstring).

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
    sync_time, fs_hz, freq0_hz, chan_bw_hz : header fields (docs/design.md, "Ring headers").
    chan0, window, align, max_ahead, quorum, resync_frames, frames_per_chunk : see
        :class:`CapturePlan`.
    gulp_nframe : frames per reader gulp the rings are laid out for (default: P, one X-engine
        integration; MeerKAT: one heap time); frames are committed a chunk at a time.
    start_timestamp, idle_timeout, stop_on_end_heap : see :class:`Capture` (end-of-stream
        heaps are counted, not followed, unless ``stop_on_end_heap``: single senders only).
    """

    #: The old name of :attr:`plan` (0.1), kept for one release.
    layout = RenamedAttribute("plan")

    def __init__(self, sources: Source | list[Source], wire: Geometry | MeerkatFormat,
                 array: ArrayDescription, *, sync_time: float, fs_hz: float, freq0_hz: float,
                 chan_bw_hz: float, chan0: int = 0, window: int = 8, align: int = 0,
                 max_ahead: int = 0, quorum: int = 0, resync_frames: int = 0,
                 frames_per_chunk: int = 0, gulp_nframe: int | None = None,
                 start_timestamp: int | None = None,
                 idle_timeout: float | None = None, stop_on_end_heap: bool = False,
                 **kwargs: Any) -> None:
        self.sources = sources if isinstance(sources, list) else [sources]
        default_gulp = wire.npacket if isinstance(wire, Geometry) else 1
        super().__init__(self.sources, gulp_nframe or default_gulp, **kwargs)
        self.orings = [self.create_ring(), self.create_ring()]
        self.plan = CapturePlan(wire, chan0=chan0, window=window, align=align,
                                max_ahead=max_ahead, quorum=quorum,
                                resync_frames=resync_frames,
                                frames_per_chunk=frames_per_chunk)
        if array.nstream != self.plan.grid.nstream:
            raise ValueError(f"array has {array.nstream} streams, "
                             f"the capture's wire format {self.plan.grid.nstream}")
        self.array = array
        #: Header fields given so far, numbered by their index (the capture's labels): a
        #: sequence's dumps carry those in force at its first heap.
        self._skies = [{"sync_time": float(sync_time), "fs_hz": float(fs_hz),
                        "freq0_hz": float(freq0_hz), "chan_bw_hz": float(chan_bw_hz)}]
        self._sky_lock = threading.Lock()
        self.start_timestamp, self.idle_timeout = start_timestamp, idle_timeout
        self.stop_on_end_heap = stop_on_end_heap
        self._capture: Capture | None = None
        self._totals = dict.fromkeys(COUNTERS, 0)
        self._stops = np.zeros(self.plan.grid.nsource, np.int64)
        #: Set once the first source's receiver is attached (its placement callback compiled
        #: and its socket read): senders in the same process wait on it so nothing is lost to
        #: start-up.
        self.receiving = threading.Event()

    @property
    def sky(self) -> dict[str, float]:
        """The header fields sequences starting from now on take."""
        return self._skies[-1]

    def set_sky(self, **fields: float) -> None:
        """New header fields (``sync_time``...) for the sequences that start from now on, on
        the wire: those whose first heap arrives after this call (e.g. the F-engines re-armed
        with a new sync time: their restart begins a sequence). A sequence already started
        keeps its fields for all its dumps, however much of it is still in the capture or the
        ring. Safe while running (the fields are replaced whole, never seen half-changed)."""
        unknown = sorted(set(fields) - set(self.sky))
        if unknown:
            raise ValueError(f"no header field {unknown[0]!r} to set (fields: {sorted(self.sky)})")
        with self._sky_lock:
            self._skies.append({**self.sky, **{k: float(v) for k, v in fields.items()}})
            cap = self._capture
            if cap is not None:
                cap.set_label(len(self._skies) - 1)

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

    def main(self, orings: list[RingWriter]) -> None:
        self.capture_into(_RingOutput(self, orings), self.counters)

    def capture_into(self, out: CaptureOutput, counters: BlockCounters) -> None:
        """Capture every source in turn into ``out`` (both runtimes' main)."""
        frame_nbyte = self.plan.frame_bytes + self.plan.mask_bytes
        for source in self.sources:
            if self.shutdown_event.is_set():
                return
            with self._sky_lock:  # no set_sky between the label given and the capture kept
                cap = Capture(source, self.plan, start_timestamp=self.start_timestamp,
                              idle_timeout=self.idle_timeout,
                              stop_on_end_heap=self.stop_on_end_heap, slots=out.slots,
                              label=len(self._skies) - 1)
                self._capture = cap
            self.receiving.set()
            if self.shutdown_event.is_set():  # shutdown() came while the stream was built
                cap.stop()
            try:
                for d in cap.deliveries():
                    if d.frame_id is None:
                        out.end()  # space between sequences
                        continue
                    if d.new_sequence:
                        t = d.frame_id * self.plan.frame_spectra
                        out.begin(capture_headers(self.plan, self.array, time_tag=t,
                                                  name=f"capture-{t}", **self._skies[d.label]))
                    counters.add(frames=d.nframe, bytes=d.nframe * frame_nbyte)
                    if self.shutdown_event.is_set():
                        cap.stop()
            finally:
                out.end()
                cap.stop()
                for k, v in cap.counters().items():
                    self._totals[k] += v
                self._stops += cap.stop_heaps_by_stream()
                self._capture = None
