"""The AIE2P kernel source, compiled with g++ through
xengine_block/npu/kernel/aie_host_emu.h, bit for bit.

The expected values come from an independent complex int64 formula, not from the kernel's
own loop structure; the emulator's numpy kernel model is checked against the same library.
"""

import numpy as np
import pytest

from xengine_block.geometry import BLOCK, SEED, small_test_geometry
from xengine_block.npu import kernel_model
from xengine_block.npu.hostkernel import build_host_kernel, host_kernel, host_kernel_availability

DIMS = [(SEED.tile_n, SEED.tile_m, SEED.tile_t),
        (small_test_geometry().tile_n, small_test_geometry().tile_m, small_test_geometry().tile_t)]


@pytest.fixture(scope="module", autouse=True)
def need_gxx():
    usable, reason = host_kernel_availability()
    if not usable:
        print(f"skipping kernel tests: {reason}")
        pytest.skip(reason)


def expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """acc[n, m, (re, im), i, j] = sum_{t,k} A[n,t][i,k] conj(B[m,t][j,k]) in int64."""
    za = a[:, :, 0].astype(np.int64) + 1j * a[:, :, 1].astype(np.int64)  # [n, t, i, k]
    zb = b[:, :, 0].astype(np.int64) + 1j * b[:, :, 1].astype(np.int64)  # [m, t, j, k]
    k = np.einsum("ntik,mtjk->nmij", za, np.conj(zb))
    re, im = np.round(k.real).astype(np.int64), np.round(k.imag).astype(np.int64)
    return np.stack([re, im], axis=2)


def inputs(kind: str, n: int, m: int, t: int, rng: np.random.Generator):
    shape_a, shape_b = (n, t, 2, BLOCK, BLOCK), (m, t, 2, BLOCK, BLOCK)
    if kind == "zeros":
        return np.zeros(shape_a, np.int8), np.zeros(shape_b, np.int8)
    if kind == "ones":
        return np.ones(shape_a, np.int8), np.ones(shape_b, np.int8)
    if kind == "single":
        # one imaginary A sample and one real B sample in the last blocks: localises index bugs
        a, b = np.zeros(shape_a, np.int8), np.zeros(shape_b, np.int8)
        a[n - 1, t - 1, 1, 5, 3] = 7
        b[m - 1, t - 1, 0, 2, 3] = -3
        return a, b
    if kind == "min":
        return np.full(shape_a, -128, np.int8), np.full(shape_b, -128, np.int8)
    return (rng.integers(-128, 128, shape_a, dtype=np.int8),
            rng.integers(-128, 128, shape_b, dtype=np.int8))


@pytest.mark.parametrize("dims", DIMS, ids=lambda d: "N{}M{}T{}".format(*d))
@pytest.mark.parametrize("kind", ["zeros", "ones", "single", "random", "min"])
def test_kernel_matches_numpy(kind, dims, rng):
    n, m, t = dims
    k = host_kernel(n, m, t)
    a, b = inputs(kind, n, m, t, rng)
    acc = rng.integers(-2**20, 2**20, k.acc_shape, dtype=np.int32)  # garbage: zero must clear it
    k.zero(acc)
    assert not acc.any()
    k.accumulate(a, b, acc)
    want = expected(a, b)
    assert np.array_equal(acc, want)
    if kind == "single":
        assert np.count_nonzero(want) == 1  # (7j) * conj(-3) = -21j, at A row 5, B row 2
        assert want[n - 1, m - 1, 1, 5, 2] == 7 * -3


@pytest.mark.parametrize("dims", DIMS, ids=lambda d: "N{}M{}T{}".format(*d))
def test_kernel_accumulates_across_calls(dims, rng):
    n, m, t = dims
    k = host_kernel(n, m, t)
    a1, b1 = inputs("random", n, m, t, rng)
    a2, b2 = inputs("min", n, m, t, rng)
    acc = np.zeros(k.acc_shape, np.int32)
    e0, e1 = k.events()
    k.accumulate(a1, b1, acc)
    k.accumulate(a2, b2, acc)
    assert np.array_equal(acc, expected(a1, b1) + expected(a2, b2))
    assert k.events() == (e0 + 2, e1 + 2)  # event0/event1 once per call


@pytest.mark.parametrize("dims", DIMS, ids=lambda d: "N{}M{}T{}".format(*d))
def test_numpy_kernel_model_matches_compiled_kernel(dims, rng):
    n, m, t = dims
    k = host_kernel(n, m, t)
    a, b = inputs("random", n, m, t, rng)
    acc_c = rng.integers(-2**30, 2**30, k.acc_shape, dtype=np.int32)
    acc_py = acc_c.copy()
    k.accumulate(a, b, acc_c)
    kernel_model.xcorr_kernel(a.reshape(-1), b.reshape(-1), acc_py.reshape(-1), n, m, t)
    assert np.array_equal(acc_py, acc_c)


def test_intrinsic_models(rng):
    a = rng.integers(-128, 128, (3, 64), dtype=np.int8)
    b = rng.integers(-128, 128, (3, 64), dtype=np.int8)
    acc = rng.integers(-1000, 1000, (3, 64), dtype=np.int32)
    am, bm = a.reshape(3, 8, 8).astype(np.int64), b.reshape(3, 8, 8).astype(np.int64)
    want = acc.reshape(3, 8, 8) + np.einsum("bik,bkj->bij", am, bm)
    assert np.array_equal(kernel_model.mac_8x8_8x8(a, b, acc).reshape(3, 8, 8), want)
    want = acc.reshape(3, 8, 8) - np.einsum("bik,bkj->bij", am, bm)
    assert np.array_equal(kernel_model.msc_8x8_8x8(a, b, acc).reshape(3, 8, 8), want)
    t = kernel_model.shuffle_t8_8x8(a)
    r, c = 2, 5
    assert t[1, r * 8 + c] == a[1, c * 8 + r]


def test_odd_n_is_rejected_at_compile_time():
    with pytest.raises(RuntimeError, match="N must be even"):
        build_host_kernel(3, 1, 15)
