"""The NPU dataflow plan: the published design's structure, every hardware limit enforced by
name."""

import dataclasses

import numpy as np
import pytest

from xengine_block.geometry import PUBLISHED, Geometry, small_test_geometry
from xengine_block.npu import PlanError, build_plan, validate_plan
from xengine_block.npu.design import limits
from xengine_block.npu.design.dataflow import MM2S, S2MM, Dim, Lock, Port, Tile
from xengine_block.npu.design.plan import a_mem_tile, compute_tile
from xengine_block.npu.host import hostio

PUBLISHED_PLAN = build_plan(PUBLISHED)
SMALL_PLAN = build_plan(small_test_geometry())


def test_seed_plan_passes_and_reports_memory():
    report = validate_plan(PUBLISHED_PLAN)
    compute = [u for t, u in report.usage.items() if t.kind == "compute"]
    assert len(compute) == PUBLISHED.rows * PUBLISHED.cols == 32
    for u in compute:
        # the published design: A 15,360 B x2, B 7,680 B x2, accumulators 16,384 B
        assert u.data_bytes == 62_464 == PUBLISHED.tile_data_bytes
        assert u.stack_bytes == limits.COMPUTE_TILE_STACK
        assert u.total_bytes <= limits.COMPUTE_TILE_MEMORY
        assert u.bds == 5
    assert report.usage[a_mem_tile(0)].bds == 2 + 2 + 12 + 4 + 1  # A in, A out, join, out
    assert "compute(0,2)" in report.summary()


def test_seed_structure_follows_the_notes():
    p = PUBLISHED_PLAN
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
    assert [a.shape for a in p.host_args] == [hostio.input_shape(PUBLISHED)] * 2 + [
        hostio.output_shape(PUBLISHED)]


def test_small_plan_uses_four_columns():
    assert validate_plan(SMALL_PLAN)
    assert {t.col for t in SMALL_PLAN.tiles} == {0, 1, 2, 3}


def test_output_layout_mapping():
    g = PUBLISHED
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


def _placed(plan, **addresses):
    """The plan with compute tile (0, 0)'s buffers moved (``a_buf0=...``: byte address)."""
    for short, address in addresses.items():
        plan = plan.replace_buffer(f"{short}_c0_r0", address=address)
    return plan


def _flow_into_a_channel(p):
    flows = tuple(dataclasses.replace(f, dests=(Port(CT, S2MM, 0),))
                  if Port(CT, S2MM, 1) in f.dests else f for f in p.flows)
    return p.replace(flows=flows)


