"""A live chain reads each integration in the backend's parts (``overlap_capture``): the native
X-engine starts on the first quarter of an integration while the capture places the rest, and
its sums are those of the reference, bit for bit; the rings after the X-engine are faulted in
when the chain is built, not while the first integration waits on them."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.runtimes import OURS, array_source, collector
from xengine_block.array import default_array
from xengine_block.backends import BackendUnavailable, get_backend
from xengine_block.blocks import XEngineBlock
from xengine_block.blocks.chain import correlator_chain
from xengine_block.capture.receive import CaptureBlock
from xengine_block.capture.spead import frame_datagrams
from xengine_block.capture.transports import BufferSource
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_frames
from xengine_block.runtime.pipeline import Pipeline
from xengine_block.runtime.ring import Ring

pytestmark = pytest.mark.timeout(120)

#: P = 72: a quarter is 18 frames, 8640 spectra, 135 K-steps of 64 (the native rule's floor is
#: 8192 spectra), so the native X-engine reads 18 frames a gulp.
G = Geometry(nstream=16, nchan=9, npacket=72)
SKY = {"sync_time": 1.7e9, "fs_hz": 40e3, "freq0_hz": 150e6, "chan_bw_hz": 40e3}


def native():
    try:
        return get_backend("native", G)
    except BackendUnavailable as exc:
        pytest.skip(f"native backend unavailable here: {exc}")


def test_native_reads_a_quarter_where_it_is_whole_k_steps_and_long_enough():
    b = native()
    assert b.overlap_gulp(72, 480) == 18
    assert b.overlap_gulp(136, 480) == 34  # S = 256's P: 16320 spectra, 255 K-steps
    assert b.overlap_gulp(32768, 1) == 8192  # Bifrost tensors: one spectrum a frame
    assert b.overlap_gulp(8, 480) == 8  # a quarter (960 spectra) would be too short
    assert b.overlap_gulp(74, 480) == 74  # halves of 17760 spectra are not whole K-steps
    assert b.overlap_gulp(54, 480) == 18  # a third where a quarter is not whole frames


def test_backends_without_a_rule_read_whole_integrations():
    assert get_backend("cpu", G).overlap_gulp(72, 480) == 72


def packets(frames: np.ndarray) -> bytes:
    return b"".join(d for *_, d in frame_datagrams(frames, G, 0))


def capture_xengine(frames: np.ndarray, overlap: bool) -> tuple[list, list, object]:
    """Our packets of ``frames`` -> capture -> native X-engine; its two outputs collected."""
    with Pipeline() as p:
        cap = CaptureBlock(BufferSource(packets(frames)), G, default_array(8), **SKY,
                           start_timestamp=0)
        xe = XEngineBlock(cap, backend="native", geometry=G, overlap_capture=overlap)
        vis, valid = collector(OURS, xe.orings[0]), collector(OURS, xe.orings[1])
        p.run()
    return vis.out, valid.out, xe


@pytest.mark.parametrize("extra", [0, 27, 36])
def test_quarter_gulps_sum_to_the_reference_bit_for_bit(extra):
    """Two whole integrations, then ``extra`` frames of a third: 27 (the last gulp is short:
    output partial, with its 27 frames' spectra) or 36 (two whole quarters: the sequence ends
    on a gulp boundary inside the integration, so it is dropped and counted, the documented
    price of overlap_capture)."""
    native()
    rng = np.random.default_rng(extra)
    n = 2 * G.npacket + extra
    frames = rng.integers(-128, 128, (n, *G.frame_shape), dtype=np.int8)
    vis, valid, xe = capture_xengine(frames, overlap=True)
    assert xe.gulp_nframe == 18
    whole = [reference_frames(frames[k * 72:(k + 1) * 72], G) for k in range(2)]
    want = whole + ([reference_frames(frames[144:], G)] if extra == 27 else [])
    assert len(vis) == len(want)
    for got, ref in zip(vis, want, strict=True):
        np.testing.assert_array_equal(got, ref)
    spectra = [72 * 480, 72 * 480] + ([27 * 480] if extra == 27 else [])
    assert [int(np.unique(c)[0]) for c in valid] == spectra
    assert xe.dropped_partial == (1 if extra == 36 else 0)


def test_whole_integration_gulps_without_overlap():
    native()
    frames = np.random.default_rng(9).integers(-128, 128, (144, *G.frame_shape), dtype=np.int8)
    vis, _, xe = capture_xengine(frames, overlap=False)
    assert xe.gulp_nframe == 72
    for k, got in enumerate(vis):
        np.testing.assert_array_equal(got, reference_frames(frames[k * 72:(k + 1) * 72], G))


def test_chain_overlaps_a_capture_and_faults_its_rings_in_before_the_run(tmp_path,
                                                                         monkeypatch):
    """correlator_chain on a capture: quarter gulps, the ring three integrations deep as
    before, and the X-engine's and the integrator's output rings allocated when built and not
    again while running (each reallocation is a fresh buffer faulted in)."""
    native()
    frames = np.random.default_rng(3).integers(-128, 128, (144, *G.frame_shape), dtype=np.int8)
    grown = []
    grow = Ring._grow

    def noting(ring, contiguous, total):
        before = (ring._span, ring._ghost)
        grow(ring, contiguous, total)
        if (ring._span, ring._ghost) != before:
            grown.append(ring.name)

    with Pipeline() as p:
        cap = CaptureBlock(BufferSource(packets(frames)), G, default_array(8), **SKY,
                           start_timestamp=0)
        chain = correlator_chain(cap, directory=tmp_path, geometry=G, backend="native",
                                 quicklook=False)
        rings = chain.xengine.orings + chain.integrate.orings
        assert all(r.total_bytes > 0 for r in rings)
        assert cap.orings[0].total_bytes >= 3 * 72 * G.frame_bytes
        monkeypatch.setattr(Ring, "_grow", noting)
        p.run()
    assert chain.xengine.gulp_nframe == 18 and chain.writer.dumps_written == 2
    assert not set(grown) & {r.name for r in rings}, grown


def test_chain_on_a_reader_keeps_whole_integrations(tmp_path):
    """Recordings (no capture plan) are read in whole integrations: a file whose length is
    a whole number of quarters but not of integrations still gets its partial last dump."""
    native()
    x = np.random.default_rng(4).integers(-128, 128, (90, *G.frame_shape), dtype=np.int8)
    hdr = {"name": "rec", "time_tag": 0, **SKY, "nchan": G.nchan, "geometry": G.to_dict(),
           "_tensor": {"dtype": G.frame_dtype, "shape": [-1, *G.frame_shape]}}
    with Pipeline() as p:
        src = array_source(OURS, [(hdr, x)], 18)
        xe = XEngineBlock(src, backend="native")
        vis = collector(OURS, xe.orings[0])
        p.run()
    assert xe.gulp_nframe == 72 and xe.dropped_partial == 0
    np.testing.assert_array_equal(vis.out[1], reference_frames(x[72:], G))
