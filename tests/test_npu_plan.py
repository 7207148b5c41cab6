"""The NPU dataflow plan: the seed's structure, and every hardware limit enforced by name."""

import dataclasses

import numpy as np
import pytest

from xengine_block.geometry import SEED, Geometry, small_test_geometry
from xengine_block.npu import PlanError, build_plan, hostio, limits
from xengine_block.npu.plan import (
    MM2S,
    S2MM,
    Dim,
    Lock,
    Port,
    Tile,
    a_mem_tile,
    compute_tile,
)

SEED_PLAN = build_plan(SEED)
SMALL_PLAN = build_plan(small_test_geometry())


def test_seed_plan_passes_and_reports_memory():
    report = SEED_PLAN.validate()
    compute = [u for t, u in report.usage.items() if t.kind == "compute"]
    assert len(compute) == SEED.rows * SEED.cols == 32
    for u in compute:
        # NPU_NOTES: A 15,360 B x2, B 7,680 B x2, accumulators 16,384 B
        assert u.data_bytes == 62_464 == SEED.tile_data_bytes
        assert u.stack_bytes == limits.COMPUTE_TILE_STACK
        assert u.total_bytes <= limits.COMPUTE_TILE_MEMORY
        assert u.bds == 5
    assert report.usage[a_mem_tile(0)].bds == 2 + 2 + 12 + 4 + 1  # A in, A out, join, out
    assert "compute(0,2)" in report.summary()


def test_seed_structure_follows_the_notes():
    p = SEED_PLAN
    mt = Tile(0, 1)
    a_in = [c for c in p.chains_of(mt) if c.port.direction == S2MM and c.port.channel in (0, 1)]
    assert [bd.dims for bd in a_in[0].bds] == [(Dim(4, 7680), Dim(8, 8), Dim(120, 64),
                                                Dim(8, 1))] * 2
    assert [bd.offset for c in a_in for bd in c.bds] == [0, 0, 30720, 30720]
    a_out = next(c for c in p.chains_of(mt) if c.port == Port(mt, MM2S, 0))
    assert len(a_out.bds) == 12
    sends = [bd for bd in a_out.bds if bd.length]
    assert [bd.offset for bd in sends[:4]] == [0, 1920, 3840, 5760]
    assert sends[0].dims == (Dim(8, 7680), Dim(15, 128), Dim(128, 1))
    # A row 0: shims 0 and 1 -> memory tile 0 -> the 8 compute tiles of row 0
    flows = {f.source: f.dests for f in p.flows}
    assert flows[Port(Tile(1, 0), MM2S, 0)] == (Port(mt, S2MM, 1),)
    assert flows[Port(mt, MM2S, 0)] == tuple(Port(Tile(c, 2), S2MM, 0) for c in range(8))
    # B columns 2 and 3 both served by memory tile 3, channels 0 and 1
    assert flows[Port(Tile(3, 0), MM2S, 1)] == (Port(Tile(3, 1), S2MM, 1),)
    assert flows[Port(Tile(3, 1), MM2S, 1)] == tuple(Port(Tile(3, r), S2MM, 1) for r in range(2, 6))
    task = next(t for t in p.tasks if t.name == "in_a_r1_h1")
    assert task.offset == 32 * 8640 * 3
    assert task.dims == (Dim(9, 960), Dim(136, 8640 * 256), Dim(32, 8640), Dim(960, 1))
    assert task.repeat_count == 8
    out = next(t for t in p.tasks if t.name == "out_c5")
    assert out.offset == 5 * 4 * 4096 and out.wait
    assert out.dims == (Dim(9, 8 * 4 * 4096), Dim(32, 512), Dim(512, 1))
    assert [a.shape for a in p.host_args] == [hostio.input_shape(SEED)] * 2 + [
        hostio.output_shape(SEED)]


def test_small_plan_uses_four_columns():
    assert SMALL_PLAN.validate()
    assert {t.col for t in SMALL_PLAN.tiles} == {0, 1, 2, 3}


def test_output_layout_mapping():
    g = SEED
    out = np.zeros(hostio.output_shape(g), np.int32)
    chan, col, row, n, m, reim, r2, c2 = 4, 5, 3, 6, 2, 1, 7, 1
    out[chan, col, row, n, m, reim, r2, c2] = 99
    re, im = hostio.npu_output_to_matrix(out, g)
    assert not re.any()
    assert np.argwhere(im).tolist() == [[chan, 64 * row + 8 * n + r2, 32 * col + 8 * m + c2]]


# ------------------------------------------------------------------ each limit, violated once
def _extend_chain(plan, port, copies, prefix):
    chain = next(c for c in plan.chains if c.port == port)
    extra = tuple(dataclasses.replace(bd, name=f"{prefix}{i}_{bd.name}")
                  for i in range(copies) for bd in chain.bds)
    chains = tuple(dataclasses.replace(c, bds=c.bds + extra) if c.port == port else c
                   for c in plan.chains)
    return plan.replace(chains=chains)


