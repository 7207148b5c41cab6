"""The quantiser-extreme counts of input health (``kernels/cpu/engine.c``, counted in the Y tiles
the layout pass builds) on every path this CPU runs (the others skip with the reason; run the
suite with XENGINE_NATIVE_DISABLE=amx,avx512vnni,avx2,amx_emulated too), against a count of the
natural samples written here: our frames (ci8, ci4 in both nibble orders), packets placed
anywhere, Bifrost's side-by-side tensor (the AVX2 transposes) and a GUPPI-like layout; odd
spectrum counts (a partial K-step), S not a multiple of 16, added across calls; the numpy count
of the other backends the same; and the correlation itself unchanged by counting."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.native import runnable
from xengine_block.backends import get_backend
from xengine_block.backends.native import ISAS, NativeBackend
from xengine_block.frames import natural_to_frames, pack_ci4
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_triangle
from xengine_block.sample_layout import SampleLayout

RNG = np.random.default_rng(53)


def natural(nstream: int, nchan: int, nspec: int, bits: int) -> np.ndarray:
    """Samples [S, C, T, 2] with many at the extremes, some streams clipped hard."""
    lo, hi = (-8, 7) if bits == 4 else (-128, 127)
    x = RNG.integers(lo, hi + 1, (nstream, nchan, nspec, 2)).astype(np.int8)
    x[1] = np.where(RNG.random(x[1].shape) < 0.6, np.int8(hi), x[1])
    x[-1, :, ::3, 1] = lo
    return x


def count(x: np.ndarray, bits: int) -> np.ndarray:
    """Parts at the extremes per stream, written here: a comparison per part."""
    lo, hi = (-8, 7) if bits == 4 else (-128, 127)
    return np.array([int(np.sum(x[s] == lo) + np.sum(x[s] == hi)) for s in range(x.shape[0])])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("bits,order", [(8, "re_high"), (4, "re_high"), (4, "re_low")])
def test_frames_counted_in_the_pass(isa, bits, order):
    runnable(isa)
    g = Geometry(nstream=24, nchan=9, npacket=2, sample_bits=bits, nibble_order=order)
    x = natural(24, 9, 2 * 480, bits)
    frames = natural_to_frames(x, g)
    be = NativeBackend(g, isa=isa, nthreads=2)
    ext = np.zeros(24, np.int64)
    out = be.correlate_layout(frames, SampleLayout.packet(g), extremes=ext)
    np.testing.assert_array_equal(ext, count(x, bits))
    np.testing.assert_array_equal(out, reference_triangle(x))  # the correlation as before
    be.correlate_layout(frames, SampleLayout.packet(g), extremes=ext, nframe=1)
    np.testing.assert_array_equal(ext, count(x, bits) + count(x[:, :, :480], bits))  # added


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("bits", [8, 4])
def test_layouts_counted_in_the_pass(isa, bits):
    runnable(isa)
    nstream, nchan, nspec = 40, 3, 1001  # S not a multiple of 16, a partial K-step
    x = natural(nstream, nchan, nspec, bits)
    g = Geometry(nstream=nstream, nchan=nchan, nchan_pkt=1, npacket=1, sample_bits=bits)
    be = NativeBackend(g, isa=isa, nthreads=3)
    # Bifrost's [time][freq][station][pol] (side by side: the AVX2 transposes)
    tensor = np.ascontiguousarray(x.reshape(nstream // 2, 2, nchan, nspec, 2)
                                  .transpose(3, 2, 0, 1, 4))
    axes = [("freq", nchan), ("station", nstream // 2), ("pol", 2)]  # a spectrum a frame
    if bits == 4:
        tensor = pack_ci4(tensor)
        lay = SampleLayout.from_axes(axes, encoding="ci4")
    else:
        lay = SampleLayout.from_axes([*axes, ("reim", 2)])
    # GUPPI-like [ant][chan][time][pol] (sample by sample)
    guppi = np.ascontiguousarray(x.reshape(nstream // 2, 2, nchan, nspec, 2)
                                 .transpose(0, 2, 3, 1, 4))
    gaxes = [("station", nstream // 2), ("freq", nchan), ("fine_time", nspec), ("pol", 2)]
    if bits == 4:
        guppi = pack_ci4(guppi)
        glay = SampleLayout.from_axes(gaxes, encoding="ci4")
    else:
        glay = SampleLayout.from_axes([*gaxes, ("reim", 2)])
    for data, layout in ((tensor, lay), (guppi, glay)):
        ext = np.zeros(nstream, np.int64)
        out = be.correlate_layout(data, layout, extremes=ext)
        np.testing.assert_array_equal(ext, count(x, bits))
        np.testing.assert_array_equal(layout.count_extremes(data), count(x, bits))
        np.testing.assert_array_equal(out, reference_triangle(x))


@pytest.mark.parametrize("name", ["cpu", "emulator"])
def test_other_backends_count_with_numpy(name):
    g = Geometry(nstream=8, nchan=9, npacket=2)
    x = natural(8, 9, 960, 8)
    be = get_backend(name, g)
    ext = np.zeros(8, np.int64)
    be.correlate_layout(natural_to_frames(x, g), SampleLayout.packet(g), extremes=ext)
    np.testing.assert_array_equal(ext, count(x, 8))


def test_bad_extremes_array_refused():
    g = Geometry(nstream=8, nchan=9, npacket=1)
    be = NativeBackend(g, isa="scalar", nthreads=1)
    frames = natural_to_frames(natural(8, 9, 480, 8), g)
    for bad in (np.zeros(7, np.int64), np.zeros(8, np.int32), np.zeros(16, np.int64)[::2]):
        with pytest.raises(ValueError, match="extremes"):
            be.correlate_layout(frames, SampleLayout.packet(g), extremes=bad)
