"""The AIE2P kernel source, compiled with g++ through
kernels/aie/aie_host_emu.h, bit for bit: the ci8 entry point and the ci4 ones
(both nibble orders), which unpack on the tile.

The expected values come from an independent complex int64 formula, not from the kernel's
own loop structure, and ci4 bytes are decoded by the tests' own nibble reader; the emulator's
numpy kernel model is checked against the same library.
"""

import numpy as np
import pytest

from tests.helpers.ci4 import ORDERS, decode
from xengine_block.geometry import BLOCK, PUBLISHED, small_test_geometry
from xengine_block.npu.host import kernel_model
from xengine_block.npu.host.hostkernel import (
    build_host_kernel,
    host_kernel,
    host_kernel_availability,
)

DIMS = [(PUBLISHED.tile_n, PUBLISHED.tile_m, PUBLISHED.tile_t),
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


# ---------------------------------------------------------------------- ci4 entry points
def ci4_inputs(kind: str, n: int, m: int, t: int, rng: np.random.Generator):
    """Packed A ``[n][t][8][8]`` and B bytes: any byte is a legal ci4 sample."""
    shape_a, shape_b = (n, t, BLOCK, BLOCK), (m, t, BLOCK, BLOCK)
    if kind == "min":  # every part -8: the largest products
        return np.full(shape_a, 0x88, np.uint8).view(np.int8), \
            np.full(shape_b, 0x88, np.uint8).view(np.int8)
    if kind == "single":  # one byte in the last blocks: re and im of one sample told apart
        a, b = np.zeros(shape_a, np.int8), np.zeros(shape_b, np.int8)
        a[n - 1, t - 1, 5, 3] = np.uint8(0x3E).view(np.int8)  # nibbles 3 (high), -2 (low)
        b[m - 1, t - 1, 2, 3] = np.uint8(0x95).view(np.int8)  # nibbles -7 (high), 5 (low)
        return a, b
    return (rng.integers(-128, 128, shape_a, dtype=np.int8),
            rng.integers(-128, 128, shape_b, dtype=np.int8))


def decoded(packed: np.ndarray, order: str) -> np.ndarray:
    """Packed ``[..][8][8]`` bytes -> int8 ``[..][2][8][8]`` (re, im) by the tests' own decoder."""
    parts = np.array([decode(int(v), order) for v in packed.view(np.uint8).ravel()], np.int8)
    return np.moveaxis(parts.reshape(*packed.shape, 2), -1, -3)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dims", DIMS, ids=lambda d: "N{}M{}T{}".format(*d))
@pytest.mark.parametrize("kind", ["single", "random", "min"])
def test_ci4_kernel_unpacks_on_the_tile_and_correlates(kind, dims, order, rng):
    n, m, t = dims
    k = host_kernel(n, m, t)
    a, b = ci4_inputs(kind, n, m, t, rng)
    ua = rng.integers(-128, 128, k.a_shape, dtype=np.int8)  # garbage: the unpack overwrites it
    ub = rng.integers(-128, 128, k.b_shape, dtype=np.int8)
    acc = np.zeros(k.acc_shape, np.int32)
    e0, e1 = k.events()
    k.accumulate_ci4(a, b, acc, ua, ub, order)
    assert k.events() == (e0 + 1, e1 + 1)  # the trace span covers unpack and MACs
    assert np.array_equal(ua, decoded(a, order)) and np.array_equal(ub, decoded(b, order))
    want = expected(decoded(a, order), decoded(b, order))
    assert np.array_equal(acc, want)
    if kind == "single":
        za = complex(*decode(0x3E, order))
        zb = complex(*decode(0x95, order))
        assert np.count_nonzero(want) == 2 and za.imag != za.real
        assert want[n - 1, m - 1, 0, 5, 2] == (za * zb.conjugate()).real
        assert want[n - 1, m - 1, 1, 5, 2] == (za * zb.conjugate()).imag
    if kind == "min":
        assert np.all(want[:, :, 0] == t * 8 * 128) and not want[:, :, 1].any()


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dims", DIMS, ids=lambda d: "N{}M{}T{}".format(*d))
def test_numpy_ci4_kernel_model_matches_compiled_kernel(dims, order, rng):
    n, m, t = dims
    k = host_kernel(n, m, t)
    a, b = ci4_inputs("random", n, m, t, rng)
    acc_c = rng.integers(-2**30, 2**30, k.acc_shape, dtype=np.int32)
    ua_c, ub_c = np.zeros(k.a_shape, np.int8), np.zeros(k.b_shape, np.int8)
    acc_py, ua_py, ub_py = acc_c.copy(), ua_c.copy(), ub_c.copy()
    k.accumulate_ci4(a, b, acc_c, ua_c, ub_c, order)
    kernel_model.xcorr_kernel_ci4(a.reshape(-1), b.reshape(-1), acc_py.reshape(-1),
                                  ua_py.reshape(-1), ub_py.reshape(-1), n, m, t, order)
    assert np.array_equal(acc_py, acc_c)
    assert np.array_equal(ua_py, ua_c) and np.array_equal(ub_py, ub_c)


def test_ci4_intrinsic_models(rng):
    v = rng.integers(0, 256, (3, 32), dtype=np.uint8)
    lanes = kernel_model.unpack_v64int4(v.view(np.int8))
    for i in (0, 1, 17, 62, 63):  # lane i: nibble i, low nibble of each byte first
        nib = (int(v[1, i // 2]) >> (4 * (i % 2))) & 15
        assert lanes[1, i] == (nib - 16 if nib >= 8 else nib)
    a = rng.integers(-128, 128, (2, 64), dtype=np.int8)
    b = rng.integers(-128, 128, (2, 64), dtype=np.int8)
    lo, hi = (kernel_model.shuffle_t8_64x2(a, b, h) for h in (False, True))
    assert lo[1, 3] == a[1, 6] and hi[1, 3] == a[1, 7]  # lanes 2i and 2i + 1 of a ++ b
    assert lo[1, 40] == b[1, 16] and hi[1, 63] == b[1, 63]


def test_ci4_entry_points_refuse_a_wrong_nibble_order():
    k = host_kernel(2, 1, 15)
    with pytest.raises(ValueError, match="nibble_order"):
        k.accumulate_ci4(*ci4_inputs("min", 2, 1, 15, None), np.zeros(k.acc_shape, np.int32),
                         np.zeros(k.a_shape, np.int8), np.zeros(k.b_shape, np.int8), "im_high")
