"""The pyxrt NPU backend's host code, run against the simulated device (plan emulator inside).

The simulated device keeps separate host and device copies of every buffer object, so these
tests also check the backend's sync discipline: a missing sync gives a wrong answer here as it
would on hardware (see test_the_simulation_punishes_a_missing_sync).
"""

import importlib.util

import numpy as np
import pytest

from tests.conftest import random_frames
from tests.helpers.ci4 import ORDERS
from tests.helpers.npu import reference
from xengine_block.backends import backend_class, choose_backend
from xengine_block.backends.base import BackendUnavailable
from xengine_block.backends.emulator import EmulatorBackend
from xengine_block.backends.npu import NpuBackend, probe
from xengine_block.geometry import PUBLISHED, small_test_geometry
from xengine_block.npu.design import artifacts
from xengine_block.npu.host import blockpairs
from xengine_block.npu.host.simdevice import SimulatedBo, SimulatedXrt, write_simulated_build


@pytest.fixture
def sim(tmp_path):
    """(xrt, build root) -> a function making a backend for a geometry on the simulation."""
    xrt = SimulatedXrt()
    made = []

    def make(g, **kwargs):
        write_simulated_build(tmp_path, g)
        backend = NpuBackend(g, xrt=xrt, build_dir=tmp_path, **kwargs)
        made.append(backend)
        return backend

    make.xrt = xrt
    make.root = tmp_path
    yield make
    for backend in made:
        backend.close()


def test_consecutive_calls_through_the_ring(sim):
    g = small_test_geometry()
    backend = sim(g, nring=2)
    for k in range(5):  # more calls than ring entries, new data every time
        frames = random_frames(g, g.npacket, seed=100 + k)
        assert np.array_equal(backend.correlate(frames), reference(g, frames))
    assert sim.xrt.counters["runs"] == backend.ncalls == 5
    # the one block pair is diagonal: the design reading its input once ran every call
    assert backend.reads_diagonal_once
    assert sim.xrt.counters["diagonal_runs"] == backend.stats["diagonal_single_read_calls"] == 5
    # one sync of one input BO per call + the instructions of both designs
    art = artifacts.Artifacts(sim.root / artifacts.geometry_tag(g))
    insts = art.insts.stat().st_size + art.diagonal_insts.stat().st_size
    assert sim.xrt.counters["sync_to_device_bytes"] == 5 * g.npu_in_bytes + insts
    assert sim.xrt.counters["sync_from_device_bytes"] == 5 * g.npu_out_bytes


@pytest.mark.slow  # ~16 s: the emulator runs the published design's full array
def test_seed_geometry_reduced_p(sim):
    g = PUBLISHED.replace(npacket=2)
    backend = sim(g, nring=2)
    for k in range(2):
        frames = random_frames(g, g.npacket, seed=7 + k)
        assert np.array_equal(backend.correlate(frames), reference(g, frames))


@pytest.mark.parametrize("nstream,nchan", [(64, 2), (48, 4)])
@pytest.mark.parametrize("share_diagonal", [True, False])
def test_more_streams_than_one_npu_block(sim, nstream, nchan, share_diagonal):
    # 32-stream NPU blocks: S = 64 is 2 blocks -> 3 block pairs; S = 48 pads the last block;
    # nchan = 4 is two channel groups, i.e. two ring entries per call.
    g = small_test_geometry(nstream=nstream, nchan=nchan)
    assert g.npu_nblock == 2 and g.npu_block_pairs == [(0, 0), (0, 1), (1, 1)]
    backend = sim(g, nring=3, share_diagonal=share_diagonal)
    emulator = EmulatorBackend(g)
    for k in range(2):
        frames = random_frames(g, g.npacket, seed=nstream + k)
        ref = reference(g, frames)
        assert np.array_equal(backend.correlate(frames), ref)
        assert np.array_equal(emulator.correlate(frames), ref)
    assert backend.ncalls == emulator.ncalls == 2 * 3 * g.nchan_group


def test_fewer_frames_than_the_build_are_zero_padded(sim):
    g = small_test_geometry(npacket=3)
    backend = sim(g, nring=1)  # one entry: stale packets from the last call must be cleared
    for n in (3, 1, 2):
        frames = random_frames(g, n, seed=n)
        assert np.array_equal(backend.correlate(frames), reference(g, frames))
    with pytest.raises(ValueError, match="at most 3 packets"):
        backend.submit(random_frames(g, 4))  # one NPU call
    frames = random_frames(g, 4, seed=4)  # correlate: two calls, 3 + 1 packets
    calls = backend.ncalls
    assert np.array_equal(backend.correlate(frames), reference(g, frames))
    assert backend.ncalls == calls + 2


