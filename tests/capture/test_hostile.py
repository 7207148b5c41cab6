"""Hostile and faulty senders against the capture, over loopback UDP.

Every case sends crafted SPEAD datagrams (spead2's packet generator for well-formed heaps,
``spead.raw_packet`` for what spead2 refuses to make) to a capture bound on 127.0.0.1, and
asserts the exact output (each delivered heap equal to the data sent, missing heaps zero with
mask 0) and every counter exactly. The capture never ends on traffic here: a watcher stops it
once spead2 has decoded every datagram the kernel was given (bounded wait), so no test depends
on an end-of-stream heap or on timing; datagrams go out 8 at a time, each batch read by spead2
before the next, so a small net.core.rmem_max cannot drop any.
"""

from __future__ import annotations

import numpy as np
import pytest
import spead2

from tests.conftest import needs_proc_udp
from tests.helpers.udp_capture import G, capture_udp, zero_counters
from xengine_block.capture.receive import Capture, CapturedFrame
from xengine_block.capture.spead import (
    FREQUENCY,
    PAYLOAD,
    STREAM_ID,
    TIMESTAMP,
    UdpDatagramSink,
    descriptor_datagrams,
    frame_datagrams,
    frame_heaps,
    heap_datagrams,
    junk_datagram,
    raw_packet,
    stop_datagrams,
    truncated,
)
from xengine_block.capture.transports import UdpSource

NHEAP = G.npackets_per_frame
PB = G.payload_bytes
STEP = G.nspectra_pkt
T0 = 4 * STEP  # frame 4: aligned, so a clean capture starts with the first frame sent


def make_frames(nframe: int, seed: int = 0) -> np.ndarray:
    """Random voltages (-128 included) for ``nframe`` frames from frame 4."""
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, (nframe, *G.frame_shape), dtype=np.int8)


