"""The benchmark's own arithmetic on tiny inputs (no timing asserted): the onnxruntime peer's
Gram -> triangle mapping is exact, and every native fraction has a peak to divide by."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.conftest import random_frames
from xengine_block import native_extension
from xengine_block.backends import native as nat
from xengine_block.bench import correlator as benchmarking
from xengine_block.bench import machine as machine_limits
from xengine_block.bench import peers as library_peers
from xengine_block.geometry import Geometry


def _oracle(g):
    return lambda f: benchmarking.exact_oracle(f, g)


def test_onnxruntime_peer_mapping_is_exact_where_its_kernel_cannot_saturate():
    """Our Gram -> triangle mapping of the onnxruntime peer, on inputs its u8 x s8 kernel
    cannot saturate on any CPU (|y| <= 79, the extremes included), and the u8 x u8 variant
    (non-saturating kernel) at full range, -128 included. Whether the u8 x s8 kernel is exact
    at full range is the CPU's (no VNNI: it saturates): the benchmark reports it."""
    pytest.importorskip("onnxruntime", reason="optional extra 'bench' not installed")
    pytest.importorskip("onnx", reason="optional extra 'bench' not installed")
    g = Geometry(nstream=10, nchan=9, npacket=2)
    r = library_peers.NO_SATURATION_RANGE
    small = np.clip(random_frames(g, 2, seed=3), -r, r)
    small[0, 3], small[1, 5] = -r, r  # the u8 zero point must undo the bias on the extremes
    entry = library_peers.peer_onnxruntime(small, g, 1, 1, _oracle(g))
    assert entry["exact"] and entry["gemm_alone"]["int8_tops"] > 0
    full = random_frames(g, 2, seed=3)
    full[0, 3] = -128
    entry = library_peers.peer_onnxruntime(full, g, 1, 1, _oracle(g), b_unsigned=True)
    assert entry["exact"] and "u8 x u8" in entry["gemm_alone"]["shape"]


def test_torch_peer_is_exact():
    pytest.importorskip("torch", reason="optional extra 'bench' (torch) not installed")
    g = Geometry(nstream=10, nchan=9, npacket=2)
    frames = random_frames(g, 2, seed=4)
    frames[0, 3] = -128
    entry = library_peers.peer_torch_int_mm(frames, g, 1, 1, _oracle(g))
    assert entry["exact"] and entry["packets"] >= 1 and entry["gemm_alone"]["int8_tops"] > 0


def test_best_exact_peer_ignores_inexact_and_skipped_peers():
    peers = {"fast but wrong": {"msps": 9.0, "exact": False},
             "absent": {"skipped": "not installed"},
             "slow": {"msps": 1.0, "exact": True}, "exact": {"msps": 2.0, "exact": True}}
    assert library_peers.best_exact_peer(peers)[0] == "exact"
    assert library_peers.best_exact_peer({"w": {"msps": 1.0, "exact": False}}) is None


def test_scaling_rows_have_peaks_and_are_exact():
    if not any(s.runnable for isa, s in nat.isa_status().items() if isa != "scalar"):
        pytest.skip("no native SIMD path here: nothing to scale")
    rows = benchmarking.scaling(nstreams=(16, 32), threads=(1,), repeat=1)
    assert [r["S"] for r in rows] == [16, 32]
    for r in rows:
        assert r["exact_channel0"]
        assert r["machine_int8_tops"] > 0 and r["fraction_of_int8_peak"] > 0
        assert r["fraction_of_int8_peak_cpu_time"] > 0
        assert r["fraction_of_roofline"] >= r["fraction_of_int8_peak"] > 0
        assert r["ops_per_input_byte"] == 2 * (r["S"] + 1)


def test_gram_to_triangle_matches_definition():
    """K[j, k] = sum x_j conj(x_k) from the real Gram of [re; im], on a hand-made input."""
    re = np.array([[1, 2], [3, -4]], np.int32)  # [stream, sample]
    im = np.array([[0, -1], [5, 2]], np.int32)
    y = np.concatenate([re, im])
    tri = library_peers.gram_to_triangle((y @ y.T)[None], 2)
    x = re + 1j * im
    full = x @ x.conj().T
    expect = [full[0, 0], full[0, 1], full[1, 1]]  # packed order (0,0), (0,1), (1,1)
    assert np.array_equal(tri[0, :, 0], np.real(expect)) and np.array_equal(
        tri[0, :, 1], np.imag(expect))


