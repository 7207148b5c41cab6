"""MeerKAT baseline-correlation-products heaps out: order, conjugation, missing
marker, saturation, and a pipeline whose heaps a spead2 receiver of our own decodes.

Expected values are computed here from the samples with katgpucbf's formula (``xbgpu/
correlation.py``: index ``(a2(a2+1)/2 + a1)*4 + p1 + 2*p2``, value ``sum x[a1,p1]
conj(x[a2,p2])``), not through the module's mapping, and the UVH5 convention is checked to be
the conjugate of it.
"""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest

from tests.conftest import random_frames
from tests.helpers.runtimes import array_source
from tests.helpers.spead import meerkat_formula, receive_heaps
from xengine_block.array import default_array
from xengine_block.capture.placement import CapturePlan
from xengine_block.capture.receive import capture_headers
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry
from xengine_block.outputs.spead import (
    MISSING,
    SATURATION,
    antennas_present,
    bls_ordering,
    encode,
    input_labels,
    meerkat_order,
)
from xengine_block.reference import reference_triangle
from xengine_block.triangle import baseline_index


def test_order_and_conjugation_match_katgpucbf_and_are_uvh5s_conjugate():
    rng = np.random.default_rng(0)
    nant = 5
    x = rng.integers(-128, 128, (2 * nant, 3, 200, 2), dtype=np.int8)
    ours = reference_triangle(x)  # K[j, k] = sum x_j conj(x_k), j <= k
    got = encode(ours, np.ones(nant, bool)).data
    want = meerkat_formula(x)
    assert got.dtype == np.dtype("<i4")
    assert np.array_equal(got, want)
    # UVH5 (docs/design.md, "Sign and conjugation"):
    # vis(ant_1 <= ant_2, feeds p1, p2) = conj(x[ant_1,p1]) x[ant_2,p2]:
    # the conjugate of MeerKAT's product for the same pair.
    a1, a2, p1, p2 = 1, 3, 1, 0
    s1, s2 = 2 * a1 + p1, 2 * a2 + p2
    uvh5 = np.sum((x[s1, ..., 0] - 1j * x[s1, ..., 1].astype(float))
                  * (x[s2, ..., 0] + 1j * x[s2, ..., 1].astype(float)), axis=-1)
    i = (a2 * (a2 + 1) // 2 + a1) * 4 + p1 + 2 * p2
    assert np.array_equal(got[:, i, 0], uvh5.real) and np.array_equal(got[:, i, 1], -uvh5.imag)
    # The one conjugated case: the "ba" product of an autocorrelation.
    index, conj = meerkat_order(nant)
    assert list(np.flatnonzero(conj)) == [(a * (a + 1) // 2 + a) * 4 + 1 for a in range(nant)]
    assert index[(2 * 3 // 2 + 1) * 4 + 2] == baseline_index(2 * 1 + 0, 2 * 2 + 1)


def test_bls_ordering_labels():
    labels = input_labels(["m900", "m901"], ("v", "h"))
    assert bls_ordering(labels) == [  # katsdpcontroller's test_product_controller example
        ("m900v", "m900v"), ("m900h", "m900v"), ("m900v", "m900h"), ("m900h", "m900h"),
        ("m900v", "m901v"), ("m900h", "m901v"), ("m900v", "m901h"), ("m900h", "m901h"),
        ("m901v", "m901v"), ("m901h", "m901v"), ("m901v", "m901h"), ("m901h", "m901h")]


def test_missing_marker_and_saturation():
    nant = 4
    rng = np.random.default_rng(1)
    vis = rng.integers(-1000, 1000, (2, 2 * nant * (2 * nant + 1) // 2, 2)).astype(np.int64)
    vis[0, 0, 0] = 3 << 31  # auto of stream 0: beyond int32
    vis[1, 5, 1] = -(3 << 31)
    present = np.array([True, False, True, True])
    r = encode(vis, present)
    ref = encode(vis, np.ones(nant, bool)).data
    for a2 in range(nant):
        for a1 in range(a2 + 1):
            sl = slice((a2 * (a2 + 1) // 2 + a1) * 4, (a2 * (a2 + 1) // 2 + a1) * 4 + 4)
            if 1 in (a1, a2):
                assert (r.data[:, sl] == MISSING).all()
            else:
                assert np.array_equal(r.data[:, sl], ref[:, sl])
    assert r.data[0, 0, 0] == SATURATION and r.clipped == 2 and r.missing_ants == 1
    assert ref.min() == -SATURATION  # saturation never produces the marker's -2^31


def test_antennas_present_from_autocorrelation_counts():
    nant, n = 3, 960
    valid = np.full((2, 21), n, np.int64)
    valid[1, baseline_index(3, 3)] = n - 480  # antenna 1, pol Y, second channel group
    assert list(antennas_present(valid, n, nant)) == [True, False, True]


G = Geometry(nstream=16, nchan=9, npacket=2)
NINTEG = 2  # X-engine frames per dump: 4 packet times, 1920 spectra
SBS = 18


def test_pipeline_dumps_arrive_as_meerkat_heaps(rt):
    """X-engine -> integrate -> SPEAD output over UDP loopback, in both runtimes: each dump
    decoded by a spead2 receiver equals katgpucbf's formula on the samples sent; an antenna
    that lost one packet is marked missing in its dump only; a dump where every antenna lost
    data is not sent; timestamps are the dumps' starts in ADC samples."""
    ndump = 4
    nframe = ndump * NINTEG * G.npacket
    frames = random_frames(G, nframe, seed=3)
    mask = np.ones((nframe, G.nstream), np.uint8)
    mask[5, 3] = 0  # dump 1: antenna 1 lost a packet (stream 3)
    mask[8 + 2, ::2] = 0  # dump 2: every antenna's X stream lost a packet
    frames[mask == 0] = 0  # the capture zero-fills missing packets
    array = default_array(G.nstream // 2)
    t0 = 8 * 480 * NINTEG * G.npacket  # dump-aligned
    hdrs = capture_headers(CapturePlan(G), array, time_tag=t0, sync_time=1.7e9,
                           fs_hz=1e4, freq0_hz=1e8, chan_bw_hz=1e4, name="t")
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    got: list = []
    receiver, thread = receive_heaps(sock, got)
    try:
        with rt.Pipeline() as p:
            src = array_source(rt, [(hdrs[0], frames), (hdrs[1], mask)], gulp=G.npacket)
            x = rt.XEngineBlock(src, backend="cpu")
            integ = rt.IntegrateBlock(x, ninteg=NINTEG)
            out = rt.SpeadOutputBlock(integ, samples_between_spectra=SBS, total_channels=27,
                                      destination=f"udp://127.0.0.1:{sock.getsockname()[1]}")
            p.run()
        out.close()  # the stop heap ends the receiver
        thread.join(10)
        assert not thread.is_alive()
    finally:
        receiver.stop()
        sock.close()
    assert out.spead_counters() == {"dumps_sent": 3, "dumps_skipped": 1, "dumps_with_missing": 1,
                              "clipped": 0}
    nspec = NINTEG * G.npacket * 480
    assert [h["timestamp"] for h in got] == [(t0 + d * nspec) * SBS for d in (0, 1, 3)]
    assert {h["frequency"] for h in got} == {0}  # the header's chan0
    for h, d in zip(got, (0, 1, 3), strict=True):
        fr = frames[d * NINTEG * G.npacket:(d + 1) * NINTEG * G.npacket]
        want = meerkat_formula(frames_to_natural(fr, G))
        if d == 1:  # baselines with antenna 1: all four products (-2^31, 1)
            for a2 in range(8):
                for a1 in range(a2 + 1):
                    if 1 in (a1, a2):
                        want[:, (a2 * (a2 + 1) // 2 + a1) * 4:][:, :4] = MISSING
        assert h["xeng_raw"].dtype == np.dtype("<i4")
        assert np.array_equal(h["xeng_raw"], want), d
    desc = got[0]["descriptions"]["xeng_raw"]
    ordering = json.loads(desc[desc.index("[["):])
    assert [tuple(p) for p in ordering] == bls_ordering(input_labels(list(array.antenna_names)))


@pytest.mark.parametrize("bad", ["udp://nowhere", "tcp://1.2.3.4:5", "udp://:5"])
def test_bad_destination_is_one_line(bad):
    from xengine_block.blocks.spead_output import parse_udp
    with pytest.raises(ValueError, match="udp://ADDRESS:PORT"):
        parse_udp(bad)
