"""Frames grouped K to a spead2 chunk (``CapturePlan.chunk_frames``): a capture delivers the
same frames, masks, sequences and counters whatever K is, through hostile traffic (drops,
duplicates, reordering, late heaps), a forged first heap, a resynchronisation that leaves the
old sequence inside a chunk, and data that end inside a chunk; on its own memory and through
CaptureBlock's rings."""

from __future__ import annotations

import numpy as np
import pytest
import spead2

from tests.helpers.capture import SKY, Collect, crafted
from xengine_block.array import default_array
from xengine_block.capture.placement import CapturePlan
from xengine_block.capture.receive import CaptureBlock, capture_frames
from xengine_block.capture.spead import InprocDatagramSink, frame_datagrams
from xengine_block.capture.transports import InprocSource
from xengine_block.geometry import Geometry
from xengine_block.runtime.pipeline import Pipeline

#: Sequences aligned to 8 frames, window 8 -> max_ahead 4: K = 4 by default.
G = Geometry(nstream=32, nchan=18, npacket=8)
ARRAY = default_array(16)
CHAN0 = 18
NHEAP = G.npackets_per_frame
STEP = G.nspectra_pkt


def hostile_stream(seed: int, jump: int = 1001) -> list[bytes]:
    """13 frames from frame 0 (the last chunk of 4 holds one), then the F-engines jump to frame
    ``jump`` for 13 frames (from 1001: a new sequence from 1008, six frames, the last chunk half
    full), with a forged far-future first heap, 10 % of heaps dropped, some sent twice,
    neighbouring frames interleaved, and heaps of frame 1 sent again long after (late)."""
    rng = np.random.default_rng(seed)
    out = [crafted(10 ** 6, STEP * 10 ** 9)]
    late = []
    for t, n in ((0, 13), (STEP * jump, 13)):
        frames = rng.integers(-128, 128, (n, *G.frame_shape), dtype=np.int8)
        dg = frame_datagrams(frames, G, t, chan0=CHAN0, cnt0=1 + t)
        kept = [d for d in dg if rng.random() > 0.1]
        order = np.argsort([f + rng.random() * 1.5 for f, *_ in kept], kind="stable")
        for i in order:
            f, _, _, pkt = kept[i]
            out.append(pkt)
            if rng.random() < 0.05:
                out.append(pkt)  # duplicate
            if t == 0 and f == 1 and len(late) < 5:
                late.append(pkt)
        if t == 0:
            out.extend(late)  # frame 1 when the head is at frame 12: late
    return out


def queue_of(datagrams: list[bytes]) -> spead2.InprocQueue:
    queue = spead2.InprocQueue()
    sink = InprocDatagramSink(queue)
    for pkt in datagrams:
        sink.send(pkt)
    sink.close()
    return queue


def captures_by_k(dg: list[bytes], ks: tuple[int, ...], **kw) -> dict:
    """(frames, counters) of a capture of ``dg`` per ``frames_per_chunk`` in ``ks``, keyed by
    the K the plan chose."""
    runs = {}
    for k in ks:
        cap = capture_frames(InprocSource(queue_of(dg)), G, chan0=CHAN0, frames_per_chunk=k,
                             **kw)
        runs[cap.plan.chunk_frames] = (list(cap), cap.counters())
    return runs


def assert_same_as_one_frame_chunks(runs: dict) -> None:
    """Every K's frames, masks, sequence starts and counters are K = 1's."""
    frames1, counters1 = runs[1]
    for k in sorted(runs):
        frames, counters = runs[k]
        assert counters == counters1, k
        assert [(f.time_tag, f.new_sequence) for f in frames] == [
            (f.time_tag, f.new_sequence) for f in frames1]
        for a, b in zip(frames, frames1, strict=True):
            assert np.array_equal(a.frame, b.frame) and np.array_equal(a.mask, b.mask)


def test_default_groups_the_published_frames_four_to_a_chunk():
    plan = CapturePlan(G, chan0=CHAN0)
    assert (plan.chunk_frames, plan.chunk_heaps) == (4, 4 * NHEAP)
    assert plan.spead_chunks == 4  # 12 frames in a row, wherever they start
    assert CapturePlan(G, frames_per_chunk=1).chunk_frames == 1
    with pytest.raises(ValueError, match="frames_per_chunk .3. must divide"):
        CapturePlan(G, frames_per_chunk=3)


@pytest.mark.parametrize("seed", [1, 2])
def test_frames_and_counters_do_not_depend_on_frames_per_chunk(seed):
    runs = captures_by_k(hostile_stream(seed), (1, 2, 0))
    assert sorted(runs) == [1, 2, 4]
    frames1, counters1 = runs[1]
    tags = [f.time_tag // STEP for f in frames1]
    assert tags == list(range(13)) + list(range(1008, 1014))
    assert counters1["late"] >= 5 and counters1["duplicate"] > 0 and counters1["missing"] > 0
    assert_same_as_one_frame_chunks(runs)


def test_capture_block_rings_do_not_depend_on_frames_per_chunk():
    dg = hostile_stream(3)
    got = {}
    for k in (1, 4):
        with Pipeline() as p:
            cap = CaptureBlock(InprocSource(queue_of(dg)), G, ARRAY, chan0=CHAN0,
                               frames_per_chunk=k, **SKY)
            out = Collect(cap)
            p.run()
        got[k] = ([h[0]["time_tag"] for h in out.headers], np.concatenate(out.frames),
                  np.concatenate(out.masks), cap.capture_counters())
    tags, frames, masks, counters = got[4]
    assert tags == got[1][0] == [0, 1008 * STEP]
    assert len(frames) == 13 + 6  # neither sequence padded to whole chunks
    assert np.array_equal(frames, got[1][1]) and np.array_equal(masks, got[1][2])
    assert counters == got[1][3]


def test_unaligned_sequences_begin_chunks_whatever_k():
    """With no alignment (align 1, as MeerKAT's heap times) a sequence may begin at any frame:
    its first frame still begins a chunk (frame ids skip ahead), so K = 2 and 4 deliver what
    K = 1 does, and the second sequence here begins off every chunk boundary of the first."""
    runs = captures_by_k(hostile_stream(4, jump=1002), (1, 2, 4), align=1)
    assert sorted(runs) == [1, 2, 4]
    frames1 = runs[1][0]
    tags = [f.time_tag // STEP for f in frames1]
    starts = [t for t, f in zip(tags, frames1, strict=True) if f.new_sequence]
    assert starts[0] == 0 and len(starts) == 2 and starts[1] % 4, starts
    assert tags == list(range(13)) + list(range(starts[1], 1015)), tags
    assert_same_as_one_frame_chunks(runs)