CT = compute_tile(0, 0)
MT = a_mem_tile(0)


def _flow_into_a_channel(p):
    flows = tuple(dataclasses.replace(f, dests=(Port(CT, S2MM, 0),))
                  if Port(CT, S2MM, 1) in f.dests else f for f in p.flows)
    return p.replace(flows=flows)


MUTATIONS = {
    "COMPUTE_TILE_MEMORY": lambda: build_plan(SEED.replace(tile_t=20), validate=False),
    "MEM_TILE_MEMORY": lambda: SEED_PLAN.replace_buffer("mem_out_c0", shape=(4, 32 * 1024)),
    "COMPUTE_TILE_BDS": lambda: _extend_chain(SEED_PLAN, Port(CT, S2MM, 0), 6, "x"),
    "MEM_TILE_BDS": lambda: _extend_chain(SEED_PLAN, Port(MT, MM2S, 0), 3, "x"),
    "SHIM_TILE_BDS": lambda: SEED_PLAN.replace(tasks=SEED_PLAN.tasks + tuple(
        dataclasses.replace(SEED_PLAN.tasks[0], name=f"extra{i}") for i in range(14))),
    "BD_DIM_SIZE": lambda: SEED_PLAN.replace_bd(
        "mem_a_r0_out_buf0_call0", dims=(Dim(8, 7680), Dim(1920, 1))),
    "BD_ALIGN_BYTES": lambda: SEED_PLAN.replace_bd("mem_a_r0_in0_buf0", offset=2),
    "COMPUTE_TILE_CHANNELS": lambda: SEED_PLAN.replace(chains=tuple(
        dataclasses.replace(c, port=Port(CT, S2MM, 2)) if c.port == Port(CT, S2MM, 1) else c
        for c in SEED_PLAN.chains)),
    "MEM_TILE_CHANNELS": lambda: SEED_PLAN.replace(chains=tuple(
        dataclasses.replace(c, port=Port(MT, MM2S, 6)) if c.port == Port(MT, MM2S, 2) else c
        for c in SEED_PLAN.chains)),
    "SHIM_TILE_CHANNELS": lambda: SEED_PLAN.replace_task(
        "in_b_c0", port=Port(Tile(0, 0), MM2S, 2)),
    limits.STATIC_FLOW_ONE_PRODUCER: lambda: _flow_into_a_channel(SEED_PLAN),
    limits.LOCK_PAIRING: lambda: SEED_PLAN.replace_bd("a_in_buf0_c0_r0", release=None),
    limits.SHIM_REPEAT_COUNT: lambda: SEED_PLAN.replace_task("in_a_r0_h0", repeat_count=0),
    limits.TILE_IN_ARRAY: lambda: build_plan(
        Geometry(nstream=80, tile_n=2, tile_m=2, rows=5, cols=5), validate=False),
    limits.BD_IN_BUFFER: lambda: SEED_PLAN.replace_bd("acc_out_c0_r0", offset=4),
    "COMPUTE_TILE_BD_DIMS": lambda: SEED_PLAN.replace_bd(
        "a_in_buf0_c0_r0", dims=(Dim(2, 7680), Dim(4, 1920), Dim(15, 128), Dim(128, 1))),
    "COMPUTE_TILE_LOCKS": lambda: SEED_PLAN.replace(locks=SEED_PLAN.locks + tuple(
        Lock(f"extra{i}", CT, 6 + i, 0) for i in range(11))),
    limits.FLOW_CONNECTED: lambda: SEED_PLAN.replace(flows=SEED_PLAN.flows[1:]),
    limits.PING_PONG_PARITY: lambda: SEED_PLAN.replace(cores=(dataclasses.replace(
        SEED_PLAN.cores[0], calls_per_integration=3),) + SEED_PLAN.cores[1:]),
}


@pytest.mark.parametrize("limit", list(MUTATIONS))
def test_each_limit_is_enforced(limit):
    plan = MUTATIONS[limit]()
    with pytest.raises(PlanError) as info:
        plan.validate()
    assert info.value.limit == limit
    assert limit in str(info.value)
    assert isinstance(info.value, ValueError)
    assert info.value.where  # names the tile / channel / BD / task


def test_named_places_in_errors():
    with pytest.raises(PlanError, match=r"compute\(0,2\)"):
        MUTATIONS["COMPUTE_TILE_BDS"]().validate()
    with pytest.raises(PlanError, match="mem_a_r0_out_buf0_call0"):
        MUTATIONS["BD_DIM_SIZE"]().validate()
    with pytest.raises(PlanError, match="COMPUTE_TILE_MEMORY"):
        build_plan(SEED.replace(tile_t=20))
