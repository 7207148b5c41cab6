"""X-engine -> integrate -> UVH5 writer / quick-look blocks in a real pipeline, fed by a test
source with known frames and presence masks: the file must equal the reference bit for bit.
The runtime is a parameter where the same check holds on ours and on real Bifrost (``rt``)."""

import os

import numpy as np
import pytest

from tests.conftest import random_frames
from tests.helpers.chain import capture_like, lossy_frames, run_file_chain, run_header
from tests.helpers.runtimes import array_source, collector
from xengine_block.array import default_array
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_full, reference_triangle
from xengine_block.runtime.pipeline import PipelineError

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) validates UVH5 files")


def run_chain(tmp_path, g, frames, mask, ninteg, time_tag=0, **writer_kw):
    header = {"sync_time": 1.8e9, "fs_hz": 48000.0, "chan0": 100, "nchan": g.nchan,
              "freq0_hz": 150e6, "chan_bw_hz": 10e3, "nstream": g.nstream,
              "geometry": g.to_dict(), "array": default_array(g.nstream // 2).to_dict()}
    return run_header(tmp_path, g, frames, mask, ninteg, header, time_tag, **writer_kw)


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


# ---------------------------------------------------------------- the same on either runtime
def test_xengine_exact_against_reference_with_lost_packets(rt):
    """X-engine visibilities and per-baseline valid-sample counts of frames with lost packets
    (zero-filled, mask cleared), on our runtime and on real Bifrost; Bifrost's proclog sees the
    block's time (what its like_top.py shows)."""
    g = Geometry(nstream=8, nchan=9, npacket=2)
    frames, mask = lossy_frames(g, 8)
    with rt.Pipeline() as p:
        x = rt.XEngineBlock(array_source(rt, capture_like(g, frames, mask), g.npacket),
                            backend="cpu")
        vis, valid = collector(rt, x.orings[0]), collector(rt, x.orings[1])
        p.run()
    assert vis.hdr["_tensor"]["dtype"] == "ci32" and len(vis.out) == 4
    if rt.name == "bifrost":
        from bifrost.proclog import load_by_pid

        logs = load_by_pid(os.getpid())
        assert logs[x.name.split("/")[-1]]["perf"]["process_time"] > 0
    assert x.perf["frames"] == 8 and x.perf["process_s"] > 0
    j, k = np.triu_indices(g.nstream)  # row-major upper triangle: reorder to b = k(k+1)/2 + j
    order = np.lexsort((j, k))
    j, k = j[order], k[order]
    for f, (v, c) in enumerate(zip(vis.out, valid.out, strict=True)):
        sl = slice(2 * f, 2 * f + 2)
        assert np.array_equal(v, reference_triangle(frames_to_natural(frames[sl], g)))
        want = 480 * (mask[sl, j] * mask[sl, k].astype(np.int64)).sum(axis=0)
        assert np.array_equal(c[0], want)


class Boom(RuntimeError):
    pass


def test_a_failing_block_stops_the_pipeline_and_the_writer_closes_its_file(rt, tmp_path):
    g = Geometry(nstream=8, nchan=9, npacket=1)
    frames, mask = lossy_frames(g, 40)

    class FailingSink(rt.SinkBlock):
        def on_sequence(self, iseq):
            self.n = 0

        def on_data(self, ispan):
            self.n += 1
            if self.n == 3:
                raise Boom("third dump")

    with rt.Pipeline() as p:
        x = rt.XEngineBlock(array_source(rt, capture_like(g, frames, mask), 1), backend="cpu")
        integ = rt.IntegrateBlock(x, ninteg=1)
        w = rt.UVH5WriterBlock(integ, directory=tmp_path)
        FailingSink(integ, name="failing")
        with pytest.raises(PipelineError, match="failing") as info:
            p.run()
    assert isinstance(info.value.__cause__, Boom)
    assert p.stop_reason and "failing" in p.stop_reason
    uv = pyuvdata.UVData.from_file(w.files[0])  # closed, every completed dump readable
    assert uv.Ntimes == w.dumps_written >= 1


def test_a_second_run_into_the_same_directory_refuses_to_overwrite(rt, tmp_path):
    g = Geometry(nstream=8, nchan=9, npacket=2)
    frames, mask = lossy_frames(g, 8)
    run_file_chain(rt, tmp_path, g, frames, mask)
    with pytest.raises(PipelineError, match="refusing to overwrite"):
        run_file_chain(rt, tmp_path, g, frames, mask)
