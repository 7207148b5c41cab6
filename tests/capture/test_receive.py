"""Capture: simulator -> SPEAD -> capture round trips (UDP, pcap, in-process), hostile traffic
with exact counters, resynchronisation, and the CaptureBlock in a pipeline."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import spead2
import spead2.send

from tests.conftest import needs_proc_udp
from tests.helpers.capture import CHAN0, SKY, Collect, G, crafted
from tests.helpers.ci4 import random_ci4_natural
from xengine_block.array import default_array
from xengine_block.capture.placement import COUNTERS, CapturePlan, _State
from xengine_block.capture.receive import Capture, CaptureBlock, capture_frames
from xengine_block.capture.recording import read_metadata, write_metadata
from xengine_block.capture.sockets import socket_drops
from xengine_block.capture.spead import (
    FLAVOUR,
    InprocDatagramSink,
    PcapWriter,
    descriptor_datagrams,
    frame_datagrams,
    heap_datagrams,
    inproc_sender,
    junk_datagram,
    pcap_sender,
    stop_datagrams,
    truncated,
    udp_sender,
)
from xengine_block.capture.transports import InprocSource, PcapSource, UdpSource, parse_source
from xengine_block.frames import frames_to_natural, natural_to_frames
from xengine_block.geometry import Geometry
from xengine_block.runtime.pipeline import Pipeline
from xengine_block.sim.fengine import FEngineSimulator, PointSource

ARRAY = default_array(16)
NHEAP = G.npackets_per_frame


def simulator(seed: int = 0) -> FEngineSimulator:
    return FEngineSimulator(ARRAY, G, sources=[PointSource.altaz(50.0, 20.0, 2.0)], seed=seed,
                            **SKY)


def zero_counters(**nonzero: int) -> dict[str, int]:
    out = dict.fromkeys(COUNTERS, 0)
    out.update(nonzero)
    return out


@pytest.mark.parametrize("transport", ["inproc", "pcap", "udp"])
def test_round_trip_equals_simulator(transport, tmp_path):
    sim = simulator()
    t0, nframe = 4 * 480, 4
    frames = sim.frames(t0, nframe)
    if transport == "inproc":
        queue = spead2.InprocQueue()
        source = InprocSource(queue)
        sender = inproc_sender(G, queue, chan0=CHAN0)
    elif transport == "pcap":
        path = tmp_path / "f.pcap"
        source = PcapSource(str(path))
        sender = pcap_sender(G, path, chan0=CHAN0)
    else:
        source = UdpSource("127.0.0.1", 0)
        source.bind()
        sender = None
    if sender is not None:  # in-process and pcap: send first, then capture
        with sender:
            sender.send_frames(frames, t0)
    # UDP from one trusted sender: its end-of-stream heap may end the capture (the option);
    # in-process and pcap captures end with their source (queue stopped, end of file).
    cap = capture_frames(source, G, chan0=CHAN0, idle_timeout=10.0,
                         stop_on_end_heap=transport == "udp")
    if sender is None:  # UDP: the stream is listening; send now (rate-limited, loopback)
        with udp_sender(G, port=source.port, chan0=CHAN0, rate_gbps=0.5) as udp:
            udp.send_frames(frames, t0)
    out = list(cap)
    assert [f.time_tag for f in out] == [t0 + 480 * i for i in range(nframe)]
    got = frames_to_natural(np.stack([f.frame for f in out]), G)
    assert np.array_equal(got, sim.samples(t0, nframe * 480))  # byte for byte
    assert all(f.mask.shape == (32, 2) and f.mask.all() for f in out)
    assert [f.new_sequence for f in out] == [True, False, False, False]
    # the descriptors are the metadata heap; the end-of-stream heap is counted as a stop
    assert cap.counters() == zero_counters(heaps=nframe * NHEAP, metadata=1, stop_heaps=1,
                                           frames=nframe, sequences=1,
                                           packets=nframe * NHEAP + 2)


def foreign(cnt: int) -> bytes:
    """A SPEAD heap of someone else's items (no timestamp / stream / frequency)."""
    heap = spead2.send.Heap(FLAVOUR)
    heap.add_item(spead2.Item(0x1234, "other", "", (16,), dtype=np.uint8,
                              value=np.arange(16, dtype=np.uint8)))
    (pkt,) = heap_datagrams(heap, cnt, 1024)
    return pkt


