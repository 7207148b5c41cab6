"""The native backend's own layout pass (``kernels/cpu/layout.c``): any SampleLayout read
straight into its tiles, bit for bit against the int64 reference, on every path this CPU runs
(the others skip with the reason; the layout pass is one piece of code they all share, and
``tests/backends/test_isa_detection.py`` tests which path each CPU gets).

Layouts: Bifrost's [time][freq][station][pol] ci8 and ci4 (both nibble orders, the AVX2
transposes where 16 or 32 streams lie side by side, sample by sample for the rest), GUPPI-like
[ant][chan][time][pol], MeerKAT-like [heap][ant][chan][256][pol][reim], a permuted stream
order, planar re/im, a blocked time axis, ci16; odd spectrum counts, 1-3 threads.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.native import runnable
from xengine_block.backends.native import ISAS, NativeBackend, isa_status
from xengine_block.frames import natural_to_frames, pack_ci4
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_triangle
from xengine_block.sample_layout import SampleLayout

RNG = np.random.default_rng(31)
#: The fastest path of the shared layout pass here (AVX2 transposes), else portable C.
FAST = "avx2" if isa_status()["avx2"][0] else "scalar"


def native(nstream: int, nchan: int, isa: str, nthreads: int = 2, bits: int = 8,
           order: str = "re_high", kt: int = 0) -> NativeBackend:
    runnable(isa)
    g = Geometry(nstream=nstream, nchan=nchan, nchan_pkt=1, npacket=1, sample_bits=bits,
                 nibble_order=order)
    return NativeBackend(g, isa=isa, nthreads=nthreads, chunk_ksteps=kt)


def samples(nstream: int, nchan: int, nspec: int, bits: int = 8) -> np.ndarray:
    lo, hi = (-8, 8) if bits == 4 else (-128, 128)
    x = RNG.integers(lo, hi, (nstream, nchan, nspec, 2)).astype(np.int8)
    x[0, 0, :3] = lo  # the most negative values, exact too
    x[-1, -1, -2:] = [lo, hi - 1]
    return x


def bifrost(x: np.ndarray) -> np.ndarray:
    s, c, t, _ = x.shape
    return np.ascontiguousarray(x.reshape(s // 2, 2, c, t, 2).transpose(3, 2, 0, 1, 4))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("nstream, nspec, nthreads", [(8, 100, 1), (32, 1001, 2),
                                                      (40, 333, 3), (64, 17, 2)])
def test_bifrost_ci8(isa, nstream, nspec, nthreads):
    """16-stream groups side by side (S = 32, 40, 64), the 8 left of S = 40 sample by sample,
    spectra past a multiple of 16 and of 64 too; 1 spectrum per frame."""
    x = samples(nstream, 3, nspec)
    lay = SampleLayout.from_axes([("freq", 3), ("station", nstream // 2), ("pol", 2)])
    be = native(nstream, 3, isa, nthreads)
    np.testing.assert_array_equal(be.correlate_layout(bifrost(x), lay), reference_triangle(x))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("order", ["re_high", "re_low"])
@pytest.mark.parametrize("nstream, nspec", [(64, 481), (40, 96), (8, 5)])
def test_bifrost_ci4_both_nibble_orders(isa, order, nstream, nspec):
    x = samples(nstream, 2, nspec, bits=4)
    b = pack_ci4(x, order)  # [stream, chan, time]
    buf = np.ascontiguousarray(b.reshape(nstream // 2, 2, 2, nspec).transpose(3, 2, 0, 1))
    lay = SampleLayout.from_axes([("freq", 2), ("stand", nstream // 2), ("pol", 2)],
                                 encoding="ci4", nibble_order=order)
    be = native(nstream, 2, isa, bits=4, order=order)
    np.testing.assert_array_equal(be.correlate_layout(buf, lay), reference_triangle(x))


def test_guppi_like_and_meerkat_like_and_permuted():
    """[ant][chan][time][pol] frames of 40 spectra (an antenna subset in another order);
    MeerKAT-like heaps [ant][chan][256][pol][reim]; Bifrost's layout seen with its streams
    permuted (no group side by side)."""
    for isa in sorted({FAST, "scalar"}):
        na, nf, nt = 6, 2, 40
        x = samples(2 * na, nf, 3 * nt)  # 3 frames
        buf = np.ascontiguousarray(
            x.reshape(na, 2, nf, 3, nt, 2).transpose(3, 0, 2, 4, 1, 5))
        lay = SampleLayout.from_axes([("ant", na), ("freq", nf), ("fine_time", nt),
                                      ("pol", 2)], antennas=[4, 0, 5, 1])
        want = x.reshape(na, 2, nf, 3 * nt, 2)[[4, 0, 5, 1]].reshape(8, nf, 3 * nt, 2)
        be = native(8, nf, isa)
        np.testing.assert_array_equal(be.correlate_layout(buf, lay), reference_triangle(want))

        x = samples(16, 3, 2 * 256)
        heaps = np.ascontiguousarray(x.reshape(8, 2, 3, 2, 256, 2).transpose(3, 0, 2, 4, 1, 5))
        lay = SampleLayout.from_axes([("ant", 8), ("chan", 3), ("fine_time", 256), ("pol", 2)])
        be = native(16, 3, isa, nthreads=3)
        np.testing.assert_array_equal(be.correlate_layout(heaps, lay), reference_triangle(x))

        x = samples(32, 2, 130)
        perm = RNG.permutation(32)
        lay = SampleLayout.from_axes([("freq", 2), ("station", 16), ("pol", 2)]).select(
            streams=perm)
        be = native(32, 2, isa)
        np.testing.assert_array_equal(be.correlate_layout(bifrost(x), lay),
                                      reference_triangle(x[perm]))


def test_planar_and_blocked_time():
    """Planar re/im (im_offset half a frame) and our packet layout with its streams reversed
    (a blocked time axis the packet fast path does not take)."""
    x = samples(16, 2, 77)
    planes = np.ascontiguousarray(x.transpose(3, 2, 1, 0))  # [reim][time][chan][stream]
    lay = SampleLayout(16, 2, 77, planes.nbytes, tuple(range(16)), chan_stride=16,
                       time_stride=32, encoding="ci8", im_offset=planes.nbytes // 2)
    be = native(16, 2, FAST)
    np.testing.assert_array_equal(be.correlate_layout(planes, lay), reference_triangle(x))

    g = Geometry(nstream=16, nchan=2, nchan_pkt=1, npacket=2)
    x = samples(16, 2, 2 * 480)
    frames = natural_to_frames(x, g)
    rev = SampleLayout.packet(g).select(streams=list(range(16))[::-1])
    be = native(16, 2, FAST, kt=3)
    np.testing.assert_array_equal(be.correlate_layout(frames, rev),
                                  reference_triangle(x[::-1]))


def test_ci16_narrowed_and_range_checked():
    x = samples(16, 2, 50)
    buf = bifrost(x).astype("<i2")
    lay = SampleLayout.from_axes([("freq", 2), ("station", 8), ("pol", 2)], encoding="ci16")
    be = native(16, 2, FAST)
    np.testing.assert_array_equal(be.correlate_layout(buf, lay), reference_triangle(x))
    buf[30, 1, 3, 0, 1] = 200
    with pytest.raises(ValueError, match="ci16 sample value 200 is outside -128..127"):
        be.correlate_layout(buf, lay)


def test_accumulate_nframe_and_packet_layout_same_as_frames():
    x = samples(32, 2, 300)
    buf = bifrost(x)
    lay = SampleLayout.from_axes([("freq", 2), ("station", 16), ("pol", 2)])
    be = native(32, 2, FAST)
    out = be.correlate_layout(buf, lay, nframe=100)
    be.correlate_layout(buf[100:], lay, out=out, accumulate=True)
    np.testing.assert_array_equal(out, reference_triangle(x))
    g = Geometry(nstream=32, nchan=2, nchan_pkt=1, npacket=2)
    frames = natural_to_frames(samples(32, 2, 960), g)
    be = NativeBackend(g, isa=FAST)
    np.testing.assert_array_equal(be.correlate_layout(frames, SampleLayout.packet(g)),
                                  be.correlate(frames))


def test_disable_avx2_leaves_scalar(monkeypatch):
    """XENGINE_NATIVE_DISABLE=avx2: the scalar C path (and its sample-by-sample layout pass)
    still correlates any layout exactly."""
    monkeypatch.setenv("XENGINE_NATIVE_DISABLE", "avx2")
    assert not isa_status()["avx2"][0]
    x = samples(32, 2, 70)
    lay = SampleLayout.from_axes([("freq", 2), ("station", 16), ("pol", 2)])
    be = native(32, 2, "scalar", nthreads=1)
    np.testing.assert_array_equal(be.correlate_layout(bifrost(x), lay), reference_triangle(x))


def test_layout_reaching_past_the_buffer_is_refused():
    lay = SampleLayout.from_axes([("freq", 2), ("station", 8), ("pol", 2)])
    be = native(16, 2, FAST)
    buf = np.zeros((10, 2, 8, 2, 2), np.int8)
    with pytest.raises(Exception, match="hold fewer|reaches byte"):
        be.correlate_layout(buf, lay, nframe=11)


def scattered_packets(frames: np.ndarray, g: Geometry, frame_bytes: int,
                      offsets: np.ndarray) -> np.ndarray:
    """Each stream's packet of each frame copied to ``f * frame_bytes + offsets[s]`` of a
    buffer of junk (as the records of a pcap file hold them, headers between)."""
    stream = g.stream_bytes
    buf = RNG.integers(0, 256, frames.shape[0] * frame_bytes, dtype=np.uint8)
    flat = frames.reshape(frames.shape[0], g.nstream, stream).view(np.uint8)
    for f in range(frames.shape[0]):
        for s, off in enumerate(offsets):
            buf[f * frame_bytes + off:f * frame_bytes + off + stream] = flat[f, s]
    return buf


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("bits", [8, 4])
def test_packets_placed_anywhere_take_the_frame_path_in_place(isa, bits):
    """Our packet layout with the streams in any order at any byte (odd ones included) and
    frames any distance apart: the frame path reads it where it lies, bit for bit."""
    runnable(isa)
    g = Geometry(nstream=24, nchan=2, nchan_pkt=2, npacket=3, sample_bits=bits)
    x = samples(24, 2, 3 * 480, bits)
    frames = natural_to_frames(x, g)
    record = g.stream_bytes + 131  # a payload and an odd-sized header per record
    offsets = np.array([record * j + 77 for j in RNG.permutation(24)])
    lay = SampleLayout.packet(g).replace(frame_bytes=24 * record + 5,
                                         stream_offsets=tuple(offsets))
    assert lay.is_packets(g) and lay != SampleLayout.packet(g)
    buf = scattered_packets(frames, g, lay.frame_bytes, offsets)
    be = NativeBackend(g, isa=isa, nthreads=2)
    np.testing.assert_array_equal(be.correlate_layout(buf, lay), reference_triangle(x))
    out = be.correlate_layout(buf, lay, nframe=1)  # and frames 1, 2 added to it
    be.correlate_layout(buf[lay.frame_bytes:], lay, out=out, nframe=2, accumulate=True)
    np.testing.assert_array_equal(out, reference_triangle(x))
    be.close()


def test_packets_placed_past_the_buffer_are_refused():
    g = Geometry(nstream=8, nchan=1, nchan_pkt=1, npacket=1)
    be = NativeBackend(g, isa=FAST)
    lay = SampleLayout.packet(g).replace(frame_bytes=8 * g.stream_bytes + 64)
    buf = np.zeros(2 * lay.frame_bytes, np.uint8)
    be.correlate_layout(buf, lay, nframe=2)
    with pytest.raises(ValueError, match="reach past|hold fewer|reaches byte"):
        be._run(buf[:lay.frame_bytes + 8 * g.stream_bytes - 1], be.new_output(), "full",
                placed=lay, nframe=2)  # one byte short of the last stream's last sample
    with pytest.raises(ValueError, match="stream_offsets must be 8 int64"):
        be._ext.correlate(buf, be.new_output(), 8, 1, 60, be.isa, 1, stream_offsets=np.zeros(
            4, np.int64), frame_bytes=lay.frame_bytes, nframe=1)
