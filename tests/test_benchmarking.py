"""The benchmark's own arithmetic on tiny inputs (no timing asserted): the onnxruntime peer's
Gram -> triangle mapping is exact, and every native fraction has a peak to divide by."""

from __future__ import annotations

import numpy as np
import pytest

from xengine_block.backends import native as nat
from xengine_block.geometry import Geometry
from xengine_block.tools import benchmarking

from .conftest import random_frames


def test_onnxruntime_peer_is_exact():
    pytest.importorskip("onnxruntime", reason="optional extra 'bench' not installed")
    pytest.importorskip("onnx", reason="optional extra 'bench' not installed")
    g = Geometry(nstream=10, nchan=9, npacket=2)
    frames = random_frames(g, 2, seed=3)
    frames[0, 3] = -128  # the u8 zero point must undo the bias on the extremes too
    entry = benchmarking.peer_onnxruntime(frames, g, 1, 1, benchmarking.exact_oracle(frames, g))
    assert entry["exact"] and entry["gemm_alone"]["int8_tops"] > 0


def test_scaling_rows_have_peaks_and_are_exact():
    if not any(ok for isa, (ok, _) in nat.isa_status().items() if isa != "scalar"):
        pytest.skip("no native SIMD path here: nothing to scale")
    rows = benchmarking.scaling(nstreams=(16, 32), threads=(1,), repeat=1)
    assert [r["S"] for r in rows] == [16, 32]
    for r in rows:
        assert r["exact_channel0"]
        assert r["machine_int8_tops"] > 0 and r["fraction_of_int8_peak"] > 0
        assert r["fraction_of_int8_peak_cpu_time"] > 0


def test_gram_to_triangle_matches_definition():
    """K[j, k] = sum x_j conj(x_k) from the real Gram of [re; im], on a hand-made input."""
    re = np.array([[1, 2], [3, -4]], np.int32)  # [stream, sample]
    im = np.array([[0, -1], [5, 2]], np.int32)
    y = np.concatenate([re, im])
    tri = benchmarking._gram_to_triangle((y @ y.T)[None], 2)
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
    monkeypatch.setattr(benchmarking, "_read_buffer_bytes", lambda: 8 << 20)
    monkeypatch.setattr(benchmarking, "_READS", {})
    gbps, how = benchmarking.machine_read_gbps(1, seconds=0.01, repeat=1)
    wall, cpu = benchmarking._READS[1][:2]
    assert gbps == max(wall, cpu) / 1e9 > 0 and "1 thread(s)" in how
    w, c, how = benchmarking._numpy_read_bandwidth(2, 8 << 20, 1)
    assert w > 0 and c > 0 and "numpy" in how
    block = benchmarking.read_bandwidth(2)
    assert block["one_core"]["nthreads"] == 1 and block["all_cores"]["nthreads"] == 2


def test_ops_per_input_byte_from_the_geometry():
    """514 useful ops per ci8 byte at S = 256 (issue 27's figure): 8 * 256*257/2 ops over
    2 * 256 bytes per sample time; ci4 packs a sample in one byte."""
    assert benchmarking.ops_per_input_byte(256) == 514
    assert benchmarking.ops_per_input_byte(256, 4) == 1028
    assert benchmarking.ops_per_input_byte(2) == 6  # 3 baselines x 8 ops / 4 bytes
