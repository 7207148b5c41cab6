"""The NPU backend's host loop on the simulated device: the next run is queued on the device
before the previous one's output is placed (several output buffers, placement on its own
thread), so the NPU does not wait for placements; diagonal pairs run the design reading their
input once; the placement is the C extension's, exact and refusing bad indices."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.conftest import random_frames
from tests.helpers.npu import reference
from xengine_block import native_extension
from xengine_block.backends.npu import NpuBackend
from xengine_block.geometry import PUBLISHED, small_test_geometry
from xengine_block.npu.host import blockpairs, hostio
from xengine_block.npu.host.simdevice import SimulatedXrt, write_simulated_build


def _backend(tmp_path, g, xrt, **kwargs) -> NpuBackend:
    write_simulated_build(tmp_path, g, diagonal=kwargs.pop("diagonal", True))
    return NpuBackend(g, xrt=xrt, build_dir=tmp_path, **kwargs)


def test_runs_are_launched_before_the_previous_output_is_placed(tmp_path, monkeypatch):
    """Placements slower than half a run: with each output placed before the next launch the
    device would wait for every placement; here it stays busy (timing-only device, 6 runs of
    S = 48 in two channel groups)."""
    g = small_test_geometry(nstream=48, nchan=4)
    xrt = SimulatedXrt(compute=False, kernel_s=0.03)
    backend = _backend(tmp_path, g, xrt)
    launched = [0]
    launched_at_placement = []  # runs launched when output k's placement started
    real_add, real_call = blockpairs.BlockPairJob.add, type(backend._kernel).__call__

    def slow_add(self, *args):
        launched_at_placement.append(launched[0])
        time.sleep(0.02)
        real_add(self, *args)

    def call(kernel, *args):
        launched[0] += 1
        return real_call(kernel, *args)

    monkeypatch.setattr(blockpairs.BlockPairJob, "add", slow_add)
    monkeypatch.setattr(type(backend._kernel), "__call__", call)
    try:
        frames = random_frames(g, g.npacket, seed=3)
        since = time.perf_counter()
        jobs = [backend.submit(frames) for _ in range(2)]
        for job in jobs:
            job.result(30)
    finally:
        backend.close()
    assert xrt.counters["runs"] == 2 * g.nchan_group * len(g.npu_block_pairs) == 12
    # run k + 1 (indeed k + 2) was on the device before output k was placed
    assert all(n >= min(k + 2, 12) for k, n in enumerate(launched_at_placement))
    assert xrt.idle_fraction(since) < 0.25  # placing first: 0.02 / (0.02 + 0.03) = 0.4


@pytest.mark.parametrize("diagonal", [True, False], ids=["diagonal design", "main design"])
def test_every_pair_exact_through_the_loop(tmp_path, diagonal):
    """S = 48 (pairs (0,0), (0,1), (1,1)), two channel groups, three calls in flight, with
    two output buffers: bit for bit; diagonal pairs run the single-read design where built."""
    g = small_test_geometry(nstream=48, nchan=4)
    xrt = SimulatedXrt()
    backend = _backend(tmp_path, g, xrt, nout=2, diagonal=diagonal)
    try:
        frames = [random_frames(g, g.npacket, seed=60 + k) for k in range(3)]
        jobs = [backend.submit(f) for f in frames]
        for f, job in zip(frames, jobs, strict=True):
            assert np.array_equal(job.result(60), reference(g, f))
    finally:
        backend.close()
    assert backend.reads_diagonal_once is diagonal
    assert xrt.counters["diagonal_runs"] == (3 * g.nchan_group * g.npu_nblock if diagonal else 0)


def test_one_output_buffer_is_refused(tmp_path):
    with pytest.raises(ValueError, match="nout must be at least 2"):
        _backend(tmp_path, small_test_geometry(), SimulatedXrt(), nout=1)


def test_placement_matches_the_output_layout_and_refuses_bad_indices():
    """``place_pair`` (C, GIL released) against the output read through
    ``hostio.npu_output_to_matrix``, the one statement of the output layout."""
    g = PUBLISHED.replace(nstream=300, nchan=18)  # two blocks, two channel groups
    out = np.random.default_rng(5).integers(-2**31, 2**31, hostio.output_shape(g),
                                            dtype=np.int64).astype(np.int32)
    job = blockpairs.BlockPairJob(g, g.npacket)
    job.triangle[...] = 0
    job.add(1, 0, 1, out)
    re, im = hostio.npu_output_to_matrix(out, g)
    a, b = 10, 256 + 20  # A stream of block 0, B stream of block 1
    from xengine_block.triangle import baseline_index
    k = baseline_index(a, b)
    assert np.array_equal(job.triangle[g.nchan_pkt:, k, 0], re[:, a, b - 256])
    assert np.array_equal(job.triangle[g.nchan_pkt:, k, 1], im[:, a, b - 256])
    assert not job.triangle[:g.nchan_pkt].any()
    re_pos, im_pos, dst = blockpairs.pair_index(g, 0, 1)
    place = native_extension.native().place_pair
    tri = np.zeros((g.nchan_pkt, g.nbaseline, 2), np.int32)
    with pytest.raises(ValueError, match="outside"):
        place(out, re_pos, im_pos, dst + g.nbaseline, tri)
    with pytest.raises(ValueError, match="outside"):
        place(out, re_pos + out.size, im_pos, dst, tri)
    with pytest.raises(ValueError, match="place_pair"):
        place(out, re_pos, im_pos[:-1], dst, tri)
    with pytest.raises(ValueError, match="place_pair"):
        place(out, re_pos, im_pos, dst, tri[:, :, :1].copy())
    with pytest.raises(ValueError, match="place_pair"):
        place(out.astype(np.int64), re_pos, im_pos, dst, tri)


def test_idle_fraction_of_the_simulated_device():
    xrt = SimulatedXrt()
    xrt.busy(10.0, 11.0)
    xrt.busy(12.0, 13.0)
    assert xrt.idle_fraction(0.0) == pytest.approx(1 / 3)
    assert xrt.idle_fraction(11.5) == 0.0
    with pytest.raises(ValueError, match="no run"):
        xrt.idle_fraction(20.0)


def test_without_the_diagonal_design_an_unshared_diagonal_copies_b(tmp_path):
    """A build without the diagonal design and ``share_diagonal=False``: each diagonal pair's
    A is copied into the spare B BO and synced (the fallback where XRT refuses one BO in two
    arguments), still exact."""
    g = small_test_geometry(nstream=48, nchan=4)
    xrt = SimulatedXrt()
    backend = _backend(tmp_path, g, xrt, diagonal=False, share_diagonal=False)
    try:
        synced = xrt.counters["sync_to_device_bytes"]
        frames = random_frames(g, g.npacket, seed=8)
        assert np.array_equal(backend.correlate(frames), reference(g, frames))
    finally:
        backend.close()
    assert not backend.reads_diagonal_once and xrt.counters["diagonal_runs"] == 0
    assert xrt.counters["sync_to_device_bytes"] - synced == \
        g.nchan_group * 2 * g.npu_nblock * backend.design.npu_in_bytes  # blocks + spares
