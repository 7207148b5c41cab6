"""The NPU performance model: calibrated on the published design, computed from the plan, moving
the right way with each input; the ci4 plan predicted from its own bytes and unpack loop, with
the host-unpack path it replaced as the made change's baseline; its trace; ``xengine
npu-model``; the single-read diagonal plan it prices, checked bit for bit in the emulator."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import random_frames
from xengine_block.backends.npu import host_schedule, predicted, predicted_rate, tilings
from xengine_block.cli import main
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import PUBLISHED, small_test_geometry
from xengine_block.npu.design.dataflow import Port
from xengine_block.npu.design.plan import build_plan, single_read_diagonal
from xengine_block.npu.design.validate import validate_plan
from xengine_block.npu.host import hostio
from xengine_block.npu.host.blockpairs import BlockPairJob
from xengine_block.npu.host.emulate import PlanEmulator
from xengine_block.npu.model import perfmodel, perftrace
from xengine_block.reference import reference_triangle

ROOT = Path(__file__).resolve().parents[3]
XDNA2 = perfmodel.DEVICES["xdna2"]
VERSAL = perfmodel.DEVICES["aie-ml-v2"]


@pytest.fixture(scope="module")
def published_plan():
    return build_plan(PUBLISHED)


@pytest.fixture(scope="module")
def published(published_plan):
    return perfmodel.predict(published_plan, XDNA2)


# ---------------------------------------------------------------------- calibration
@pytest.mark.parametrize("key", ["msps", "calls_per_s", "tops", "kernel_cycles"])
def test_published_figures_within_ten_percent(published, key):
    measured = perfmodel.figure(f"published_{key}")
    assert abs(getattr(published, key) / measured - 1) < 0.10, (key, getattr(published, key))


def test_published_limit_is_the_one_the_post_names(published):
    assert published.bottleneck == perfmodel.PUBLISHED_BOTTLENECK == "ddr"
    assert published.terms["ddr"] < published.terms["compute"]


def test_published_measurements_are_not_inputs(published_plan, published, monkeypatch):
    """Nothing is fitted: the published results can change without moving the prediction."""
    for name in [n for n in perfmodel.FIGURES if n.startswith("published_")]:
        monkeypatch.setitem(perfmodel.FIGURES, name,
                            dataclasses.replace(perfmodel.FIGURES[name], value=1e9))
    again = perfmodel.predict(published_plan, XDNA2)
    assert again.msps == published.msps and again.kernel_cycles == published.kernel_cycles


def test_every_figure_has_a_kind_and_a_source():
    kinds = {perfmodel.HARDWARE, perfmodel.MEASURED, perfmodel.MEASURED_HERE}
    for name, fig in perfmodel.FIGURES.items():
        assert fig.kind in kinds and len(fig.source) > 20 and fig.unit, name


def test_host_pass_rates_are_the_results_file_s():
    """The host passes' rates (:data:`~xengine_block.npu.model.perfmodel.MEASURED_HERE`) are those
    of the results file their source names, to the 3 significant figures the table keeps: a
    re-measured file without the model's table updated fails here."""
    results = json.loads((ROOT / perfmodel.HOST_PASSES_RESULTS).read_text())
    assert set(perfmodel.HOST_PASS_FIGURES) == set(results["passes"])
    for host_pass, name in perfmodel.HOST_PASS_FIGURES.items():
        fig = perfmodel.FIGURES[name]
        assert fig.kind == perfmodel.MEASURED_HERE and perfmodel.HOST_PASSES_RESULTS in fig.source
        assert fig.value == float(f"{results['passes'][host_pass]['bytes_per_s']:.3g}"), name


def test_tops_count_the_blocks_and_the_useful_triangle():
    """TOPS in both conventions, written here from the op counts: 8 ops per complex product,
    every product of each NPU call's block; the triangle's 8 S(S+1)/2 ops per sample time."""
    g = PUBLISHED.replace(nstream=512)
    pred = predicted(g)
    assert pred.tops == pytest.approx(3 * 8 * 256 * 256 * pred.msps / 1e6, rel=1e-12)
    assert pred.tops_useful == pytest.approx(8 * 512 * 513 / 2 * pred.msps / 1e6, rel=1e-12)


