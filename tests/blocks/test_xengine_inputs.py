"""The X-engine block on inputs in other layouts than ours, in our runtime and on real Bifrost:
Bifrost's ``['time', 'freq', 'station', 'pol']`` tensors (also ``stand``, the merged
``stand*pol`` axis) in ci8, ci4 (both nibble orders) and ci16, ``sample_layout`` headers; any
gulp, integrations of any whole number of spectra aligned to absolute spectrum counts; bad
headers stop the pipeline with one line naming the key.

Expectations come from the int64 reference on the samples as generated here (natural order
``x[stream, chan, spectrum, reim]``), written into each layout by numpy transposes in the test.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.runtimes import array_source, collector
from xengine_block.array import default_array
from xengine_block.frames import natural_to_frames, pack_ci4
from xengine_block.geometry import Geometry
from xengine_block.integration import IntegrationClock
from xengine_block.reference import reference_triangle
from xengine_block.runtime.pipeline import PipelineError
from xengine_block.sample_layout import SampleLayout
from xengine_block.triangle import triangle_streams

pytestmark = pytest.mark.timeout(180)

NSTATION, NCHAN = 4, 3
S = 2 * NSTATION
RNG = np.random.default_rng(23)


def header(tensor: dict, time_tag: int = 0, **extra) -> dict:
    return dict({"name": "obs", "time_tag": time_tag, "sync_time": 1.8e9, "fs_hz": 25e3,
                 "freq0_hz": 60e6, "chan_bw_hz": 25e3, "nchan": NCHAN,
                 "array": default_array(NSTATION).to_dict(), "_tensor": tensor}, **extra)


def samples(nspec: int, lo: int = -128, hi: int = 128) -> np.ndarray:
    x = RNG.integers(lo, hi, (S, NCHAN, nspec, 2)).astype(np.int8)
    x[1, 0, :3] = lo  # the most negative value, exact too
    return x


def bifrost_ci8(x: np.ndarray) -> np.ndarray:
    """[time][freq][station][pol] (re, im) int8: Bifrost's ci8 in our convention."""
    return np.ascontiguousarray(
        x.reshape(NSTATION, 2, NCHAN, -1, 2).transpose(3, 2, 0, 1, 4))


def run(rt, outputs: list, gulp: int, **kw):
    """The X-engine fed by ``outputs`` (data [, mask]); returns (vis sink, valid sink, block)."""
    with rt.Pipeline() as p:
        src = array_source(rt, outputs, gulp)
        x = rt.XEngineBlock(src, backend=kw.pop("backend", "cpu"), **kw)
        vis, valid = collector(rt, x.orings[0]), collector(rt, x.orings[1])
        p.run()
    return vis, valid, x


