"""Native extension: 4-bit (ci4) input unpacked inside the layout pass, on every dispatch path,
against the int64 reference fed by an unpacking written here (not the extension's), and the
int8 peak loops the benchmark divides by (docs/native.md)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.native import runnable
from xengine_block import native_extension
from xengine_block.backends import native as nat
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_triangle

NIBBLE_ORDERS = ("re_high", "re_low")


def nibble(v: np.ndarray) -> np.ndarray:
    """Two's-complement 4-bit value of v & 15, as int8 (-8..7)."""
    v = (v & 15).astype(np.int8)
    return np.where(v >= 8, v - 16, v).astype(np.int8)


def unpack_ci4(ci4: np.ndarray, order: str) -> np.ndarray:
    """ci4 frames [P, S, C, coarse, fine] uint8 -> int8 frames [P, S, C, coarse, 2, fine]."""
    hi, lo = nibble(ci4 >> 4), nibble(ci4)
    re, im = (hi, lo) if order == "re_high" else (lo, hi)
    return np.stack([re, im], axis=-2)


def pack_ci4(re: np.ndarray, im: np.ndarray, order: str) -> np.ndarray:
    """Bytes of (re, im) in -8..7: the inverse of unpack_ci4, for building edge cases."""
    hi, lo = (re, im) if order == "re_high" else (im, re)
    return (((hi.astype(np.int16) & 15) << 4) | (lo.astype(np.int16) & 15)).astype(np.uint8)


def correlate_ci4(isa: str, g: Geometry, ci4: np.ndarray, order: str, **kw) -> np.ndarray:
    runnable(isa)
    out = np.empty(g.output_shape, np.int32)
    native_extension.native().correlate(ci4, out, g.nstream, g.nchan, g.ncoarse, isa,
                               kw.get("nthreads", 2), kw.get("kt", 0), "full", 4, order)
    return out


@pytest.mark.parametrize("isa", nat.ISAS)
@pytest.mark.parametrize("order", NIBBLE_ORDERS)
def test_ci4_random(isa, order):
    """Random bytes (every nibble pattern), odd P and short chunks straddling packets."""
    g = Geometry(nstream=40, nchan=9, npacket=3)
    ci4 = np.random.default_rng(4).integers(0, 256, size=(3, 40, 9, 60, 8), dtype=np.uint8)
    ref = reference_triangle(frames_to_natural(unpack_ci4(ci4, order), g))
    for kt, nthreads in ((0, 2), (3, 3)):
        out = correlate_ci4(isa, g, ci4, order, kt=kt, nthreads=nthreads)
        assert np.array_equal(out, ref), (kt, nthreads)


@pytest.mark.parametrize("isa", nat.ISAS)
@pytest.mark.parametrize("order", NIBBLE_ORDERS)
def test_ci4_edges(isa, order):
    """All -8, all 7 and the two mixed bytes (re -8 / im 7 and the reverse) side by side."""
    g = Geometry(nstream=16, nchan=9, npacket=2)
    shape = (2, 16, 9, 60, 8)
    re = np.full(shape, -8, np.int8)
    im = np.full(shape, -8, np.int8)
    re[:, 4:8], im[:, 4:8] = 7, 7
    re[:, 8:12], im[:, 8:12] = -8, 7
    re[:, 12:], im[:, 12:] = 7, -8
    ci4 = pack_ci4(re, im, order)
    assert np.array_equal(unpack_ci4(ci4, order), np.stack([re, im], axis=-2))
    ref = reference_triangle(frames_to_natural(np.stack([re, im], axis=-2), g))
    assert np.array_equal(correlate_ci4(isa, g, ci4, order), ref)


@pytest.mark.parametrize("isa", nat.ISAS)
def test_ci4_long_call(isa):
    """2.1 M spectra of -8 against 7 in one call: 32x the ci8 limit (65,535), and past where
    the VNNI path's biased int32 tile sums wrap (~1.97 M): exact because every accumulation
    is modulo 2^32 and the result fits in int32. Expected values are analytic: x = v (1 + i)
    gives x_j conj(x_k) = 2 v_j v_k, imaginary 0."""
    npacket = 4400
    g = Geometry(nstream=8, nchan=1, nchan_pkt=1, npacket=1)
    v = np.array([-8] * 4 + [7] * 4, np.int8)
    ci4 = np.broadcast_to(pack_ci4(v, v, "re_high")[None, :, None, None, None],
                          (npacket, 8, 1, 60, 8)).copy()
    out = correlate_ci4(isa, g, ci4, "re_high")
    nspec = npacket * 480
    j, k = np.triu_indices(8)
    order = np.argsort(k * (k + 1) // 2 + j)  # packed order: k-major, j <= k
    expect = 2 * nspec * v[j[order]].astype(np.int64) * v[k[order]]
    assert np.array_equal(out[0, :, 0], expect)
    assert not out[0, :, 1].any()


def test_ci4_refusals():
    ext = native_extension.native()
    g = Geometry(nstream=8, nchan=9, npacket=1)
    out = np.empty(g.output_shape, np.int32)
    ci4 = np.zeros((1, 8, 9, 60, 8), np.uint8)
    with pytest.raises(ValueError, match="sample_bits"):
        ext.correlate(ci4, out, 8, 9, 60, "scalar", 1, 0, "full", 2)
    with pytest.raises(ValueError, match="nibble_order"):
        ext.correlate(ci4, out, 8, 9, 60, "scalar", 1, 0, "full", 4, "im_high")
    with pytest.raises(ValueError, match="whole number"):  # ci4 bytes read as ci8 frames
        ext.correlate(ci4.reshape(-1)[:-1], out, 8, 9, 60, "scalar", 1, 0, "full", 4)


@pytest.mark.parametrize("isa", ("amx", "avx512vnni", "avx2"))
def test_int8_peak_loop(isa):
    """The peak loop runs on each SIMD path and names its instruction."""
    runnable(isa)
    ops, what, per_cpu = native_extension.native().int8_peak(isa, 1, 20_000)
    assert ops > 1e10 and per_cpu > 1e10
    assert what.split()[0] in ("tdpbssd", "vpdpbusd", "vpmaddwd+vpaddd")


@pytest.mark.parametrize("order", NIBBLE_ORDERS)
def test_backend_reads_ci4_geometry(order):
    """NativeBackend passes Geometry.sample_bits / nibble_order to the extension (skips until
    the geometry has them)."""
    import dataclasses

    if "sample_bits" not in {f.name for f in dataclasses.fields(Geometry)}:
        pytest.skip("Geometry has no sample_bits yet (4-bit geometry not merged)")
    g = Geometry(nstream=24, nchan=9, npacket=2, sample_bits=4, nibble_order=order)
    ci4 = np.random.default_rng(7).integers(0, 256, size=(2, 24, 9, 60, 8), dtype=np.uint8)
    g8 = Geometry(nstream=24, nchan=9, npacket=2)
    ref = reference_triangle(frames_to_natural(unpack_ci4(ci4, order), g8))
    backend = nat.NativeBackend(g, isa="scalar")  # the parameters, not a path, under test
    try:
        out = backend.correlate(ci4.view(np.int8).reshape(2, *g.frame_shape))
    finally:
        backend.close()
    assert np.array_equal(out, ref)