def test_kernel_cycles_from_the_loop_structure():
    # 4NMT MACs, and per (pair of A rows, B block) 16 accumulator loads + 16 stores
    assert perfmodel.kernel_cycles(8, 4, 15) == 1920 + 4 * 4 * 32
    assert perfmodel.kernel_cycles(2, 1, 15) == 120 + 1 * 32
    # a longer inner loop amortises the same accumulator traffic
    eff = [4 * 8 * 4 * t / perfmodel.kernel_cycles(8, 4, t) for t in (5, 15, 30)]
    assert eff == sorted(eff)


# ---------------------------------------------------------------------- from the plan
def test_traffic_read_off_the_plan(published_plan):
    g = PUBLISHED
    tr = perfmodel.plan_traffic(published_plan)
    assert tr.input_bytes == 2 * g.npu_in_bytes  # A and B each read once per NPU call
    assert tr.kernel_calls == g.npacket * g.npu_ncalls_per_packet * g.nchan_pkt == 4896
    assert tr.integrations == g.nchan_pkt and tr.mem_fill_calls == g.npu_ncalls_per_packet
    assert (tr.n, tr.m, tr.t, tr.cores, tr.columns, tr.rows) == (8, 4, 15, 32, 8, 4)
    core = published_plan.cores[0].tile
    assert tr.per_call(Port(core, "S2MM", 0)) == g.tile_a_bytes
    assert tr.per_call(Port(core, "S2MM", 1)) == g.tile_b_bytes
    out = sum(b for p, b in tr.port_bytes.items()
              if p.tile.kind == "shim" and p.direction == "S2MM")
    assert out == g.npu_out_bytes and not any(p in tr.inputs for p in tr.port_bytes
                                              if p.direction == "S2MM" and p.tile.kind == "shim")


def test_single_read_diagonal_halves_host_reads(published_plan):
    one = perfmodel.plan_traffic(single_read_diagonal(published_plan))
    assert one.input_bytes * 2 == perfmodel.plan_traffic(published_plan).input_bytes
    assert one.kernel_calls == 4896


@pytest.mark.parametrize("g", [small_test_geometry(), PUBLISHED.replace(npacket=2)],
                         ids=["small", "published P=2"])
def test_single_read_diagonal_is_exact_and_ignores_b(g):
    plan = single_read_diagonal(build_plan(g))
    validate_plan(plan)
    frames = random_frames(g, g.npacket, seed=11)
    a = hostio.npu_input(frames, g, 0, 0)
    out = np.zeros(plan.host_arg_map["out"].shape, np.int32)
    garbage = np.random.default_rng(7).integers(-128, 128, a.shape, dtype=np.int8)
    PlanEmulator(plan).run({"a": a, "b": garbage, "out": out})  # b: never read
    job = BlockPairJob(g, g.npacket)
    job.add(0, 0, 0, out)
    assert np.array_equal(job.triangle, reference_triangle(frames_to_natural(frames, g)))


def test_single_read_diagonal_needs_matching_reads():
    g = small_test_geometry(rows=2, cols=2, tile_n=2, tile_m=2)
    with pytest.raises(ValueError, match="N = 2M"):
        single_read_diagonal(build_plan(g))


# ---------------------------------------------------------------------- each input
def test_less_ddr_bandwidth_slows_an_input_bound_plan(published_plan, published):
    slow = perfmodel.predict(published_plan, XDNA2.replace(
        input_bytes_per_s=XDNA2.input_bytes_per_s / 2))
    assert slow.bottleneck == "ddr" and slow.msps < 0.6 * published.msps


def test_faster_clock_helps_compute_not_input(published_plan):
    roomy = XDNA2.replace(host=dataclasses.replace(XDNA2.host, sync_bytes_per_s=1e12))
    base = perfmodel.predict(published_plan, roomy)
    assert base.bottleneck == "ddr"
    fast = perfmodel.predict(published_plan, roomy.replace(clock_hz=2 * roomy.clock_hz))
    assert base.msps < fast.msps < 1.05 * base.msps  # only the per-call overheads shrink
    wide = roomy.replace(input_bytes_per_s=10 * roomy.input_bytes_per_s)
    base = perfmodel.predict(published_plan, wide)
    assert base.bottleneck == "compute"
    assert perfmodel.predict(published_plan, wide.replace(clock_hz=2 * wide.clock_hz)).msps > \
        1.8 * base.msps


