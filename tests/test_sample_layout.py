"""SampleLayout: the one description of input layouts, checked against hand-built arrays.

Each layout's plain reading (``natural``) is compared with numpy transposes of the same
samples written by hand in that layout, so a wrong stride, offset or nibble fails; the
fallback layout pass of every backend is checked bit for bit against the int64 reference.
"""

from __future__ import annotations

import numpy as np
import pytest

from xengine_block.backends import make_backend
from xengine_block.frames import frames_to_natural, natural_to_frames, pack_ci4
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_triangle
from xengine_block.sample_layout import LayoutError, SampleLayout, gather, to_packet_frames

RNG = np.random.default_rng(7)


def samples(nstream: int, nchan: int, nspec: int, lo: int = -128, hi: int = 128) -> np.ndarray:
    return RNG.integers(lo, hi, (nstream, nchan, nspec, 2)).astype(np.int8)


@pytest.mark.parametrize("bits", [8, 4])
def test_packet_layout_reads_our_frames(bits):
    g = Geometry(nstream=6, nchan=4, nchan_pkt=2, npacket=3, sample_bits=bits)
    x = samples(6, 4, 3 * 480, *((-8, 8) if bits == 4 else (-128, 128)))
    frames = natural_to_frames(x, g)
    lay = SampleLayout.packet(g)
    assert lay.frame_bytes == g.frame_bytes
    np.testing.assert_array_equal(lay.natural(frames), frames_to_natural(frames, g))
    np.testing.assert_array_equal(lay.natural(frames), x)


def test_bifrost_time_freq_station_pol_ci8():
    """Bifrost's [time, freq, station, pol] ci8: one spectrum per frame."""
    nt, nf, ns = 37, 3, 5
    x = samples(2 * ns, nf, nt)  # ours: [stream, chan, time, reim]
    buf = np.ascontiguousarray(x.reshape(ns, 2, nf, nt, 2).transpose(3, 2, 0, 1, 4))
    lay = SampleLayout.from_axes([("freq", nf), ("station", ns), ("pol", 2)])
    assert (lay.nstream, lay.nchan, lay.nspectra) == (2 * ns, nf, 1)
    np.testing.assert_array_equal(lay.natural(buf), x)
    merged = SampleLayout.from_axes([("chan", nf), ("stream", 2 * ns)])
    np.testing.assert_array_equal(merged.natural(buf), x)


@pytest.mark.parametrize("order", ["re_high", "re_low"])
def test_ci4_nibbles_both_orders(order):
    nt, nf, ns = 16, 2, 3
    x = samples(2 * ns, nf, nt, -8, 8)
    b = pack_ci4(x, order)  # [stream, chan, time] bytes
    buf = np.ascontiguousarray(b.reshape(ns, 2, nf, nt).transpose(3, 1, 2, 0))
    # axes [time][pol][freq][station]: any order of axes is a layout
    lay = SampleLayout.from_axes([("pol", 2), ("freq", nf), ("stand", ns)], encoding="ci4",
                                 nibble_order=order)
    np.testing.assert_array_equal(lay.natural(buf), x)
    other = "re_low" if order == "re_high" else "re_high"
    swapped = lay.replace(nibble_order=other).natural(buf)
    assert not np.array_equal(swapped, x)  # the order matters (re <-> im)


@pytest.mark.parametrize("out_order", ["re_high", "re_low"])
@pytest.mark.parametrize("source", ["ci4-re_high", "ci4-re_low", "ci8"])
def test_gather_packs_ci4_for_a_ci4_device(source, out_order):
    """A ci4 out layout (an NPU that takes ci4) gets packed bytes in its own nibble order, from
    ci4 in either order or from ci8 values within -8..7; a value outside is refused by name."""
    from xengine_block.sample_layout import gather

    nf, ns, nt = 2, 3, 480
    x = samples(2 * ns, nf, nt, -8, 8)
    axes = [("freq", nf), ("station", ns), ("pol", 2)]
    if source == "ci8":
        buf = np.ascontiguousarray(x.reshape(ns, 2, nf, nt, 2).transpose(3, 2, 0, 1, 4))
        lay = SampleLayout.from_axes(axes)
    else:
        order = source[4:]
        buf = np.ascontiguousarray(pack_ci4(x, order).reshape(ns, 2, nf, nt)
                                   .transpose(3, 2, 0, 1))
        lay = SampleLayout.from_axes(axes, encoding="ci4", nibble_order=order)
    g = Geometry(nstream=2 * ns, nchan=nf, nchan_pkt=nf, npacket=1, sample_bits=4,
                 nibble_order=out_order)
    frames = np.zeros((1, *g.frame_shape), np.int8)
    gather(buf, lay, frames, SampleLayout.packet(g))
    np.testing.assert_array_equal(frames, natural_to_frames(x, g))
    if source == "ci8":
        buf[7, 1, 2, 0, 1] = 9
        with pytest.raises(LayoutError, match="ci8 sample value 9 is outside -8..7"):
            gather(buf, lay, frames, SampleLayout.packet(g))


