"""Every backend (cpu, native, emulator, the NPU on its simulated device) on either sample width,
ci8 or ci4 in either nibble order, exact against the int64 reference; ci4's own limits: more
packets than an int8 device holds, all -8 at the largest P the int32 bound allows, the NPU
unpacking straight into its buffer object.

Expectations come from outside the code under test: random natural samples correlated by the
reference, and the all -8 correlation known in closed form.
"""

import numpy as np
import pytest

from tests.helpers.ci4 import ORDERS, random_ci4_natural
from xengine_block.backends import availability, make_backend
from xengine_block.backends.base import HostUnpack, device_geometry
from xengine_block.backends.cpu import CpuBackend
from xengine_block.backends.emulator import EmulatorBackend
from xengine_block.frames import natural_to_frames
from xengine_block.geometry import small_test_geometry
from xengine_block.reference import reference_frames, reference_triangle

SAMPLES = ["ci8", *(f"ci4-{order}" for order in ORDERS)]


@pytest.fixture
def npu_sim(tmp_path):
    from xengine_block.npu.simdevice import SimulatedXrt, write_simulated_build

    xrt = SimulatedXrt()

    def make(g):
        write_simulated_build(tmp_path, device_geometry(g))
        return make_backend("npu", g, xrt=xrt, build_dir=tmp_path)

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


@pytest.mark.parametrize("name", BACKENDS)
def test_every_backend_exact_on_ci4_with_more_packets_than_the_int8_device(name, npu_sim):
    """All -8 at P = 137: an int8-only device (P <= 136) runs two calls summed on the host."""
    g = small_test_geometry(sample_bits=4, nstream=2, nchan=2, npacket=137)
    frames = np.full((137, *g.frame_shape), np.uint8(0x88)).view(np.int8)
    b = backend_for(name, g, npu_sim)
    try:
        out = b.correlate(frames)
    finally:
        b.close()
    assert np.all(out[..., 0] == 137 * 480 * 128) and np.all(out[..., 1] == 0)
    if name in ("emulator", "npu-sim"):
        assert isinstance(b, HostUnpack) and b.device.geometry.npacket == 136


def test_npu_unpacks_straight_into_its_buffer_object(npu_sim):
    g = small_test_geometry(sample_bits=4, npacket=2)
    x = random_ci4_natural(g, 2, seed=3)
    b = npu_sim(g)
    try:
        assert np.array_equal(b.correlate(natural_to_frames(x, g)), reference_triangle(x))
        assert b.device.stats["in_place_calls"] == 1 and b.device.stats["copied_calls"] == 0
    finally:
        b.close()


def test_int8_only_backends_refuse_ci4_when_built_directly():
    with pytest.raises(ValueError, match="make_backend"):
        EmulatorBackend(small_test_geometry(sample_bits=4))


LARGEST = dict(nstream=2, nchan=1, nchan_pkt=1, npacket=34952, sample_bits=4)


@pytest.mark.parametrize("name", ["cpu", "native", "host-unpack"])
def test_all_minus_8_at_the_largest_p_the_bound_allows(name):
    """re = 34952 * 480 * 128 = 2,147,450,880: 32,767 below int32's limit, exactly."""
    g = small_test_geometry(**LARGEST)
    assert g.npacket == g.max_npacket
    frames = np.full((g.npacket, *g.frame_shape), np.uint8(0x88)).view(np.int8)
    if name == "host-unpack":  # the emulator/NPU wrapper's chunk sums, with an int8 device
        b = HostUnpack(CpuBackend, g)
    else:
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