def test_more_tiles_raise_a_compute_bound_plan():
    g = PUBLISHED.replace(nstream=1024)
    plan = build_plan(PUBLISHED)
    sched = host_schedule(g)
    full = perfmodel.predict(plan, VERSAL, sched)
    assert full.bottleneck == "compute" and full.partitions == 4
    half = perfmodel.predict(plan, VERSAL.replace(columns=16), sched)
    assert half.partitions == 2 and half.msps == pytest.approx(full.msps / 2, rel=1e-6)


def test_host_terms_move_the_right_way(published_plan, published):
    slow_sync = XDNA2.replace(host=dataclasses.replace(
        XDNA2.host, sync_bytes_per_s=XDNA2.host.sync_bytes_per_s / 2))
    pred = perfmodel.predict(published_plan, slow_sync)
    assert pred.bottleneck == "host_sync" and pred.msps < 0.6 * published.msps
    slow_launch = XDNA2.replace(host=dataclasses.replace(XDNA2.host, launch_s=5e-3))
    assert perfmodel.predict(published_plan, slow_launch).calls_per_s < 0.7 * published.calls_per_s


def test_more_streams_more_calls_fewer_samples():
    rates = [predicted(PUBLISHED.replace(nstream=s), "aie-ml-v2").msps for s in (256, 512, 1024)]
    assert rates == sorted(rates, reverse=True)
    assert host_schedule(PUBLISHED.replace(nstream=1024)).npu_calls == 10


# ---------------------------------------------------------------------- our plan
def test_our_schedule_from_the_backend():
    s256 = host_schedule(PUBLISHED)
    assert (s256.npu_calls, s256.diagonal_calls, s256.fill) == (1, 1, ())  # zero copy
    assert s256.sync_bytes == PUBLISHED.npu_in_bytes  # one buffer passed as A and B
    s512 = host_schedule(PUBLISHED.replace(nstream=512))
    assert (s512.npu_calls, s512.diagonal_calls) == (3, 2)
    assert dict(s512.fill)["copy"] == 2 * PUBLISHED.npu_in_bytes
    ci4 = host_schedule(PUBLISHED.replace(sample_bits=4))  # packed frames are the input: no pass
    assert ci4.fill == () and ci4.sync_bytes * 2 == PUBLISHED.npu_in_bytes


def test_unpack_cycles_from_the_unpack_loop():
    # (N + M) T blocks of 64 ci4 bytes, 2 cycles each: two 512-bit stores, and two unpacks and
    # two shuffles in the vector and move slots
    assert perfmodel.tile_unpack_cycles(8, 4, 15) == 2 * (8 + 4) * 15 == 360
    assert perfmodel.tile_unpack_cycles(2, 1, 15) == 90


def test_ci4_plan_predicted_from_its_bytes_and_its_unpack():
    g = PUBLISHED.replace(sample_bits=4)
    pred = predicted(g)
    tr, tr8 = (perfmodel.plan_traffic(pred.base_plan),
               perfmodel.plan_traffic(build_plan(PUBLISHED)))
    assert tr.unpacks and not tr8.unpacks
    assert (tr.n, tr.m, tr.t, tr.kernel_calls) == (tr8.n, tr8.m, tr8.t, tr8.kernel_calls)
    assert tr.input_bytes * 2 == tr8.input_bytes  # every hop to the compute tiles halves
    for port, nbytes in tr8.port_bytes.items():
        assert tr.port_bytes[port] * (2 if port in tr8.inputs else 1) == nbytes, port
    assert pred.kernel_cycles == perfmodel.kernel_cycles(8, 4, 15)
    assert pred.main.core == pred.kernel_cycles + perfmodel.tile_unpack_cycles(8, 4, 15)
    out = pred.to_dict()
    # the one block pair is diagonal: it runs the plan reading its input once, half the bytes
    assert out["kernel"]["ci4_unpacked_on_tiles"] and 2 * out["input_bytes_per_npu_call"] == \
        tr.input_bytes
    assert pred.bottleneck == "compute"
    assert any("480 B" in c for c in pred.caveats())  # one channel of one ci4 packet per run