MUTATIONS = {
    "COMPUTE_TILE_MEMORY": lambda: build_plan(PUBLISHED.replace(tile_t=20), validate=False),
    "MEM_TILE_MEMORY": lambda: PUBLISHED_PLAN.replace_buffer("mem_out_c0", shape=(4, 32 * 1024)),
    "COMPUTE_TILE_BDS": lambda: _extend_chain(PUBLISHED_PLAN, Port(CT, S2MM, 0), 6, "x"),
    "MEM_TILE_BDS": lambda: _extend_chain(PUBLISHED_PLAN, Port(MT, MM2S, 0), 3, "x"),
    "SHIM_TILE_BDS": lambda: PUBLISHED_PLAN.replace(tasks=PUBLISHED_PLAN.tasks + tuple(
        dataclasses.replace(PUBLISHED_PLAN.tasks[0], name=f"extra{i}") for i in range(14))),
    "BD_DIM_SIZE": lambda: PUBLISHED_PLAN.replace_bd(
        "mem_a_r0_out_buf0_call0", dims=(Dim(1024, 15), Dim(15, 1))),
    "BD_ALIGN_BYTES": lambda: PUBLISHED_PLAN.replace_bd("mem_a_r0_in0_buf0", offset=2),
    "COMPUTE_TILE_CHANNELS": lambda: PUBLISHED_PLAN.replace(chains=tuple(
        dataclasses.replace(c, port=Port(CT, S2MM, 2)) if c.port == Port(CT, S2MM, 1) else c
        for c in PUBLISHED_PLAN.chains)),
    "MEM_TILE_CHANNELS": lambda: PUBLISHED_PLAN.replace(chains=tuple(
        dataclasses.replace(c, port=Port(MT, MM2S, 6)) if c.port == Port(MT, MM2S, 2) else c
        for c in PUBLISHED_PLAN.chains)),
    "SHIM_TILE_CHANNELS": lambda: PUBLISHED_PLAN.replace_task(
        "in_b_c0", port=Port(Tile(0, 0), MM2S, 2)),
    limits.STATIC_FLOW_ONE_PRODUCER: lambda: _flow_into_a_channel(PUBLISHED_PLAN),
    limits.LOCK_PAIRING: lambda: PUBLISHED_PLAN.replace_bd("a_in_buf0_c0_r0", release=None),
    limits.SHIM_REPEAT_COUNT: lambda: PUBLISHED_PLAN.replace_task("in_a_r0_h0", repeat_count=0),
    limits.TILE_IN_ARRAY: lambda: build_plan(
        Geometry(nstream=80, tile_n=2, tile_m=2, rows=5, cols=5), validate=False),
    limits.BD_IN_BUFFER: lambda: PUBLISHED_PLAN.replace_bd("acc_out_c0_r0", offset=4),
    "COMPUTE_TILE_BD_DIMS": lambda: PUBLISHED_PLAN.replace_bd(
        "a_in_buf0_c0_r0", dims=(Dim(2, 7680), Dim(4, 1920), Dim(15, 128), Dim(128, 1))),
    "COMPUTE_TILE_LOCKS": lambda: PUBLISHED_PLAN.replace(locks=PUBLISHED_PLAN.locks + tuple(
        Lock(f"extra{i}", CT, 6 + i, 0) for i in range(11))),
    limits.FLOW_CONNECTED: lambda: PUBLISHED_PLAN.replace(flows=PUBLISHED_PLAN.flows[1:]),
    limits.MEM_TILE_BD_PARITY: lambda: PUBLISHED_PLAN.replace_bd("mem_a_r0_in1_buf0", bd_id=5),
    limits.BD_ID: lambda: PUBLISHED_PLAN.replace_bd("a_in_buf1_c0_r0", bd_id=0),
    limits.SHIM_STRIDE_WORDS: lambda: PUBLISHED_PLAN.replace_task(
        "in_a_r0_h0", dims=(Dim(9, 960), Dim(136, 8640 * 512), Dim(32, 8640), Dim(960, 1))),
    limits.SHIM_ITERATION_SIZE: lambda: PUBLISHED_PLAN.replace_task(
        "in_a_r0_h0", dims=(Dim(65, 960), Dim(136, 8640 * 256), Dim(32, 8640), Dim(960, 1)),
        repeat_count=64),
    limits.BANK_CONFLICT: lambda: _placed(PUBLISHED_PLAN, a_buf1=1024, acc=16384, a_buf0=32768,
                                          b_buf0=48128, b_buf1=55808),
    limits.BUFFER_OVERLAP: lambda: _placed(PUBLISHED_PLAN, b_buf1=4096),
    limits.PING_PONG_PARITY: lambda: PUBLISHED_PLAN.replace(cores=(dataclasses.replace(
        PUBLISHED_PLAN.cores[0], calls_per_integration=3),) + PUBLISHED_PLAN.cores[1:]),
}


@pytest.mark.parametrize("limit", list(MUTATIONS))
def test_each_limit_is_enforced(limit):
    plan = MUTATIONS[limit]()
    with pytest.raises(PlanError) as info:
        validate_plan(plan)
    assert info.value.limit == limit
    assert limit in str(info.value)
    assert isinstance(info.value, ValueError)
    assert info.value.where  # names the tile / channel / BD / task


def test_named_places_in_errors():
    with pytest.raises(PlanError, match=r"compute\(0,2\)"):
        validate_plan(MUTATIONS["COMPUTE_TILE_BDS"]())
    with pytest.raises(PlanError, match="mem_a_r0_out_buf0_call0"):
        validate_plan(MUTATIONS["BD_DIM_SIZE"]())
    with pytest.raises(PlanError, match="COMPUTE_TILE_MEMORY"):
        build_plan(PUBLISHED.replace(tile_t=20))


# ------------------------------------------------------------------ rules read from mlir-aie
def test_memory_tile_bds_follow_channel_parity():
    """isBdChannelAccessible: even channels BDs 0-23, odd channels 24-47 (the published fits)."""
    for plan in (PUBLISHED_PLAN, SMALL_PLAN):
        for tile in plan.tiles:
            if tile.kind != "mem":
                continue
            for bd in plan.bds_of(tile):
                assert (bd.bd_id >= 24) == (bd.port.channel % 2 == 1), bd.name
    odd = PUBLISHED_PLAN.bd("mem_a_r0_in1_buf0")
    assert odd.port.channel == 1 and odd.bd_id == 24


def test_eight_calls_per_packet_passed_before_and_now_fails():
    """48 BDs in one pool would hold it (29 on the A/output tile); the even half cannot (25)."""
    g = PUBLISHED.replace(ncoarse=40, tile_t=5)
    assert g.npu_ncalls_per_packet == 8
    plan = build_plan(g, validate=False)
    assert max(len(plan.bds_of(t)) for t in plan.tiles if t.kind == "mem") <= limits.MEM_TILE_BDS
    with pytest.raises(PlanError) as info:
        validate_plan(plan)
    assert info.value.limit == limits.MEM_TILE_BD_PARITY
    assert "25 BDs on even channels" in str(info.value)


