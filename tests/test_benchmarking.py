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
