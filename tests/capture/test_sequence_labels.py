"""A sequence's labels (its sync time and the other header fields that time its dumps) are
fixed when the sequence starts on the wire, at the capture's first heap of it: a ``set_sky``
(what the live service's SIGHUP does with a new ``band.sync_time``) changes only the sequences
whose first heap comes after it, wherever the call lands in a sequence's start (before its
first heap, between that heap and its first chunk leaving the capture, after that) and
whatever the capture's chunking.

Three sequences are sent as F-engines that re-arm twice (each falls back in time: a restart):
A, then B, then C; the new sync time is set at one point of A's or B's start. Every sequence
that started before the call must carry the old sync time in its headers, every one after it
the new one, and the frames must be exactly those sent.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest
import spead2

from tests.helpers.capture import CHAN0, SKY, Collect
from xengine_block.array import default_array
from xengine_block.capture.receive import CaptureBlock
from xengine_block.capture.spead import InprocDatagramSink, frame_datagrams
from xengine_block.capture.transports import InprocSource
from xengine_block.geometry import Geometry
from xengine_block.runtime.pipeline import Pipeline

#: Small frames: the policy, not the volume, is under test.
G = Geometry(nstream=4, nchan=9, npacket=2)
ARRAY = default_array(2)
T1, T2 = SKY["sync_time"], SKY["sync_time"] + 48007.0
#: Each sequence's first frame (each re-arm falls back in time) and its frames.
STARTS = {"A": 4000, "B": 2000, "C": 0}
NFRAME = 24


def wait_for(condition: Callable[[], bool], what: str | None, timeout: float = 20.0) -> bool:
    """Wait until ``condition()``; on timeout fail naming ``what`` (or, with ``what`` None,
    return False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            if what is None:
                return False
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)
    return True


@pytest.mark.parametrize("frames_per_chunk", [1, 4])
@pytest.mark.parametrize("target", ["A", "B"])
@pytest.mark.parametrize("point", ["before_first_heap", "after_first_heap",
                                   "after_first_chunk"])
def test_set_sky_changes_only_the_sequences_that_start_after_it(point, target,
                                                                frames_per_chunk):
    rng = np.random.default_rng(7)
    frames = {name: rng.integers(-128, 128, (NFRAME, *G.frame_shape), dtype=np.int8)
              for name in STARTS}
    queue = spead2.InprocQueue()
    sink_out = InprocDatagramSink(queue)
    with Pipeline() as p:
        cap = CaptureBlock(InprocSource(queue), G, ARRAY, chan0=CHAN0, window=4, max_ahead=4,
                           frames_per_chunk=frames_per_chunk, **SKY)
        sink = Collect(cap)
    runner = threading.Thread(target=p.run, daemon=True)
    runner.start()
    assert cap.receiving.wait(30)
    sent = 0

    def send(datagrams: list[bytes]) -> None:
        nonlocal sent
        for d in datagrams:
            sink_out.send(d)
        sent += len(datagrams)
        wait_for(lambda: cap.capture_counters()["packets"] >= sent, "the capture to see them")

    started_before = set()
    for name, first in STARTS.items():
        datagrams = [d for *_, d in frame_datagrams(frames[name], G, first * G.nspectra_pkt,
                                                     chan0=CHAN0, cnt0=1 + sent)]
        if name != target:
            send(datagrams)
            if target not in started_before and name < target:
                started_before.add(name)
            continue
        seen = cap.capture_counters()["sequences"]
        if point == "before_first_heap":
            cap.set_sky(sync_time=T2)
            send(datagrams)
        elif point == "after_first_heap":
            send(datagrams[:1])
            cap.set_sky(sync_time=T2)
            send(datagrams[1:])
            started_before.add(name)
        else:
            n = G.npackets_per_frame  # a frame at a time until its first chunk has left
            for f in range(NFRAME):
                send(datagrams[f * n:(f + 1) * n])
                if wait_for(lambda seen=seen: cap.capture_counters()["sequences"] > seen, None,
                            0.2):
                    break
            else:
                raise AssertionError(f"{name}'s first chunk never left the capture")
            cap.set_sky(sync_time=T2)
            send(datagrams[(f + 1) * n:])
            started_before.add(name)
    sink_out.close()
    runner.join(30)
    assert not runner.is_alive()

    names = list(STARTS)
    assert len(sink.headers) == len(names), [h[0]["time_tag"] for h in sink.headers]
    for name, (hdr, mhdr) in zip(names, sink.headers, strict=True):
        want = T1 if name in started_before else T2
        assert hdr["sync_time"] == want and mhdr["sync_time"] == want, (name, point)
        assert hdr["_tensor"]["scales"][0][0] == want + hdr["time_tag"] / SKY["fs_hz"]
    # what arrived is exact: A whole; B and C less the frames their restart votes took
    got = np.concatenate(sink.frames)
    first_b = sink.headers[1][0]["time_tag"] // G.nspectra_pkt - STARTS["B"]
    first_c = sink.headers[2][0]["time_tag"] // G.nspectra_pkt - STARTS["C"]
    want = np.concatenate([frames["A"], frames["B"][first_b:], frames["C"][first_c:]])
    assert np.array_equal(got, want)
