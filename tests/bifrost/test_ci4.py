"""4-bit (``ci4``) input through real Bifrost: a user's Bifrost source block writing a ``ci4``
ring (Bifrost's own dtype, ``[('re_im', u1)]``) in either nibble order feeds our X-engine, exact
against the int64 reference; ``fx.py --runtime bifrost --bits 4`` writes the same bytes as our
runtime.

The nibble orders are checked against Bifrost's own code, not ours: its ``quantize`` writes the
real part in the high nibble (as its cuFFT ci4 load callback reads it), its CPU ``unpack`` on a
little-endian host reads the real part from the low nibble (``byte_reverse`` gives the other).
"""

from __future__ import annotations

import contextlib
import filecmp
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import bifrost_or_skip
from tests.helpers.runtimes import bifrost_runtime, collector
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_frames, reference_triangle

xb = bifrost_or_skip()
BF = bifrost_runtime()
from bifrost.quantize import quantize  # noqa: E402 - Bifrost imports only after the skip
from bifrost.unpack import unpack  # noqa: E402

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
NFRAME = 4


def ci4_bytes(x: np.ndarray, order: str) -> np.ndarray:
    """Natural ints ``[..., 2]`` in -8..7 -> ci4 bytes (uint8), written out here by hand."""
    re, im = x[..., 0].astype(np.int64) & 0xF, x[..., 1].astype(np.int64) & 0xF
    high, low = (re, im) if order == "re_high" else (im, re)
    return (high << 4 | low).astype(np.uint8)


def samples(g: Geometry) -> np.ndarray:
    """Natural samples ``[S, C, NFRAME * 480, 2]`` with both edges, -8 and 7, in each part."""
    x = np.random.default_rng(17).integers(-8, 8, (g.nstream, g.nchan, NFRAME * 480, 2),
                                           dtype=np.int8)
    x[0, 0, :4] = [[-8, -8], [7, 7], [-8, 7], [7, -8]]
    return x


def test_nibble_orders_are_bifrosts():
    """The bytes built here are what Bifrost's own quantize writes (re_high) and what its CPU
    unpack reads (re_low); so the source below writes Bifrost ci4 as Bifrost means it."""
    x = samples(Geometry(nstream=2, nchan=1, nchan_pkt=1, npacket=1, sample_bits=4))[0, 0]
    q = xb.bf.ndarray(shape=(len(x),), dtype="ci4", space="system")
    quantize(xb.bf.ndarray((x[:, 0] + 1j * x[:, 1]).astype(np.complex64)), q, 1.0)
    inside = (x > -8).all(axis=-1)  # Bifrost's quantize clips to -7..7
    assert np.array_equal(np.asarray(q).view(np.uint8)[inside], ci4_bytes(x, "re_high")[inside])
    src = xb.bf.ndarray(shape=(len(x),), dtype="ci4", space="system")
    np.asarray(src).view(np.uint8)[...] = ci4_bytes(x, "re_low")
    out = xb.bf.ndarray(shape=(len(x),), dtype="ci8", space="system")
    unpack(src, out)
    assert np.array_equal(xb.as_ours(out, "ci8"), x)


def ci4_source(g: Geometry, frames: np.ndarray, shape: list[int], geometry: dict):
    """A user's Bifrost source block writing ``frames`` (ci4 bytes) as a Bifrost ``ci4`` ring,
    through Bifrost's structured field, no presence mask."""

    class Ci4Source(xb.bf.pipeline.SourceBlock):
        def __init__(self) -> None:
            super().__init__(["ci4-observation"], gulp_nframe=g.npacket)

        def create_reader(self, name):
            return contextlib.nullcontext(iter(range(0, len(frames), g.npacket)))

        def on_sequence(self, reader, name):
            return [{"name": name, "time_tag": 0, "sync_time": 1.7e9, "fs_hz": 40e3,
                     "geometry": geometry, "_tensor": {"dtype": "ci4", "shape": shape}}]

        def on_data(self, reader, ospans):
            i = next(reader, None)
            if i is None:
                return [0]
            data = ospans[0].data
            assert data.dtype == np.dtype([("re_im", np.uint8)])  # Bifrost's own ci4
            data["re_im"][...] = frames[i:i + g.npacket].reshape(data.shape)
            return [g.npacket]

    return Ci4Source()


@pytest.mark.parametrize("layout", ["natural", "packet"])
@pytest.mark.parametrize("order", ["re_high", "re_low"])
def test_user_ci4_source_on_bifrost_exact(order, layout):
    g = Geometry(nstream=8, nchan=9, npacket=2, sample_bits=4, nibble_order=order)
    x = samples(g)
    b = ci4_bytes(x, order).reshape(g.nstream, g.nchan, NFRAME, 480).transpose(2, 0, 1, 3)
    frames = np.ascontiguousarray(b)  # [time, stream, chan, spectrum]: also the packet layout
    shape = ([-1, g.nstream, g.nchan, 480] if layout == "natural"
             else [-1, *g.frame_shape])
    with BF.Pipeline() as p:
        x_block = xb.XEngineBlock(ci4_source(g, frames, shape, g.to_dict()), backend="cpu")
        vis = collector(BF, x_block.orings[0])
        valid = collector(BF, x_block.orings[1])
        p.run()
    assert len(vis.out) == NFRAME // g.npacket
    for f, (v, c) in enumerate(zip(vis.out, valid.out, strict=True)):
        seg = x[:, :, f * g.npacket * 480:(f + 1) * g.npacket * 480]
        want = reference_triangle(seg)
        assert np.array_equal(v, want)
        sl = frames[f * g.npacket:(f + 1) * g.npacket].view(np.int8)
        assert np.array_equal(reference_frames(sl.reshape(-1, *g.frame_shape), g), want)
        assert (c == g.npacket * 480).all()  # no mask: every packet present


def test_ci4_ring_with_8_bit_geometry_is_one_line():
    g = Geometry(nstream=8, nchan=9, npacket=2, sample_bits=4)
    frames = np.zeros((2, g.nstream, g.nchan, 480), np.uint8)
    g8 = {k: v for k, v in g.to_dict().items() if k not in ("sample_bits", "nibble_order")}
    with BF.Pipeline() as p:
        xb.XEngineBlock(ci4_source(g, frames, [-1, g.nstream, g.nchan, 480], g8),
                        backend="cpu")
        with pytest.raises(xb.PipelineError, match=r"input ci4 .* needs sample_bits 4") as e:
            p.run()
    assert "\n" not in str(e.value)


def test_fx_bits4_on_bifrost_same_bytes_as_ours(tmp_path):
    """Same simulated packets (fixed --sync-time), both runtimes: the same files, byte for
    byte (test_ci4 checks our runtime's ci4 run against the packets themselves)."""
    outs = {}
    for rt in ("ours", "bifrost"):
        outs[rt] = tmp_path / rt
        r = subprocess.run([sys.executable, str(ROOT / "pipelines" / "fx.py"), "--runtime", rt,
                            "--bits", "4", "--transport", "inproc", "--nant", "4",
                            "--npacket", "4", "--dumps", "2", "--backend", "cpu",
                            "--monitor", "0", "--sync-time", "1800000000",
                            "--out", str(outs[rt])],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
    names = sorted(p.name for p in outs["ours"].glob("*") if p.name != "summary.json")
    assert any(n.endswith(".uvh5") for n in names) and any(n.endswith(".png") for n in names)
    assert sorted(p.name for p in outs["bifrost"].glob("*") if p.name != "summary.json") == names
    for n in names:
        assert filecmp.cmp(outs["ours"] / n, outs["bifrost"] / n, shallow=False), n