def hostile_traffic(frames: np.ndarray, t0: int, rng: np.random.Generator):
    """Shuffled, lossy, duplicated traffic with junk; returns datagrams, expectations."""
    nframe = len(frames)
    first_id = t0 // 480
    dg = {(first_id + f, s * G.nchan_group + grp): pkt
          for f, s, grp, pkt in frame_datagrams(frames, G, t0, chan0=CHAN0)}
    keys = list(dg)
    dropped = {k for k in keys if rng.random() < 0.05}
    start = -(-first_id // G.npacket) * G.npacket  # first aligned frame
    exp = zero_counters(metadata=1, stop_heaps=1, frames=first_id + nframe - start,
                        sequences=1)
    seq: list[bytes] = []
    ids = list(range(first_id, first_id + nframe))
    for block in [ids[i:i + 2] for i in range(0, nframe, 2)]:  # reorder within frame pairs
        part = [k for k in keys if k[0] in block and k not in dropped]
        rng.shuffle(part)
        for k in list(part):
            if rng.random() < 0.02:  # a duplicate after the original, within the pair
                pos = part.index(k)
                part.insert(int(rng.integers(pos + 1, len(part) + 1)), k)
                exp["duplicate" if k[0] >= start else "before_start"] += 1
        seq += [dg[k] for k in part]
        if block[-1] == start + 4:  # head is now start + 4 = (start) + window: start is late
            seq += [dg[(start, i)] for i in (0, 5, NHEAP - 1)]
            exp["late"] += 3
    for k in keys:
        if k not in dropped:
            exp["heaps" if k[0] >= start else "before_start"] += 1
    exp["missing"] = exp["frames"] * NHEAP - exp["heaps"]
    junk: list[bytes] = []
    cnt = 10 ** 6
    for i in range(5):
        junk.append(crafted(cnt + i, t0, stream=G.nstream + i))  # unknown stream
        junk.append(crafted(cnt + 10 + i, 480 * 10 ** 9 + 480 * i))  # absurd timestamp
        junk.append(crafted(cnt + 20 + i, t0 + 480 + 7 * (i + 1)))  # not a multiple of 480
        junk.append(crafted(cnt + 30 + i, t0, freq=(17, 19, 36, 0, 45)[i]))  # wrong channel
    for i, size in enumerate((100, 8641, 1, 4320)):
        junk.append(crafted(cnt + 40 + i, t0, size=size))  # wrong size
    for i in range(3):
        junk.append(crafted(cnt + 50 + i, 0, stream=i))  # before the start
    junk += [foreign(cnt + 60), foreign(cnt + 61)]
    exp.update(bad_stream=5, out_of_window=5, bad_timestamp=5, bad_channel=5, bad_size=4)
    exp["before_start"] += 3
    exp["metadata"] += 2
    undecodable = [junk_datagram(rng, int(n)) for n in rng.integers(1, 9000, 10)]
    undecodable += [truncated(dg[k], rng) for k in keys[:10]]
    # Anywhere once the first frame pair (2 * NHEAP heaps) has decided the start: junk while
    # it is provisional is start_rejected instead (tests/capture/test_hostile.py covers that).
    for pkt in junk + undecodable:
        seq.insert(int(rng.integers(2 * NHEAP, len(seq) + 1)), pkt)
    seq = descriptor_datagrams(G) + seq + stop_datagrams(G, 2 * 10 ** 6)
    exp["packets"] = len(seq) - len(undecodable)
    delivered = {k for k in keys if k not in dropped}
    return seq, exp, delivered, start


@pytest.mark.parametrize("transport", ["inproc", "pcap"])
def test_hostile_traffic_exact(transport, tmp_path):
    sim = simulator(seed=1)
    t0, nframe = 480, 9  # frame 1 precedes the aligned start (frame 2)
    frames = sim.frames(t0, nframe)
    seq, exp, delivered, start = hostile_traffic(frames, t0, np.random.default_rng(7))
    if transport == "inproc":
        queue = spead2.InprocQueue()
        sink, source = InprocDatagramSink(queue), InprocSource(queue)
    else:
        path = tmp_path / "hostile.pcap"
        sink, source = PcapWriter(path), PcapSource(str(path))
    for pkt in seq:
        sink.send(pkt)
    sink.close()
    cap = capture_frames(source, G, chan0=CHAN0, window=4)
    out = list(cap)
    assert [f.time_tag for f in out] == [480 * i for i in range(start, t0 // 480 + nframe)]
    for f in out:
        fid = f.time_tag // 480
        want = frames[fid - t0 // 480].reshape(NHEAP, -1)
        got = f.frame.reshape(NHEAP, -1)
        for idx in range(NHEAP):
            present = (fid, idx) in delivered
            assert f.mask.reshape(-1)[idx] == present
            assert np.array_equal(got[idx], want[idx] if present else np.zeros_like(want[idx]))
    counters = cap.counters()
    assert counters == exp
    stats = cap.stream.stats
    judged = sum(counters[k] for k in ("stop_heaps", "metadata", "bad_size", "bad_pointer",
                                       "bad_timestamp", "bad_stream", "bad_channel",
                                       "before_start", "out_of_window", "late", "duplicate"))
    assert stats["rejected_heaps"] == judged  # every rejection counted exactly once


def test_resync_starts_a_new_aligned_sequence_and_explicit_start():
    sim = simulator(seed=2)
    a = sim.frames(0, 3)
    b = sim.frames(480 * 1001, 5)  # the F-engines jump far ahead (to an odd frame)
    queue = spead2.InprocQueue()
    sink = InprocDatagramSink(queue)
    # An absurd heap arrives first: with start_timestamp given it cannot hijack the start.
    sink.send(crafted(10 ** 6, 480 * 10 ** 9))
    for part, t in ((a, 0), (b, 480 * 1001)):
        for *_, pkt in frame_datagrams(part, G, t, chan0=CHAN0, cnt0=1 + t):
            sink.send(pkt)
    sink.close()
    cap = capture_frames(InprocSource(queue), G, chan0=CHAN0, window=4, start_timestamp=0)
    out = list(cap)
    # The jump is followed once two frames (1001, 1002) hold a quorum (33 of 64 heaps) while
    # the old sequence is silent; the new sequence starts at the next aligned frame, 1004.
    assert [f.time_tag // 480 for f in out] == [0, 1, 2, 1004, 1005]
    assert [f.new_sequence for f in out] == [True, False, False, True, False]
    assert np.array_equal(np.stack([f.frame for f in out]), np.concatenate([a, b[3:]]))
    c = cap.counters()
    # out of window: the absurd heap, frame 1001, 33 heaps of frame 1002 (the jump); the rest
    # of 1002 and all of 1003 are before the new start.
    assert (c["out_of_window"], c["before_start"], c["sequences"]) == (1 + NHEAP + 33,
                                                                      NHEAP - 33 + NHEAP, 2)
    assert (c["heaps"], c["missing"], c["restarts"]) == (5 * NHEAP, 0, 0)  # forward: no restart


@pytest.mark.parametrize("first", [0, 1000], ids=["back_to_the_start", "back_before_it"])
def test_restart_back_is_followed_as_a_jump_forward_is(first, caplog):
    """The F-engines run 40 frames from frame ``first``, re-arm and start again from frame 0
    (the sync time unchanged). Frames behind the time base vote as far-ahead ones do: once two
    frames hold a quorum while the old time base is silent, a new sequence begins at the next
    aligned frame (2), one log line says so and ``restarts`` counts it; the heaps after the
    restart are delivered, not counted late or before_start."""
    sim = simulator(seed=6)
    a, b = sim.frames(480 * first, 40), sim.frames(0, 20)
    queue = spead2.InprocQueue()
    sink = InprocDatagramSink(queue)
    for part, t, cnt in ((a, 480 * first, 1), (b, 0, 10 ** 6)):
        for *_, pkt in frame_datagrams(part, G, t, chan0=CHAN0, cnt0=cnt):
            sink.send(pkt)
    sink.close()
    cap = capture_frames(InprocSource(queue), G, chan0=CHAN0)
    with caplog.at_level("WARNING"):
        out = list(cap)
    assert [f.time_tag // 480 for f in out] == [*range(first, first + 40), *range(2, 20)]
    assert [f.time_tag // 480 for f in out if f.new_sequence] == [first, 2]
    assert np.array_equal(np.stack([f.frame for f in out]), np.concatenate([a, b[2:]]))
    c = cap.counters()
    # frame 0 and 33 heaps of frame 1 vote (counted where they fell: late within the old
    # sequence, before_start before it); the rest of frame 1 is before the new start
    voted = "late" if first == 0 else "before_start"
    rest = {"late": 0, "before_start": NHEAP - 33}
    rest[voted] += NHEAP + 33
    assert c == zero_counters(heaps=58 * NHEAP, frames=58, sequences=2, restarts=1,
                              packets=60 * NHEAP, **rest)
    [line] = [r.getMessage() for r in caplog.records if "resynchronised" in r.getMessage()]
    assert f"back: frame {first + 39} to frame 2" in line and "restarted" in line
    # what monitoring reads of the counter the votes fell in says they vote
    assert "vote for a restart" in COUNTERS[voted] and "vote" in COUNTERS["out_of_window"]


def test_heaps_just_before_a_new_start_do_not_vote_it_again():
    """After a jump forward the new sequence starts at the next aligned frame (align 8: 1008
    after a vote ending at 1002); frames 1003-1007 are before that start, and must not vote for
    a time base of their own: it would win (the new sequence has nothing yet) and begin the
    same sequence again, past spead2's window."""
    sim = simulator(seed=9)
    a, b = sim.frames(0, 4), sim.frames(480 * 1001, 12)
    queue = spead2.InprocQueue()
    sink = InprocDatagramSink(queue)
    for part, t in ((a, 0), (b, 480 * 1001)):
        for *_, pkt in frame_datagrams(part, G, t, chan0=CHAN0, cnt0=1 + t):
            sink.send(pkt)
    sink.close()
    cap = capture_frames(InprocSource(queue), G, chan0=CHAN0, align=8)
    out = list(cap)
    assert [f.time_tag // 480 for f in out] == [0, 1, 2, 3, *range(1008, 1013)]
    assert np.array_equal(np.stack([f.frame for f in out]), np.concatenate([a, b[7:]]))
    assert int(cap._state[_State.NEPOCH]) == 2  # two sequences recorded, none begun twice
    c = cap.counters()
    assert (c["sequences"], c["restarts"], c["before_start"]) == (2, 0, 6 * NHEAP - 33)


def test_explicit_start_is_a_floor_a_restart_never_falls_below():
    """With ``start_timestamp`` frames before it are before_start for good: F-engines that
    restart from 0 under a start at frame 1000 are not followed there."""
    sim = simulator(seed=7)
    a, b = sim.frames(480 * 1000, 6), sim.frames(0, 6)
    queue = spead2.InprocQueue()
    sink = InprocDatagramSink(queue)
    for part, t, cnt in ((a, 480 * 1000, 1), (b, 0, 10 ** 6)):
        for *_, pkt in frame_datagrams(part, G, t, chan0=CHAN0, cnt0=cnt):
            sink.send(pkt)
    sink.close()
    cap = capture_frames(InprocSource(queue), G, chan0=CHAN0, start_timestamp=480 * 1000)
    assert [f.time_tag // 480 for f in cap] == list(range(1000, 1006))
    c = cap.counters()
    assert (c["before_start"], c["sequences"], c["restarts"]) == (6 * NHEAP, 1, 0)


def test_repeated_frame_datagrams_equal_those_built_one_by_one():
    from xengine_block.capture.spead import repeated_frame_datagrams

    frame = simulator(seed=8).frames(0, 1)
    fast = repeated_frame_datagrams(frame, G, 5, 960, chan0=CHAN0, cnt0=7)
    slow = frame_datagrams(np.concatenate([frame] * 5), G, 960, chan0=CHAN0, cnt0=7)
    assert [bytes(p) for p in fast] == [d for *_, d in slow]


def test_buffer_source_captures_pre_built_datagrams():
    from xengine_block.capture.spead import repeated_frame_datagrams
    from xengine_block.capture.transports import BufferSource

    frame = simulator(seed=9).frames(0, 1)
    blob = repeated_frame_datagrams(frame, G, 6, 0, chan0=CHAN0).tobytes()
    cap = capture_frames(BufferSource(blob), G, chan0=CHAN0, start_timestamp=0)
    out = list(cap)
    assert [f.time_tag for f in out] == [480 * i for i in range(6)]
    assert all(np.array_equal(f.frame, frame[0]) and f.mask.all() for f in out)
    assert cap.counters()["heaps"] == 6 * NHEAP


def test_parse_source():
    s = parse_source("udp://127.0.0.1:7150")
    assert isinstance(s, UdpSource) and (s.address, s.port) == ("127.0.0.1", 7150)
    assert parse_source("udp://:7148").address == "127.0.0.1"
    assert parse_source("x.pcap") == PcapSource("x.pcap")
    with pytest.raises(ValueError, match="udp://"):
        parse_source("tcp://host:1")


def test_capture_block_rings_and_headers(tmp_path):
    sim = simulator(seed=3)
    frames = sim.frames(0, 5)
    path = tmp_path / "obs.pcap"
    with pcap_sender(G, path, chan0=CHAN0) as sender:
        sender.send_frames(frames, 0)
    with Pipeline() as p:
        cap = CaptureBlock(PcapSource(str(path)), G, ARRAY, chan0=CHAN0, **SKY)
        sink = Collect(cap)
        p.run()
    hdr, mhdr = sink.headers[0]
    assert hdr["time_tag"] == 0 and hdr["name"] == "capture-0" and mhdr["name"] == "capture-0.mask"
    for key, value in dict(SKY, chan0=CHAN0, nchan=18, nstream=32).items():
        assert hdr[key] == value and mhdr[key] == value
    assert hdr["geometry"] == G.to_dict() and hdr["array"] == ARRAY.to_dict()
    assert hdr["_tensor"]["dtype"] == "i8" and hdr["_tensor"]["shape"] == [-1, 32, 18, 60, 2, 8]
    assert mhdr["_tensor"]["dtype"] == "u8" and mhdr["_tensor"]["shape"] == [-1, 32, 2]
    assert hdr["_tensor"]["scales"][0] == [SKY["sync_time"], 480 / SKY["fs_hz"]]
    assert np.array_equal(np.concatenate(sink.frames), frames)  # gulps of P=2, last one short
    assert np.concatenate(sink.masks).all()
    assert cap.capture_counters()["frames"] == 5 and cap.perf["frames"] == 5
    # the recording's end-of-stream heap (no stream id) is counted; end of file ended it
    assert cap.capture_counters()["stop_heaps"] == 1 and cap.stop_heaps_by_stream().sum() == 0


def test_capture_block_resync_gives_two_sequences():
    sim = simulator(seed=4)
    a, b = sim.frames(0, 2), sim.frames(480 * 2000, 4)
    queue = spead2.InprocQueue()
    with inproc_sender(G, queue, chan0=CHAN0) as sender:
        sender.send_frames(a, 0)
        sender.send_frames(b, 480 * 2000)
    with Pipeline() as p:
        cap = CaptureBlock(InprocSource(queue), G, ARRAY, chan0=CHAN0, window=4, **SKY)
        sink = Collect(cap)
        p.run()
    # frames 2000 and 2001 carry the vote for the jump; the new sequence starts at 2002
    assert [h[0]["time_tag"] for h in sink.headers] == [0, 480 * 2002]
    assert [h[1]["name"] for h in sink.headers] == ["capture-0.mask", "capture-960960.mask"]
    assert np.array_equal(np.concatenate(sink.frames), np.concatenate([a, b[2:]]))
    assert cap.capture_counters()["sequences"] == 2


def test_capture_block_set_sky_replaces_header_fields_and_names_a_wrong_one():
    with Pipeline():
        cap = CaptureBlock(InprocSource(spead2.InprocQueue()), G, ARRAY, chan0=CHAN0, **SKY)
    before = cap.sky
    cap.set_sky(sync_time=1.9e9)
    assert cap.sky == {**SKY, "sync_time": 1.9e9} and before["sync_time"] == SKY["sync_time"]
    with pytest.raises(ValueError, match="no header field 'sync'"):
        cap.set_sky(sync=1.0)


def test_one_forged_start_heap_costs_no_real_data():
    """The first heap of a capture (CaptureBlock defaults, no start_timestamp)
    claims a far-future time, then the F-engines send 24 frames. The heaps that arrive while
    the start is provisional wait in the reorder window, so once the quorum overrules the
    forged start all 1536 are delivered from frame 0 and the first dump (P = 4 frames) is
    complete: the forged heap costs no real heap."""
    g = Geometry(nstream=64, nchan=9, npacket=4)
    frames = np.random.default_rng(22).integers(-128, 128, (24, *g.frame_shape), dtype=np.int8)
    queue = spead2.InprocQueue()
    sink = InprocDatagramSink(queue)
    forged = np.full((1, *g.frame_shape), 7, np.int8)
    sink.send(frame_datagrams(forged, g, 480 * 10 ** 9, cnt0=10 ** 6)[0][3])
    for *_, pkt in frame_datagrams(frames, g, 0):
        sink.send(pkt)
    sink.close()
    with Pipeline() as p:
        cap = CaptureBlock(InprocSource(queue), g, default_array(32), **SKY)
        out = Collect(cap)
        p.run()
    assert [h[0]["time_tag"] for h in out.headers] == [0]
    assert np.array_equal(np.concatenate(out.frames), frames)
    assert out.frames[0].shape[0] == 4 and out.masks[0].all()  # the first dump, complete
    c = cap.capture_counters()
    assert (c["heaps"], c["missing"], c["frames"], c["start_rejected"]) == (1536, 0, 24, 1)
    assert c["before_start"] == c["out_of_window"] == 0


def test_deliveries_are_the_ring_slots_and_heaps_land_there():
    """Zero copy: every chunk spead2 fills is a slot of the output rings (frames and mask), so
    the frames a reader acquires are the bytes spead2 placed, not a copy."""
    from xengine_block.capture.receive import RingSlots
    from xengine_block.runtime.ring import Ring

    frames = simulator(seed=5).frames(0, 6)
    queue = spead2.InprocQueue()
    with inproc_sender(G, queue, chan0=CHAN0) as sender:
        sender.send_frames(frames, 0)
    rings = [Ring(), Ring()]
    with rings[0].begin_writing() as wf, rings[1].begin_writing() as wm:
        plan = CapturePlan(G, chan0=CHAN0)
        slots = RingSlots.for_rings(plan, [wf, wm], 2)
        cap = Capture(InprocSource(queue), plan, slots=slots)
        got = []
        for d in cap.deliveries():
            assert d.frame_id is not None
            assert np.shares_memory(d.data, rings[0]._buf)
            assert np.shares_memory(d.present, rings[1]._buf)
            got.append(d.data.view(np.int8).reshape(-1, *G.frame_shape)[:d.nframe].copy())
    assert plan.chunk_frames > 1 and len(got) == -(-6 // plan.chunk_frames)  # frames share chunks
    assert np.array_equal(np.concatenate(got), frames)


def test_capture_block_keeps_a_start_that_a_forged_lane_followed():
    """The real start's lane is followed by a forged candidate's lane: the real frames move next
    to the frames after them, once, so the ring sequence is still one run of slots."""
    frames = simulator(seed=6).frames(0, 8)
    dg = [pkt for *_, pkt in frame_datagrams(frames, G, 0, chan0=CHAN0)]
    queue = spead2.InprocQueue()
    sink = InprocDatagramSink(queue)
    for pkt in dg[:5] + [crafted(10 ** 6, 480 * 10 ** 9)] + dg[5:]:
        sink.send(pkt)
    sink.close()
    with Pipeline() as p:
        cap = CaptureBlock(InprocSource(queue), G, ARRAY, chan0=CHAN0, window=4, **SKY)
        out = Collect(cap)
        p.run()
    assert [h[0]["time_tag"] for h in out.headers] == [0]
    assert np.array_equal(np.concatenate(out.frames), frames)
    assert np.concatenate(out.masks).all()
    c = cap.capture_counters()
    assert (c["heaps"], c["frames"], c["start_rejected"]) == (8 * NHEAP, 8, 1)


@pytest.mark.parametrize("delay", [0.05, 1.0])  # while the stream is built / while waiting
def test_capture_block_shutdown_while_waiting_for_packets(delay):
    import threading
    import time
    with Pipeline() as p:
        cap = CaptureBlock(UdpSource("127.0.0.1", 0), G, ARRAY, **SKY)
        Collect(cap)
        threading.Timer(delay, p.shutdown).start()
        t0 = time.monotonic()
        p.run()
    assert time.monotonic() - t0 < delay + 2.0
    assert p.stop_reason == "shutdown() called"


def test_udp_receive_buffer_is_granted_or_the_shortfall_is_logged(caplog):
    """The socket buffer carries packets while the receiver is off the CPU: it is forced past
    net.core.rmem_max where the process may (CAP_NET_ADMIN), else a warning says so."""
    asked = 48 << 20
    source = UdpSource("127.0.0.1", 0, buffer_size=asked)
    with caplog.at_level("WARNING", logger="xengine_block.capture.sockets"):
        source.bind()
    try:
        granted = source._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        assert source.buffer_obtained == granted > 0
        warned = [r for r in caplog.records if "UDP receive buffer" in r.getMessage()]
        assert (granted >= asked) != bool(warned), (granted, warned)
    finally:
        source.close()


def _flood(port: int, n: int, size: int = 1000) -> None:
    """``n`` datagrams of ``size`` bytes to ``port`` on loopback, as fast as the kernel takes
    them (a blocking UDP send never drops on the sender's side)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
        for i in range(n):
            tx.sendto(i.to_bytes(4, "little") * (size // 4), ("127.0.0.1", port))


def _drain(sock: socket.socket) -> int:
    """Datagrams waiting in ``sock`` (read and discarded)."""
    sock.setblocking(False)
    n = 0
    while True:
        try:
            sock.recv(65536)
        except BlockingIOError:
            return n
        n += 1


def test_socket_drops_are_what_the_receive_buffer_could_not_hold():
    """Datagrams sent to a socket nobody reads fill its (smallest) buffer; every one the
    kernel did not queue is counted by dropped(), exactly, and the count outlives the socket."""
    needs_proc_udp()
    source = UdpSource("127.0.0.1", 0, buffer_size=1)  # the kernel's minimum
    source.bind()
    sent = 300
    _flood(source.port, sent)
    queued = _drain(source._sock)
    assert 0 < queued < sent
    assert source.dropped() == sent - queued
    source.close()
    assert source.dropped() == sent - queued


def test_socket_drops_of_a_service_source_sum_its_endpoints():
    needs_proc_udp()
    from xengine_block.service.config import UdpEndpoint
    from xengine_block.service.endpoints import ServiceSource

    src = ServiceSource([UdpEndpoint("127.0.0.1", 0), UdpEndpoint("127.0.0.1", 0)],
                        buffer_size=1)
    ports = [ep.port for ep in src.bind()]
    _flood(ports[0], 200)
    _flood(ports[1], 100)
    queued = [_drain(s) for s in src.sockets]
    assert src.dropped() == 300 - sum(queued) > 0
    src.close()
    assert src.dropped() == 300 - sum(queued)


def test_socket_drops_is_zero_without_a_socket():
    """Sources without a socket (pcap, in-process) report 0; a closed or unlisted socket is
    not found (None), and a table without it says nothing."""
    with Capture(InprocSource(spead2.InprocQueue()), G) as cap:
        assert cap.counters()["socket_drops"] == 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.close()
    assert socket_drops(sock) is None
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as live:
        assert socket_drops(live, proc_files=("/nonexistent/udp",)) is None


def test_service_sockets_get_the_buffer_or_say_so(caplog):
    """The service's sockets are sized like UdpSource's (SO_RCVBUFFORCE first, then a warning
    naming the endpoint when less was granted); they used plain SO_RCVBUF, silently capped."""
    from xengine_block.service.config import UdpEndpoint
    from xengine_block.service.endpoints import ServiceSource

    asked = 48 << 20
    src = ServiceSource([UdpEndpoint("127.0.0.1", 0)], buffer_size=asked)
    with caplog.at_level("WARNING", logger="xengine_block.capture.sockets"):
        src.bind()
    try:
        granted = src.sockets[0].getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        warned = [r.getMessage() for r in caplog.records if "UDP receive buffer" in
                  r.getMessage()]
        assert (granted >= asked) != bool(warned), (granted, warned)
        assert all(m.startswith("source udp://127.0.0.1:0: ") for m in warned)
    finally:
        src.close()


def test_recording_sidecar_keeps_ci4(tmp_path):
    from xengine_block.array import default_array

    g = Geometry(nstream=4, nchan=9, npacket=2, sample_bits=4, nibble_order="re_low")
    write_metadata(tmp_path / "r.pcap", default_array(2), g, sync_time=1.0, fs_hz=1.0,
                   freq0_hz=1.0, chan_bw_hz=1.0)
    assert read_metadata(tmp_path / "r.pcap").geometry == g


def test_capture_drops_ci8_sized_heaps_on_a_ci4_stream(tmp_path):
    from xengine_block.array import default_array
    from xengine_block.capture.receive import capture_frames, capture_headers
    from xengine_block.capture.spead import PcapWriter, frame_datagrams
    from xengine_block.capture.transports import PcapSource

    g4 = Geometry(nstream=4, nchan=9, npacket=1, sample_bits=4)
    g8 = g4.replace(sample_bits=8)
    x = random_ci4_natural(g4, 3, seed=2)
    good, wrong = natural_to_frames(x, g4), natural_to_frames(x, g8)
    pcap = tmp_path / "mixed.pcap"
    with PcapWriter(pcap) as w:
        for f, s, _, pkt in frame_datagrams(good, g4, 0):
            w.send(pkt)
            if f == 1 and s == 2:  # a ci8 heap for a later slot: wrong size for ci4
                w.send(frame_datagrams(wrong[2:], g8, 2 * 480)[s][3])
    cap = capture_frames(PcapSource(str(pcap)), g4, copy=True)
    got = list(cap)
    assert np.array_equal(np.stack([c.frame for c in got]), good)
    assert cap.counters()["bad_size"] == 1
    (hdr, _) = capture_headers(cap.plan, default_array(2), time_tag=0, sync_time=0.0,
                               fs_hz=1.0, freq0_hz=1.0, chan_bw_hz=1.0, name="x")
    assert hdr["_tensor"]["dtype"] == "ci4" and hdr["_tensor"]["shape"] == [-1, 4, 9, 60, 8]
    assert hdr["_tensor"]["labels"] == ["time", "stream", "freq", "coarse", "fine"]