def test_zero_copy_input_buffer(sim, monkeypatch):
    g = small_test_geometry(npacket=3)
    assert blockpairs.frames_are_input(g)
    backend = sim(g, nring=2)

    def no_copy(*args, **kwargs):
        raise AssertionError("frames already in the BO must not be copied")

    for k, n in enumerate((3, 2, 3)):
        view = backend.input_buffer()
        assert view.shape == (3, *g.frame_shape)
        assert any(np.shares_memory(view, e.views[0]) for e in backend._entries)
        view[:n] = random_frames(g, n, seed=20 + k)
        monkeypatch.setattr(blockpairs.hostio, "npu_input", no_copy)
        out = backend.correlate(view[:n])
        monkeypatch.undo()
        assert np.array_equal(out, reference(g, view[:n]))


def test_input_buffer_only_when_frames_are_the_input_layout(sim):
    g = small_test_geometry(nstream=64)
    backend = sim(g)
    with pytest.raises(ValueError, match="regrouped"):
        backend.input_buffer()


def test_input_buffers_all_reserved_is_an_error(sim):
    backend = sim(small_test_geometry(), nring=2, timeout_s=5)
    backend.input_buffer()
    backend.input_buffer()
    with pytest.raises(RuntimeError, match="reserved"):
        backend.correlate(random_frames(backend.geometry, 2))


def test_submit_keeps_calls_in_flight_and_fills_out(sim):
    g = small_test_geometry(nchan=4)
    backend = sim(g, nring=4)
    frames = [random_frames(g, g.npacket, seed=50 + k) for k in range(3)]
    jobs = [backend.submit(f) for f in frames]
    out = np.zeros(g.output_shape, np.int32)
    last = backend.submit(frames[0], out=out)
    for f, job in zip(frames, jobs, strict=True):
        assert np.array_equal(job.result(30), reference(g, f))
    assert last.result(30) is out and np.array_equal(out, reference(g, frames[0]))


def test_the_simulation_punishes_a_missing_sync(sim, monkeypatch):
    g = small_test_geometry()
    backend = sim(g)  # instructions synced during construction
    monkeypatch.setattr(SimulatedBo, "sync", lambda self, direction, *args: None)
    frames = random_frames(g, g.npacket, seed=1)
    assert not np.array_equal(backend.correlate(frames), reference(g, frames))


def test_device_errors_reach_the_caller(sim):
    g = small_test_geometry()
    art = write_simulated_build(sim.root, g)
    for insts in (art.insts, art.diagonal_insts):  # not the build's instruction streams
        np.zeros(3, np.uint32).tofile(insts)
    backend = NpuBackend(g, xrt=sim.xrt, build_dir=sim.root)
    try:
        with pytest.raises(RuntimeError, match="instruction"):
            backend.correlate(random_frames(g, g.npacket))
    finally:
        backend.close()


def test_unavailable_reasons(tmp_path, monkeypatch):
    monkeypatch.delenv(artifacts.BUILD_DIR_ENV, raising=False)
    monkeypatch.setenv("XENGINE_CACHE_DIR", str(tmp_path / "none"))
    g = small_test_geometry()
    ok, why = probe(SimulatedXrt(ndevices=0), g, tmp_path)
    assert not ok and "no NPU device" in why
    ok, why = probe(SimulatedXrt(), g, tmp_path)
    assert not ok and "no xclbin built for" in why and artifacts.geometry_tag(g) in why
    ok, why = probe(SimulatedXrt(), None, tmp_path)
    assert not ok and "python -m xengine_block.npu.design.build" in why
    write_simulated_build(tmp_path, g.replace(npacket=4))
    (tmp_path / artifacts.geometry_tag(g.replace(npacket=4))).rename(
        tmp_path / artifacts.geometry_tag(g))  # a build for P = 4 under P = 2's name
    ok, why = probe(SimulatedXrt(), g, tmp_path)
    assert not ok and "was built for" in why
    with pytest.raises(BackendUnavailable, match="was built for"):
        NpuBackend(g, xrt=SimulatedXrt(), build_dir=tmp_path)
    write_simulated_build(tmp_path / "other", g)
    assert NpuBackend.availability(g, xrt=SimulatedXrt(), build_dir=tmp_path / "other")[0]


