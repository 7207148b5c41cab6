"""X-engine -> integrate -> UVH5 writer / quick-look blocks in a real pipeline, fed by a test
source with known frames and presence masks: the file must equal the reference bit for bit."""

import numpy as np
import pytest

from tests.conftest import random_frames
from xengine_block.array import default_array
from xengine_block.blocks import IntegrateBlock, QuicklookBlock, UVH5WriterBlock, XEngineBlock
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_full
from xengine_block.runtime.pipeline import Pipeline, SourceBlock

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) validates UVH5 files")


class FramesSource(SourceBlock):
    """Emits given capture frames and presence mask as one sequence (stands in for capture);
    records where each output span lay (zero-copy tests)."""

    def __init__(self, frames, mask, header, gulp_nframe, time_tag=0):
        super().__init__(["frames"], gulp_nframe=gulp_nframe)
        self.orings = [self.create_ring(), self.create_ring()]
        self.frames, self.mask, self.header, self.time_tag = frames, mask, header, time_tag
        self.span_addresses: list[int] = []

    def create_reader(self, name):
        return iter(range(0, len(self.frames), self.gulp_nframe))

    def on_sequence(self, reader, name):
        g = self.header["geometry"]
        data = dict(self.header, name="test", time_tag=self.time_tag, _tensor={
            "dtype": "i8", "shape": [-1, g["nstream"], g["nchan"], 60, 2, 8],
            "labels": ["time", "stream", "freq", "coarse", "reim", "fine"],
            "scales": [None] * 6, "units": [None] * 6})
        mask = dict(self.header, name="test.mask", time_tag=self.time_tag, _tensor={
            "dtype": "u8", "shape": [-1, g["nstream"]], "labels": ["time", "stream"],
            "scales": [None, None], "units": [None, None]})
        return [data, mask]

    def on_data(self, reader, ospans):
        i = next(reader, None)
        if i is None:
            return [0, 0]
        n = min(self.gulp_nframe, len(self.frames) - i)
        self.span_addresses.append(ospans[0].data.ctypes.data)
        ospans[0].data[:n] = self.frames[i:i + n]  # the one copy: capture -> ring
        ospans[1].data[:n] = self.mask[i:i + n]
        return [n, n]


