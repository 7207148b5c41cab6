"""Every backend's own layout pass, bit for bit against the int64 reference: ``cpu`` (gathered
straight into its float32 scratch), ``emulator`` and ``npu`` on the simulated pyxrt device
(the host layout pass writing the device's input buffers: int8, or for ci4 packed bytes in the
device's nibble order), and the X-engine block on a Bifrost tensor with each of them.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.runtimes import OURS, array_source, collector
from xengine_block.backends import make_backend
from xengine_block.backends.npu import NpuBackend
from xengine_block.frames import pack_ci4
from xengine_block.geometry import Geometry, small_test_geometry
from xengine_block.npu.host.simdevice import SimulatedXrt, write_simulated_build
from xengine_block.reference import reference_triangle
from xengine_block.sample_layout import LayoutError, SampleLayout

RNG = np.random.default_rng(41)


def samples(nstream: int, nchan: int, nspec: int, bits: int = 8) -> np.ndarray:
    lo, hi = (-8, 8) if bits == 4 else (-128, 128)
    x = RNG.integers(lo, hi, (nstream, nchan, nspec, 2)).astype(np.int8)
    x[1, 0, :4] = lo
    return x


def bifrost(x: np.ndarray, bits: int = 8, order: str = "re_high") -> tuple[np.ndarray,
                                                                           SampleLayout]:
    """Bifrost's [time][freq][station][pol] buffer of ``x`` and its layout."""
    s, c, t, _ = x.shape
    axes = [("freq", c), ("station", s // 2), ("pol", 2)]
    if bits == 4:
        b = pack_ci4(x, order).reshape(s // 2, 2, c, t).transpose(3, 2, 0, 1)
        return (np.ascontiguousarray(b),
                SampleLayout.from_axes(axes, encoding="ci4", nibble_order=order))
    return (np.ascontiguousarray(x.reshape(s // 2, 2, c, t, 2).transpose(3, 2, 0, 1, 4)),
            SampleLayout.from_axes(axes))


def npu_sim(tmp_path, g: Geometry):
    write_simulated_build(tmp_path, g)
    return make_backend("npu", g, xrt=SimulatedXrt(), build_dir=tmp_path)


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("name", ["cpu", "emulator", "npu"])
def test_bifrost_layout_exact_and_accumulated(tmp_path, name, bits):
    """S = 40 (two NPU blocks of 32: block pairs, the last zero-padded), 4 channels in groups of
    2, 1500 spectra (the last device call partial), then the same split in two calls that add
    into one output."""
    g = small_test_geometry(nstream=40, nchan=4, sample_bits=bits)
    x = samples(40, 4, 1500, bits)
    buf, lay = bifrost(x, bits, "re_low" if bits == 4 else "re_high")
    if bits == 4:
        g = g.replace(nibble_order="re_low")
    be = npu_sim(tmp_path, g) if name == "npu" else make_backend(name, g)
    try:
        want = reference_triangle(x)
        np.testing.assert_array_equal(be.correlate_layout(buf, lay), want)
        out = be.correlate_layout(buf, lay, nframe=700)
        be.correlate_layout(buf[700:], lay, out=out, accumulate=True)
        np.testing.assert_array_equal(out, want)
        if name == "npu":
            # 1500 spectra in calls of P = 2 packets: 2 calls, then 1 + 1 after the split
            assert be.stats["layout_calls"] == 4 and be.stats["copied_calls"] == 0
    finally:
        be.close()


@pytest.mark.parametrize("name", ["emulator", "npu"])
def test_ci4_device_takes_the_other_nibble_order(tmp_path, name):
    """A re_high layout into a re_low ci4 device: the host pass repacks the nibbles on its way
    into the packed input buffers; S = 40 (block pairs), 4 channels (two groups)."""
    g = small_test_geometry(nstream=40, nchan=4, sample_bits=4, nibble_order="re_low")
    x = samples(40, 4, 1000, 4)
    buf, lay = bifrost(x, 4, "re_high")
    be = npu_sim(tmp_path, g) if name == "npu" else make_backend(name, g)
    try:
        np.testing.assert_array_equal(be.correlate_layout(buf, lay), reference_triangle(x))
    finally:
        be.close()


def test_npu_layout_at_its_block_writes_its_bos(tmp_path):
    """S = npu_block, one channel group: the host pass writes the ring entries' BOs (nothing
    copied after it); a MeerKAT-like heap layout."""
    g = small_test_geometry()  # 32 streams = npu_block, 2 channels = nchan_pkt, P = 2
    be = npu_sim(tmp_path, g)
    try:
        x = samples(32, 2, 3 * 256)
        heaps = np.ascontiguousarray(
            x.reshape(16, 2, 2, 3, 256, 2).transpose(3, 0, 2, 4, 1, 5))
        lay = SampleLayout.from_axes([("ant", 16), ("chan", 2), ("fine_time", 256),
                                      ("pol", 2)])
        np.testing.assert_array_equal(be.correlate_layout(heaps, lay), reference_triangle(x))
        assert be.stats["layout_calls"] == 1 and be.stats["copied_calls"] == 0
        assert be.stats["zero_copy_calls"] == 0
    finally:
        be.close()


@pytest.mark.parametrize("name", ["cpu", "emulator"])
def test_ci16_range_checked_in_the_host_pass(name):
    g = small_test_geometry()
    x = samples(32, 2, 100)
    buf = bifrost(x)[0].astype("<i2")
    lay = SampleLayout.from_axes([("freq", 2), ("station", 16), ("pol", 2)], encoding="ci16")
    be = make_backend(name, g)
    try:
        np.testing.assert_array_equal(be.correlate_layout(buf, lay), reference_triangle(x))
        buf[7, 1, 3, 1, 0] = -300
        with pytest.raises(LayoutError, match="ci16 sample value -300"):
            be.correlate_layout(buf, lay)
    finally:
        be.close()


@pytest.mark.parametrize("name", ["cpu", "native", "emulator", "npu"])
def test_xengine_block_on_bifrost_tensor_with_each_backend(tmp_path, name):
    """The block with each backend: its geometry from the tensor (nchan_pkt and tiling from the
    header's geometry, which the NPU build needs), gulps of 100 spectra, outputs of 600."""
    from xengine_block.backends import availability

    g = small_test_geometry(nstream=32, nchan=2, npacket=2)
    if not availability(g)[name][0] and name != "npu":
        pytest.skip(f"{name}: {availability(g)[name][1]}")
    x = samples(32, 2, 1200)
    buf, _ = bifrost(x)
    hdr = {"name": "obs", "time_tag": 0, "sync_time": 1.8e9, "fs_hz": 25e3,
           "freq0_hz": 60e6, "chan_bw_hz": 25e3, "nchan": 2,
           "geometry": {k: v for k, v in g.to_dict().items()
                        if k not in ("nstream", "nchan")},
           "_tensor": {"dtype": "ci8", "shape": [-1, 2, 16, 2],
                       "labels": ["time", "freq", "station", "pol"]}}
    options = {}
    if name == "npu":
        write_simulated_build(tmp_path, g)
        options = {"backend_options": {"xrt": SimulatedXrt(), "build_dir": tmp_path}}
    with OURS.Pipeline() as p:
        src = array_source(OURS, [(hdr, buf)], 100)
        xe = OURS.XEngineBlock(src, backend=name, integration_spectra=600, gulp_nframe=100,
                               **options)
        vis = collector(OURS, xe.orings[0])
        p.run()
    assert xe.geometry == g and isinstance(xe.backend, NpuBackend) == (name == "npu")
    assert len(vis.out) == 2
    for k, v in enumerate(vis.out):
        np.testing.assert_array_equal(v, reference_triangle(x[:, :, 600 * k:600 * (k + 1)]))
    xe.backend.close()