def test_read_bandwidth_loop_reads_every_byte():
    """The C loop's checksum is the sum of every 64-bit word of every pass (buffer bytes
    0x5a): a loop the compiler dropped or that skipped lines would give another sum."""
    rb = pytest.importorskip("xengine_block._readbw", reason="C extension not built")
    nbytes, passes = 3 << 20, 2
    for nthreads in (1, 2, 3):
        slice_ = (nbytes // nthreads) & ~4095
        wall, cpu, how, checksum = rb.read_bandwidth(nthreads, nbytes, passes)
        words = nthreads * (passes + 1) * slice_ // 8  # + the untimed warm-up pass
        assert checksum == (words * 0x5A5A5A5A5A5A5A5A) % (1 << 64), (nthreads, how)
        assert wall > 0 and cpu > 0 and "loads" in how
    with pytest.raises(ValueError, match="nthreads"):
        rb.read_bandwidth(0, nbytes, 1)


def test_machine_read_gbps_reports_both_ways(monkeypatch):
    """The figure is the best of wall clock and CPU time, with how it was measured; the numpy
    fallback answers where the extension is absent."""
    monkeypatch.setattr(machine_limits, "_read_buffer_bytes", lambda: 8 << 20)
    monkeypatch.setattr(machine_limits, "_READS", {})
    gbps, how = machine_limits.machine_read_gbps(1, seconds=0.01, repeat=1)
    wall, cpu = machine_limits._READS[1][:2]
    assert gbps == max(wall, cpu) / 1e9 > 0 and "1 thread(s)" in how
    w, c, how = machine_limits._numpy_read_bandwidth(2, 8 << 20, 1)
    assert w > 0 and c > 0 and "numpy" in how
    block = benchmarking.read_bandwidth(2)
    assert block["one_core"]["nthreads"] == 1 and block["all_cores"]["nthreads"] == 2


def test_ops_per_input_byte_from_the_geometry():
    """514 useful ops per ci8 byte at S = 256: 8 * 256*257/2 ops over
    2 * 256 bytes per sample time; ci4 packs a sample in one byte."""
    assert benchmarking.ops_per_input_byte(256) == 514
    assert benchmarking.ops_per_input_byte(256, 4) == 1028
    assert benchmarking.ops_per_input_byte(2) == 6  # 3 baselines x 8 ops / 4 bytes


def test_roofline_is_the_lower_limit(monkeypatch):
    """min(int8 peak, read bandwidth x useful ops per byte), on made-up limits."""
    monkeypatch.setattr(benchmarking, "best_read_gbps", lambda n: {1: 1.0, 2: 4.0}[n])
    entry = {"int8_tops_triangle_useful": 0.25, "machine_int8_tops": 1.0}
    benchmarking.set_roofline(entry, 1, 514)  # memory: 1 GB/s x 514 ops/B = 0.514 TOPS
    assert entry["roofline_bound"] == "memory" and entry["roofline_tops"] == 0.514
    assert entry["fraction_of_roofline"] == 0.25 / 0.514
    benchmarking.set_roofline(entry, 2, 514)  # memory 2.056 TOPS: the peak binds
    assert entry["roofline_bound"] == "int8 compute" and entry["fraction_of_roofline"] == 0.25
    no_peak = {"int8_tops_triangle_useful": 0.25, "machine_int8_tops": None}
    benchmarking.set_roofline(no_peak, 1, 514)
    assert no_peak["fraction_of_roofline"] is None and no_peak["memory_limit_tops"] == 0.514


def test_an_amx_machine_gets_amx_rows(monkeypatch):
    """On Sapphire Rapids' CPUID and XCR0 (test_isa_detection's facts) the benchmark's rows are
    the AMX path's: ``auto`` scaling rows, per-ISA entries with their roofline. The kernels
    that run are this machine's best (the dispatch and the rows are under test, not AMX)."""
    from tests.helpers.native import compiled, decide

    compiled("amx", "avx512vnni", "avx2")
    monkeypatch.delenv(nat.DISABLE_ENV, raising=False)
    here = nat.select_isa().isa
    ext, spr = native_extension.native(), decide("sapphire_rapids")

    def run_here(isa: str) -> str:
        return here if isa in ("amx", "avx512vnni") else isa

    class OnSapphireRapids:
        isa_status = staticmethod(lambda: dict(spr))

        @staticmethod
        def correlate(frames, out, s, c, coarse, isa, *rest):
            return ext.correlate(frames, out, s, c, coarse, run_here(isa), *rest)

        @staticmethod
        def int8_peak(isa, nthreads, iters):
            return ext.int8_peak(run_here(isa), nthreads, iters)

    monkeypatch.setattr(native_extension, "native", OnSapphireRapids)
    monkeypatch.setattr(machine_limits, "_PEAKS", {})  # keep the stand-in's peaks out
    rows = benchmarking.scaling(nstreams=(16,), threads=(1,), repeat=1)
    assert [r["isa"] for r in rows] == ["amx"] and rows[0]["fraction_of_roofline"] > 0
    g = Geometry(nstream=16, nchan=9, npacket=2)
    details = benchmarking.native_details(random_frames(g, 2, seed=5), g, repeat=1)
    assert details["isa"] == "amx"
    for isa in ("amx", "avx512vnni", "avx2"):
        entry = details["per_isa"][isa]
        assert entry["exact"] and entry["fraction_of_roofline"] > 0, isa
    assert details["per_isa"]["amx_emulated"]["benchmarked"] is False


def test_machine_identity_names_the_cpu_from_cpuinfo():
    """The benchmarks' ``machine``: model name, family, model and int8 ISA flags of the first
    processor (two blocks of an AMX Xeon's /proc/cpuinfo, cut down), and this machine's."""
    from xengine_block.bench.machine import machine_identity, parse_cpuinfo

    block = ("processor\t: {n}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
             "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: fpu sse2 avx2 avx512f "
             "avx512_vnni amx_bf16 amx_tile amx_int8\n\n")
    cpu = parse_cpuinfo(block.format(n=0) + block.format(n=1).replace("143", "999"))
    assert cpu == {"model_name": "Intel(R) Xeon(R) Platinum 8480+", "family": 6, "model": 143,
                   "isa_flags": ["avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_int8"],
                   "vendor": "GenuineIntel"}
    assert parse_cpuinfo("")["model_name"] is None
    here = machine_identity()
    assert here["cpus"] == os.cpu_count() and here["kernel"]


@pytest.mark.parametrize("vendor, family, model, flags, expected", [
    ("GenuineIntel", 6, 143, ["avx2", "avx512f", "avx512_vnni", "amx_tile", "amx_int8"],
     "intel-amx"),
    ("GenuineIntel", 6, 207, ["avx2", "avx512f", "avx512_vnni", "avx_vnni"], "intel-avx512vnni"),
    ("AuthenticAMD", 25, 0x01, ["avx2"], "amd-zen3"),           # Milan
    ("AuthenticAMD", 25, 0x11, ["avx2", "avx512f", "avx512_vnni"], "amd-zen4"),  # Genoa
    ("AuthenticAMD", 26, 0x02, ["avx2", "avx512f", "avx512_vnni"], "amd-zen5"),  # Turin
    ("HygonGenuine", 24, 1, ["avx2"], "cpu-avx2"),
])
def test_cpu_class_names_the_int8_path_and_microarchitecture(vendor, family, model, flags,
                                                              expected):
    from xengine_block.bench.machine import cpu_class, results_path

    cpu = {"vendor": vendor, "family": family, "model": model, "isa_flags": flags}
    assert cpu_class(cpu) == expected
    assert results_path("bench_x", "r", cpu).as_posix() == f"r/{expected}/bench_x.json"


def test_write_results_stamps_the_date_and_refuses_a_result_without_its_machine(tmp_path):
    import json

    from xengine_block.bench.machine import machine_identity, write_results

    with pytest.raises(ValueError, match="machine"):
        write_results("bench_x", {"msps": 1.0}, tmp_path)
    path = write_results("bench_x", {"msps": 1.0, "machine": machine_identity()}, tmp_path)
    data = json.loads(path.read_text())
    assert data["benchmark"] == "bench_x" and data["msps"] == 1.0
    assert data["measured_utc"].endswith("Z") and path.parent.parent == tmp_path


def test_bench_correlator_writes_its_results_file_when_told(tmp_path, monkeypatch, capsys):
    """bench_correlator.py writes <root>/<cpu class>/bench_correlator.json (the printed JSON,
    stamped) with --write-results, as every benchmark does, and only prints without it."""
    import importlib.util
    import json
    from pathlib import Path

    from xengine_block.bench.machine import machine_identity, results_path

    benchmarks = Path(__file__).resolve().parents[2] / "benchmarks"
    monkeypatch.syspath_prepend(str(benchmarks))  # its results_file helper, as when run
    spec = importlib.util.spec_from_file_location("bench_correlator",
                                                  benchmarks / "bench_correlator.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    canned = {"msps": 1.5, "fraction_of_roofline": 0.5, "machine": machine_identity()}
    monkeypatch.setattr(benchmarking, "run", lambda *args, **kw: dict(canned))
    bench.main(["--no-scaling", "--write-results", "--results-root", str(tmp_path / "w")])
    path = results_path("bench_correlator", tmp_path / "w", canned["machine"])
    written = json.loads(path.read_text())
    assert written["benchmark"] == "bench_correlator" and written["msps"] == 1.5
    assert "measured_utc" in written
    assert set(written["load_average_1min"]) == {"start", "end"}
    assert all(isinstance(v, float) for v in written["load_average_1min"].values())
    assert json.loads(capsys.readouterr().out)["fraction_of_roofline"] == 0.5
    bench.main(["--results-root", str(tmp_path / "n")])
    assert not (tmp_path / "n").exists()


def test_compare_builds_alternates_builds_and_refuses_disagreeing_ones():
    """compare_builds runs each build's full call, layout pass and products on the same frames
    and reports CPU seconds, fractions and ratios to the first; a build whose result differs
    is refused."""
    from types import SimpleNamespace

    from xengine_block.backends.native import isa_status
    from xengine_block.bench.correlator import compare_builds, load_build
    from xengine_block.native_extension import native

    if not any(isa_status()[i][0] for i in ("amx", "avx512vnni", "avx2")):
        pytest.skip("no SIMD path of the native backend runs here")
    builds = {"this": native(), "again": load_build(native().__file__)}
    rows = compare_builds(builds, nstreams=(16,), rounds=1)
    assert [r["build"] for r in rows] == ["this", "again"]
    assert rows[0]["full_ratio_to_this"] == 1.0
    for r in rows:
        assert r["full_cpu_seconds"] > 0 and 0 < r["layout_fraction"] < 1
        assert r["compute_fraction_of_int8_peak_cpu_time"] > 0

    def wrong(frames, out, *args):
        out[...] = 1
        return 1.0

    with pytest.raises(ValueError, match="disagree at S = 16"):
        compare_builds({"this": native(), "wrong": SimpleNamespace(correlate=wrong)},
                       nstreams=(16,), rounds=1)


@pytest.mark.parametrize("alternate", [False, True])
def test_interleaved_best_calls_each_once_a_round(alternate):
    """Each function once per round (in reverse every other round when ``alternate``), the
    ``between`` hook after each call, one best time per function."""
    calls: list[str] = []
    best = machine_limits.interleaved_best([lambda: calls.append("a"), lambda: calls.append("b")],
                                           3, between=lambda: calls.append(" "),
                                           alternate=alternate)
    expected = {False: "a b a b a b ", True: "a b b a a b "}[alternate]
    assert "".join(calls) == expected and len(best) == 2 and all(t >= 0 for t in best)