def expected(x: np.ndarray, time_tag: int, nspec: int) -> list[tuple[np.ndarray, int]]:
    """Per aligned integration overlapping the data: (reference triangle, spectra in it)."""
    out, t1 = [], time_tag + x.shape[2]
    for k in range(time_tag // nspec, -(-t1 // nspec)):
        a, b = max(k * nspec, time_tag), min((k + 1) * nspec, t1)
        out.append((reference_triangle(x[:, :, a - time_tag:b - time_tag]), b - a))
    return out


def check_outputs(vis, valid, want, nspec: int, start: int) -> None:
    assert len(vis.out) == len(want)
    assert vis.hdr["time_tag"] == start and vis.hdr["nspectra"] == nspec
    assert vis.hdr["time_tag"] % nspec == 0
    assert vis.hdr["_tensor"]["scales"][0] == [1.8e9 + start / 25e3, nspec / 25e3]
    for v, c, (ref, n) in zip(vis.out, valid.out, want, strict=True):
        np.testing.assert_array_equal(v, ref)
        assert (c == n).all()


@pytest.mark.parametrize("gulp", [7, 100])
def test_bifrost_tensor_ci8_any_gulp_aligned_integrations(rt, gulp):
    """1-spectrum frames, integrations of 1000 spectra aligned to multiples of 1000: a sequence
    starting at spectrum 2500 gives a partial first output (2000..3000) and a partial last one
    (its short last gulp); gulps of 7 do not divide 1000."""
    t0, nspec, nt = 2500, 1000, 2105
    x = samples(nt)
    tensor = {"dtype": "ci8", "shape": [-1, NCHAN, NSTATION, 2],
              "labels": ["time", "freq", "station", "pol"]}
    vis, valid, xe = run(rt, [(header(tensor, t0), bifrost_ci8(x))], gulp,
                         integration_spectra=nspec, gulp_nframe=gulp)
    want = expected(x, t0, nspec)
    if nt % gulp == 0:  # the sequence ended on a gulp boundary: the partial last one dropped
        want = want[:-1]
        assert xe.dropped_partial == 1
    check_outputs(vis, valid, want, nspec, 2000)
    assert [n for _, n in want][:2] == [500, 1000]
    assert vis.hdr["geometry"]["nstream"] == S and vis.hdr["geometry"]["nchan_pkt"] == 1
    assert "sample_layout" not in vis.hdr


def test_default_gulp_is_one_integration_and_dropped_partial(rt):
    """No gulp given: one integration's frames; a sequence ending on that boundary inside an
    integration (it started mid-way) drops nothing, the one ending mid-integration on a gulp
    boundary is counted in dropped_partial."""
    x = samples(300)
    tensor = {"dtype": "ci8", "shape": [-1, NCHAN, NSTATION, 2],
              "labels": ["time", "stand", "freq", "pol"]}  # any axis order, stand = station
    buf = np.ascontiguousarray(x.reshape(NSTATION, 2, NCHAN, -1, 2).transpose(3, 0, 2, 1, 4))
    vis, valid, xe = run(rt, [(header(dict(tensor, shape=[-1, NSTATION, NCHAN, 2])), buf)],
                         100, integration_spectra=100)
    check_outputs(vis, valid, expected(x, 0, 100), 100, 0)
    assert xe.gulp_nframe == 100 and xe.dropped_partial == 0


@pytest.mark.parametrize("order", ["re_high", "re_low"])
def test_bifrost_tensor_ci4_both_nibble_orders(rt, order):
    """ci4 [time][freq][station][pol] bytes; the header's nibble_order picks the order (default
    re_high, Bifrost's and the LWA F-engines')."""
    x = samples(1200, -8, 8)
    b = pack_ci4(x, order)  # [stream, chan, time] bytes, written by the layout module
    buf = np.ascontiguousarray(b.reshape(NSTATION, 2, NCHAN, -1).transpose(3, 2, 0, 1))
    tensor = {"dtype": "ci4", "shape": [-1, NCHAN, NSTATION, 2],
              "labels": ["time", "freq", "station", "pol"]}
    extra = {} if order == "re_high" else {"nibble_order": "re_low"}
    vis, valid, _ = run(rt, [(header(tensor, **extra), buf)], 64, integration_spectra=480,
                        gulp_nframe=64)
    check_outputs(vis, valid, expected(x, 0, 480), 480, 0)


@pytest.mark.parametrize("label", ["station", "input", "stream"])
def test_merged_stand_pol_axis(rt, label):
    """(time, chan, stand*pol): a station axis without a pol axis (Bifrost's correlate_dp4a,
    the LWA capture rings) or an input/stream axis is s = 2*stand + pol."""
    x = samples(333)
    buf = np.ascontiguousarray(x.transpose(2, 1, 0, 3))  # [time][chan][stream]
    tensor = {"dtype": "ci8", "shape": [-1, NCHAN, S], "labels": ["time", "freq", label]}
    vis, valid, _ = run(rt, [(header(tensor, time_tag=111), buf)], 50, integration_spectra=111,
                        gulp_nframe=50)
    check_outputs(vis, valid, expected(x, 111, 111), 111, 111)


def test_ci16_int8_range_exact_and_wider_values_stop(rt):
    x = samples(90)
    buf = bifrost_ci8(x).astype(np.int16)
    tensor = {"dtype": "ci16", "shape": [-1, NCHAN, NSTATION, 2],
              "labels": ["time", "freq", "station", "pol"]}
    vis, valid, _ = run(rt, [(header(tensor), buf)], 30, integration_spectra=45)
    check_outputs(vis, valid, expected(x, 0, 45), 45, 0)
    buf[50, 1, 2, 0, 1] = -129
    with pytest.raises(PipelineError, match="ci16 sample value -129 is outside -128..127") as e:
        run(rt, [(header(tensor), buf)], 30, integration_spectra=45)
    assert "\n" not in str(e.value)


def test_sample_layout_header_meerkat_like_heaps(rt):
    """A sample_layout header (authoritative): MeerKAT-like heaps [ant][chan][256][pol][reim]
    per frame, antennas in the buffer in reverse order; integrations of 2 frames; a mask."""
    nt = 256
    x = samples(4 * nt)
    per = x.reshape(NSTATION, 2, NCHAN, 4, nt, 2)  # [ant][pol][chan][frame][t][reim]
    lay = SampleLayout.from_axes([("ant", NSTATION), ("chan", NCHAN), ("fine_time", nt),
                                  ("pol", 2)], antennas=list(range(NSTATION))[::-1])
    tensor = {"dtype": "i8", "shape": [-1, NSTATION, NCHAN, nt, 2, 2]}
    mask = np.ones((4, S), np.uint8)
    mask[1, 5] = 0  # stream 5 of frame 1 lost: zero-filled
    x[5, :, nt:2 * nt] = 0
    buf = np.ascontiguousarray(per[::-1].transpose(3, 0, 2, 4, 1, 5))
    mhdr = header({"dtype": "u8", "shape": [-1, S]}, name="obs.mask")
    vis, valid, _ = run(rt, [(header(tensor, sample_layout=lay.to_dict()), buf), (mhdr, mask)],
                        1, integration_spectra=2 * nt)
    assert len(vis.out) == 2
    j, k = triangle_streams(S)
    for f in range(2):
        np.testing.assert_array_equal(vis.out[f],
                                      reference_triangle(x[:, :, 2 * f * nt:(2 * f + 2) * nt]))
        m = mask[2 * f:2 * f + 2].astype(np.int64)
        np.testing.assert_array_equal(valid.out[f][0], nt * (m[:, j] * m[:, k]).sum(axis=0))


def test_packet_input_integration_spectra_and_gulp(rt):
    """Our own frames (geometry, P = 2): integrations of 3 packets (not P) read in gulps of 2
    frames, from a sequence that starts at packet 4 (integrations at multiples of 1440)."""
    g = Geometry(nstream=S, nchan=NCHAN, nchan_pkt=1, npacket=2)
    x = samples(8 * 480)
    hdr = header({"dtype": "i8", "shape": [-1, *g.frame_shape]}, time_tag=4 * 480,
                 geometry=g.to_dict())
    vis, valid, _ = run(rt, [(hdr, natural_to_frames(x, g))], 2, integration_spectra=1440,
                        gulp_nframe=2)
    want = expected(x, 4 * 480, 1440)
    assert [n for _, n in want] == [960, 1440, 1440]
    check_outputs(vis, valid, want, 1440, 1440)


def test_clock_cuts():
    c = IntegrationClock(time_tag=2500, frame_spectra=1, integration_spectra=1000)
    assert c.start_tag == 2000 and c.frames(0) == (0, 500) and c.frames(1) == (500, 1500)
    assert c.segments(490, 1510) == [(0, 490, 500), (1, 500, 1500), (2, 1500, 1510)]
    with pytest.raises(ValueError, match="time_tag 100 is not .* multiple of the frame's 256"):
        IntegrationClock(100, 256, 512)
    with pytest.raises(ValueError, match="integration_spectra 1000 is not a whole number"):
        IntegrationClock(0, 256, 1000)


BAD = [
    ({"dtype": "cf32", "shape": [-1, NCHAN, NSTATION, 2],
      "labels": ["time", "freq", "station", "pol"]}, {},
     r"_tensor \(cf32 .*\) cannot be correlated exactly: dtype 'cf32'"),
    ({"dtype": "ci8", "shape": [-1, NCHAN, 7], "labels": ["time", "freq", "station"]}, {},
     r"merged stream axis of 7"),
    ({"dtype": "ci8", "shape": [-1, NCHAN, NSTATION, 1],
      "labels": ["time", "freq", "station", "pol"]}, {},
     r"pol axis of 1: .* npol must be 2|_tensor.shape = .*one polarisation"),
    ({"dtype": "ci8", "shape": [-1, NCHAN, NSTATION, 3],
      "labels": ["time", "freq", "station", "pol"]}, {}, r"pol axis of 3"),
    ({"dtype": "ci8", "shape": [-1, NCHAN, NSTATION, 2],
      "labels": ["time", "freq", "station", "pol"]}, {"nibble_order": "low"},
     r"header nibble_order 'low' is not one of"),
    ({"dtype": "ci8", "shape": [-1, NCHAN, NSTATION, 2],
      "labels": ["time", "freq", "beam", "pol"]}, {},
     r"no sample_layout or geometry, and _tensor labels .*'beam'"),
]


@pytest.mark.parametrize("tensor, extra, match", BAD)
def test_bad_headers_stop_with_one_line(rt, tensor, extra, match):
    nbyte = {"cf32": 8, "ci8": 2}[tensor["dtype"]]
    frame = np.zeros((4, *tensor["shape"][1:], *([2] if nbyte == 2 else [])),
                     np.complex64 if nbyte == 8 else np.int8)
    with pytest.raises(PipelineError, match=match) as e:
        run(rt, [(header(tensor, **extra), frame)], 2, integration_spectra=2)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("kw, time_tag, match", [
    ({}, 0, r"no geometry to take P from: give the block integration_spectra"),
    ({"integration_spectra": 70000}, 0, r"integration_spectra 70000: .* overflow int32"),
    ({"integration_spectra": 10}, 3, r"time_tag 3 is not .* multiple of the frame's 2"),
    ({"integration_spectra": 5}, 0, r"integration_spectra 5 is not a whole number of frames"),
])
def test_bad_integrations_stop_with_one_line(rt, kw, time_tag, match):
    """Frames of 2 spectra (a sample_layout with fine_time 2)."""
    lay = SampleLayout.from_axes([("fine_time", 2), ("freq", NCHAN), ("station", NSTATION),
                                  ("pol", 2)])
    hdr = header({"dtype": "ci8", "shape": [-1, 2, NCHAN, NSTATION, 2]}, time_tag,
                 sample_layout=lay.to_dict())
    frame = np.zeros((4, 2, NCHAN, NSTATION, 2, 2), np.int8)
    with pytest.raises(PipelineError, match=match) as e:
        run(rt, [(hdr, frame)], 2, **kw)
    assert "\n" not in str(e.value)


def test_layout_mask_shape_checked(rt):
    tensor = {"dtype": "ci8", "shape": [-1, NCHAN, NSTATION, 2],
              "labels": ["time", "freq", "station", "pol"]}
    frame = np.zeros((2, NCHAN, NSTATION, 2, 2), np.int8)
    mhdr = header({"dtype": "u8", "shape": [-1, S, 3]}, name="obs.mask")
    with pytest.raises(PipelineError, match=r"mask header _tensor shape \[-1, 8, 3\] is not"):
        run(rt, [(header(tensor), frame), (mhdr, np.ones((2, S, 3), np.uint8))], 2,
            integration_spectra=2)


def test_unguaranteed_layout_input_each_integration_once(rt):
    """guarantee=False, gulps of 3 frames, integrations of 10: most input is overwritten while
    the block waits in its first gulp. Every frame is the same, so an output must be n times
    one frame's correlation, n its valid spectra; each integration is output exactly once."""
    from tests.helpers.threads import slow_first_gulp

    nt, per = 400, 10
    one = samples(1)
    x = np.repeat(one, nt, axis=2)
    tensor = {"dtype": "ci8", "shape": [-1, NCHAN, NSTATION, 2],
              "labels": ["time", "freq", "station", "pol"]}
    with rt.Pipeline() as p:
        src = array_source(rt, [(header(tensor), bifrost_ci8(x))], 3)
        xe = slow_first_gulp(rt.XEngineBlock, src)(src, backend="cpu", guarantee=False,
                                                    integration_spectra=per, gulp_nframe=3,
                                                    buffer_nframe=6)
        vis, valid = collector(rt, xe.orings[0]), collector(rt, xe.orings[1])
        p.run()
    assert len(vis.out) == nt // per
    ref = reference_triangle(one)
    used = 0
    for v, c in zip(vis.out, valid.out, strict=True):
        n = int(c[0, 0])
        assert (c == n).all() and 0 <= n <= per
        np.testing.assert_array_equal(v, n * ref)
        used += n
    assert xe.lost_frames > 0, "the test must lose input"
    assert used + xe.lost_frames >= nt
    assert xe.nodata_outputs == sum(1 for c in valid.out if not c.any())


@pytest.mark.parametrize("by", ["integration_spectra", "ninteg"])
def test_integrate_dumps_of_spectra_aligned(rt, by):
    """X-engine outputs of 100 spectra from a sequence starting at spectrum 150, dumps of 300
    spectra (3 outputs): dumps at multiples of 300, the first partial, sums and valid counts
    exact (int64), header nspectra/ninteg."""
    t0, nt = 150, 750  # spectra 150..900: dumps [0, 300) partial, [300, 600), [600, 900)
    x = samples(nt)
    tensor = {"dtype": "ci8", "shape": [-1, NCHAN, NSTATION, 2],
              "labels": ["time", "freq", "station", "pol"]}
    with rt.Pipeline() as p:
        src = array_source(rt, [(header(tensor, t0), bifrost_ci8(x))], 25)
        xe = rt.XEngineBlock(src, backend="cpu", integration_spectra=100, gulp_nframe=25)
        integ = rt.IntegrateBlock(xe, **({by: 300} if by == "integration_spectra"
                                         else {by: 3}))
        dumps, counts = collector(rt, integ.orings[0]), collector(rt, integ.orings[1])
        p.run()
    assert dumps.hdr["time_tag"] == 0 and dumps.hdr["nspectra"] == 300
    assert dumps.hdr["ninteg"] == 3
    want = expected(x, t0, 300)
    assert [n for _, n in want] == [150, 300, 300] and len(dumps.out) == 3
    for d, c, (ref, n) in zip(dumps.out, counts.out, want, strict=True):
        np.testing.assert_array_equal(d, ref)
        assert (c == n).all()


def test_integrate_spectra_not_whole_outputs_is_one_line(rt):
    tensor = {"dtype": "ci8", "shape": [-1, NCHAN, NSTATION, 2],
              "labels": ["time", "freq", "station", "pol"]}
    frame = np.zeros((20, NCHAN, NSTATION, 2, 2), np.int8)
    with rt.Pipeline() as p:
        src = array_source(rt, [(header(tensor), frame)], 10)
        xe = rt.XEngineBlock(src, backend="cpu", integration_spectra=10)
        rt.IntegrateBlock(xe, integration_spectra=25)
        with pytest.raises(PipelineError, match=r"integration_spectra 25 is not a whole number "
                                                r"of the X-engine's frames of 10 spectra") as e:
            p.run()
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="ninteg .* or integration_spectra"):
        rt.IntegrateBlock(xe, ninteg=2, integration_spectra=20)


def test_correlate_dp4a_tensor(rt):
    """Bifrost's correlate_dp4a input, ['time', 'freq', 'station', 'fine_time'] ci8
    (ledatelescope/bifrost python/bifrost/blocks/correlate_dp4a.py): no pol axis, so station is
    the merged stand*pol axis; frames of 16 spectra."""
    x = samples(64)
    buf = np.ascontiguousarray(x.reshape(S, NCHAN, 4, 16, 2).transpose(2, 1, 0, 3, 4))
    tensor = {"dtype": "ci8", "shape": [-1, NCHAN, S, 16],
              "labels": ["time", "freq", "station", "fine_time"]}
    vis, valid, _ = run(rt, [(header(tensor), buf)], 2, integration_spectra=32)
    check_outputs(vis, valid, expected(x, 0, 32), 32, 0)
