"""The simulated device is as strict as pyxrt, and the backend's host loop survives it.

pyxrt (XRT src/python/pybind11/src/pyxrt.cpp) keeps the GIL for the whole of run.wait, bo.sync
and kernel(...); takes sync(dir) or sync(dir, size, offset); its map() is raw BO memory. The
simulation holds one process-wide lock over those calls, starts runs when the kernel is called,
refuses the other sync signature and poisons a freed BO's memory.
"""

import gc
import threading
import time

import numpy as np
import pytest

from tests.conftest import random_frames
from tests.helpers.npu import reference
from xengine_block.backends.npu import NpuBackend, NpuTimeout
from xengine_block.geometry import small_test_geometry
from xengine_block.npu.design import artifacts
from xengine_block.npu.host.simdevice import (
    POISON,
    PYXRT_LOCK,
    SimulatedHang,
    SimulatedRun,
    SimulatedXrt,
    write_simulated_build,
)

G = small_test_geometry()


def device_parts(xrt, root):
    """A device, kernel, instruction BO and data BOs as the backend makes them."""
    art = write_simulated_build(root, G)
    dev = xrt.device(0)
    xclbin = xrt.xclbin(str(art.xclbin))
    dev.register_xclbin(xclbin)
    kernel = xrt.kernel(xrt.hw_context(dev, xclbin.get_uuid()), artifacts.KERNEL_NAME)
    insts = np.fromfile(art.insts, dtype=np.uint32)
    instr = xrt.bo(dev, insts.nbytes, xrt.bo.cacheable, kernel.group_id(1))
    np.frombuffer(instr.map(), np.uint32)[:] = insts
    instr.sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
    a = xrt.bo(dev, G.npu_in_bytes, xrt.bo.host_only, kernel.group_id(3))
    out = xrt.bo(dev, G.npu_out_bytes, xrt.bo.host_only, kernel.group_id(5))
    return dev, kernel, instr, insts.size, a, out


def test_sync_takes_pyxrts_two_signatures_only(tmp_path):
    xrt = SimulatedXrt()
    _, _, _, _, a, _ = device_parts(xrt, tmp_path)
    to_dev = xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE
    a.sync(to_dev)
    a.sync(to_dev, 64, 128)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        a.sync(to_dev, 64)


def test_the_run_starts_when_the_kernel_is_called(tmp_path):
    xrt = SimulatedXrt()
    _, kernel, instr, n, a, out = device_parts(xrt, tmp_path)
    run = kernel(3, instr, n, a, a, out)
    for _ in range(2000):  # never wait(): the device finishes on its own
        if run.state() == xrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED:
            break
        time.sleep(0.005)
    assert run.state() == xrt.ert_cmd_state.ERT_CMD_STATE_COMPLETED
    assert xrt.counters["runs"] == 1


def test_mapped_memory_dies_with_its_bo(tmp_path):
    xrt = SimulatedXrt()
    dev, kernel, *_ = device_parts(xrt, tmp_path)
    bo = xrt.bo(dev, 4096, xrt.bo.host_only, kernel.group_id(3))
    view = np.frombuffer(bo.map(), np.uint8)
    view[:] = 7
    sub = xrt.bo(bo, 1024, 2048)
    del bo
    gc.collect()
    assert (view == 7).all()  # the sub-buffer keeps its parent alive
    del sub
    gc.collect()
    assert (view == POISON).all()  # a dangling view reads garbage


def test_wait_without_timeout_blocks_every_other_pyxrt_call(tmp_path):
    """pyxrt's run.wait() holds the GIL: a sync in another thread waits for the whole run."""
    xrt = SimulatedXrt(kernel_s=0.3)
    _, kernel, instr, n, a, out = device_parts(xrt, tmp_path)
    run = kernel(3, instr, n, a, a, out)
    waiter = threading.Thread(target=run.wait)
    waiter.start()
    while PYXRT_LOCK.acquire(blocking=False):  # until the waiter holds the lock
        PYXRT_LOCK.release()
        time.sleep(0.001)
    out.sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
    assert run._done.is_set()  # the sync could only run once the run was over
    waiter.join()


def test_a_hung_npu_with_a_plain_wait_would_freeze(tmp_path):
    xrt = SimulatedXrt(hang=True, hang_guard_s=0.2)
    _, kernel, instr, n, a, out = device_parts(xrt, tmp_path)
    run = kernel(3, instr, n, a, a, out)
    assert run.wait(50) == xrt.ert_cmd_state.ERT_CMD_STATE_TIMEOUT
    with pytest.raises(SimulatedHang, match="never returns"):
        run.wait()


def test_a_hung_npu_is_a_clear_error_not_a_frozen_process(tmp_path):
    write_simulated_build(tmp_path, G)
    backend = NpuBackend(G, xrt=SimulatedXrt(hang=True, hang_guard_s=1), build_dir=tmp_path,
                         timeout_s=0.5)
    try:
        frames = random_frames(G, G.npacket, seed=3)
        start = time.monotonic()
        with pytest.raises(NpuTimeout, match=r"not complete after 0.5 s .*looks hung"):
            backend.correlate(frames)
        assert time.monotonic() - start < 5
        with pytest.raises(NpuTimeout, match="looks hung"):  # refused at once from now on
            backend.submit(frames)
    finally:
        backend.close()


def test_the_backend_never_blocks_in_run_wait(tmp_path, monkeypatch):
    def refuse(self, timeout_ms=0):
        raise AssertionError("run.wait() would hold the GIL for the whole run")

    monkeypatch.setattr(SimulatedRun, "wait", refuse)
    write_simulated_build(tmp_path, G)
    backend = NpuBackend(G, xrt=SimulatedXrt(), build_dir=tmp_path)
    try:
        for seed in range(3):
            frames = random_frames(G, G.npacket, seed=seed)
            assert np.array_equal(backend.correlate(frames), reference(G, frames))
    finally:
        backend.close()


def test_input_sync_overlaps_the_running_kernel(tmp_path):
    """While run k computes, the sync thread syncs entry k+1 (the lock is free between polls)."""
    write_simulated_build(tmp_path, G)
    xrt = SimulatedXrt(kernel_s=0.2)
    backend = NpuBackend(G, xrt=xrt, build_dir=tmp_path, nring=2)
    synced_during_run = []
    real_sync = type(backend._entries[0].bos[0]).sync

    def sync(self, direction, *args):
        running = any(not r._done.is_set() for r in list(runs))
        if self.nbytes == G.npu_in_bytes:
            synced_during_run.append(running)
        real_sync(self, direction, *args)

    runs = []
    real_call = type(backend._kernel).__call__

    def call(self, *args):
        run = real_call(self, *args)
        runs.append(run)
        return run

    monkey = pytest.MonkeyPatch()
    monkey.setattr(type(backend._entries[0].bos[0]), "sync", sync)
    monkey.setattr(type(backend._kernel), "__call__", call)
    try:
        frames = random_frames(G, G.npacket, seed=9)
        jobs = [backend.submit(frames) for _ in range(3)]
        for job in jobs:
            assert np.array_equal(job.result(30), reference(G, frames))
        assert any(synced_during_run)
    finally:
        monkey.undo()
        backend.close()
