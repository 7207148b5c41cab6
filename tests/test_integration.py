"""Valid-spectra counts from the presence mask and exact, aligned integration."""

import itertools

import numpy as np
import pytest

from xengine_block.geometry import Geometry
from xengine_block.integration import Integrator, counts_per_channel, valid_counts
from xengine_block.triangle import baseline_index


def test_valid_counts_per_baseline():
    g = Geometry(nstream=6, nchan=9, npacket=3)
    mask = np.ones((3, 6), np.uint8)
    mask[0, 2] = 0  # stream 2 missing in frame 0
    mask[1, 4] = 0  # stream 4 missing in frame 1
    v = valid_counts(mask, g)
    assert v.shape == (1, g.nbaseline)
    assert v[0, baseline_index(0, 1)] == 3 * 480
    assert v[0, baseline_index(2, 2)] == 2 * 480
    assert v[0, baseline_index(2, 4)] == 1 * 480
    assert v[0, baseline_index(1, 4)] == 2 * 480
    assert counts_per_channel(v, g).shape == (9, g.nbaseline)


def test_valid_counts_per_group():
    g = Geometry(nstream=4, nchan=18, npacket=2)
    mask = np.ones((2, 4, 2), np.uint8)
    mask[1, 3, 1] = 0
    v = valid_counts(mask, g)
    assert v[0, baseline_index(3, 3)] == 960 and v[1, baseline_index(3, 3)] == 480
    c = counts_per_channel(v, g)
    assert (c[:9] == v[0]).all() and (c[9:] == v[1]).all()


@pytest.mark.parametrize("missing", [0.0, 0.02, 0.6, 1.0])
def test_valid_counts_match_a_loop_over_every_pair(missing):
    """Whole frames, a few lost packets, most lost, none arrived: against plain loops."""
    g = Geometry(nstream=12, nchan=18, npacket=7)
    rng = np.random.default_rng(int(missing * 100))
    mask = (rng.random((7, 12, 2)) >= missing).astype(np.uint8) * rng.integers(1, 4, (7, 12, 2))
    v = valid_counts(mask, g)
    for grp in range(2):
        for j in range(12):
            for k in range(j, 12):
                both = sum(1 for p in range(7) if mask[p, j, grp] and mask[p, k, grp])
                assert v[grp, baseline_index(j, k)] == both * 480, (grp, j, k)


def test_valid_counts_rejects_wrong_shape():
    with pytest.raises(ValueError, match="mask must be"):
        valid_counts(np.ones((2, 5)), Geometry(nstream=4, nchan=9, npacket=2))


def test_integrator_aligned_sums():
    integ = Integrator(ninteg=3, frame_spectra=960)
    shape = (2, 3, 2)
    dumps = []
    # starts mid-integration (frame at 960*4 = second frame of the dump starting at 960*3)
    for i in range(4, 11):
        if i == 8:
            continue  # a missing X-engine frame
        dumps += integ.add(960 * i, np.full(shape, i, np.int32), np.full((1, 3), 960))
    dumps += integ.flush()
    assert [d.time_tag for d in dumps] == [960 * 3, 960 * 6, 960 * 9]
    assert [d.ninput for d in dumps] == [2, 2, 2]
    assert dumps[0].vis[0, 0, 0] == 4 + 5
    assert dumps[1].vis[0, 0, 0] == 6 + 7
    assert dumps[2].vis[0, 0, 0] == 9 + 10
    assert dumps[1].valid[0, 0] == 2 * 960
    assert all(d.nspectra == 3 * 960 and d.vis.dtype == np.int64 for d in dumps)


def test_integrator_exceeds_int32_exactly():
    integ = Integrator(ninteg=4, frame_spectra=480)
    big = np.full((1, 1, 2), 2**31 - 1, np.int32)
    dumps = [d for t in range(4) for d in integ.add(480 * t, big, np.ones((1, 1), np.int64))]
    assert dumps[0].vis[0, 0, 0] == 4 * (2**31 - 1)


def test_integrator_rejects_unaligned_time_tag():
    with pytest.raises(ValueError, match="not a multiple"):
        Integrator(2, 480).add(100, np.zeros((1, 1, 2), int), np.zeros((1, 1), int))


def test_integrator_rejects_floats():
    with pytest.raises(TypeError, match="exact on integers"):
        Integrator(2, 480).add(0, np.zeros((1, 1, 2)), np.zeros((1, 1), int))


def test_integrator_with_buffers_gives_the_same_dumps_in_two_pairs_of_arrays():
    """With ``reuse`` the sums live in buffers used again: the dumps equal those of fresh
    arrays (int32 frames summed in int64, gaps, an add that finishes two dumps), each dump a
    view of one of two buffers, taken in turn."""
    rng = np.random.default_rng(5)
    shape, cshape = (3, 6, 2), (2, 6)
    frames = [(480 * t, rng.integers(-2**31, 2**31, shape, dtype=np.int64).astype(np.int32),
               rng.integers(0, 480, cshape)) for t in (0, 1, 2, 5, 6, 7, 9, 10, 13)]
    plain, kept = Integrator(2, 480), Integrator(2, 480, reuse=True)
    seen, per_add = [], []
    for t, vis, valid in frames:
        want = plain.add(t, vis, valid)
        got = kept.add(t, vis, valid)
        assert len(got) == len(want)
        per_add.append(len(got))
        for g, w in zip(got, want, strict=True):
            assert (g.time_tag, g.ninput, g.nspectra) == (w.time_tag, w.ninput, w.nspectra)
            assert g.vis.dtype == np.int64 and np.array_equal(g.vis, w.vis)
            assert np.array_equal(g.valid, w.valid)
            seen.append(g.vis)
    assert per_add.count(2) == 2  # frames 5 and 13 end the open dump and complete their own
    assert len(seen) == 7 and len({id(v) for v in seen}) == 2
    assert all(a is not b for a, b in itertools.pairwise(seen))
    # frames of another shape: new buffers of that shape
    other = kept.add(480 * 20, np.ones((1, 1, 2), np.int32), np.ones((1, 1), np.int64))
    other += kept.add(480 * 21, np.ones((1, 1, 2), np.int32), np.ones((1, 1), np.int64))
    assert other[-1].vis.tolist() == [[[2, 2]]] and other[-1].valid.tolist() == [[2]]
    # one frame per dump: the dump is the frame itself, nothing copied
    single = Integrator(1, 480, reuse=True)
    for t, vis, valid in frames:
        (d,) = single.add(t, vis, valid)
        assert d.vis is vis and d.valid is valid and (d.time_tag, d.ninput) == (t, 1)
