"""MeerKAT F-engine heaps into the capture, over loopback UDP.

The sender (``sim/meerkat.py``) is written from the ICD with spead2's own sender and none of
our capture code; one packet's bytes are checked here against the ICD's layout written out by
hand. 8 F-engines, a 16-channel substream starting at channel 16 of 64, 256 spectra per heap
(16 KiB heaps, two 8192-byte packets each, interleaved across F-engines as concurrent senders
arrive). Frames are compared sample by sample with what was sent (via the ring header's
``SampleLayout``), correlated by a backend and compared bit for bit with the int64 reference,
and every counter is checked exactly, for clean, lossy and hostile traffic.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import spead2
import spead2.send

from tests.helpers.udp_capture import capture_udp, zero_counters
from xengine_block.array import ArrayDescription, default_array
from xengine_block.backends import get_backend
from xengine_block.capture.meerkat import FENG_RAW, FormatError, MeerkatFormat
from xengine_block.capture.placement import CapturePlan
from xengine_block.capture.receive import CapturedFrame, capture_headers
from xengine_block.capture.spead import raw_packet
from xengine_block.geometry import Geometry
from xengine_block.integration import valid_counts
from xengine_block.reference import reference_triangle
from xengine_block.sample_layout import SampleLayout
from xengine_block.sim.meerkat import (
    MeerkatFEngines,
    data_heap,
    heap_packets,
    interleave,
    item_group,
)
from xengine_block.triangle import triangle_streams

A, C, T = 8, 16, 256
TOTAL = 64
SBS = 2 * TOTAL  # samples_between_spectra of a wideband F-engine of 64 channels
CHAN0 = 16
FMT = MeerkatFormat(A, C, samples_between_spectra=SBS, spectra_per_heap=T)
STEP = T * SBS  # ADC samples per heap time
H0 = 4  # first heap time sent
PKTS = FMT.packets_per_heap()  # 2


def voltages(nheap: int, seed: int = 0) -> np.ndarray:
    """Natural samples ``[2A, C, nheap * T, 2]``, -128 included."""
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, (2 * A, C, nheap * T, 2), dtype=np.int8)


def fengines() -> MeerkatFEngines:
    return MeerkatFEngines(None, n_ants=A, nchan=C, spectra_per_heap=T,
                           samples_between_spectra=SBS, frequency=CHAN0)


def heaps(x: np.ndarray, h0: int = H0, eng: MeerkatFEngines | None = None
          ) -> dict[tuple[int, int], list[bytes]]:
    """``(heap time, feng_id) -> packets`` of every heap of ``x``."""
    return {(h, a): p for h, a, p in (eng or fengines()).datagrams(x, h0 * T)}


def in_order(dg: dict[tuple[int, int], list[bytes]], skip=()) -> list[bytes]:
    """Heap time by heap time, the F-engines' packets interleaved (concurrent senders)."""
    out = []
    for h in sorted({h for h, _ in dg}):
        out += interleave([dg[k] for k in sorted(dg) if k[0] == h and k not in skip])
    return out


def capture(datagrams: list[bytes], decodable: int, **kw):
    return capture_udp(datagrams, decodable, wire=FMT, chan0=CHAN0, **kw)


def check_output(out: list[CapturedFrame], x: np.ndarray, first: int, last: int,
                 present: set[tuple[int, int]]) -> None:
    """Heap times ``first..last`` delivered; every antenna's samples equal to those sent where
    present, else zero with both pols' mask 0 (read through the header's sample layout)."""
    assert [f.time_tag for f in out] == [h * T for h in range(first, last + 1)]
    layout = FMT.sample_layout
    for f in out:
        h = f.time_tag // T
        got = layout.natural(f.frame)
        want = x[:, :, (h - H0) * T:(h - H0 + 1) * T]
        for a in range(A):
            ok = (h, a) in present
            assert list(f.mask[2 * a:2 * a + 2]) == [ok, ok], (h, a)
            assert np.array_equal(got[2 * a:2 * a + 2],
                                  want[2 * a:2 * a + 2] if ok else 0 * want[:2]), (h, a)