def test_contiguous_runs_are_counted_in_words():
    """bad_npu_nd.mlir: 2048 int8 elements are 512 words (legal); 1536 words are not."""
    validate_plan(PUBLISHED_PLAN.replace_bd("mem_b_c0_in_buf0", dims=(Dim(15, 2048), Dim(2048, 1))))
    validate_plan(PUBLISHED_PLAN.replace_bd("acc_out_c0_r0", dims=(Dim(8, 512), Dim(512, 1))))
    with pytest.raises(PlanError, match="1536 32-bit words") as info:
        validate_plan(PUBLISHED_PLAN.replace_bd("mem_b_c0_in_buf0",
                                                dims=(Dim(5, 6144), Dim(6144, 1))))
    assert info.value.limit == "BD_DIM_SIZE"
    with pytest.raises(PlanError, match="1024 32-bit words"):
        validate_plan(PUBLISHED_PLAN.replace_bd("acc_out_c0_r0", dims=(Dim(4, 1024), Dim(1024, 1))))


def test_shim_strides_in_words_and_a_size_one_dimension_is_exempt():
    words = limits.SHIM_STRIDE_MAX_WORDS
    published_task = next(t for t in PUBLISHED_PLAN.tasks if t.name == "in_a_r0_h0")
    assert published_task.dims[1].stride // 4 <= words  # 552,960 words per packet
    # the limit itself is allowed (int8: 4 bytes per word) ...
    ok = (Dim(9, 960), Dim(2, 4 * words), Dim(32, 8640), Dim(960, 1))
    validate_plan(PUBLISHED_PLAN.replace_task("in_a_r0_h0", dims=ok, offset=0).replace(
        host_args=_bigger_a(PUBLISHED_PLAN, 1 << 30)))
    # ... a size-1 dimension's stride is not a stride at all
    one = (Dim(9, 960), Dim(1, 8 * words), Dim(32, 8640), Dim(960, 1))
    validate_plan(PUBLISHED_PLAN.replace_task("in_a_r0_h0", dims=one))


def _bigger_a(plan, nbytes):
    return tuple(dataclasses.replace(h, shape=(nbytes,)) if h.name == "a" else h
                 for h in plan.host_args)


# ------------------------------------------------------------------ buffer placement
def test_compute_buffers_are_placed_as_the_published_linker_map():
    """The published post: stack 0-1 KiB, B at 1 KiB and 8.5 KiB (bank 0), accumulators at
    16 KiB (bank 1 to themselves), A at 32 KiB and 48 KiB (banks 2 and 3)."""
    kib = 1024
    for core in PUBLISHED_PLAN.cores:
        got = {n.split("_c")[0]: PUBLISHED_PLAN.buffer_map[n].address
               for n in (*core.a, *core.b, core.acc)}
        assert got == {"b_buf0": kib, "b_buf1": 8 * kib + kib // 2, "acc": 16 * kib,
                       "a_buf0": 32 * kib, "a_buf1": 48 * kib}
        banks = {n: list(PUBLISHED_PLAN.buffer_map[n].banks) for n in (*core.a, *core.b, core.acc)}
        assert banks[core.acc] == [1]
        assert all(1 not in b for n, b in banks.items() if n != core.acc)
    for tile in SMALL_PLAN.tiles:  # the rule generalises: small tiles are placed too
        if tile.kind == "compute":
            assert all(b.address is not None for b in SMALL_PLAN.buffers_of(tile))


def test_bank_conflict_names_the_buffers():
    with pytest.raises(PlanError, match=r"a_buf0_c0_r0/b_buf0_c0_r0.*bank\(s\) \[2\]"):
        validate_plan(MUTATIONS[limits.BANK_CONFLICT]())
    # the same buffers without a conflict (A and B of one call in different banks) pass
    validate_plan(_placed(PUBLISHED_PLAN, a_buf1=1024, acc=16384, b_buf0=32768, b_buf1=40448,
            a_buf0=49152))


# ------------------------------------------------------------------ ci4: packed to the tiles
PUBLISHED_CI4 = PUBLISHED.replace(sample_bits=4)
CI4_PLAN = build_plan(PUBLISHED_CI4)