def test_ci4_on_tiles_is_made_and_priced_against_the_host_unpack():
    g = PUBLISHED.replace(sample_bits=4)
    plan, sched = build_plan(g), host_schedule(g)
    base = perfmodel.predict(plan, XDNA2, sched)
    assert "ci4_on_tiles" not in [c["name"] for c in perfmodel.design_changes(base)]
    made = {c["name"]: c for c in perfmodel.made_changes(base)}["ci4_on_tiles"]
    old_plan, old_sched = perfmodel.ci4_unpacked_on_host(plan, sched)
    old = perfmodel.predict(old_plan, XDNA2, old_sched)
    assert not old_plan.geometry.ci4 and old_sched.sync_bytes == 2 * sched.sync_bytes
    assert dict(old_sched.fill)["ci4_unpack"] == PUBLISHED.npu_in_bytes // 2
    assert made["name"] == "ci4_on_tiles" and made["msps_without"] == old.msps
    assert made["bottleneck_without"] == "host_fill" and made["gain"] > 1.5
    assert made["msps"] == predicted(g).msps
    assert [c["name"] for c in perfmodel.made_changes(predicted(PUBLISHED))] == [
        "place_beside_runs", "single_read_diagonal", "placement_off_gil"]


def test_design_changes_only_list_gains():
    """At S = 256 the changes the model priced are made; each made one is priced by undoing it
    alone (a gain > 1, and its bottleneck without it), and what is left (the native ring: the
    GIL no longer binds once the placement leaves it) gains nothing, so nothing is listed.
    Before them (the previous host loop), every one of them is listed with its gain."""
    pred = predicted(PUBLISHED)
    assert perfmodel.design_changes(pred) == []
    made = {c["name"]: c for c in perfmodel.made_changes(pred)}
    assert set(made) == {"place_beside_runs", "single_read_diagonal", "placement_off_gil"}
    assert all(c["gain"] > 1.05 for c in made.values())
    assert made["single_read_diagonal"]["bottleneck_without"] == "ddr"
    assert made["placement_off_gil"]["bottleneck_without"] == "host_gil"
    before = pred.schedule.replace(place="launch", diagonal_read_once=False, place_gil=True)
    old = perfmodel.predict(pred.base_plan, XDNA2, before)
    assert old.bottleneck == "ddr" and old.idle_fraction > 0.25
    undone = {c.name: c for c in perfmodel.DESIGN_CHANGES}
    for name in made:  # made ones priced on the old loop as options
        gained = perfmodel.predict(pred.base_plan, XDNA2,
                                   undone[name].options(before))
        assert gained.msps >= old.msps * (1 - perfmodel.MIN_GAIN), name


def test_ours_passes_the_published_design_as_the_model_predicts_it():
    """The model still predicts the published design within 10 % of its measured 64 Msps and
    109 calls/s, and ours at S = 256 at least 1.25 times it, compute-bound, with the NPU idle
    about 5 % of the time."""
    published = perfmodel.predict(build_plan(PUBLISHED), XDNA2)
    for key in ("msps", "calls_per_s"):
        assert abs(perfmodel.published_comparison(published)[key]["ratio"] - 1) < 0.1, key
    ours = predicted(PUBLISHED)
    assert ours.msps >= 1.25 * published.msps and ours.bottleneck == "compute"
    assert ours.idle_fraction < 0.06


def test_tilings_are_priced_and_the_256_block_is_best():
    """128-stream block pairs do 3/4 of the square's work but read each block once per pair:
    the model finds them (and 64-stream blocks) slower than one 256-stream block."""
    found = tilings(PUBLISHED)
    assert [t["npu_block"] for t in found][0] == 256
    assert {t["npu_block"]: t["block_pairs"] for t in found} == {256: 1, 128: 3, 64: 10}
    best = found[0]
    assert all(t["device_msps"] < best["device_msps"] for t in found[1:])


# ---------------------------------------------------------------------- trace
def _tracks(trace: dict) -> dict[tuple[int, int], list[dict]]:
    tracks = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append(e)
    return tracks


