"""Every backend (cpu, native, emulator, the NPU on its simulated device) on either sample width,
ci8 or ci4 in either nibble order, exact against the int64 reference; ci4's own limits: more
packets per device call than ci8's int32 bound allows, calls longer than the build's P, all -8
at the largest P the int32 bound allows, the NPU taking ci4 frames in its buffer objects as
they are (packed: half the bytes of ci8 synced).

Expectations come from outside the code under test: random natural samples correlated by the
reference, and the all -8 correlation known in closed form.
"""

import numpy as np
import pytest

from tests.helpers.ci4 import ORDERS, random_ci4_natural
from xengine_block.backends import availability, make_backend
from xengine_block.frames import natural_to_frames
from xengine_block.geometry import small_test_geometry
from xengine_block.reference import reference_frames, reference_triangle

SAMPLES = ["ci8", *(f"ci4-{order}" for order in ORDERS)]


@pytest.fixture
def npu_sim(tmp_path):
    from xengine_block.npu.host.simdevice import SimulatedXrt, write_simulated_build

    xrt = SimulatedXrt()

    def make(g):
        write_simulated_build(tmp_path, g)
        return make_backend("npu", g, xrt=xrt, build_dir=tmp_path)

    make.xrt = xrt
    return make


def backend_for(name, g, npu_sim):
    if name == "npu-sim":
        return npu_sim(g)
    usable, why = availability(g)[name]
    if not usable:
        print(f"{name} skipped: {why}")
        pytest.skip(f"{name}: {why}")
    return make_backend(name, g)


BACKENDS = ["cpu", "native", "emulator", "npu-sim"]


@pytest.mark.parametrize("sample", SAMPLES)
@pytest.mark.parametrize("name", BACKENDS)
def test_every_backend_exact_on_random_input(name, sample, npu_sim):
    if sample == "ci8":
        g = small_test_geometry(nchan=4, npacket=3)
        x = np.random.default_rng(7).integers(-128, 128, (g.nstream, g.nchan, 3 * 480, 2),
                                              dtype=np.int8)
    else:
        g = small_test_geometry(sample_bits=4, nibble_order=sample[4:], nchan=4, npacket=3)
        x = random_ci4_natural(g, 3, seed=7)
    b = backend_for(name, g, npu_sim)
    try:
        assert np.array_equal(b.correlate(natural_to_frames(x, g)), reference_triangle(x))
    finally:
        b.close()


def device_calls(b) -> int | None:
    """NPU calls a device backend made so far (None for the CPU backends)."""
    return getattr(b, "ncalls", None) if b.name in ("emulator", "npu") else None


@pytest.mark.parametrize("name", BACKENDS)
def test_every_backend_exact_on_ci4_with_more_packets_than_ci8_allows(name, npu_sim):
    """All -8 at P = 137 (ci8's int32 bound is 136): on the NPU one call of the ci4 build, its
    int32 accumulators holding 137 * 480 * 128."""
    g = small_test_geometry(sample_bits=4, nstream=2, nchan=2, npacket=137)
    frames = np.full((137, *g.frame_shape), np.uint8(0x88)).view(np.int8)
    b = backend_for(name, g, npu_sim)
    try:
        out = b.correlate(frames)
    finally:
        b.close()
    assert np.all(out[..., 0] == 137 * 480 * 128) and np.all(out[..., 1] == 0)
    assert device_calls(b) in (None, 1)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("name", ["emulator", "npu-sim"])
def test_ci4_calls_longer_than_the_build_are_summed(name, order, npu_sim):
    """5 frames on a build for P = 3: two device calls (3 + 2 packets), summed exactly."""
    g = small_test_geometry(sample_bits=4, nibble_order=order, nstream=40, npacket=3)
    x = random_ci4_natural(g, 5, seed=13)
    b = backend_for(name, g, npu_sim)
    try:
        out = b.correlate(natural_to_frames(x, g))
    finally:
        b.close()
    assert np.array_equal(out, reference_triangle(x))
    assert device_calls(b) == 2 * len(g.npu_block_pairs)


@pytest.mark.parametrize("order", ORDERS)
def test_npu_takes_ci4_frames_in_its_buffer_objects_as_they_are(order, npu_sim):
    """S = npu_block, one channel group: frames written into input_buffer() run in place, and
    frames in allocate_host memory run zero copy; the device syncs the packed bytes (half of
    ci8's) and unpacks them on its tiles."""
    g = small_test_geometry(sample_bits=4, nibble_order=order, npacket=2)
    x = random_ci4_natural(g, 2, seed=3)
    frames = natural_to_frames(x, g)
    b = npu_sim(g)
    synced = npu_sim.xrt.counters["sync_to_device_bytes"]  # the instruction stream
    try:
        view = b.input_buffer()
        view[...] = frames
        assert np.array_equal(b.correlate(view), reference_triangle(x))
        ring = b.allocate_host(frames.nbytes).view(np.int8).reshape(frames.shape)
        ring[...] = frames
        assert np.array_equal(b.correlate(ring), reference_triangle(x))
        assert b.stats["in_place_calls"] == 1 and b.stats["zero_copy_calls"] == 1
        assert b.stats["copied_calls"] == 0
        assert npu_sim.xrt.counters["sync_to_device_bytes"] - synced == 2 * frames.nbytes
        assert frames.nbytes * 2 == g.replace(sample_bits=8).npu_in_bytes
    finally:
        b.close()


LARGEST = dict(nstream=2, nchan=1, nchan_pkt=1, npacket=34952, sample_bits=4)


@pytest.mark.parametrize("name", ["cpu", "native"])
def test_all_minus_8_at_the_largest_p_the_bound_allows(name):
    """re = 34952 * 480 * 128 = 2,147,450,880: 32,767 below int32's limit, exactly."""
    g = small_test_geometry(**LARGEST)
    assert g.npacket == g.max_npacket
    frames = np.full((g.npacket, *g.frame_shape), np.uint8(0x88)).view(np.int8)
    b = backend_for(name, g, None)
    try:
        out = b.correlate(frames)
    finally:
        b.close()
    assert np.all(out[..., 0] == 2_147_450_880) and np.all(out[..., 1] == 0)


def test_reference_takes_ci4_frames():
    g = small_test_geometry(sample_bits=4, nstream=4, npacket=1)
    x = random_ci4_natural(g, 1, seed=11)
    assert np.array_equal(reference_frames(natural_to_frames(x, g), g), reference_triangle(x))
