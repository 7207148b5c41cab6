"""Unguaranteed readers (``guarantee=False``), in our runtime and on real Bifrost: input the
writer overwrote before the block read it gives exactly the outputs that cover it, marked as no
data (zero valid spectra) and counted. (Issue: 117 dumps from 60 input frames, 114 all zero.)

The block under test waits in its first ``on_data`` until the source has written everything,
so most input is overwritten in its small ring. The expectations do not come from the code
under test: each input frame carries a distinct power of two, so a dump's value says exactly
which frames went into it.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import random_frames
from tests.helpers.runtimes import array_source, collector
from tests.helpers.threads import slow_first_gulp
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry
from xengine_block.reference import reference_triangle

pytestmark = pytest.mark.timeout(120)

HDR = {"sync_time": 1.8e9, "fs_hz": 48000.0, "freq0_hz": 150e6, "chan_bw_hz": 10e3}


def test_integrate_unguaranteed_emits_each_dump_once(rt):
    nframe, ninteg, nbl = 60, 4, 512  # 4 KiB frames: the ring holds only a few
    f = np.arange(nframe)
    vis = np.zeros((nframe, 1, nbl, 2), np.int32)
    vis[..., 0] = (1 << (f % ninteg))[:, None, None]  # frame f of a dump: bit f % ninteg
    valid = np.full((nframe, 1, nbl), 7, np.int64)
    hdr = dict(HDR, name="x", time_tag=0, nspectra=480, gulp_nframe=1)
    with rt.Pipeline() as p:
        src = array_source(rt, [
            (dict(hdr, _tensor={"dtype": "ci32", "shape": [-1, 1, nbl]}), vis),
            (dict(hdr, name="x.valid", _tensor={"dtype": "i64", "shape": [-1, 1, nbl]}), valid)],
            gulp=1)
        integ = slow_first_gulp(rt.IntegrateBlock, src)(src, ninteg=ninteg, guarantee=False)
        dumps, counts = collector(rt, integ.orings[0]), collector(rt, integ.orings[1])
        p.run()
    assert len(dumps.out) == len(counts.out) == nframe // ninteg  # each dump exactly once
    used = 0
    for d, c in zip(dumps.out, counts.out, strict=True):
        bits = int(d[0, 0, 0])
        assert np.all(d[..., 0] == bits) and np.all(d[..., 1] == 0)
        assert 0 <= bits < 1 << ninteg
        assert np.all(c == 7 * bin(bits).count("1"))  # valid spectra = the frames summed
        used += bin(bits).count("1")
    assert integ.lost_frames > 0, "the test must lose input"
    assert used + integ.lost_frames == nframe
    assert integ.nodata_outputs == sum(1 for c in counts.out if not c.any())
    assert integ.perf["skipped"] > 0


def test_xengine_unguaranteed_one_output_per_gulp(rt):
    g = Geometry(nstream=8, nchan=9, npacket=2)
    nframe = 40
    frames = random_frames(g, nframe, seed=5)
    mask = np.ones((nframe, g.nstream), np.uint8)
    hdr = dict(HDR, name="cap", time_tag=0, chan0=0, nchan=g.nchan, nstream=g.nstream,
               geometry=g.to_dict())
    with rt.Pipeline() as p:
        src = array_source(rt, [
            (dict(hdr, _tensor={"dtype": "i8", "shape": [-1, *g.frame_shape]}), frames),
            (dict(hdr, name="cap.mask", _tensor={"dtype": "u8", "shape": [-1, g.nstream]}),
             mask)], gulp=g.npacket)
        x = slow_first_gulp(rt.XEngineBlock, src)(src, backend="cpu", guarantee=False)
        vis, valid = collector(rt, x.orings[0]), collector(rt, x.orings[1])
        p.run()
    P = g.npacket
    assert len(vis.out) == len(valid.out) == nframe // P
    used = 0
    for k, (v, c) in enumerate(zip(vis.out, valid.out, strict=True)):
        n = int(c[0, 0]) // g.nspectra_pkt  # frames used: the last n of the gulp
        assert np.all(c == n * g.nspectra_pkt) and 0 <= n <= P
        want = (reference_triangle(frames_to_natural(frames[(k + 1) * P - n:(k + 1) * P], g))
                if n else 0)
        assert np.array_equal(v, want + np.zeros_like(v)), k
        used += n
    assert x.lost_frames > 0, "the test must lose input"
    assert used + x.lost_frames >= nframe  # frames read but overwritten meanwhile: both
    assert x.nodata_outputs == sum(1 for c in valid.out if not c.any())


def test_writer_unguaranteed_writes_lost_dumps_as_no_data(rt, tmp_path):
    pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads UVH5")
    from xengine_block.array import default_array

    g = Geometry(nstream=8, nchan=9, npacket=1)
    ndump = 12
    vis = np.zeros((ndump, g.nchan, g.nbaseline, 2), np.int64)
    vis[..., 0] = (np.arange(ndump) + 1)[:, None, None]  # dump d holds d + 1
    valid = np.full((ndump, 1, g.nbaseline), 480, np.int64)
    hdr = dict(HDR, name="d", time_tag=0, nspectra=480, chan0=0, nchan=g.nchan,
               nstream=g.nstream, geometry=g.to_dict(), gulp_nframe=1,
               array=default_array(g.nstream // 2).to_dict())
    with rt.Pipeline() as p:
        src = array_source(rt, [
            (dict(hdr, _tensor={"dtype": "ci64", "shape": [-1, g.nchan, g.nbaseline]}), vis),
            (dict(hdr, name="d.valid", _tensor={"dtype": "i64", "shape": [-1, 1, g.nbaseline]}),
             valid)], gulp=1)
        w = slow_first_gulp(rt.UVH5WriterBlock, src)(src, directory=tmp_path, guarantee=False)
        p.run()
    uv = pyuvdata.UVData.from_file(w.files[0])
    assert uv.Ntimes == ndump  # every dump once, lost ones included
    data = uv.get_data(0, 1, "xx").real  # [time, chan]
    nsamples, flags = uv.get_nsamples(0, 1, "xx"), uv.get_flags(0, 1, "xx")
    lost = nsamples[:, 0] == 0
    assert lost.any() and not lost.all()
    assert np.all(flags[lost]) and not flags[~lost].any() and np.all(nsamples[~lost] == 1)
    assert np.all(data[lost] == 0)
    assert np.array_equal(data[~lost], np.repeat(np.flatnonzero(~lost)[:, None] + 1, g.nchan, 1))
    assert w.lost_frames == lost.sum() == w.nodata_outputs