def test_packets_follow_the_icd():
    """The sender's first packet, byte by byte: SPEAD-64-48 header with 8 pointers, heap cnt
    (k * n_ants + feng_id), heap size, offset, length, then timestamp (ADC samples), feng_id,
    frequency as immediates and feng_raw at address 0; payload from byte 72, ordered
    [chan][spectra][pol][re, im]; 8192 payload bytes per packet."""
    x = voltages(1, seed=1)
    eng = fengines()
    dg = heaps(x, h0=7, eng=eng)
    pkt = dg[(7, 3)][0]
    assert pkt[:8] == bytes([0x53, 0x04, 0x02, 0x06, 0x00, 0x00, 0x00, 0x08])
    words = struct.unpack(">8Q", pkt[8:72])
    ids = [(w >> 48) for w in words]
    vals = [w & ((1 << 48) - 1) for w in words]
    assert ids == [0x8001, 0x8002, 0x8003, 0x8004, 0x9600, 0xC101, 0xC103, 0x4300]
    assert vals == [0 * A + 3, C * T * 4, 0, 8192, 7 * T * SBS, 3, CHAN0, 0]
    assert len(pkt) == 72 + 8192 and len(dg[(7, 3)]) == 2
    payload = np.frombuffer(b"".join(p[72:] for p in dg[(7, 3)]), np.int8)
    c, t, p, r = 5, 200, 1, 1
    assert payload[((c * T + t) * 2 + p) * 2 + r] == x[2 * 3 + p, c, t, r]
    assert FENG_RAW.id == 0x4300  # our one source of truth agrees with the ICD


def test_clean_heaps_are_exact_and_correlate_exactly():
    x = voltages(6, seed=2)
    dg = heaps(x)
    seq = in_order(dg)
    out, c, _ = capture(seq, len(seq))
    check_output(out, x, H0, H0 + 5, set(dg))
    assert c == zero_counters(heaps=6 * A, frames=6, sequences=1, packets=len(seq))
    # The frames as the X-engine reads them: header layout -> backend -> exact vs int64.
    hdr, mask_hdr = capture_headers(_layout(), _array(), time_tag=out[0].time_tag,
                                    sync_time=0.0, fs_hz=1e3, freq0_hz=1e8, chan_bw_hz=1e3,
                                    name="t")
    layout = SampleLayout.from_dict(hdr["sample_layout"])
    assert hdr["_tensor"]["shape"] == [-1, A, C, T, 2] and hdr["_tensor"]["dtype"] == "ci8"
    assert mask_hdr["_tensor"]["shape"] == [-1, 2 * A]
    assert (hdr["spectra_per_heap"], hdr["samples_between_spectra"]) == (T, SBS)
    frames = np.stack([f.frame for f in out])
    backend = get_backend("cpu", Geometry(nstream=2 * A, nchan=C, nchan_pkt=1))
    vis = backend.correlate_layout(frames, layout)
    assert np.array_equal(vis, reference_triangle(x))


def _layout() -> CapturePlan:
    return CapturePlan(FMT, chan0=CHAN0)


def _array() -> ArrayDescription:
    return default_array(A)