def test_guppi_style_frame_with_fine_time_and_antenna_subset():
    """[ant][chan][time][pol][reim] blocks of 40 spectra; antennas 2, 0 taken in that order."""
    na, nf, nt = 3, 2, 40
    x = samples(2 * na, nf, 2 * nt)  # two frames
    blocks = x.reshape(na, 2, nf, 2, nt, 2).transpose(3, 0, 2, 4, 1, 5)  # [f][a][c][t][p][ri]
    buf = np.ascontiguousarray(blocks)
    lay = SampleLayout.from_axes([("ant", na), ("freq", nf), ("fine_time", nt), ("pol", 2)],
                                 antennas=[2, 0])
    want = x.reshape(na, 2, nf, 2 * nt, 2)[[2, 0]].reshape(4, nf, 2 * nt, 2)
    np.testing.assert_array_equal(lay.natural(buf), want)
    # channels 1..1 only, and streams reordered
    sub = lay.select(channels=[1], streams=[1, 0, 3, 2])
    np.testing.assert_array_equal(sub.natural(buf), want[[1, 0, 3, 2]][:, 1:2])


def test_ci16_narrowed_or_refused():
    x = samples(4, 1, 5).astype(np.int16)
    buf = np.ascontiguousarray(x.reshape(2, 2, 1, 5, 2).transpose(3, 2, 0, 1, 4)).astype("<i2")
    lay = SampleLayout.from_axes([("freq", 1), ("station", 2), ("pol", 2)], encoding="ci16")
    np.testing.assert_array_equal(lay.natural(buf), x)
    g = Geometry(nstream=4, nchan=1, nchan_pkt=1, npacket=1)
    frames, nspec = to_packet_frames(buf, lay, g)
    assert nspec == 5 and frames.shape[0] == 1
    buf[2, 0, 1, 0, 1] = 300
    with pytest.raises(LayoutError, match="300 is outside -128..127"):
        to_packet_frames(buf, lay, g)


def natural_out(nstream: int, nchan: int, nspec: int) -> SampleLayout:
    """A two-part out layout [stream][chan][spectrum][re, im], counted in elements."""
    return SampleLayout(nstream, nchan, nspec, nstream * nchan * nspec * 2,
                        tuple(s * nchan * nspec * 2 for s in range(nstream)),
                        chan_stride=nspec * 2, time_stride=2, im_offset=1)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("encoding", ["ci8", "ci4-re_high", "ci4-re_low", "ci16"])