def run_chain(tmp_path, g, frames, mask, ninteg, time_tag=0, **writer_kw):
    header = {"sync_time": 1.8e9, "fs_hz": 48000.0, "chan0": 100, "nchan": g.nchan,
              "freq0_hz": 150e6, "chan_bw_hz": 10e3, "nstream": g.nstream,
              "geometry": g.to_dict(), "array": default_array(g.nstream // 2).to_dict()}
    return run_header(tmp_path, g, frames, mask, ninteg, header, time_tag, **writer_kw)


def run_chain_with_header(tmp_path, g, frames, mask, ninteg, array, **fields):
    """The chain with a header describing ``array`` and the given sky/time fields."""
    header = dict(fields, chan0=0, nchan=g.nchan, nstream=g.nstream, geometry=g.to_dict(),
                  array=array.to_dict())
    return run_header(tmp_path, g, frames, mask, ninteg, header, 0)[0]


def run_header(tmp_path, g, frames, mask, ninteg, header, time_tag, **writer_kw):
    with Pipeline() as p:
        src = FramesSource(frames, mask, header, g.npacket, time_tag)
        x = XEngineBlock(src, backend="cpu")
        integ = IntegrateBlock(x, ninteg=ninteg)
        w = UVH5WriterBlock(integ, directory=tmp_path, **writer_kw)
        q = QuicklookBlock(integ.orings[0], directory=tmp_path)
        p.run()
    return w, q, x


def test_file_equals_reference_with_lost_packets(tmp_path):
    g = Geometry(nstream=8, nchan=9, npacket=2)
    nframe, ninteg = 8, 2  # 4 X-engine frames -> 2 dumps
    frames = random_frames(g, nframe, seed=7)
    mask = np.ones((nframe, g.nstream), np.uint8)
    lost = [(1, 3), (4, 0), (5, 0), (6, 5)]  # (frame, stream): zero-filled, mask cleared
    for f, s in lost:
        frames[f, s] = 0
        mask[f, s] = 0
    w, q, x = run_chain(tmp_path, g, frames, mask, ninteg)
    assert x.backend.name == "cpu" and len(w.files) == 1 and w.dumps_written == 2
    assert q.images and q.images[0].stat().st_size > 10_000
    uv = pyuvdata.UVData.from_file(w.files[0])
    uv.check()
    assert uv.Ntimes == 2
    per_dump = nframe // 2
    for d in range(2):
        sl = slice(d * per_dump, (d + 1) * per_dump)
        re, im = reference_full(frames_to_natural(frames[sl], g))
        k = re + 1j * im  # K[c, j, k] = sum x_j conj(x_k)
        present = mask[sl].astype(int)
        for a1, a2 in [(0, 0), (0, 1), (1, 2), (2, 3), (0, 3)]:
            for pol, p1, p2 in [(-5, 0, 0), (-6, 1, 1), (-7, 0, 1), (-8, 1, 0)]:
                s1, s2 = 2 * a1 + p1, 2 * a2 + p2
                got = uv.get_data(a1, a2, pol)[d]
                assert np.array_equal(got, k[:, s2, s1]), (d, a1, a2, pol)
                nvalid = (present[:, s1] * present[:, s2]).sum() * 480
                assert np.all(uv.get_nsamples(a1, a2, pol)[d] == nvalid / (per_dump * 480))
                assert np.all(uv.get_flags(a1, a2, pol)[d] == (nvalid == 0))


def test_named_file_rotates_to_names_that_keep_the_suffix(tmp_path):
    """``filename="obs.uvh5"`` with rotation: obs.uvh5, obs.1.uvh5 (pyuvdata infers the type
    from the suffix), each read with its own dumps."""
    g = Geometry(nstream=4, nchan=9, npacket=1)
    w, _, _ = run_chain(tmp_path, g, random_frames(g, 3, seed=2), np.ones((3, 4), np.uint8), 1,
                        dumps_per_file=2, filename="obs.uvh5")
    assert [f.name for f in w.files] == ["obs.uvh5", "obs.1.uvh5"]
    assert [pyuvdata.UVData.from_file(f).Ntimes for f in w.files] == [2, 1]


def test_dumps_per_file_and_no_overwrite(tmp_path):
    g = Geometry(nstream=4, nchan=9, npacket=1)
    frames = random_frames(g, 3, seed=1)
    mask = np.ones((3, 4), np.uint8)
    w, _, _ = run_chain(tmp_path, g, frames, mask, 1, dumps_per_file=2)
    assert [pyuvdata.UVData.from_file(f).Ntimes for f in w.files] == [2, 1]
    from xengine_block.runtime.pipeline import PipelineError
    with pytest.raises(PipelineError, match="refusing to overwrite"):
        run_chain(tmp_path, g, frames, mask, 1, dumps_per_file=2)


def test_sequence_without_a_dump_leaves_no_file(tmp_path):
    """A sequence that ends before any dump is complete (2 frames of a 4-frame integration)
    leaves no file behind (one without dumps is no UVH5 file), and the next run may use the
    name."""
    g = Geometry(nstream=4, nchan=9, npacket=1)
    frames, mask = random_frames(g, 2, seed=3), np.ones((2, 4), np.uint8)
    w, _, _ = run_chain(tmp_path, g, frames, mask, 4, filename="obs.uvh5")
    assert w.dumps_written == 0 and w.files == [] and not list(tmp_path.glob("*.uvh5"))
    w, _, _ = run_chain(tmp_path, g, random_frames(g, 4, seed=3), np.ones((4, 4), np.uint8),
                        4, filename="obs.uvh5")
    assert [f.name for f in w.files] == ["obs.uvh5"] and w.dumps_written == 1
