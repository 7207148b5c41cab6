"""The NPU plan executed by the emulator equals the int64 reference bit for bit: ci8, and ci4
sent packed and unpacked on the compute tiles (both nibble orders)."""

import dataclasses

import numpy as np
import pytest

from tests.conftest import random_frames
from tests.helpers.ci4 import ORDERS
from xengine_block.backends import backend_class, choose_backend
from xengine_block.backends.emulator import EmulatorBackend
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import PUBLISHED, small_test_geometry
from xengine_block.npu import build_plan, validate_plan
from xengine_block.npu.design.dataflow import Dim
from xengine_block.npu.host import hostio
from xengine_block.npu.host.blockpairs import BlockPairJob
from xengine_block.npu.host.emulate import EmulationError, PlanEmulator, expected_kernel_calls
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
    g = PUBLISHED.replace(npacket=2)
    frames = random_frames(g, g.npacket, seed=3)
    out, _ = correlate(g, frames)
    assert np.array_equal(out, reference(g, frames))


@pytest.mark.slow
def test_seed_geometry_full_p():
    g = PUBLISHED
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
    validate_plan(plan)  # still a legal plan: only the emulator can tell it is wrong
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


# ---------------------------------------------------------------------- ci4: packed to the tiles
def ci4_edge_frames(g, nframe, seed):
    """Random bytes (every byte is a ci4 sample), stream 1 all (-8, -8), stream 3 (7, -8) and
    (-8, 7) alternating: the nibble values at both ends."""
    frames = random_frames(g, nframe, seed=seed)
    frames[:, 1] = np.uint8(0x88).view(np.int8)
    frames[:, 3, ..., 0::2] = np.uint8(0x78).view(np.int8)
    frames[:, 3, ..., 1::2] = np.uint8(0x87).view(np.int8)
    return frames


CI4_GEOMETRIES = {
    "small": small_test_geometry(sample_bits=4),
    # 32-stream blocks: S = 80 is 3 blocks (6 pairs), the last half padding; 2 channel groups
    "small S=80 C=4": small_test_geometry(sample_bits=4, nstream=80, nchan=4),
    "published P=2": PUBLISHED.replace(sample_bits=4, npacket=2),
    # 2 blocks, 3 pairs
    "published S=300 P=1": PUBLISHED.replace(sample_bits=4, nstream=300, npacket=1),
}


@pytest.mark.parametrize("name,order", [(name, order) for name in CI4_GEOMETRIES
                                        for order in ORDERS][:-1])  # S=300 once (4 s)
def test_ci4_plan_exact(name, order):
    g = CI4_GEOMETRIES[name].replace(nibble_order=order)
    frames = ci4_edge_frames(g, g.npacket, seed=len(name))
    out, backend = correlate(g, frames)
    assert np.array_equal(out, reference(g, frames))
    plan = backend.emulator_for(g.npacket).plan
    assert {c.kernel for c in plan.cores} == {f"xcorr_kernel_ci4_{order}"}
    assert backend.ncalls == len(g.npu_block_pairs) * g.nchan_group


def test_ci4_frames_are_the_plan_input_as_they_are():
    """S = npu_block, one channel group: the packed frames, byte for byte, are the input."""
    g = small_test_geometry(sample_bits=4)
    frames = ci4_edge_frames(g, g.npacket, seed=2)
    a = np.ascontiguousarray(frames).reshape(hostio.input_shape(g))
    assert np.array_equal(hostio.npu_input(frames, g, 0, 0), a)
    plan = build_plan(g)
    out = np.zeros(plan.host_arg_map["out"].shape, np.int32)
    PlanEmulator(plan).run({"a": a, "b": a, "out": out})
    job = BlockPairJob(g, g.npacket)
    job.add(0, 0, 0, out)
    assert np.array_equal(job.triangle, reference(g, frames))


def test_ci4_plan_of_the_other_nibble_order_is_wrong():
    """The entry point the plan names decides which nibble is real: swapping it breaks the
    result (only the conjugation-symmetric autocorrelations survive)."""
    g = small_test_geometry(sample_bits=4)
    plan = build_plan(g.replace(nibble_order="re_low"))
    frames = random_frames(g, g.npacket, seed=8)
    out, _ = correlate(g, frames, plan=plan)
    assert not np.array_equal(out, reference(g, frames))


def test_ci4_core_without_unpack_buffers_is_refused():
    plan = build_plan(small_test_geometry(sample_bits=4))
    core = dataclasses.replace(plan.cores[0], unpacked=None)
    with pytest.raises(EmulationError, match="takes two unpack buffers"):
        PlanEmulator(plan.replace(cores=(core, *plan.cores[1:]))).run(
            {a.name: np.zeros(a.shape, np.int8 if a.dtype == "int8" else np.int32)
             for a in plan.host_args})