def test_trace_names_a_track_per_tile_and_channel(published_plan, published):
    trace = json.loads(json.dumps(perftrace.chrome_trace(published, 8)))
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta
               if e["name"] == "thread_name"}
    assert set(procs.values()) == {str(t) for t in published_plan.tiles}
    names = defaultdict(set)
    for (pid, _), name in threads.items():
        names[procs[pid]].add(name)
    for core in published_plan.cores:
        assert names[str(core.tile)] == {"core", "S2MM0", "S2MM1", "MM2S0"}
    assert {"MM2S0", "MM2S1", "S2MM0"} <= names["shim(0,0)"]
    tracks = _tracks(trace)
    assert set(tracks) == set(threads)
    assert {e["cat"] for es in tracks.values() for e in es} == {"kernel", "dma_in", "dma_out"}
    kernels = [e for e in tracks[next(k for k, v in threads.items()
                                      if v == "core")] if e["name"].startswith("kernel")]
    assert len(kernels) == 8


@pytest.mark.parametrize("device", ["xdna2", "aie-ml-v2"])
def test_trace_tracks_never_overlap(device):
    pred = predicted(PUBLISHED.replace(sample_bits=4), device)
    for events in _tracks(perftrace.chrome_trace(pred, 12)).values():
        events.sort(key=lambda e: e["ts"])
        for a, b in zip(events, events[1:], strict=False):
            assert a["ts"] + a["dur"] <= b["ts"] + 1e-9, (a, b)


@pytest.mark.parametrize("single_read", [False, True], ids=["as built", "single read"])
def test_trace_steady_state_is_the_model_period(published_plan, single_read):
    pred = perfmodel.predict(published_plan, XDNA2, host_schedule(PUBLISHED).replace(
        diagonal_read_once=single_read))
    assert pred.main.limit == ("compute" if single_read else "ddr")
    spans = perftrace.schedule(pred, 40)
    core = published_plan.cores[0].tile
    starts = sorted(s.start for s in spans if s.tile == core and s.name.startswith("kernel"))
    assert (starts[-1] - starts[-21]) / 20 == pytest.approx(pred.main.period, rel=0.01)


# ---------------------------------------------------------------------- command line
def test_cli_published_json_and_trace(tmp_path, capsys):
    trace = tmp_path / "t.json"
    assert main(["npu-model", "--design", "published", "--trace", str(trace)]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("msps", "calls_per_s", "kernel_cycles", "tops", "bottleneck"):
        assert key in out
    assert out["predicted_not_measured"] is True and out["bottleneck"] == "ddr"
    assert abs(out["published_measured"]["msps"]["ratio"] - 1) < 0.1
    assert json.loads(trace.read_text())["traceEvents"] and out["trace"] == str(trace)


def test_cli_ours_names_the_change_it_points_to(capsys):
    assert main(["npu-model", "--nstream", "512", "--bits", "8"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["design"] == "ours" and out["bits"] == 8 and out["bottleneck"] == "compute"
    made = {c["name"]: c for c in out["made_changes"]}
    assert made["parallel_host_fill"]["gain"] > 1.5
    assert made["parallel_host_fill"]["bottleneck_without"] == "host_fill"
    assert [t["npu_block"] for t in out["tilings"]][0] == 256


def test_cli_ci4_reports_the_made_change(capsys):
    assert main(["npu-model", "--nstream", "256", "--bits", "4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bits"] == 4 and out["bottleneck"] == "compute"
    assert out["kernel"]["ci4_unpacked_on_tiles"]
    made = {c["name"]: c for c in out["made_changes"]}
    assert made["ci4_on_tiles"]["bottleneck_without"] == "host_fill"
    assert "ci4_on_tiles" not in [c["name"] for c in out["design_changes"]]


def test_cli_figures_table(capsys):
    assert main(["npu-model", "--figures"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert table["xdna2_ddr_read_bytes_per_s"]["kind"] == perfmodel.MEASURED


def test_backends_quote_the_prediction(capsys):
    assert main(["backends"]) == 0
    lines = capsys.readouterr().out.splitlines()
    npu = lines.index(next(ln for ln in lines if ln.startswith("npu ")))
    assert "predicted, not measured" in lines[npu + 1]
    assert f"{predicted().msps:.1f} Msps" in predicted_rate()
