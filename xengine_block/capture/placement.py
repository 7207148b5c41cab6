"""The capture's placement callback and time policy: which heap goes where in which frame.

spead2 receives in its own C++ thread and places every heap's payload straight into its frame
through a numba ``cfunc`` placement callback built from the :class:`CapturePlan`: heap index
in the frame = ``stream * nchan_group + group``, offset = index * payload_bytes, so a frame is
exactly a ring frame ``[stream][chan][coarse][reim][fine]``. A spead2 *chunk* is
``chunk_frames`` consecutive frames (K, 4 for the published geometry: the consumer's work is per
chunk, so K frames share it), chunk id = frame id // K, heap index in the chunk = (frame id % K)
* heaps per frame + the frame's index. Everything below is per frame, as if K were 1: K only
decides how frames are grouped for delivery (sequence starts and the start-up lanes fall on
chunk boundaries, a sequence's frame ids skipping to the next chunk where its start is not a
multiple of K, so no chunk holds frames of two sequences).
:mod:`.receive` delivers the chunks; this module decides, per heap, in spead2's thread.
The wire format enters only through a :class:`HeapGrid` (sizes, steps, which ids are valid):
MeerKAT's F-engine heaps (:mod:`.meerkat`, one heap per antenna per heap time, chunk
``[ant][chan][spectra][pol][re, im]``) are the same rule with other numbers, so the checks and
the time policy below are one compiled callback for both.

Many F-engines feed one X-engine, so no single sender may steer it (docs/design.md, "SPEAD items").
The callback judges every heap once (``_Stat``, spead2 custom stream stats), in this order:
end-of-stream heaps (counted per stream, never followed unless ``stop_on_end_heap``), missing items
(descriptors, foreign SPEAD), wrong size, item pointers other than one payload at address 0,
timestamp not a multiple of the frame's step, unknown stream (or feng_id), wrong channel; then the
time policy:

- **Start.** The first well-formed heap opens a *provisional* sequence at its frame (rounded up
  to ``align``); it is confirmed once ``quorum`` distinct heaps of one frame are placed in it.
  Heaps far from it (more than the chunk window away, either side) vote for a *candidate* time
  base instead; a candidate reaching ``quorum`` distinct heaps in one frame before the
  provisional sequence is confirmed replaces it (its heaps are dropped as ``start_rejected``).
  So one outlier, or a few, cannot hold the start. While the start is undecided, each
  candidate also gets a *lane* of the start-up area (chunk ids ``[0, lanes * max_ahead)``, the
  provisional start's is lane 0), where its first ``max_ahead`` frames are placed: whichever
  wins keeps what arrived meanwhile (one forged first heap costs no real heap), the losers'
  heaps are ``start_rejected``. The start-up area fits in spead2's window, so the start is
  decided before spead2 delivers any of it; the winner's later frames follow the last lane.
- **Head.** The head is the newest frame with ``quorum`` distinct heaps, not the newest
  heap: heaps up to ``max_ahead`` frames beyond it are placed; heaps further ahead are
  ``out_of_window`` (dropped, never followed) and vote; heaps ``window`` frames or more behind
  it are ``late``. spead2 keeps chunks enough for any ``window + max_ahead`` frames in a row,
  so a heap aimed ahead can never flush a frame still inside the reorder window.
- **Resynchronisation.** The capture jumps (a new aligned sequence after the candidate's newest
  frame) only when the candidate holds ``resync_frames`` frames each with ``quorum`` distinct
  heaps *and* the current sequence has accepted fewer than ``quorum`` heaps since the candidate
  appeared (the F-engines really moved on). Votes are distinct (frame, heap) pairs; a heap that
  matches neither sequence nor candidate takes a vote away, and the candidate is replaced when
  its votes reach zero (majority voting), so sparse junk never accumulates.
- **Restarts.** Heaps behind what the sequence places vote the same way (F-engines that
  re-armed fall back in time): those ``window`` frames or more behind the head, and those
  before the start (only more than ``align + window + max_ahead`` frames before it while the
  sequence holds no quorum frame, so the gap before a new aligned start never votes it again),
  never those before an explicit start (``FLOOR``). The jump back is a new sequence as above;
  the consumer counts it in ``restarts``.

Slots: a heap whose first packet carries all of it (the format: one heap = one packet) claims
its slot for good; a partial heap claims it only tentatively, so a later complete heap still
wins (``displaced``); any further copy is a ``duplicate``. Frame ids are frame + offset (and
chunk ids frame ids // K), the offset growing when a new sequence must start behind chunks
already used (a start-up outlier in the future), so spead2's window always moves forward;
sequences are recorded in a small history the consumer reads to turn chunk ids back into
frames (the history and the start-up area below count frame ids; the callback's "chunk" is a
frame id).

Missing heaps are zero-filled when the frame is delivered (chunks are recycled, so this is what
keeps stale or partial data out); the mask is the per-heap presence, ``[S]`` when a stream has one
channel group (published geometry) and ``[S, G]`` otherwise, so no received heap is ever discarded
and valid counts stay exact per group.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numba
import numpy as np
import scipy
import spead2
import spead2.recv
from numba import types
from spead2.numba import intp_to_voidptr
from spead2.recv.numba import chunk_place_data

from .._moved import renamed_names
from ..geometry import Geometry
from . import numba_cache
from .spead import FREQUENCY, PAYLOAD, STREAM_ID, TIMESTAMP

#: Every capture counter, declared once: name -> description (docs/capture.md has the policy).
COUNTERS: dict[str, str] = {
    "heaps": "heaps placed in delivered frames",
    "missing": "heaps absent from delivered frames (zero-filled, mask cleared)",
    "late": "heaps for a frame window or more behind the head (already delivered or due; "
            "dropped, they vote for a restart, an earlier time base, as out_of_window heaps "
            "do for a jump forward)",
    "duplicate": "further copies of a heap whose slot a complete heap holds (dropped)",
    "displaced": "partial heaps whose slot a later complete heap took over",
    "bad_size": "heaps whose heap-size item is not payload_bytes",
    "bad_pointer": "heaps with an item pointer other than one payload at address 0 "
                   "(extra payload pointers, addresses past the payload)",
    "bad_zero_length": "heaps with no payload at all (spead2 never offers them for placement)",
    "bad_unsized": "packets without a heap-size item (spead2 drops them; derived: packets - "
                   "packets of sized heaps, exact unless multi-packet heaps lose packets)",
    "bad_timestamp": "heaps whose timestamp is not a multiple of the frame's timestamp step "
                     "(nspectra_pkt; MeerKAT: spectra_per_heap * samples_between_spectra)",
    "bad_stream": "heaps whose stream id (MeerKAT: feng_id) is outside the array",
    "bad_channel": "heaps whose first channel is not chan0 + k * nchan_pkt, k < nchan_group "
                   "(MeerKAT: not chan0, the substream's first channel)",
    "out_of_window": "heaps more than max_ahead frames ahead of the head (dropped, they vote "
                     "for a resynchronisation)",
    "before_start": "heaps before the first (aligned) frame of a sequence (dropped; they vote "
                    "for a restart, an earlier time base, as out_of_window heaps do for a jump "
                    "forward; not those in the gap up to a new sequence's aligned start, nor "
                    "any before an explicit start)",
    "start_rejected": "heaps placed in a provisional start that a quorum elsewhere overruled",
    "stop_heaps": "end-of-stream heaps received (any sender; per stream id: "
                  "stop_heaps_by_stream)",
    "metadata": "heaps without timestamp, stream id (MeerKAT: feng_id) or frequency "
                "(descriptors, foreign SPEAD)",
    "incomplete": "heaps with packets missing when their frame was delivered (spead2)",
    "packets": "SPEAD packets decoded (spead2); datagrams that are not SPEAD, truncated, or "
               "whose payload runs past their heap size are dropped by spead2 before any count",
    "socket_drops": "UDP datagrams the kernel dropped because the capture's socket receive "
                    "buffer was full (the receiver fell behind: more buffer or cores, not the "
                    "network); 0 for pcap and in-process sources",
    "frames": "frames delivered",
    "sequences": "sequences begun (the first, then one per resynchronisation)",
    "restarts": "resynchronisations back to an earlier time (the F-engines restarted and "
                "their timestamps fell back; each also begins a sequence)",
}


class _Stat(IntEnum):
    """Counters the placement callback keeps (spead2 custom stats, in registration order).

    All but PLACED and PARTIAL are :data:`COUNTERS` of the same name; those two only serve
    derived counters. Every heap offered for placement is counted once in STOP_HEAPS ..
    PLACED; PARTIAL counts, besides, the packets of heaps whose first packet is not the whole
    heap (heap size / that packet's payload length, rounded up).
    """

    STOP_HEAPS = 0
    METADATA = 1
    BAD_SIZE = 2
    BAD_POINTER = 3
    BAD_TIMESTAMP = 4
    BAD_STREAM = 5
    BAD_CHANNEL = 6
    BEFORE_START = 7
    OUT_OF_WINDOW = 8
    LATE = 9
    DUPLICATE = 10
    DISPLACED = 11
    PLACED = 12
    PARTIAL = 13


_CALLBACK_STATS = tuple(s.name.lower() for s in _Stat)
_REJECTIONS = tuple(s.name.lower() for s in _Stat if s <= _Stat.DUPLICATE)
_STAT_PREFIX = "xengine."


class _State(IntEnum):
    """Scalar slots of the callback's int64 state array (arrays follow, see _Offsets)."""

    STATS_BASE = 0  # index of the first custom stat in spead2's batch_stats
    STATUS = 1  # current sequence: -1 none yet, else an _Epoch status
    START = 2  # first frame of the current sequence
    HEAD = 3  # newest frame holding a quorum of distinct heaps (start - 1 before)
    OFFSET = 4  # chunk id = frame + offset in the current sequence
    MAXCHUNK = 5  # largest chunk id placed so far (-1: none)
    ACCEPTED = 6  # distinct heaps placed in the current sequence
    BITMAP = 7  # address of the uint8 [nchunks, nheap] slot claims (0 free, 1 partial, 2 whole)
    CAND_BITMAP = 8  # address of the uint8 [nchunks, nheap] candidate votes
    CAND_BASE = 9  # first frame of the candidate
    CAND_VOTES = 10  # its votes (distinct (frame, heap) pairs minus heaps that disagreed; 0:
    #                  no candidate)
    CAND_NEWEST = 11  # its newest frame
    CAND_QFRAMES = 12  # its frames holding a quorum of votes
    CAND_ACCEPTED0 = 13  # ACCEPTED when it appeared
    NEPOCH = 14  # sequences recorded so far
    # The plan's parameters (one compiled callback serves every plan and format: HeapGrid).
    NSTREAM = 15  # source ids (our stream ids; MeerKAT feng_ids)
    NGROUP = 16
    NCHAN_PKT = 17  # channels per heap
    CHAN0 = 18
    HEAP_BYTES = 19
    STEP = 20
    WINDOW = 21
    ALIGN = 22
    AHEAD = 23
    QUORUM = 24
    RESYNC = 25
    LANES = 26  # lanes of the start-up area (parameter: nchunks // AHEAD, at most _MAX_LANES)
    # The start-up area (chunk ids [0, LANES * AHEAD)): while the start is provisional the
    # provisional sequence (lane 0) and each candidate (lanes 1, 2, ...) place their first
    # AHEAD frames in a lane of their own, so whichever wins keeps what arrived meanwhile.
    LANE_USED = 27  # lanes opened so far
    CAND_LANE = 28  # the candidate's lane (-1: none, it only votes)
    WINNER = 29  # lane holding the first sequence's first AHEAD frames (-1: undecided)
    PRE_FRAMES = 30  # frames start .. start + PRE_FRAMES - 1 are at chunk PRE_CHUNK0 + ...
    PRE_CHUNK0 = 31  # ... (the current sequence's lane; 0 frames for later sequences)
    KFRAMES = 32  # frames per spead2 chunk (parameter: CapturePlan.chunk_frames)
    FLOOR = 33  # heaps of earlier frames never vote (an explicit start; else 0: none)
    # Labels: which header fields (sync time...) a sequence's dumps carry is fixed when the
    # sequence starts on the wire, at its first heap, whatever happens to them after. The
    # consumer numbers the fields it has been given (0, 1, ...: CaptureBlock.set_sky) and
    # writes the newest number here; the callback copies it into a sequence's record at its
    # first heap (a start by a candidate: the candidate's first heap).
    LABEL = 34  # the label sequences starting now take (written by the consumer)
    CAND_LABEL = 35  # the label the candidate took at its first heap
    LANE_BASE = 36  # first frame of each lane (_MAX_LANES slots), then each lane's label


class _Epoch(IntEnum):
    """A sequence record: _REC int64 (start chunk, offset, end chunk or -1, status, label or
    -1 until its first heap)."""

    PROVISIONAL = 0
    CONFIRMED = 1
    ABANDONED = 2


#: Sequence records remembered for the consumer (it may lag several sequences behind).
_NHISTORY = 16
#: Lanes of the start-up area at most (the provisional start and candidates that replaced
#: each other: more than three forged starts in a row only vote, as all did before).
_MAX_LANES = 4
#: int64 scalars before the state's arrays (the _State slots, then the lanes' first frames
#: and labels).
_NSCALAR = int(_State.LANE_BASE) + 2 * _MAX_LANES
#: int64 per sequence record (_Epoch).
_REC = 5
#: A spead2 chunk of several frames stays within this (CapturePlan.chunk_frames).
_CHUNK_BYTES = 16 << 20


@dataclass(frozen=True)
class _Offsets:
    """Where the arrays of the state live: the sequence history, then per chunk slot its
    chunk id and distinct-heap count, the candidate's per-frame votes, stop heaps per source."""

    nchunks: int
    nsource: int

    @property
    def history(self) -> int:
        return _NSCALAR

    @property
    def tags(self) -> int:
        return self.history + _REC * _NHISTORY

    @property
    def counts(self) -> int:
        return self.tags + self.nchunks

    @property
    def cand_counts(self) -> int:
        return self.counts + self.nchunks

    @property
    def stops(self) -> int:
        return self.cand_counts + self.nchunks

    @property
    def size(self) -> int:
        return self.stops + self.nsource


@dataclass(frozen=True)
class HeapGrid:
    """The format-specific part of placement: how a wire format's heaps tile a frame.

    A heap is well formed when its heap-size item is ``heap_bytes``, its timestamp a multiple
    of ``timestamp_step``, its source id (the 0x4101 item) below ``nsource`` and its first
    channel (0x4103) ``chan0 + k * nchan_heap`` with ``k < ngroup``; it goes to frame
    ``timestamp // timestamp_step``, heap index ``source * ngroup + k``, byte offset
    ``index * heap_bytes``. Both formats are this rule with other numbers (ours: a source is a
    stream, heaps of ``nchan_pkt`` channels, a frame one packet time; MeerKAT's F-engines,
    :mod:`.meerkat`: a source is an antenna carrying both pols, one heap of the substream's
    channels, a frame one heap time), so one compiled callback and one time policy serve both.
    """

    nsource: int  # source ids 0 .. nsource - 1 (our stream ids; MeerKAT feng_ids)
    ngroup: int  # heaps per source per frame (channel groups)
    nchan_heap: int  # channels per heap
    heap_bytes: int
    timestamp_step: int  # timestamp units from one frame to the next
    frame_spectra: int  # spectra per frame (time_tag = frame * frame_spectra)
    pols_per_source: int  # streams a source's heap carries: 1 (ours) or 2 (MeerKAT)
    frame_shape: tuple[int, ...]  # the frame's int8 array shape
    default_align: int  # frames a sequence start is aligned to by default

    @classmethod
    def packet(cls, g: Geometry) -> HeapGrid:
        """Our format (docs/design.md, "SPEAD items"): one heap per stream and channel group
        per packet time."""
        return cls(g.nstream, g.nchan_group, g.nchan_pkt, g.payload_bytes, g.nspectra_pkt,
                   g.nspectra_pkt, 1, g.frame_shape, g.npacket)

    @property
    def nheap(self) -> int:
        """Heaps per frame."""
        return self.nsource * self.ngroup

    @property
    def nstream(self) -> int:
        return self.nsource * self.pols_per_source

    @property
    def mask_shape(self) -> tuple[int, ...]:
        """Per-frame mask: ``[S]`` for one channel group per stream, else ``[S, G]``."""
        return (self.nstream,) if self.ngroup == 1 else (self.nstream, self.ngroup)

    def mask(self, present: np.ndarray) -> np.ndarray:
        """spead2's per-heap presence of whole frames -> their per-stream masks ``[frames,
        *mask_shape]`` (a view where a heap is a stream)."""
        m = present.reshape(-1, self.nsource, self.ngroup)
        if self.pols_per_source > 1:
            m = np.repeat(m, self.pols_per_source, axis=1)
        return m.reshape(-1, *self.mask_shape)


@dataclass(frozen=True)
class CapturePlan:
    """How the capture places heaps: the sizes of its frames and spead2 chunks and the rules of
    its time policy, all derived from the wire format (katgpucbf's ``Layout`` plays this part;
    "layout" in this package means only :class:`~xengine_block.sample_layout.SampleLayout`,
    where samples lie).

    Parameters
    ----------
    wire : the wire format: a :class:`~xengine_block.geometry.Geometry` (ours: streams,
        channels, payload) or a :class:`.meerkat.MeerkatFormat` (MeerKAT F-engine heaps).
    chan0 : first (absolute) channel of this X-engine; packets carry absolute channels.
    window : reorder depth: heaps this many frames behind the head are late.
    align : the first frame of a sequence is a multiple of ``align`` frames (0: P for ours,
        1 for MeerKAT's).
    max_ahead : heaps more than this many frames ahead of the head are out of window
        (0: ``window // 2``, at least 1). spead2 keeps every ``window + max_ahead`` frames
        in a row (:attr:`spead_chunks`).
    quorum : distinct heaps of one frame that confirm a start, move the head and count a
        candidate frame (0: a majority of the heaps of a frame). Lower it for arrays
        that run with fewer than half of their F-engines.
    resync_frames : candidate frames holding a quorum before the capture jumps (0: 2).
    frames_per_chunk : frames per spead2 chunk, K (0: the most of 8, 4, 2, 1 that divides
        max_ahead and keeps a chunk within 16 MiB). It must divide max_ahead (the start-up
        area's lanes begin chunks); every sequence's first frame begins a chunk, whatever the
        alignment (frame ids skip to the next chunk).
        The consumer's Python work is per chunk (a wakeup, two ring slots, spead2's chunk
        calls), so K frames share it; the policy is per frame
        whatever K is.
    """

    wire: Any
    chan0: int = 0
    window: int = 8
    align: int = 0
    max_ahead: int = 0
    quorum: int = 0
    resync_frames: int = 0
    frames_per_chunk: int = 0

    def __post_init__(self) -> None:
        if self.chan0 < 0:
            raise ValueError(f"chan0 must be >= 0, got {self.chan0}")
        if self.window < 1:
            raise ValueError(f"window must be >= 1 frame, got {self.window}")
        if min(self.align, self.max_ahead, self.quorum, self.resync_frames,
               self.frames_per_chunk) < 0:
            raise ValueError("align, max_ahead, quorum, resync_frames and frames_per_chunk "
                             "must be >= 0 (0: default)")
        if self.quorum > self.frame_heaps:
            raise ValueError(f"quorum ({self.quorum}) must be <= the heaps of a frame "
                             f"({self.frame_heaps})")
        k = self.frames_per_chunk
        if k and self.max_ahead_frames % k:
            raise ValueError(f"frames_per_chunk ({k}) must divide max_ahead "
                             f"({self.max_ahead_frames} frames)")
        if self.resync_after > self.nchunks:
            raise ValueError(f"resync_frames ({self.resync_frames}) must be <= window + "
                             f"max_ahead ({self.nchunks})")

    @functools.cached_property
    def grid(self) -> HeapGrid:
        """How the wire format's heaps tile a frame."""
        if isinstance(self.wire, Geometry):
            return HeapGrid.packet(self.wire)
        return self.wire.heap_grid()

    @property
    def geometry(self) -> Geometry | None:
        """Our format's geometry (None for another wire format)."""
        return self.wire if isinstance(self.wire, Geometry) else None

    @property
    def heap_bytes(self) -> int:
        return self.grid.heap_bytes

    @property
    def frame_heaps(self) -> int:
        """Heaps per frame: ``nsource * ngroup`` (ours: ``nstream * nchan_group``)."""
        return self.grid.nheap

    @property
    def frame_bytes(self) -> int:
        return self.grid.nheap * self.grid.heap_bytes

    @functools.cached_property
    def chunk_frames(self) -> int:
        """Frames per spead2 chunk (and per ring slot), K."""
        if self.frames_per_chunk:
            return self.frames_per_chunk
        return next(k for k in (8, 4, 2, 1) if self.max_ahead_frames % k == 0
                    and (k == 1 or k * self.frame_bytes <= _CHUNK_BYTES))

    @property
    def chunk_heaps(self) -> int:
        """Heaps per chunk: K frames of heaps, frame-major."""
        return self.chunk_frames * self.frame_heaps

    @property
    def chunk_bytes(self) -> int:
        return self.chunk_frames * self.frame_bytes

    @property
    def timestamp_step(self) -> int:
        """Timestamp increment from one frame to the next."""
        return self.grid.timestamp_step

    @property
    def frame_spectra(self) -> int:
        """Spectra per frame (a frame's time_tag is its number times this)."""
        return self.grid.frame_spectra

    @property
    def frame_shape(self) -> tuple[int, ...]:
        return self.grid.frame_shape

    @property
    def align_frames(self) -> int:
        return self.align or self.grid.default_align

    @property
    def max_ahead_frames(self) -> int:
        return self.max_ahead or max(1, self.window // 2)

    @property
    def nchunks(self) -> int:
        """Frames the time policy keeps track of (``window + max_ahead``)."""
        return self.window + self.max_ahead_frames

    @property
    def spead_chunks(self) -> int:
        """Chunks under construction in spead2 (``max_chunks``): every ``nchunks`` frames in a
        row fit, so a heap aimed ahead never flushes a frame inside the reorder window."""
        return int(spead_chunks(self.nchunks, self.chunk_frames))

    @property
    def lanes(self) -> int:
        """Lanes of the start-up area: the provisional start's and its candidates' (each
        ``max_ahead`` frames; all fit in spead2's window)."""
        return min(_MAX_LANES, self.nchunks // self.max_ahead_frames)

    @property
    def quorum_heaps(self) -> int:
        return self.quorum or self.frame_heaps // 2 + 1

    @property
    def resync_after(self) -> int:
        return self.resync_frames or 2

    @property
    def mask_shape(self) -> tuple[int, ...]:
        """Per-frame mask: ``[S]`` for one channel group per stream, else ``[S, G]``."""
        return self.grid.mask_shape

    @property
    def mask_bytes(self) -> int:
        """Bytes of one frame's mask (uint8 per stream and group: a ring frame of the mask)."""
        return int(np.prod(self.mask_shape))

    @property
    def offsets(self) -> _Offsets:
        return _Offsets(self.nchunks, self.grid.nsource)

    def stream_config(self, **kw: Any) -> spead2.recv.StreamConfig:
        """spead2's stream config for this format: heaps are assembled per source where the
        format's heap counters say which source sent them (MeerKAT's ``cnt % n_ants ==
        feng_id``), so interleaved multi-packet heaps of many senders never evict each other."""
        extra = getattr(self.wire, "stream_config_kw", None)
        return spead2.recv.StreamConfig(**kw, **(extra() if extra is not None else {}))

    def new_state(self, start_timestamp: int | None = None) -> np.ndarray:
        """The callback's int64 state: parameters set, no sequence yet, or (``start_timestamp``)
        a sequence already confirmed at the first aligned frame at or after that timestamp."""
        grid = self.grid
        state = np.zeros(self.offsets.size, np.int64)
        state[self.offsets.tags:self.offsets.counts] = -1
        state[[_State.STATUS, _State.MAXCHUNK, _State.CAND_LANE, _State.WINNER]] = -1
        params = {_State.NSTREAM: grid.nsource, _State.NGROUP: grid.ngroup,
                  _State.NCHAN_PKT: grid.nchan_heap, _State.CHAN0: self.chan0,
                  _State.HEAP_BYTES: grid.heap_bytes, _State.STEP: grid.timestamp_step,
                  _State.WINDOW: self.window, _State.ALIGN: self.align_frames,
                  _State.AHEAD: self.max_ahead_frames, _State.QUORUM: self.quorum_heaps,
                  _State.RESYNC: self.resync_after, _State.LANES: self.lanes,
                  _State.KFRAMES: self.chunk_frames}
        for k, v in params.items():
            state[k] = v
        if start_timestamp is not None:
            first = -(-start_timestamp // self.timestamp_step)
            start = -(-first // self.align_frames) * self.align_frames
            h = self.offsets.history
            state[h:h + _REC] = (0, -start, -1, _Epoch.CONFIRMED, -1)  # chunk ids from 0
            state[[_State.NEPOCH, _State.STATUS, _State.START, _State.HEAD, _State.OFFSET,
                   _State.FLOOR]] = (1, _Epoch.CONFIRMED, start, start - 1, -start, start)
        return state

    @staticmethod
    def chunk_place(state: np.ndarray) -> scipy.LowLevelCallable:
        """The placement callback for spead2, with ``state`` (int64 array) as user data."""
        return scipy.LowLevelCallable(_place_cfunc().ctypes,
                                      user_data=state.ctypes.data_as(ctypes.c_void_p),
                                      signature="void (void *, size_t, void *)")


def chunk_frame(state: np.ndarray, chunk_id: int) -> tuple[int, int, int] | None:
    """(sequence record number, first frame, frames of the sequence in it) of a chunk spead2
    delivered, or None when it holds no frame of a sequence: spead2's back-fill, a start-up
    lane that lost, a provisional start a quorum overruled (whatever such a chunk holds was
    placed there: ``start_rejected``).

    The callback records a sequence before it places anything in it and decides the start
    before spead2 can flush a lane (the start-up area fits in its window), so a delivered chunk
    is always resolved as it will stay.
    """
    fid = chunk_id * int(state[_State.KFRAMES])  # its first frame's id (all of one sequence)
    width = int(state[_State.AHEAD])
    h = _NSCALAR
    if fid < int(state[_State.LANE_USED]) * width:  # the start-up area
        lane, status = fid // width, int(state[h + 3])
        winner = int(state[_State.WINNER])
        if winner < 0 and status == _Epoch.PROVISIONAL:
            winner = 0  # undecided when the stream ended: the provisional start, as it is
        if status == _Epoch.ABANDONED or lane != winner:
            return None
        frame = int(state[_State.LANE_BASE + lane]) + fid % width
        return 0, frame, sequence_frames(state, 0, fid)
    n = int(state[_State.NEPOCH])
    for i in range(n - 1, max(-1, n - 1 - _NHISTORY), -1):
        r = h + _REC * (i % _NHISTORY)
        start_chunk, offset, end_chunk, status = (int(x) for x in state[r:r + 4])
        if fid >= start_chunk:
            if (end_chunk >= 0 and fid >= end_chunk) or status == _Epoch.ABANDONED:
                return None
            return i, fid - offset, sequence_frames(state, i, fid)
    return None


def sequence_label(state: np.ndarray, number: int) -> int:
    """The label sequence ``number``'s dumps carry: the consumer's label number in force at
    its first heap (State.LABEL); -1 while no heap of it has arrived."""
    return int(state[_NSCALAR + _REC * (number % _NHISTORY) + 4])


def set_label(state: np.ndarray, label: int) -> None:
    """Make ``label`` the one sequences starting from now on take (one aligned int64 store:
    the callback sees the old number or the new, never half of one)."""
    state[_State.LABEL] = label


def sequence_frames(state: np.ndarray, number: int, fid: int) -> int:
    """Frames of the chunk whose first frame id is ``fid`` that sequence ``number`` delivers:
    all K but in its last chunk (frames after its end were space when K was 1: they stay so)
    and in the data's last (frames no heap has reached; spead2 hands over a chunk before the
    newest one placed only when a later chunk is in use). 0 or less: none."""
    limit = int(state[_State.MAXCHUNK]) + 1
    end = int(state[_NSCALAR + _REC * (number % _NHISTORY) + 2])
    if end >= 0:
        limit = min(limit, end)
    return min(int(state[_State.KFRAMES]), limit - fid)


#: Items the callback reads (spead2 extracts their immediate values from the first packet).
_ITEMS = (TIMESTAMP.id, STREAM_ID.id, FREQUENCY.id, spead2.HEAP_LENGTH_ID, spead2.STREAM_CTRL_ID,
          spead2.PAYLOAD_OFFSET_ID, spead2.PAYLOAD_LENGTH_ID)


# The state slots as plain ints (numba cannot index with an IntEnum).
_I_ACCEPTED = int(_State.ACCEPTED)
_I_AHEAD = int(_State.AHEAD)
_I_ALIGN = int(_State.ALIGN)
_I_BITMAP = int(_State.BITMAP)
_I_CAND_ACCEPTED0 = int(_State.CAND_ACCEPTED0)
_I_CAND_BASE = int(_State.CAND_BASE)
_I_CAND_BITMAP = int(_State.CAND_BITMAP)
_I_CAND_NEWEST = int(_State.CAND_NEWEST)
_I_CAND_QFRAMES = int(_State.CAND_QFRAMES)
_I_CAND_VOTES = int(_State.CAND_VOTES)
_I_CHAN0 = int(_State.CHAN0)
_I_HEAD = int(_State.HEAD)
_I_HEAP_BYTES = int(_State.HEAP_BYTES)
_I_MAXCHUNK = int(_State.MAXCHUNK)
_I_NCHAN_PKT = int(_State.NCHAN_PKT)
_I_NEPOCH = int(_State.NEPOCH)
_I_NGROUP = int(_State.NGROUP)
_I_NSTREAM = int(_State.NSTREAM)
_I_OFFSET = int(_State.OFFSET)
_I_QUORUM = int(_State.QUORUM)
_I_RESYNC = int(_State.RESYNC)
_I_START = int(_State.START)
_I_STATS_BASE = int(_State.STATS_BASE)
_I_STATUS = int(_State.STATUS)
_I_STEP = int(_State.STEP)
_I_WINDOW = int(_State.WINDOW)
_I_LANES = int(_State.LANES)
_I_LANE_USED = int(_State.LANE_USED)
_I_CAND_LANE = int(_State.CAND_LANE)
_I_WINNER = int(_State.WINNER)
_I_PRE_FRAMES = int(_State.PRE_FRAMES)
_I_PRE_CHUNK0 = int(_State.PRE_CHUNK0)
_I_LANE_BASE = int(_State.LANE_BASE)
_I_LANE_LABEL = _I_LANE_BASE + _MAX_LANES
_I_LABEL = int(_State.LABEL)
_I_CAND_LABEL = int(_State.CAND_LABEL)
_I_KFRAMES = int(_State.KFRAMES)
_I_FLOOR = int(_State.FLOOR)
_PROVISIONAL, _CONFIRMED, _ABANDONED = (int(e) for e in _Epoch)
_HIST = _NSCALAR
_NSTAT = len(_Stat)
_STOP = spead2.CTRL_STREAM_STOP
_PAYLOAD_ID = PAYLOAD.id

numba_cache.install()  # the cache=True loops below (and the callback) cache in the user cache


@numba.njit(cache=True)
def spead_chunks(nframes: int, kframes: int) -> int:
    """spead2's window in chunks of ``kframes`` frames such that any ``nframes`` consecutive
    frames (the policy's reorder window plus max_ahead) lie in it, wherever they start."""
    return (nframes + kframes - 2) // kframes + 1


@numba.njit(cache=True)
def _new_sequence(state, start, status, label):  # pragma: no cover - runs in spead2's thread
    """Record a sequence starting at frame ``start`` whose dumps carry ``label`` (State.LABEL);
    chunk ids keep moving forward. The first one places its first AHEAD frames in lane 0 of the
    start-up area, the rest after it."""
    nchunks = state[_I_WINDOW] + state[_I_AHEAD]
    n = state[_I_NEPOCH]
    offset = state[_I_OFFSET]
    first_chunk = start + offset
    if n == 0:
        width = state[_I_AHEAD]
        state[_I_LANE_USED] = 1
        state[_I_LANE_BASE] = start
        state[_I_LANE_LABEL] = label
        state[_I_PRE_FRAMES] = width
        state[_I_PRE_CHUNK0] = 0
        offset = -start  # frames from start + width on: chunk ids from width on
        first_chunk = width
    else:
        prev = _HIST + _REC * ((n - 1) % _NHISTORY)
        if state[prev + 3] == _PROVISIONAL:
            state[prev + 3] = _ABANDONED
        last = state[_I_MAXCHUNK]
        state[prev + 2] = last + 1  # its chunks end after the last one placed
        kf = state[_I_KFRAMES]
        past = (last // kf + spead_chunks(nchunks, kf)) * kf + kf  # past spead2's whole window
        if last >= 0 and start + offset < past:
            offset = past - start  # (a chunk boundary: sequences never share a chunk)
        offset += (kf - (start + offset) % kf) % kf  # its first frame begins a chunk
        first_chunk = start + offset
        state[_I_PRE_FRAMES] = 0
    rec = _HIST + _REC * (n % _NHISTORY)
    state[rec] = first_chunk
    state[rec + 1] = offset
    state[rec + 2] = -1
    state[rec + 3] = status
    state[rec + 4] = label
    state[_I_NEPOCH] = n + 1
    state[_I_STATUS] = status
    state[_I_START] = start
    state[_I_HEAD] = start - 1
    state[_I_OFFSET] = offset
    state[_I_ACCEPTED] = 0
    state[_I_CAND_VOTES] = 0  # forget the candidate
    state[_I_CAND_LANE] = -1


@numba.njit(cache=True)
def _decide(state, lane):  # pragma: no cover - runs in spead2's thread
    """The first sequence is confirmed with ``lane``'s frames as its first AHEAD frames (the
    provisional start's, lane 0, or a candidate's); the rest follows the last lane opened."""
    width = state[_I_AHEAD]
    nchunks = state[_I_WINDOW] + width
    quorum = state[_I_QUORUM]
    start = state[_I_LANE_BASE + lane]
    cont = state[_I_LANE_USED] * width  # chunk id of frame start + width
    state[_HIST] = cont
    state[_HIST + 1] = cont - start - width
    state[_HIST + 3] = _CONFIRMED
    state[_HIST + 4] = state[_I_LANE_LABEL + lane]  # the label its first heap took
    state[_I_OFFSET] = cont - start - width
    state[_I_START] = start
    state[_I_PRE_FRAMES] = width
    state[_I_PRE_CHUNK0] = lane * width
    state[_I_STATUS] = _CONFIRMED
    state[_I_WINNER] = lane
    state[_I_CAND_LANE] = -1
    tags = _HIST + _REC * _NHISTORY
    head = start - 1
    accepted = 0
    for i in range(width):  # what the lane already holds
        chunk = lane * width + i
        if state[tags + chunk % nchunks] == chunk:
            count = state[tags + nchunks + chunk % nchunks]
            accepted += count
            if count >= quorum:
                head = start + i
    state[_I_HEAD] = head
    state[_I_ACCEPTED] = accepted


@numba.njit(cache=True)
def _vote(state, frame, index, nheap):  # pragma: no cover - runs in spead2's thread
    """A heap far from the sequence votes for the candidate; may move the sequence."""
    nchunks = state[_I_WINDOW] + state[_I_AHEAD]
    quorum = state[_I_QUORUM]
    ccounts = _HIST + _REC * _NHISTORY + 2 * nchunks
    cbits = numba.carray(intp_to_voidptr(state[_I_CAND_BITMAP]), nchunks * nheap,
                         dtype=np.uint8)
    base = state[_I_CAND_BASE]
    if state[_I_CAND_VOTES] > 0 and base <= frame < base + nchunks:
        pos = (frame - base) * nheap + index
        if cbits[pos]:
            return
        cbits[pos] = 1
        state[_I_CAND_VOTES] += 1
        state[ccounts + frame - base] += 1
        if state[ccounts + frame - base] == quorum:
            state[_I_CAND_QFRAMES] += 1
        if frame > state[_I_CAND_NEWEST]:
            state[_I_CAND_NEWEST] = frame
    else:
        if state[_I_CAND_VOTES] > 0:
            state[_I_CAND_VOTES] -= 1  # a vote against: sparse junk cancels out
            if state[_I_CAND_VOTES] > 0:
                return
        cbits[:] = 0
        state[ccounts:ccounts + nchunks] = 0
        state[_I_CAND_BASE] = frame - 1
        state[_I_CAND_VOTES] = 1
        state[_I_CAND_NEWEST] = frame
        state[_I_CAND_ACCEPTED0] = state[_I_ACCEPTED]
        state[_I_CAND_LABEL] = state[_I_LABEL]  # its first heap: the label it starts with
        cbits[nheap + index] = 1
        state[ccounts + 1] = 1
        state[_I_CAND_QFRAMES] = 1 if quorum <= 1 else 0
        state[_I_CAND_LANE] = -1
        lane = state[_I_LANE_USED]
        if state[_I_STATUS] == _PROVISIONAL and lane < state[_I_LANES]:
            align = state[_I_ALIGN]  # a lane of its own while the start is undecided
            state[_I_LANE_BASE + lane] = (frame + align - 1) // align * align
            state[_I_LANE_LABEL + lane] = state[_I_CAND_LABEL]
            state[_I_LANE_USED] = lane + 1
            state[_I_CAND_LANE] = lane
    if state[_I_STATUS] == _PROVISIONAL:
        won = state[_I_CAND_QFRAMES] >= 1
    else:
        won = (state[_I_CAND_QFRAMES] >= state[_I_RESYNC]
               and state[_I_ACCEPTED] - state[_I_CAND_ACCEPTED0] < quorum)
    if won:
        if state[_I_STATUS] == _PROVISIONAL and state[_I_CAND_LANE] >= 0:
            _decide(state, state[_I_CAND_LANE])  # it keeps what its lane holds
        else:
            align = state[_I_ALIGN]
            _new_sequence(state, (state[_I_CAND_NEWEST] + align) // align * align,
                          _CONFIRMED, state[_I_CAND_LABEL])


def _place(data_ptr, data_size, state_ptr):  # pragma: no cover - runs in spead2's thread
    """The placement callback: judge a heap, apply the time policy, claim its slot."""
    data = numba.carray(data_ptr, 1)
    head_state = numba.carray(state_ptr, _HIST)
    nstream, ngroup = head_state[_I_NSTREAM], head_state[_I_NGROUP]
    window, ahead = head_state[_I_WINDOW], head_state[_I_AHEAD]
    nchunks = window + ahead
    nheap = nstream * ngroup
    tags = _HIST + _REC * _NHISTORY
    counts = tags + nchunks
    stops = counts + 2 * nchunks
    state = numba.carray(state_ptr, stops + nstream)
    nchan_pkt, chan0, heap_bytes = (state[_I_NCHAN_PKT], state[_I_CHAN0],
                                    state[_I_HEAP_BYTES])
    step, align, quorum = state[_I_STEP], state[_I_ALIGN], state[_I_QUORUM]
    base = state[_I_STATS_BASE]
    stats = numba.carray(intp_to_voidptr(data[0].batch_stats), base + _NSTAT, dtype=np.uint64)
    items = numba.carray(intp_to_voidptr(data[0].items), 7, dtype=np.int64)
    timestamp, stream, freq, length = items[0], items[1], items[2], items[3]
    if length < 0 or items[6] != length:  # PARTIAL: not a one-packet heap (spead2's criterion)
        plen = items[6]  # count the packets it should have (all as long as this one)
        stats[base + 13] += np.uint64((length + plen - 1) // plen if length > 0 and plen > 0
                                      else 1)
    if items[4] == _STOP:
        stats[base + 0] += 1  # STOP_HEAPS
        if 0 <= stream < nstream:
            state[stops + stream] += 1
        return
    if timestamp < 0 or stream < 0 or freq < 0:
        stats[base + 1] += 1  # METADATA
        return
    if length != heap_bytes:
        stats[base + 2] += 1  # BAD_SIZE
        return
    # Item pointers: exactly one non-immediate item, the payload at address 0.
    size = data[0].packet_size
    pkt = numba.carray(intp_to_voidptr(data[0].packet), size, dtype=np.uint8)
    addr_bits = np.int64(pkt[3]) * 8
    nitem = (np.int64(pkt[6]) << 8) | np.int64(pkt[7])
    npayload = 0
    for i in range(nitem):
        o = 8 + 8 * i
        if o + 8 > size:
            break
        if pkt[o] & 0x80:  # immediate: only its top bit matters here
            continue
        word = np.int64(0)
        for k in range(8):
            word = (word << 8) | np.int64(pkt[o + k])
        if (word >> addr_bits) == _PAYLOAD_ID and word & ((1 << addr_bits) - 1) == 0:
            npayload += 1
        else:
            npayload += 2
    if npayload != 1:
        stats[base + 3] += 1  # BAD_POINTER
        return
    if timestamp % step != 0:
        stats[base + 4] += 1  # BAD_TIMESTAMP
        return
    if stream >= nstream:
        stats[base + 5] += 1  # BAD_STREAM
        return
    chan = freq - chan0
    if chan < 0 or chan >= ngroup * nchan_pkt or chan % nchan_pkt != 0:
        stats[base + 6] += 1  # BAD_CHANNEL
        return
    frame = timestamp // step
    index = stream * ngroup + chan // nchan_pkt
    if state[_I_STATUS] < 0:  # the first well-formed heap opens a provisional sequence
        _new_sequence(state, (frame + align - 1) // align * align, _PROVISIONAL,
                      state[_I_LABEL])
    start, head = state[_I_START], state[_I_HEAD]
    chunk = -1
    voted = False
    if state[_I_STATUS] == _PROVISIONAL:
        if frame < start - nchunks or frame >= start + nchunks:
            _vote(state, frame, index, nheap)
            voted = True
            if state[_I_STATUS] == _PROVISIONAL:  # undecided: keep it in its lane, if any
                lane = state[_I_CAND_LANE]
                first = state[_I_LANE_BASE + lane] if lane >= 0 else 0
                if lane < 0 or frame < first or frame >= first + ahead:
                    stats[base + (7 if frame < start else 8)] += 1  # BEFORE_START / O_O_W
                    return
                chunk = lane * ahead + frame - first
            else:  # the vote decided the start: judge the heap in the sequence
                start, head = state[_I_START], state[_I_HEAD]
        elif frame < start:
            stats[base + 7] += 1  # BEFORE_START
            return
    if chunk < 0:
        if state[_I_STATUS] != _PROVISIONAL:
            before = frame < start
            if before or frame <= head - window:
                # Behind what the sequence can place: the F-engines may have restarted
                # (timestamps fell back), so it votes, as heaps far ahead do. Not the heaps
                # just before a new start (the gap up to its aligned first frame): before
                # the sequence holds a quorum frame only heaps further back than that vote.
                if frame >= state[_I_FLOOR] and (
                        frame <= head - window if head >= start
                        else frame < start - align - nchunks):
                    _vote(state, frame, index, nheap)
                stats[base + (7 if before else 9)] += 1  # BEFORE_START / LATE
                return
        if frame > head + ahead:
            stats[base + 8] += 1  # OUT_OF_WINDOW (near a provisional start: no vote)
            if state[_I_STATUS] != _PROVISIONAL and not voted:
                _vote(state, frame, index, nheap)
            return
        if frame - start < state[_I_PRE_FRAMES]:  # the sequence's lane
            chunk = state[_I_PRE_CHUNK0] + frame - start
        else:
            chunk = frame + state[_I_OFFSET]
    whole = items[5] == 0 and items[6] == heap_bytes
    slot = chunk % nchunks
    bitmap = numba.carray(intp_to_voidptr(state[_I_BITMAP]), nchunks * nheap,
                          dtype=np.uint8)
    if state[tags + slot] != chunk:  # slot reused by a newer frame: forget the old one
        state[tags + slot] = chunk
        state[counts + slot] = 0
        bitmap[slot * nheap:(slot + 1) * nheap] = 0
    claim = bitmap[slot * nheap + index]
    if claim == 2:
        stats[base + 10] += 1  # DUPLICATE
        return
    if whole and claim == 1:
        stats[base + 11] += 1  # DISPLACED (the partial heap loses its slot)
    bitmap[slot * nheap + index] = 2 if whole else 1
    if claim == 0:  # a new slot: multi-packet heaps count too (their first packet is partial)
        state[counts + slot] += 1
        if not voted or state[_I_STATUS] != _PROVISIONAL:  # a candidate's lane does not count
            state[_I_ACCEPTED] += 1
            if state[counts + slot] == quorum:
                if frame > state[_I_HEAD]:
                    state[_I_HEAD] = frame
                if state[_I_STATUS] == _PROVISIONAL:
                    _decide(state, 0)  # the provisional start holds
    stats[base + 12] += 1  # PLACED
    rec = _HIST + _REC * ((state[_I_NEPOCH] - 1) % _NHISTORY)
    if state[rec + 4] < 0:  # the first heap of a sequence begun without one (an explicit start)
        state[rec + 4] = state[_I_LABEL]
    if chunk > state[_I_MAXCHUNK]:
        state[_I_MAXCHUNK] = chunk
    kf = state[_I_KFRAMES]
    in_chunk = (chunk % kf) * nheap + index
    data[0].chunk_id = chunk // kf
    data[0].heap_index = in_chunk
    data[0].heap_offset = in_chunk * heap_bytes


@functools.cache
def _place_cfunc() -> Any:
    """The compiled callback: one for every plan (its parameters are in the state), compiled
    on first use and cached on disk by numba."""
    return numba.cfunc(types.void(types.CPointer(chunk_place_data), types.uintp,
                                  types.CPointer(types.int64)), nopython=True,
                       cache=True)(_place)


#: ``CaptureLayout``, :class:`CapturePlan`'s old name, with a warning (one release).
__getattr__ = renamed_names(__name__, {"CaptureLayout": "CapturePlan"}, globals())
