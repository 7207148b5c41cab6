"""The NPU plan executed by the emulator equals the int64 reference bit for bit."""

import numpy as np
import pytest

from tests.conftest import random_frames
from xengine_block.backends import backend_class, choose_backend
from xengine_block.backends.emulator import EmulatorBackend
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import SEED, small_test_geometry
from xengine_block.npu import build_plan
from xengine_block.npu.emulate import EmulationError, PlanEmulator, expected_kernel_calls
from xengine_block.npu.plan import Dim
from xengine_block.reference import reference_triangle


def correlate(g, frames, plan=None):
    backend = EmulatorBackend(g, plan=plan)
    out = backend.correlate(frames)
    assert out.dtype == np.int32 and out.shape == g.output_shape
    return out, backend


def reference(g, frames):
    return reference_triangle(frames_to_natural(frames, g))


def test_small_geometry_random():
    g = small_test_geometry()
    frames = random_frames(g, g.npacket)
    out, backend = correlate(g, frames)
    assert np.array_equal(out, reference(g, frames))
    emu = backend.emulator_for(g.npacket)
    assert emu.last_kernel_calls == expected_kernel_calls(emu.plan) == 8 * 2 * 2 * 4


def test_seed_geometry_reduced_p():
    g = SEED.replace(npacket=2)
    frames = random_frames(g, g.npacket, seed=3)
    out, _ = correlate(g, frames)
    assert np.array_equal(out, reference(g, frames))


@pytest.mark.slow
def test_seed_geometry_full_p():
    g = SEED
    frames = random_frames(g, g.npacket, seed=4)
    out, _ = correlate(g, frames)
    assert np.array_equal(out, reference(g, frames))


@pytest.mark.parametrize("nstream,nchan", [(64, 2), (48, 4)])
def test_block_pairs_padding_and_channel_groups(nstream, nchan):
    # 32-stream NPU blocks: 64 -> 3 block pairs; 48 -> 3 pairs with the last block half
    # zero-padding; nchan 4 = two channel groups of 2.
    g = small_test_geometry(nstream=nstream, nchan=nchan)
    frames = random_frames(g, g.npacket, seed=nstream)
    out, backend = correlate(g, frames)
    assert np.array_equal(out, reference(g, frames))
    assert backend.ncalls == len(g.npu_block_pairs) * g.nchan_group == 3 * (nchan // 2)


def test_all_min_at_max_p():
    g = small_test_geometry()
    g = g.replace(npacket=g.max_npacket)
    frames = np.full((g.npacket, *g.frame_shape), -128, np.int8)
    out, _ = correlate(g, frames)
    ref = reference(g, frames)
    assert ref.max() == g.npacket * g.nspectra_pkt * 2 * 128 * 128  # autos: near 2^31
    assert np.array_equal(out, ref)


def test_fewer_frames_than_geometry_p():
    g = small_test_geometry(npacket=4)
    frames = random_frames(g, 1, seed=9)
    out, _ = correlate(g, frames)
    assert np.array_equal(out, reference(g, frames))


@pytest.mark.parametrize("bd,axis,stride", [
    # memory-tile write: stream rows of the 8x8 blocks 16 bytes apart instead of 8
    ("mem_a_r1_in0_buf1", 1, 16),
    # memory-tile read for compute: sample blocks taken 64 bytes apart instead of 128
    ("mem_b_c2_out_buf0_call1", 1, 64),
])
def test_wrong_stride_changes_the_result(bd, axis, stride):
    g = small_test_geometry()
    plan = build_plan(g)
    dims = list(plan.bd(bd).dims)
    assert dims[axis].stride != stride
    dims[axis] = Dim(dims[axis].size, stride)
    plan = plan.replace_bd(bd, dims=tuple(dims))
    plan.validate()  # still a legal plan: only the emulator can tell it is wrong
    frames = random_frames(g, g.npacket, seed=5)
    out, _ = correlate(g, frames, plan=plan)
    assert not np.array_equal(out, reference(g, frames))


def test_wrong_shim_stride_changes_the_result():
    g = small_test_geometry()
    plan = build_plan(g)
    task = next(t for t in plan.tasks if t.name == "in_b_c1")
    dims = (task.dims[0], task.dims[1], Dim(task.dims[2].size, g.payload_bytes * 2),
            task.dims[3])
    frames = random_frames(g, g.npacket, seed=6)
    out, _ = correlate(g, frames, plan=plan.replace_task("in_b_c1", dims=dims))
    assert not np.array_equal(out, reference(g, frames))


def test_lock_mistake_is_reported_as_deadlock():
    g = small_test_geometry()
    plan = build_plan(g)
    locks = tuple(lk if lk.name != "a_prod_c0_r0" else type(lk)(lk.name, lk.tile, lk.lock_id, 0)
                  for lk in plan.locks)
    emu = PlanEmulator(plan.replace(locks=locks))
    host = {a.name: np.zeros(a.shape, np.int8 if a.dtype == "int8" else np.int32)
            for a in plan.host_args}
    with pytest.raises(EmulationError, match="deadlock"):
        emu.run(host)


def test_unbalanced_lock_is_reported():
    g = small_test_geometry()
    plan = build_plan(g)
    bd = plan.bd("mem_out_c1_out")
    plan = plan.replace_bd(bd.name, release=type(bd.release)(bd.release.lock, g.rows + 1))
    frames = random_frames(g, g.npacket)
    with pytest.raises(EmulationError, match="mem_out_c1_prod"):
        correlate(g, frames, plan=plan)


def test_registered_with_low_priority():
    assert backend_class("emulator") is EmulatorBackend
    assert EmulatorBackend.priority == 1
    assert choose_backend("auto")[0] != "emulator"