def test_gather_matches_the_numpy_reading(encoding, dtype):
    """gather (the C extension's pass) of a window of spectra, a subset of streams in another
    order and a range of channels, into every out type, equals numpy's plain reading
    (``natural``) of the same samples; what it does not write keeps its value; a window past
    the data, an out too small and an unsupported out type are refused by name."""
    enc, _, order = encoding.partition("-")
    nt, nf, ns = 70, 3, 4  # [time][freq][station][pol], 70 spectra: two time blocks of 35
    lo, hi = (-8, 8) if enc == "ci4" else (-128, 128)
    x = samples(2 * ns, nf, nt, lo, hi)
    x[1, 0, :3] = [[lo, hi - 1], [hi - 1, lo], [-1, 0]]
    if enc == "ci4":
        buf = np.ascontiguousarray(pack_ci4(x, order).reshape(ns, 2, nf, nt).transpose(3, 2, 0, 1))
    else:
        wide = x.astype("<i2") if enc == "ci16" else x
        buf = np.ascontiguousarray(wide.reshape(ns, 2, nf, nt, 2).transpose(3, 2, 0, 1, 4))
    lay = SampleLayout.from_axes([("freq", nf), ("station", ns), ("pol", 2)], encoding=enc,
                                 nibble_order=order or "re_high")
    lay = lay.replace(nspectra=35, frame_bytes=35 * lay.frame_bytes, time_block=35,
                      block_stride=lay.frame_bytes, time_stride=lay.frame_bytes)
    np.testing.assert_array_equal(lay.natural(buf), x)  # the reference reading itself
    streams, t0, nspec = [5, 0, 7, 2], 3, 60
    out = np.full((4, 2, nspec, 2), 99, dtype)
    gather(buf, lay, out, natural_out(4, 2, nspec), t0=t0, nspec=nspec, streams=streams,
           channels=(1, 3))
    np.testing.assert_array_equal(out, x[streams][:, 1:3, t0:t0 + nspec].astype(dtype))
    big = np.full((6, 3, nspec, 2), 99, dtype)
    gather(buf, lay, big, natural_out(6, 3, nspec), t0=t0, nspec=nspec, streams=streams,
           channels=(1, 3))
    assert (big[4:] == 99).all() and (big[:, 2] == 99).all()
    np.testing.assert_array_equal(big[:4, :2], out)
    with pytest.raises(LayoutError, match="hold fewer than spectrum 70"):
        gather(buf, lay, out, natural_out(4, 2, nspec), t0=11, nspec=nspec, streams=streams,
               channels=(1, 3))
    with pytest.raises(LayoutError, match="out holds"):
        gather(buf, lay, out[:3], natural_out(4, 2, nspec), t0=t0, nspec=nspec,
               streams=streams, channels=(1, 3))
    with pytest.raises(ValueError, match="dst must be int8, int16, int32, float32 or float64"):
        gather(buf, lay, out.astype(np.uint16), natural_out(4, 2, nspec), t0=t0, nspec=nspec,
               streams=streams, channels=(1, 3))


def test_round_trip_and_refusals():
    lay = SampleLayout.from_axes([("freq", 3), ("station", 4), ("pol", 2)])
    assert SampleLayout.from_dict(lay.to_dict()) == lay
    with pytest.raises(LayoutError, match="npol must be 2"):
        SampleLayout.from_axes([("freq", 3), ("station", 4), ("pol", 1)])
    with pytest.raises(LayoutError, match="stations \\* 2 pols must be even"):
        SampleLayout.from_axes([("freq", 3), ("stream", 5)])
    with pytest.raises(LayoutError, match="frame_bytes too small"):
        lay.replace(frame_bytes=lay.frame_bytes - 1)
    with pytest.raises(LayoutError, match="lacks"):
        SampleLayout.from_dict({"nstream": 2})
    with pytest.raises(LayoutError, match="overflow int32"):
        lay.check_spectra(65536)


@pytest.mark.parametrize("backend", ["cpu", "native", "emulator"])
def test_fallback_layout_pass_is_exact(backend):
    """Any backend takes any layout through correlate_layout: 1000 spectra (no whole
    packet) of a time-major ci8 input, full range, against the int64 reference."""
    from xengine_block.backends import availability

    g = Geometry(nstream=32, nchan=2, nchan_pkt=1, npacket=3) if backend != "emulator" else (
        Geometry(nstream=32, nchan=2, nchan_pkt=2, npacket=3, tile_n=2, tile_m=1, rows=2,
                 cols=4))
    ok, why = availability(g)[backend]
    if not ok:
        pytest.skip(f"{backend}: {why}")
    nt = 1000
    x = samples(32, 2, nt)
    x[3] = -128
    buf = np.ascontiguousarray(x.reshape(16, 2, 2, nt, 2).transpose(3, 2, 0, 1, 4))
    lay = SampleLayout.from_axes([("freq", 2), ("station", 16), ("pol", 2)])
    be = make_backend(backend, g)
    try:
        out = be.correlate_layout(buf, lay)
    finally:
        be.close()
    np.testing.assert_array_equal(out, reference_triangle(x))