def test_a_ci4_geometry_needs_a_ci4_build(tmp_path, monkeypatch):
    """ci8 and ci4 builds (and the two nibble orders) have their own directories and
    manifests: a ci8 build never runs ci4 frames; the message says how to build the one
    missing; P beyond what one call's DMAs take is capped in the build's geometry."""
    monkeypatch.delenv(artifacts.BUILD_DIR_ENV, raising=False)
    monkeypatch.setenv("XENGINE_CACHE_DIR", str(tmp_path / "none"))
    g = small_test_geometry(sample_bits=4, nibble_order="re_low")
    tags = {artifacts.geometry_tag(x) for x in (g, g.replace(sample_bits=8, nibble_order=
                                                              "re_high"),
                                                 g.replace(nibble_order="re_high"))}
    assert len(tags) == 3 and artifacts.geometry_tag(g).endswith("_ci4_re_low")
    write_simulated_build(tmp_path, g.replace(sample_bits=8, nibble_order="re_high"))
    ok, why = probe(SimulatedXrt(), g, tmp_path)
    assert not ok and "--bits 4 --nibble-order re_low" in why
    long = g.replace(npacket=5000)
    assert artifacts.design_geometry(long).npacket == 1023
    assert artifacts.design_geometry(g.replace(sample_bits=8, nibble_order="re_high")) == \
        g.replace(sample_bits=8, nibble_order="re_high", nstream=32, nchan=2)


def test_build_dir_from_the_environment(tmp_path, monkeypatch):
    g = small_test_geometry()
    write_simulated_build(tmp_path, g)
    monkeypatch.setenv(artifacts.BUILD_DIR_ENV, str(tmp_path))
    backend = NpuBackend(g, xrt=SimulatedXrt())
    try:
        assert backend.artifacts.directory == tmp_path / artifacts.geometry_tag(g)
        frames = random_frames(g, g.npacket, seed=3)
        assert np.array_equal(backend.correlate(frames), reference(g, frames))
    finally:
        backend.close()


@pytest.mark.skipif(importlib.util.find_spec("pyxrt") is not None, reason="pyxrt is installed")
def test_auto_falls_back_when_pyxrt_is_missing():
    assert backend_class("npu") is NpuBackend
    ok, why = NpuBackend.availability()
    assert not ok and "pyxrt is not importable" in why
    name, reason = choose_backend("auto")
    assert name != "npu"
    assert "npu: pyxrt is not importable" in reason
    with pytest.raises(BackendUnavailable, match="pyxrt"):
        choose_backend("npu")


def test_auto_prefers_the_npu_when_usable(monkeypatch):
    monkeypatch.setattr(NpuBackend, "availability",
                        classmethod(lambda cls, geometry=None: (True, "sim")))
    assert choose_backend("auto")[0] == "npu"


def test_auto_needs_a_build_for_the_geometry(tmp_path, monkeypatch):
    """With a (simulated) NPU and a build for g only, auto takes the NPU for g, not for g2."""
    import sys
    g = small_test_geometry()
    write_simulated_build(tmp_path, g)
    monkeypatch.setitem(sys.modules, "pyxrt", SimulatedXrt())
    monkeypatch.setenv(artifacts.BUILD_DIR_ENV, str(tmp_path))
    assert choose_backend("auto", g)[0] == "npu"
    name, reason = choose_backend("auto", g.replace(npacket=3))
    assert name != "npu" and "npu: " in reason


@pytest.mark.parametrize("share_diagonal", [True, False])
@pytest.mark.parametrize("order", ORDERS)
def test_ci4_block_pairs_on_the_device(sim, order, share_diagonal):
    """ci4 through the ring on the simulated device (the ci4 build's plan inside): S = 48 in
    two 32-stream blocks (3 pairs, the last padded), two channel groups; the input BOs hold the
    packed bytes (half of ci8's) and the device syncs just those."""
    g = small_test_geometry(sample_bits=4, nibble_order=order, nstream=48, nchan=4)
    backend = sim(g, nring=2, share_diagonal=share_diagonal)
    assert backend.design.ci4 and backend.design.npu_in_bytes * 2 == \
        backend.design.replace(sample_bits=8).npu_in_bytes
    synced = sim.xrt.counters["sync_to_device_bytes"]
    for k in range(2):
        frames = random_frames(g, g.npacket, seed=40 + k)
        assert np.array_equal(backend.correlate(frames), reference(g, frames))
    # per call and channel group: both blocks once; no diagonal's B copy even when not shared,
    # as the diagonal pairs run the design that reads its input once (B is not read)
    assert backend.reads_diagonal_once
    spare = 0
    assert sim.xrt.counters["sync_to_device_bytes"] - synced == \
        2 * g.nchan_group * (g.npu_nblock + spare) * backend.design.npu_in_bytes


@pytest.mark.slow
def test_seed_ci4_on_the_device(sim):
    g = PUBLISHED.replace(sample_bits=4, npacket=2, nibble_order="re_low")
    frames = random_frames(g, g.npacket, seed=4)
    assert np.array_equal(sim(g, nring=2).correlate(frames), reference(g, frames))


@pytest.mark.slow
def test_seed_blocks_512_streams(sim):
    g = PUBLISHED.replace(nstream=512, npacket=2)
    frames = random_frames(g, g.npacket, seed=512)
    ref = reference(g, frames)
    assert np.array_equal(sim(g, nring=2).correlate(frames), ref)
    assert np.array_equal(EmulatorBackend(g).correlate(frames), ref)