def test_missing_heaps_are_gaps_in_the_mask():
    """F-engines skip heaps whose input was incomplete (the ICD: such heaps are not sent):
    zero data, both pols' mask 0, and exact valid counts per baseline."""
    x = voltages(6, seed=3)
    dg = heaps(x)
    lost = {(5, 0), (6, 3), (6, 4), (8, 7), (9, 1)}
    seq = in_order(dg, skip=lost)
    out, c, _ = capture(seq, len(seq))
    present = set(dg) - lost
    check_output(out, x, H0, H0 + 5, present)
    assert c == zero_counters(heaps=len(present), missing=len(lost), frames=6, sequences=1,
                              packets=len(seq))
    mask = np.stack([f.mask for f in out])
    g = Geometry(nstream=2 * A, nchan=C, nchan_pkt=1, npacket=6)
    per_stream = np.array([[(h, s // 2) in present for s in range(2 * A)]
                           for h in range(H0, H0 + 6)])
    want = (per_stream.astype(np.int64).T @ per_stream) * T  # both streams' heaps arrived
    j, k = triangle_streams(2 * A)
    got = valid_counts(mask, g) // g.nspectra_pkt * T  # it counts heaps of 480 spectra
    assert np.array_equal(got[0], want[j, k])


def _heap(h: int, a: int, *, cnt: int, nchan: int = C, ts: int | None = None,
          frequency: int = CHAN0, feng_id: int | None = None) -> list[bytes]:
    payload = np.full((nchan, T, 2, 2), 77, np.int8)
    heap = data_heap(h * STEP if ts is None else ts, a if feng_id is None else feng_id,
                     frequency, payload)
    return heap_packets(heap, cnt)


def test_hostile_and_malformed_heaps_are_counted_and_dropped():
    """Amid clean traffic: a heap of the wrong size, a misaligned timestamp, feng_ids outside
    the array, another substream's heap, one without feng_id, descriptors, stop heaps from
    every F-engine plus a forged one, and far-future heaps from three F-engines for four heap
    times: each counted once, none changes a sample or ends the capture."""
    x = voltages(8, seed=4)
    dg = heaps(x)
    good = in_order(dg)
    big = 10 ** 6 * A  # heap counters far from the real ones (cnt % A still picks a substream)
    no_feng = spead2.send.Heap(spead2.Flavour(4, 64, 48, 0))
    no_feng.repeat_pointers = True
    for spec_id, value in ((0x1600, 6 * STEP), (0x4103, CHAN0)):
        no_feng.add_item(spead2.Item(spec_id, "", "", (), format=[("u", 48)], value=value))
    no_feng.add_item(spead2.Item(0x4300, "", "", (C * T * 4,), dtype=np.int8,
                                 value=np.zeros(C * T * 4, np.int8)))
    bad = {
        "bad_size": _heap(6, 1, cnt=big + 1, nchan=C // 2),
        "bad_timestamp": _heap(6, 2, cnt=big + 2, ts=6 * STEP + SBS),
        "bad_stream": _heap(6, 3, cnt=big + 3, feng_id=A) + _heap(6, 4, cnt=big + 4,
                                                                  feng_id=1000),
        "bad_channel": _heap(6, 5, cnt=big + 5, frequency=0),
        "metadata": heap_packets(no_feng, big + 6),
    }
    descriptors = []
    ig = item_group(C, T)
    for a in range(2):
        descriptors += heap_packets(ig.get_heap(descriptors="all", data="none"), big + 8 + a)
    stops = []
    for a in range(A):
        stop = spead2.send.Heap(spead2.Flavour(4, 64, 48, 0))
        stop.add_end()
        stops += heap_packets(stop, big + 16 + a)
    forged = raw_packet([(spead2.HEAP_CNT_ID, big + 30, True), (spead2.PAYLOAD_OFFSET_ID, 0, True),
                         (spead2.PAYLOAD_LENGTH_ID, 1, True), (spead2.HEAP_LENGTH_ID, 1, True),
                         (spead2.STREAM_CTRL_ID, spead2.CTRL_STREAM_STOP, True),
                         (0x4101, 5, True)], b"\0")
    future = [p for h in range(4) for a in (1, 2, 6)
              for p in _heap(10 ** 6 + h, a, cnt=big + 40 + 8 * h + a)]
    n = 2 * A * PKTS
    seq = descriptors + good[:n]
    for pkts in bad.values():
        seq += pkts
    seq += good[n:2 * n] + stops + [forged] + future + good[2 * n:]
    out, c, cap = capture(seq, len(seq))
    check_output(out, x, H0, H0 + 7, set(dg))
    counts = {k: 2 if k == "bad_stream" else 1 for k in bad}
    assert c == zero_counters(heaps=8 * A, frames=8, sequences=1, packets=len(seq),
                              stop_heaps=A + 1, out_of_window=4 * 3,
                              **{k: v + (2 if k == "metadata" else 0) for k, v in counts.items()})
    # katgpucbf's stop heaps carry no feng_id; the forged one names feng_id 5.
    assert list(cap.stop_heaps_by_stream()) == [0] * 5 + [1] + [0] * 2


def test_a_far_future_first_heap_does_not_hold_the_start():
    """One heap far in the future arrives first: it opens only a provisional start, which
    the quorum of real F-engines overrules; the real heaps that arrived meanwhile waited in
    their own start-up lane, so the real start is the first heap time sent."""
    x = voltages(6, seed=5)
    dg = heaps(x)
    outlier = _heap(10 ** 7, 2, cnt=10 ** 6 * A + 2)
    seq = outlier + in_order(dg)
    out, c, _ = capture(seq, len(seq))
    check_output(out, x, H0, H0 + 5, set(dg))
    assert c == zero_counters(heaps=6 * A, frames=6, sequences=1, packets=len(seq),
                              start_rejected=1)


@pytest.mark.parametrize("field, kw", [
    ("spectra_per_heap", {"spectra_per_heap": 70000}),
    ("samples_between_spectra", {"samples_between_spectra": 0}),
    ("nchan", {"nchan": 0}),
])
def test_format_errors_name_the_field(field, kw):
    args = {"n_ants": A, "nchan": C, "samples_between_spectra": SBS, "spectra_per_heap": T}
    with pytest.raises(FormatError) as e:
        MeerkatFormat(**{**args, **kw})
    assert e.value.field == field and field in str(e.value)