def test_ci4_plan_moves_half_the_bytes_on_every_hop_to_the_tiles():
    """The same tiles, flows, locks and BD chains as ci8, every input length, offset and stride
    halved (one byte per complex sample); the output side unchanged."""
    assert [f.dests for f in CI4_PLAN.flows] == [f.dests for f in PUBLISHED_PLAN.flows]
    assert [lk.init for lk in CI4_PLAN.locks] == [lk.init for lk in PUBLISHED_PLAN.locks]
    out_names = {"acc", "mem_out"}
    for b8, b4 in zip(PUBLISHED_PLAN.bds(), CI4_PLAN.bds(), strict=True):
        assert (b8.name, b8.bd_id, b8.acquire, b8.release) == (b4.name, b4.bd_id, b4.acquire,
                                                               b4.release)
        if any(b8.name.startswith(o) for o in out_names):
            assert b4 == b8
            continue
        assert (b4.length * 2, b4.offset * 2) == (b8.length, b8.offset), b8.name
    # memory-tile write: rows of 8 packed samples, 60 per stream (ci8: 120 rows of re or im)
    a_in = CI4_PLAN.bd("mem_a_r0_in0_buf0")
    assert a_in.dims == (Dim(4, 3840), Dim(8, 8), Dim(60, 64), Dim(8, 1))
    assert CI4_PLAN.bd("mem_a_r0_out_buf0_call1").dims == (Dim(8, 3840), Dim(15, 64),
                                                           Dim(64, 1))
    task = next(t for t in CI4_PLAN.tasks if t.name == "in_a_r1_h1")
    assert task.offset == 32 * 4320 * 3
    assert task.dims == (Dim(9, 480), Dim(136, 4320 * 256), Dim(32, 4320), Dim(480, 1))
    assert [a.nbytes for a in CI4_PLAN.host_args[:2]] == [PUBLISHED.npu_in_bytes // 2] * 2
    assert CI4_PLAN.host_args[2] == PUBLISHED_PLAN.host_args[2]


@pytest.mark.parametrize("order", ["re_high", "re_low"])
def test_ci4_cores_unpack_into_their_own_buffers(order):
    plan = build_plan(PUBLISHED_CI4.replace(nibble_order=order))
    report = validate_plan(plan)
    kib = 1024
    for core in plan.cores:
        assert core.kernel == f"xcorr_kernel_ci4_{order}"
        ua, ub = (plan.buffer_map[n] for n in core.unpacked)
        assert ua.nbytes == PUBLISHED.tile_a_bytes and ub.nbytes == PUBLISHED.tile_b_bytes
        assert core.kernel_args(1) == (core.a[1], core.b[1], core.acc, *core.unpacked)
        got = {n.split("_c")[0]: plan.buffer_map[n].address
               for n in (*core.a, *core.b, core.acc, *core.unpacked)}
        assert got == {"b_unpacked": kib, "a_buf0": 8 * kib + kib // 2, "acc": 16 * kib,
                       "a_unpacked": 32 * kib, "a_buf1": 48 * kib, "b_buf0": 55 * kib + kib // 2,
                       "b_buf1": 59 * kib + kib // 4}
        # the published design's 62,464 B of tile buffers: A and B halve, the unpacked A and B
        # take their place
        assert report.usage[core.tile].data_bytes == 62_464 == PUBLISHED_CI4.tile_data_bytes


def test_ci4_unpack_and_mac_phases_keep_their_banks_apart():
    """The MAC loop streams the unpacked A, B and the accumulators; each unpack reads a packed
    buffer and writes an unpacked one: a shared bank in either phase is refused (layouts with
    no overlap, each with one conflict)."""
    def placed(**addresses):
        plan = CI4_PLAN
        for short, address in addresses.items():
            plan = plan.replace_buffer(f"{short}_c0_r0", address=address)
        return plan

    mac = placed(a_buf0=1024, a_buf1=8704, b_buf0=32768, b_buf1=36608, a_unpacked=40960,
                 b_unpacked=57344)  # the unpacked A spans banks 2 and 3, the unpacked B bank 3
    with pytest.raises(PlanError, match=r"a_unpacked_c0_r0/b_unpacked_c0_r0"):
        validate_plan(mac)
    unpack = placed(a_buf1=48128, b_buf0=55808, b_buf1=59648)  # A1 reaches into bank 2
    with pytest.raises(PlanError, match=r"a_buf1_c0_r0/a_unpacked_c0_r0"):
        validate_plan(unpack)
    validate_plan(placed(a_buf1=49152, b_buf0=56832, b_buf1=60672))  # as built


def test_ci4_plan_holds_up_to_the_dma_limit_of_packets():
    """ci4's int32 bound allows 34,952 packets; one call's shim tasks walk at most 1023."""
    assert validate_plan(build_plan(PUBLISHED_CI4.replace(npacket=1023)))
    with pytest.raises(PlanError, match="BD_DIM_SIZE"):
        build_plan(PUBLISHED_CI4.replace(npacket=1024))