def heaps(frames: np.ndarray, t0: int = T0, cnt0: int = 1) -> dict[tuple[int, int], bytes]:
    """``(frame id, heap index) -> datagram`` of every heap of ``frames``, in send order."""
    return {(t0 // STEP + f, s): pkt
            for f, s, _, pkt in frame_datagrams(frames, G, t0, cnt0=cnt0)}


def raw_heap(cnt: int, frame: int, stream: int, payload: bytes, *, heap_length: int | None = PB,
             offset: int = 0, extra: tuple[tuple[int, int, bool], ...] = ()) -> bytes:
    """One heap's packet written by hand (``heap_length=None``: no heap-size item)."""
    items = [(spead2.HEAP_CNT_ID, cnt, True), (spead2.PAYLOAD_OFFSET_ID, offset, True),
             (spead2.PAYLOAD_LENGTH_ID, len(payload), True)]
    if heap_length is not None:
        items.append((spead2.HEAP_LENGTH_ID, heap_length, True))
    items += [(TIMESTAMP.id, frame * STEP, True), (STREAM_ID.id, stream, True),
              (FREQUENCY.id, 0, True), (PAYLOAD.id, 0, False), *extra]
    return raw_packet(items, payload)


def check_output(out: list[CapturedFrame], frames: np.ndarray, first: int, last: int,
                 present: set[tuple[int, int]]) -> None:
    """Frames ``first..last`` delivered, each heap equal to the one sent where ``present``,
    else zero with mask 0."""
    assert [f.time_tag // STEP for f in out] == list(range(first, last + 1))
    for f in out:
        fid = f.time_tag // STEP
        want = frames[fid - T0 // STEP].reshape(NHEAP, PB)
        got = f.frame.reshape(NHEAP, PB)
        for i in range(NHEAP):
            ok = (fid, i) in present
            assert f.mask.reshape(-1)[i] == ok, (fid, i)
            assert np.array_equal(got[i], want[i] if ok else np.zeros(PB, np.int8)), (fid, i)


def test_clean_traffic_is_exact():
    frames = make_frames(4)
    dg = heaps(frames)
    out, c, _ = capture_udp(list(dg.values()), len(dg))
    check_output(out, frames, 4, 7, set(dg))
    assert c == zero_counters(heaps=4 * NHEAP, frames=4, sequences=1, packets=4 * NHEAP)


def test_junk_truncation_and_malformed_heaps_are_counted():
    """Junk and truncated datagrams, zero-length heaps, heaps without a heap-size item, a
    payload past the heap size, extra / misplaced payload pointers: each dropped, and each
    kind of heap counted on its own (zero-length and unsized heaps were silent before)."""
    rng = np.random.default_rng(1)
    frames = make_frames(4, seed=1)
    dg = heaps(frames)
    good = list(dg.values())
    junk = [junk_datagram(rng, int(n)) for n in (1, 7, 100, 8000)]
    cut = [truncated(good[i], rng) for i in (3, 20, 40)]
    junk_payload = bytes(PB)
    malformed = {
        "bad_zero_length": [raw_heap(9000 + i, 5, i, b"", heap_length=0) for i in range(2)],
        "bad_unsized": [raw_heap(9010 + i, 5, i, junk_payload, heap_length=None)
                        for i in range(3)],
        "bad_pointer": [raw_heap(9020, 5, 1, junk_payload, extra=((PAYLOAD.id, 100, False),)),
                        raw_heap(9021, 5, 2, junk_payload, extra=((0x4444, PB + 8, False),)),
                        raw_heap(9022, 5, 3, junk_payload, extra=((0x1234, 0, False),))],
    }
    past = [raw_heap(9030, 5, 4, junk_payload, offset=8)]  # offset + length > heap size
    seq = good[:20]
    for pkts in malformed.values():
        seq += pkts
    seq += junk + cut + past + good[20:]
    decodable = len(good) + sum(len(p) for p in malformed.values())
    out, c, _ = capture_udp(seq, decodable)
    check_output(out, frames, 4, 7, set(dg))
    # spead2 itself also calls the heap whose pointer lies past its payload incomplete.
    assert c == zero_counters(heaps=4 * NHEAP, frames=4, sequences=1, packets=decodable,
                              incomplete=1, **{k: len(v) for k, v in malformed.items()})


def test_a_burst_past_the_socket_buffer_is_counted_as_socket_drops():
    """A burst sent while the capture is not reading yet: the kernel keeps what its smallest
    receive buffer holds and drops the rest; every datagram is then either decoded (packets)
    or counted in socket_drops, exactly."""
    needs_proc_udp()
    sent = list(heaps(make_frames(8, seed=5)).values())
    source = UdpSource("127.0.0.1", 0, buffer_size=64 << 10)
    source.bind()
    sink = UdpDatagramSink(port=source.port)
    for d in sent:
        sink.send(d)
    sink.close()
    cap = Capture(source, G, copy=True, idle_timeout=0.5)
    list(cap)
    c = cap.counters()
    assert 0 < c["socket_drops"] < len(sent)
    assert c["packets"] + c["socket_drops"] == len(sent)


def test_stop_heaps_are_counted_not_followed():
    """Stop heaps from several senders (one forged, carrying a stream id) mid-stream: the
    capture runs on; with stop_on_end_heap (single trusted sender) the first one ends it."""
    frames = make_frames(6, seed=2)
    dg = heaps(frames)
    good = list(dg.values())
    stops = stop_datagrams(G, 5000) + stop_datagrams(G, 5001)
    forged = raw_packet([(spead2.HEAP_CNT_ID, 5002, True), (spead2.PAYLOAD_OFFSET_ID, 0, True),
                         (spead2.PAYLOAD_LENGTH_ID, 1, True), (spead2.HEAP_LENGTH_ID, 1, True),
                         (spead2.STREAM_CTRL_ID, spead2.CTRL_STREAM_STOP, True),
                         (STREAM_ID.id, 7, True)], b"\0")
    seq = descriptor_datagrams(G) + good[:30] + stops + [forged] + good[30:]
    out, c, cap = capture_udp(seq, len(seq))
    check_output(out, frames, 4, 9, set(dg))
    assert c == zero_counters(heaps=6 * NHEAP, frames=6, sequences=1, packets=len(seq),
                              metadata=1, stop_heaps=3)
    by_stream = cap.stop_heaps_by_stream()
    assert by_stream[7] == 1 and by_stream.sum() == 1

    # Honoured: the capture ends at the first stop; the 30 heaps before it are delivered.
    out, c, _ = capture_udp(seq, 1 + 30 + 1, stop_on_end_heap=True)
    sent = set(list(dg)[:30])
    check_output(out, frames, 4, 5, sent)
    assert (c["stop_heaps"], c["heaps"], c["missing"]) == (1, 30, 2)


def test_far_future_first_heap_does_not_hold_the_start():
    """A far-future first heap opens only a provisional start, which the quorum of real
    streams overrules; the real heaps that voted meanwhile wait in a lane of their own, so
    nothing real is lost (frames 4-5 included): only the outlier is start_rejected."""
    frames = make_frames(8, seed=3)
    dg = heaps(frames)
    outlier = heaps(make_frames(1, seed=9), t0=10 ** 6 * STEP, cnt0=7000)
    seq = list(outlier.values())[:1] + list(dg.values())
    out, c, _ = capture_udp(seq, len(seq))
    check_output(out, frames, 4, 11, set(dg))
    assert c == zero_counters(heaps=8 * NHEAP, frames=8, sequences=1, packets=len(seq),
                              start_rejected=1)


def test_heaps_far_from_a_real_start_cost_it_nothing():
    """The first heap is real, and a forged far-future heap comes before the real start
    reaches its quorum: the forgery gets a lane (it could have been the real start), the real
    start holds, every real heap is delivered and the forgery is start_rejected."""
    frames = make_frames(6, seed=13)
    dg = list(heaps(frames).values())
    forged = list(heaps(make_frames(1, seed=14), t0=10 ** 6 * STEP, cnt0=7000).values())
    seq = dg[:3] + forged[:2] + dg[3:]
    out, c, _ = capture_udp(seq, len(seq))
    check_output(out, frames, 4, 9, set(heaps(frames)))
    assert c == zero_counters(heaps=6 * NHEAP, frames=6, sequences=1, packets=len(seq),
                              start_rejected=2)


def test_two_forged_starts_cost_no_real_data():
    """Two forged heaps at different far times, then the real F-engines: the first opens the
    provisional start, the second a candidate, the first real heap outvotes that candidate and
    becomes one with a lane of its own, which wins: all real heaps are delivered."""
    frames = make_frames(6, seed=15)
    dg = heaps(frames)
    f1 = list(heaps(make_frames(1, seed=16), t0=10 ** 6 * STEP, cnt0=7000).values())[0]
    f2 = list(heaps(make_frames(1, seed=17), t0=3 * 10 ** 6 * STEP, cnt0=7100).values())[0]
    seq = [f1, f2] + list(dg.values())
    out, c, _ = capture_udp(seq, len(seq))
    check_output(out, frames, 4, 9, set(dg))
    assert c == zero_counters(heaps=6 * NHEAP, frames=6, sequences=1, packets=len(seq),
                              start_rejected=2)


def test_far_future_bursts_midstream_are_not_followed():
    """A burst of one whole frame far ahead (every stream id), another at a different time,
    and three senders keeping a far-future clock for six frames: counted, never followed."""
    frames = make_frames(10, seed=4)
    dg = heaps(frames)
    good = list(dg.values())
    burst1 = list(heaps(make_frames(1, seed=5), t0=10 ** 6 * STEP, cnt0=8000).values())
    burst2 = list(heaps(make_frames(1, seed=6), t0=(10 ** 7 + 1) * STEP, cnt0=8100).values())
    few = [pkt for (f, i), pkt in heaps(make_frames(6, seed=7), t0=5 * 10 ** 6 * STEP,
                                        cnt0=8200).items() if i in (3, 8, 12)]
    seq = good[:3 * NHEAP + 5] + burst1 + good[3 * NHEAP + 5:6 * NHEAP] + burst2
    seq += [x for pair in zip(few, good[6 * NHEAP:6 * NHEAP + len(few)], strict=True) for x in pair]
    seq += good[6 * NHEAP + len(few):]
    out, c, _ = capture_udp(seq, len(seq))
    check_output(out, frames, 4, 13, set(dg))
    nfuture = len(burst1) + len(burst2) + len(few)
    assert c == zero_counters(heaps=10 * NHEAP, frames=10, sequences=1, packets=len(seq),
                              out_of_window=nfuture)


def test_old_heaps_midstream_are_not_followed():
    """Old heaps vote for a restart as far-future ones vote for a jump (the F-engines re-armed
    and fell back), and move nothing unless they are the F-engines: a burst of one whole old
    frame (every stream id), three senders replaying old frames, one forged old heap, and at
    the end a whole frame re-sent late (its frame is that burst's candidate's too, so two of
    its frames hold a quorum, but the real streams went on meanwhile): counted, not followed."""
    frames = make_frames(12, seed=20)
    dg = heaps(frames)
    good = list(dg.values())
    old_frames = make_frames(4, seed=21)
    burst = list(heaps(old_frames[:1], t0=0, cnt0=8000).values())  # frame 0: before the start
    few = [pkt for (f, i), pkt in heaps(old_frames, t0=0, cnt0=8100).items() if i in (3, 8, 12)]
    forged = raw_heap(8200, 1, 5, bytes(PB))
    late = list(heaps(frames[1:2], t0=T0 + STEP, cnt0=8300).values())  # frame 5, head 15
    cut = 8 * NHEAP  # the head is frame 11: frames 0-3 are window + more behind it
    seq = good[:cut] + burst + [forged]
    seq += [x for pair in zip(few, good[cut:cut + len(few)], strict=True) for x in pair]
    seq += good[cut + len(few):] + late
    out, c, _ = capture_udp(seq, len(seq))
    check_output(out, frames, 4, 15, set(dg))
    assert c == zero_counters(heaps=12 * NHEAP, frames=12, sequences=1, packets=len(seq),
                              before_start=len(burst) + len(few) + 1, late=len(late))


def test_heaps_aimed_ahead_cost_no_real_data():
    """Correct heaps sent early, 3 and 8 frames ahead, in the middle of a frame. Before: the
    head jumped with them and the frames under construction became late. Now heaps within
    max_ahead (4) are placed early (their later copies are duplicates), heaps further ahead
    are out of window, and nothing real is late."""
    frames = make_frames(14, seed=8)
    dg = heaps(frames)
    keys = list(dg)
    mid = 2 * NHEAP + 7  # frame 6, heap 7
    early3 = [k for k in keys if k[0] == 6 + 3]
    early8 = [k for k in keys if k[0] == 6 + 8]
    seq = [dg[k] for k in keys[:mid]]
    seq += [dg[k] for k in early3] + [dg[k] for k in early8]
    seq += [dg[k] for k in keys[mid:]]
    out, c, _ = capture_udp(seq, len(seq))
    check_output(out, frames, 4, 17, set(dg))
    assert c == zero_counters(heaps=14 * NHEAP, frames=14, sequences=1, packets=len(seq),
                              duplicate=len(early3), out_of_window=len(early8))


def test_partial_and_extra_pointer_heaps_do_not_squat():
    """A partial heap (first half only, junk) or a heap with an extra payload pointer sent
    before the genuine heap of the same slot. Before: it took the slot and the genuine heap
    was a duplicate. Now the complete heap wins; partial copies after it are duplicates."""
    frames = make_frames(4, seed=10)
    dg = heaps(frames)
    junk = np.full(PB, 77, np.int8).tobytes()
    squat_partial = [(5, i) for i in (0, 4, 9)]
    squat_pointer = [(6, i) for i in (1, 2)]
    after_partial = [(5, 15)]
    seq = []
    cnt = 9500
    for k, pkt in dg.items():
        if k in squat_partial:
            seq.append(raw_heap(cnt, k[0], k[1], junk[:PB // 2]))
        if k in squat_pointer:
            seq.append(raw_heap(cnt, k[0], k[1], junk, extra=((PAYLOAD.id, 8, False),)))
        seq.append(pkt)
        if k in after_partial:
            seq.append(raw_heap(cnt, k[0], k[1], junk[:PB // 2]))
        cnt += 1
    out, c, _ = capture_udp(seq, len(seq))
    check_output(out, frames, 4, 7, set(dg))
    npartial = len(squat_partial) + len(after_partial)
    assert c == zero_counters(heaps=4 * NHEAP, frames=4, sequences=1, packets=len(seq),
                              displaced=len(squat_partial), duplicate=len(after_partial),
                              bad_pointer=len(squat_pointer), incomplete=npartial)


@pytest.mark.parametrize("seed", [11, 12])
def test_duplicates_reordering_loss_and_late(seed):
    """Shuffled within frame pairs, 10% lost, 10% sent twice (same datagram, or re-sent with
    a new heap counter), and heaps of a frame the window has passed: exact frames and mask."""
    rng = np.random.default_rng(seed)
    frames = make_frames(12, seed=seed)
    dg = heaps(frames)
    keys = list(dg)
    lost = {k for k in keys if rng.random() < 0.1 and k[0] != 4}
    renumbered = heaps(frames, cnt0=100000)
    seq: list[bytes] = []
    ndup = nlate = 0
    for pair in range(4, 16, 2):
        part = [k for k in keys if k[0] in (pair, pair + 1) and k not in lost]
        rng.shuffle(part)
        if pair == 4:  # the very first heap opens the sequence: make it one of frame 4
            part.remove((4, 0))
            part.insert(0, (4, 0))
        for k in list(part):
            if rng.random() < 0.1:
                part.insert(int(rng.integers(part.index(k) + 1, len(part) + 1)), k)
        seen: set = set()
        for k in part:
            if k in seen:
                ndup += 1
                seq.append(dg[k] if rng.random() < 0.5 else renumbered[k])
            else:
                seen.add(k)
                seq.append(dg[k])
        if pair == 14:  # the head is 15 now: frames 7 and below are late (window 8)
            seq += [renumbered[k] for k in keys if k[0] == 7][:5]
            nlate += 5
    out, c, _ = capture_udp(seq, len(seq))
    present = set(keys) - lost
    check_output(out, frames, 4, 15, present)
    assert c == zero_counters(heaps=len(present), missing=len(lost), frames=12, sequences=1,
                              packets=len(seq), duplicate=ndup, late=nlate)


def test_multi_packet_heaps_are_exact():
    """A sender with small packets (a heap in ~8 datagrams of 1200 bytes): heaps are placed
    as their packets arrive, count toward the quorum, and no counter calls them bad."""
    frames = make_frames(4, seed=13)
    seq = []
    for f in range(4):
        for s, _, heap in frame_heaps(frames[f], G, T0 + f * STEP):
            seq += heap_datagrams(heap, 1 + f * NHEAP + s, 1200)
    out, c, _ = capture_udp(seq, len(seq))
    check_output(out, frames, 4, 7, {(4 + f, s) for f in range(4) for s in range(NHEAP)})
    assert len(seq) > 4 * NHEAP
    assert c == zero_counters(heaps=4 * NHEAP, frames=4, sequences=1, packets=len(seq))
