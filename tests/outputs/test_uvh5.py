"""UVH5 writer: pyuvdata reads it, conventions are exact, crash-safe appends, no overwrite."""

import numpy as np
import pytest

from tests.conftest import random_frames
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry, max_spectra_int32
from xengine_block.outputs.baselines import DumpRows, baseline_map, visdata_dtype
from xengine_block.outputs.site import SiteInfo
from xengine_block.outputs.times import LST_ANCHOR_S, SIDEREAL_RAD_PER_S, LstClock, _lst_rad
from xengine_block.outputs.uvh5 import UVH5Writer
from xengine_block.reference import reference_triangle

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) validates UVH5 files")

LAT, LON, ALT = -26.703319, 116.67081, 377.827


def make_site(nant: int) -> SiteInfo:
    from pyuvdata.utils import ECEF_from_ENU, XYZ_from_LatLonAlt

    enu = np.random.default_rng(0).normal(size=(nant, 3)) * 100
    enu[:, 2] = 0
    lat, lon = np.deg2rad(LAT), np.deg2rad(LON)
    ecef = ECEF_from_ENU(enu, latitude=lat, longitude=lon, altitude=ALT)
    return SiteInfo("MWA", LAT, LON, ALT, [f"T{i:03d}" for i in range(nant)],
                    np.arange(nant), ecef - XYZ_from_LatLonAlt(lat, lon, ALT), enu)


def write(tmp_path, nant=4, ndump=2, max_spectra=960, valid=None, name="out.uvh5",
          **writer):
    g = Geometry(nstream=2 * nant, nchan=9, npacket=2)
    frames = random_frames(g, 2, seed=3)
    x = frames_to_natural(frames, g)
    tri = reference_triangle(x)
    valid = np.full((1, g.nbaseline), 960) if valid is None else valid
    path = tmp_path / name
    with UVH5Writer(path, make_site(nant), 1e8 + 1e4 * np.arange(9), 1e4, max_spectra,
                    **writer) as w:
        for i in range(ndump):
            w.append(tri, valid, 960, 1.8e9 + i, 1.0)
    return path, x, g


def test_pyuvdata_reads_and_checks(tmp_path):
    path, _, _ = write(tmp_path)
    uv = pyuvdata.UVData.from_file(path)
    uv.check()
    assert (uv.Ntimes, uv.Nbls, uv.Npols, uv.Nfreqs) == (2, 10, 4, 9)
    assert list(uv.polarization_array) == [-5, -6, -7, -8]
    assert np.all(uv.ant_1_array <= uv.ant_2_array)
    autos = uv.ant_1_array == uv.ant_2_array
    assert np.all(uv.uvw_array[autos] == 0)
    assert np.all(uv.data_array[autos][:, :, :2].imag == 0)  # XX, YY autos are real


def test_the_same_dumps_make_the_same_file_bytes(tmp_path):
    """No clock in the file (HDF5's object timestamps are off on every dataset, the header's
    scalars too): the same dumps written a second later are the same bytes."""
    import time

    first = write(tmp_path, name="a.uvh5")[0]
    time.sleep(1.1)  # HDF5's timestamps count seconds
    second = write(tmp_path, name="b.uvh5")[0]
    assert first.read_bytes() == second.read_bytes()


def test_a_writer_not_kill_safe_publishes_buffered_the_same_bytes(tmp_path, monkeypatch):
    """``kill_safe=False`` (reprocessing's .partial files): the file is never opened for
    direct writes, and it is byte for byte the kill-safe writer's."""
    from xengine_block.outputs import staged_file

    direct = []
    real = staged_file._open_direct
    monkeypatch.setattr(staged_file, "_open_direct", lambda path: direct.append(path) or real(path))
    safe = write(tmp_path, name="safe.uvh5")[0]
    assert direct == [safe]
    partial = write(tmp_path, name="partial.uvh5", kill_safe=False)[0]
    assert direct == [safe]  # the direct fd comes only from _open_direct: none for this one
    assert partial.read_bytes() == safe.read_bytes()


def test_lst_clock_follows_astropy_between_anchors():
    """The extrapolated LST stays within 0.1 mas of astropy's (pyuvdata checks 1 mas) for
    dumps each side of an anchor, and a time beyond the anchor's reach asks astropy again."""
    clock = LstClock(LAT, LON, ALT)
    jd0 = 2461000.25
    mas = np.deg2rad(1 / 3.6e6)
    for dt in (0.0, 0.5, 13.7, -20.0, LST_ANCHOR_S, 3 * LST_ANCHOR_S, 3 * LST_ANCHOR_S + 59):
        jd = jd0 + dt / 86400
        want = _lst_rad(jd, LAT, LON, ALT)
        err = (clock(jd) - want + np.pi) % (2 * np.pi) - np.pi
        assert abs(err) < 0.1 * mas, (dt, err / mas)
    assert clock._anchor[0] == pytest.approx(jd0 + 3 * LST_ANCHOR_S / 86400)
    # An LST near 2 pi wraps to [0, 2 pi) as astropy's does.
    assert 0 <= clock(jd0 + 3 * LST_ANCHOR_S / 86400 + 1e-6) < 2 * np.pi


def test_lst_clocks_of_one_site_share_their_anchor(monkeypatch):
    """A second file's clock at the same site, within the anchor's reach, asks astropy
    nothing; another site's clock does."""
    import xengine_block.outputs.times as times

    asked = []
    monkeypatch.setattr(times, "_lst_rad", lambda jd, *site: asked.append(site) or _lst_rad(
        jd, *site))
    jd0 = 2461003.5
    first = LstClock(LAT, LON, ALT)(jd0)
    second = LstClock(LAT, LON, ALT)(jd0 + 10 / 86400)
    assert asked == [(LAT, LON, ALT)]
    # (10 s as far as a JD in float64 tells it: to ~40 us)
    assert second == pytest.approx(first + 10 * SIDEREAL_RAD_PER_S, abs=1e-8)
    LstClock(LAT + 1, LON, ALT)(jd0)
    assert asked == [(LAT, LON, ALT), (LAT + 1, LON, ALT)]


def test_many_dumps_pass_pyuvdatas_lst_check(tmp_path):
    path, _, _ = write(tmp_path, ndump=150)  # 150 s: two anchors
    uv = pyuvdata.UVData.from_file(path, run_check_acceptability=True)
    uv.check(check_extra=True, run_check_acceptability=True)
    from pyuvdata.utils import get_lst_for_time

    lst = get_lst_for_time(uv.time_array, telescope_loc=uv.telescope.location)
    assert np.max(np.abs(np.angle(np.exp(1j * (uv.lst_array - lst))))) < np.deg2rad(1 / 3.6e6)


def test_conjugation_and_polarisation_convention(tmp_path):
    path, x, _ = write(tmp_path, ndump=1)
    uv = pyuvdata.UVData.from_file(path)
    z = x[..., 0].astype(np.complex128) + 1j * x[..., 1]
    for a1, a2 in [(0, 1), (1, 3), (2, 2)]:
        for pol, p1, p2 in [(-5, 0, 0), (-6, 1, 1), (-7, 0, 1), (-8, 1, 0)]:
            expect = np.sum(np.conj(z[2 * a1 + p1]) * z[2 * a2 + p2], axis=-1)
            assert np.array_equal(uv.get_data(a1, a2, pol)[0], expect), (a1, a2, pol)


def test_uvw_matches_pyuvdata(tmp_path):
    path, _, _ = write(tmp_path)
    uv = pyuvdata.UVData.from_file(path)
    ref = uv.copy()
    ref.set_uvws_from_antenna_positions()
    assert np.allclose(ref.uvw_array, uv.uvw_array, atol=1e-6)


def test_flags_and_nsamples_from_valid_counts(tmp_path):
    g = Geometry(nstream=8, nchan=9, npacket=2)
    valid = np.full((1, g.nbaseline), 960)
    valid[0, 0] = 0  # stream 0 auto: nothing valid
    valid[0, 1] = 480  # K[0, 1]: half
    path, _, _ = write(tmp_path, valid=valid)
    uv = pyuvdata.UVData.from_file(path)
    assert uv.get_flags(0, 0, -5).all() and not uv.get_flags(0, 0, -6).any()
    assert np.all(uv.get_nsamples(0, 0, -8) == 0.5)  # YX of ant 0 = streams 1, 0
    assert np.all(uv.get_nsamples(0, 1, -5) == 1.0)


def test_visdata_type_switches_to_float_when_int32_could_overflow(tmp_path):
    assert visdata_dtype(65535)["r"] == np.int32
    assert visdata_dtype(65536 * 2)["r"] == np.float64
    path, _, _ = write(tmp_path, max_spectra=10**6)
    import h5py
    with h5py.File(path) as f:
        member = f["Data/visdata"].id.get_type().get_member_type(0)  # the "r" field
        assert (member.get_class(), member.get_size()) == (h5py.h5t.FLOAT, 8)
    assert pyuvdata.UVData.from_file(path).Ntimes == 2


def test_visdata_bound_follows_sample_bits():
    for bits in (8, 4):
        n = max_spectra_int32(bits)  # INT32_MAX // (2 * most negative value squared)
        assert n * 2 * (1 << (bits - 1)) ** 2 <= 2**31 - 1
        assert visdata_dtype(n, bits)["r"] == np.int32
        assert visdata_dtype(n + 1, bits)["r"] == np.float64
    assert visdata_dtype(65536, 4)["r"] == np.int32  # past the ci8 bound


def test_ci4_dump_past_the_ci8_bound_stays_int32_and_exact(tmp_path):
    """The writer block takes the bound from the header geometry's sample_bits: a ci4 dump of
    65,760 spectra (over ci8's 65,535, far under ci4's 16,777,215) stays int32, exact."""
    import h5py

    from tests.helpers.runtimes import OURS, array_source
    from xengine_block.array import default_array
    from xengine_block.frames import natural_to_frames

    g = Geometry(nstream=4, nchan=1, nchan_pkt=1, npacket=137, sample_bits=4)
    nspec = g.npacket * g.nspectra_pkt
    assert max_spectra_int32(8) < nspec <= max_spectra_int32(4)
    x = np.random.default_rng(5).integers(-8, 8, (g.nstream, g.nchan, nspec, 2), dtype=np.int8)
    x[:, :, : nspec // 2] = -8  # half the dump at the most negative value
    hdr = {"name": "ci4", "time_tag": 0, "sync_time": 1.8e9, "fs_hz": 40e3, "chan0": 0,
           "freq0_hz": 150e6, "chan_bw_hz": 40e3, "nchan": g.nchan, "geometry": g.to_dict(),
           "array": default_array(g.nstream // 2).to_dict(),
           "_tensor": {"dtype": "ci4", "shape": [-1, *g.frame_shape]}}
    with OURS.Pipeline() as p:
        xe = OURS.XEngineBlock(array_source(OURS, [(hdr, natural_to_frames(x, g))], g.npacket),
                               backend="cpu")
        w = OURS.UVH5WriterBlock(OURS.IntegrateBlock(xe, ninteg=1), directory=tmp_path)
        p.run()
    with h5py.File(w.files[0]) as f:
        assert f["Data/visdata"].dtype == np.dtype([("r", np.int32), ("i", np.int32)])
    uv = pyuvdata.UVData.from_file(w.files[0])
    z = x[..., 0].astype(np.int64) + 1j * x[..., 1].astype(np.int64)
    ants = default_array(2).antenna_numbers
    for a1, a2 in [(0, 0), (0, 1), (1, 1)]:
        for pol, p1, p2 in [(-5, 0, 0), (-6, 1, 1), (-7, 0, 1), (-8, 1, 0)]:
            want = np.sum(np.conj(z[2 * a1 + p1]) * z[2 * a2 + p2], axis=-1)
            assert np.array_equal(uv.get_data(ants[a1], ants[a2], pol)[0], want)


def test_refuses_to_overwrite(tmp_path):
    path, _, _ = write(tmp_path)
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        UVH5Writer(path, make_site(4), np.ones(9), 1.0, 960)
    UVH5Writer(path, make_site(4), np.ones(9), 1.0, 960, overwrite=True).close()


def test_baseline_map_covers_every_pair_once():
    b = baseline_map([0, 1, 2])
    assert b.nbls == 6
    assert sorted(zip(b.ant_1.tolist(), b.ant_2.tolist(), strict=True)) == [
        (0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (2, 2)]


KILL_SCRIPT = """
import sys, numpy as np
from tests.outputs.test_uvh5 import make_site
from xengine_block.outputs.uvh5 import UVH5Writer
nant = 16
nbl = 2 * nant * (2 * nant + 1) // 2
tri = np.ones((16, nbl, 2), np.int32)
tri[..., 1] = 0  # real autocorrelations
w = UVH5Writer(sys.argv[1], make_site(nant), np.arange(16) * 1e4 + 1e8, 1e4, 960)
for i in range(100000):
    w.append(tri, np.full((1, nbl), 960), 960, 1.8e9 + i, 1.0)
    print(i + 1, flush=True)
"""


@pytest.mark.parametrize("delay", [0.002, 0.009, 0.017])
def test_sigkilled_writer_leaves_a_readable_file(tmp_path, delay):
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    path = tmp_path / "killed.uvh5"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT, str(path)], cwd=root,
                            stdout=subprocess.PIPE, text=True)
    done = 0
    t0 = time.monotonic()
    while done < 10 and time.monotonic() - t0 < 60:  # let it complete some dumps
        done = int(proc.stdout.readline() or done)
    time.sleep(delay)  # land somewhere inside a later append
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = max([done] + [int(x) for x in proc.stdout.read().split()])
    assert done >= 10
    uv = pyuvdata.UVData.from_file(path)
    uv.check()
    assert uv.Ntimes in (done, done + 1)  # +1: killed after the flush, before the print


# ------------------------------------------------------------------ every crash point, replayed
# A SIGKILL lands between two system calls, never inside one pwrite (see uvh5's docstring for
# the page caveat). Recording a writer's pwrite/ftruncate calls and rebuilding the file as it
# is after each of them covers every place a kill can land, deterministically.

def record_writer(monkeypatch, path, nant: int, nchan: int, ndump: int):
    """Write ``ndump`` distinct dumps (dump i: the samples' triangle times i + 1) and close;
    returns the file as the constructor left it, the (offset, bytes) / (size, None) calls of
    each commit (dump 1..ndump, then close) and the complex samples ``[stream, chan, time]``."""
    from xengine_block.outputs.staged_file import StagedFile

    calls: list[tuple[int, bytes | None]] = []
    pwrite, ftruncate = StagedFile._pwrite, StagedFile._ftruncate

    def rec_pwrite(self, data, offset):
        calls.append((offset, bytes(data)))
        pwrite(self, data, offset)

    def rec_ftruncate(self, size):
        calls.append((size, None))
        ftruncate(self, size)

    monkeypatch.setattr(StagedFile, "_pwrite", rec_pwrite)
    monkeypatch.setattr(StagedFile, "_ftruncate", rec_ftruncate)
    x = np.random.default_rng(7).integers(-128, 128, (2 * nant, nchan, 16, 2), dtype=np.int8)
    tri = reference_triangle(x)
    valid = np.full((1, tri.shape[1]), 960)
    valid[0, ::7] = 480  # some nsamples != 1
    tris, commits = [tri * (i + 1) for i in range(ndump)], []
    w = UVH5Writer(path, make_site(nant), 1e8 + 1e4 * np.arange(nchan), 1e4, 960)
    base = path.read_bytes()
    calls.clear()
    for i, t in enumerate(tris):
        w.append(t, valid, 960, 1.8e9 + i, 1.0)
        commits.append(calls[:])
        calls.clear()
    w.close()
    commits.append(calls[:])
    return base, commits, x[..., 0] + 1j * x[..., 1].astype(np.float64)


def replay(base: bytes, commits, check):
    """Yield (commit, call, file image) after every call of the commits ``check`` selects."""
    img = bytearray(base)
    for c, calls in enumerate(commits):
        for k, (a, data) in enumerate(calls):
            if data is None:
                del img[a:]
                img.extend(bytes(a - len(img)))
            else:
                img.extend(bytes(max(a + len(data) - len(img), 0)))
                img[a:a + len(data)] = data
            if check(c):
                yield c, k, bytes(img)
    yield len(commits), -1, bytes(img)


def read_prefix(path, final, nbls: int, before: int):
    """The dumps a crashed file holds (``before`` or ``before + 1``), after checking that they
    are bit for bit the final file's first dumps; raises (AssertionError or the reader's
    error) otherwise. A file killed in its first dump may instead hold no dump (h5py)."""
    import h5py

    try:
        uv = pyuvdata.UVData.from_file(path)
    except Exception:
        if before:
            raise
        with h5py.File(path, "r") as f:  # no complete dump: an empty file h5py reads
            assert f["Header/Nblts"][()] == f["Header/Ntimes"][()] == 0
            assert all(f[d].shape[0] == 0 for d in ("Header/time_array", "Data/visdata"))
        return 0
    n = uv.Ntimes
    assert n in (before, before + 1) and uv.Nblts == n * nbls, (n, uv.Nblts, before)
    for name in ("data_array", "flag_array", "nsample_array", "time_array", "ant_1_array",
                 "ant_2_array", "uvw_array", "lst_array", "integration_time"):
        assert np.array_equal(getattr(uv, name), getattr(final, name)[:n * nbls]), name
    return n


def crash_states_fail(tmp_path, monkeypatch, nant, nchan, ndump, only_new_kinds=False):
    """Every place a kill can land in every commit (``only_new_kinds``: in the first commit of
    each kind, i.e. of each list of write sizes, and the last): the failures, as text."""
    path = tmp_path / "w.uvh5"
    base, commits, z = record_writer(monkeypatch, path, nant, nchan, ndump)
    kinds = [tuple(sorted(-1 if d is None else len(d) for _, d in calls)) for calls in commits]
    firsts = {len(commits) - 1} | {kinds.index(k) for k in kinds}
    assert not only_new_kinds or max(map(len, commits)) > len(commits[1]), "no node split"

    def check(c: int) -> bool:
        return not only_new_kinds or c in firsts

    final = pyuvdata.UVData.from_file(path)
    nbls = final.Nbls
    for a1, a2, pol, s1, s2 in ((0, 0, "xx", 0, 0), (0, 1, "xy", 0, 3), (1, 2, "yx", 3, 4)):
        want = np.sum(np.conj(z[s1]) * z[s2], axis=-1)  # from the samples, not the writer
        for d in range(ndump):  # the complete file holds every dump, exactly
            assert np.array_equal(final.get_data(a1, a2, pol)[d], (d + 1) * want)
    crashed, failures, last = tmp_path / "crashed.uvh5", [], {}
    for c, k, img in replay(base, commits, check):
        if k < 0:  # every call replayed: the disk's file, byte for byte
            assert img == path.read_bytes()
            break
        crashed.write_bytes(img)
        before = min(c, ndump)
        try:
            n = read_prefix(crashed, final, nbls, before)
            assert n >= last.get(c, before), "went back to fewer dumps"
            last[c] = n
        except Exception as exc:  # noqa: BLE001 (any reader error is a failure to report)
            a, data = commits[c][k]
            what = f"ftruncate({a})" if data is None else f"pwrite({len(data)} B at {a})"
            failures.append(f"commit {c + 1} call {k + 1}/{len(commits[c])} {what}: "
                            f"{type(exc).__name__}: {str(exc)[:150]}")
    for c in range(len(commits)):
        if check(c) and c in last:
            assert last[c] == min(c + 1, ndump), (c, last[c])  # complete commit: all dumps
    return failures


def test_every_crash_point_of_appends_leaves_a_readable_file(tmp_path, monkeypatch):
    """Dumps 1-4 and close of a small writer: after every pwrite/ftruncate the file reads with
    pyuvdata (its default checks) with exactly the completed dumps, or one more."""
    failures = crash_states_fail(tmp_path, monkeypatch, nant=4, nchan=2, ndump=4)
    assert not failures, "\n".join(failures)


def test_every_crash_point_with_dumps_across_chunks(tmp_path, monkeypatch):
    """Chunks of 10 rows, dumps of 15: each dump fills the last chunk of the one before (data
    written in place into a chunk the committed file already has) and starts new ones (the
    hyperslab writes of a file whose dumps are not whole chunks)."""
    from xengine_block.outputs import uvh5

    monkeypatch.setattr(uvh5, "data_chunk_rows", lambda nbls, row_bytes: 10)
    failures = crash_states_fail(tmp_path, monkeypatch, nant=5, nchan=3, ndump=3)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("rows", [10, 5], ids=["straddling", "whole_chunks"])
def test_every_crash_point_where_chunk_btrees_split(tmp_path, monkeypatch, rows):
    """70 dumps: HDF5's chunk B-tree nodes (64 entries) fill and split (data after 42 dumps
    with 1.5 chunks per dump, sooner with 3 whole chunks written directly; baseline-time after
    64), rewriting nodes in place and adding new ones; the first commit of each kind (and the
    last) is checked at every call."""
    from xengine_block.outputs import uvh5

    monkeypatch.setattr(uvh5, "data_chunk_rows", lambda nbls, row_bytes: rows)
    failures = crash_states_fail(tmp_path, monkeypatch, nant=5, nchan=2, ndump=70,
                                 only_new_kinds=True)
    assert not failures, "\n".join(failures)


def test_the_publishing_write_is_one_direct_write_and_a_cut_one_would_tear(tmp_path,
                                                                          monkeypatch):
    """The write that publishes a dump spans pages (16 antennas x 16 channels: three), and a
    buffered write stops at a page boundary when a fatal signal arrives while it copies (this
    test's SIGKILL once caught one): replayed cut at each boundary, the file is refused (or
    holds rows of zeros). So it goes to disk as one direct write, which a kill cannot cut,
    where the filesystem has direct I/O (here: every append's)."""
    from xengine_block.outputs.staged_file import StagedFile

    probe = StagedFile(tmp_path / "probe", overwrite=True)  # a direct write, as the writer's
    probe.write(bytes(3 * 4096))
    probe.commit()
    direct = probe._publish(b"published", 5000)
    probe.close()
    if not direct:
        pytest.skip(f"no direct I/O on the filesystem of {tmp_path}: the publishing write is "
                    f"buffered there (uvh5's docstring)")
    assert (tmp_path / "probe").read_bytes()[5000:5009] == b"published"
    done = []
    publish = StagedFile._publish
    monkeypatch.setattr(StagedFile, "_publish",
                        lambda self, data, off: done.append(publish(self, data, off)) or done[-1])
    path = tmp_path / "w.uvh5"
    base, commits, _ = record_writer(monkeypatch, path, nant=16, nchan=16, ndump=3)
    assert done and all(done) and len(done) >= 3  # every append's publication, direct
    final = pyuvdata.UVData.from_file(path)
    page, cut, torn = 4096, [], []
    for calls in commits[:-1]:  # each append's calls, its publication split at page ends
        split = []
        for a, data in calls:
            if data is None or not 0 < a < len(base):
                split.append((a, data))
                continue
            ends = list(range(a - a % page + page, a + len(data), page)) + [a + len(data)]
            split += [(lo, data[lo - a:hi - a]) for lo, hi in zip([a, *ends[:-1]], ends,
                                                                     strict=True)]
        cut.append(split)
    assert max(len(c) for c in cut) > max(len(c) for c in commits)  # pages to cut between
    crashed = tmp_path / "crashed.uvh5"
    for c, k, img in replay(base, cut, lambda c: True):
        if k < 0:
            break
        crashed.write_bytes(img)
        try:
            read_prefix(crashed, final, final.Nbls, min(c, 3))
        except Exception as exc:  # noqa: BLE001
            torn.append(f"{c} {k}: {type(exc).__name__}")
    assert torn, "no page boundary tears the publication: the direct write is not needed"


@pytest.mark.filterwarnings("ignore")  # pyuvdata on the broken files: time zero, LST off
def test_crash_replay_fails_commits_in_hdf5s_order(tmp_path, monkeypatch):
    """The replay can fail: the in-place writes in HDF5's own order (the code before this
    test) leave files pyuvdata refuses, or that hold rows of zeros."""
    from xengine_block.outputs.staged_file import StagedFile

    def hdf5_order(self, old):
        return [(off, data[:old - off]) for off, data in self._writes if off < old]

    monkeypatch.setattr(StagedFile, "_in_place", hdf5_order)
    failures = crash_states_fail(tmp_path, monkeypatch, nant=4, nchan=2, ndump=2)
    assert any("not expected shape" in f for f in failures)
    assert any("AssertionError: data_array" in f for f in failures)


@pytest.mark.filterwarnings("ignore:Fixing auto-correlations")  # random triangles: autos too
@pytest.mark.parametrize("broadcast", [False, True])
def test_flags_and_nsamples_per_channel(tmp_path, broadcast):
    """Valid counts per channel (and, as reprocessing passes them, one per channel broadcast
    over the baselines without a copy): each visibility's nsamples is its own channel's count
    of its streams' baseline over the dump's spectra, flagged where it is zero."""
    nant, nchan, nspec = 3, 4, 960
    s = 2 * nant
    nbl = s * (s + 1) // 2
    rng = np.random.default_rng(11)
    if broadcast:
        per_chan = np.array([0, 480, 960, 7])
        valid = np.broadcast_to(per_chan[:, None], (nchan, nbl))
    else:
        valid = rng.integers(0, nspec + 1, (nchan, nbl))
        valid[rng.random((nchan, nbl)) < 0.2] = 0
    tri = rng.integers(-1000, 1000, (nchan, nbl, 2))
    path = tmp_path / "c.uvh5"
    with UVH5Writer(path, make_site(nant), 150e6 + 40e3 * np.arange(nchan), 40e3, nspec) as w:
        w.append(tri, valid, nspec, 1.7e9, 0.024)
    uv = pyuvdata.UVData.from_file(path)
    for a1 in range(nant):
        for a2 in range(a1, nant):
            for pol, p1, p2 in [(-5, 0, 0), (-6, 1, 1), (-7, 0, 1), (-8, 1, 0)]:
                j, k = sorted((2 * a1 + p1, 2 * a2 + p2))
                count = np.asarray(valid)[:, k * (k + 1) // 2 + j]
                assert np.array_equal(uv.get_nsamples(a1, a2, pol)[0],
                                      (count / nspec).astype(np.float32)), (a1, a2, pol)
                assert np.array_equal(uv.get_flags(a1, a2, pol)[0], count == 0), (a1, a2, pol)


def test_dumps_as_whole_chunks_equal_the_hyperslab_writes(tmp_path, monkeypatch):
    """The same dumps written as whole chunks of their own (direct chunk writes: the default
    where the chunk divides the dump) and through hyperslab writes into chunks that straddle
    dumps read back identical: data, flags, nsamples, times."""
    from xengine_block.outputs import uvh5

    valid = np.full((1, Geometry(nstream=10, nchan=9, npacket=2).nbaseline), 960)
    valid[0, ::5] = 0
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    direct, _, _ = write(tmp_path / "a", nant=5, ndump=3, valid=valid)
    assert uvh5.data_chunk_rows(15, 9 * 4 * 8) == 15  # default: one chunk per dump
    monkeypatch.setattr(uvh5, "data_chunk_rows", lambda nbls, row_bytes: 10)
    straddle, _, _ = write(tmp_path / "b", nant=5, ndump=3, valid=valid)
    a, b = pyuvdata.UVData.from_file(direct), pyuvdata.UVData.from_file(straddle)
    for name in ("data_array", "flag_array", "nsample_array", "time_array", "lst_array"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    assert a.flag_array.any() and not a.flag_array.all()


def test_data_chunk_rows_divide_the_dump_where_that_costs_little():
    from xengine_block.outputs.uvh5 import DATA_CHUNK_BYTES, data_chunk_rows

    assert data_chunk_rows(8256, 8 * 4 * 8) == 2752  # S = 256 x 8 channels: 3 chunks a dump
    assert data_chunk_rows(15, 9 * 4 * 8) == 15
    prime = 1031  # no divisor but itself and 1: chunks of the most rows, across dumps
    assert data_chunk_rows(prime, DATA_CHUNK_BYTES // 500) == 500


@pytest.mark.filterwarnings("ignore:Fixing auto-correlations")  # random triangles: autos too
def test_repeated_count_chunks_are_deflated_once_and_read_back(tmp_path):
    """flags and nsamples of a dump whose counts are the same on every baseline are written as
    one deflated chunk, compressed when the counts change (a dump with counts varying by baseline
    goes in unfiltered, one with every spectrum not at all: the fill values); pyuvdata reads
    every dump's values back, whichever way it went, and a repeated column that changes (the
    integration time) is compressed again. The phase centre's constant columns store no
    chunk and read back as their constants."""
    import h5py

    nant, nchan, nspec = 5, 4, 960
    s = 2 * nant
    nbl = s * (s + 1) // 2
    rng = np.random.default_rng(12)
    per_chan = np.array([960, 0, 480, 7])
    ragged = rng.integers(0, nspec + 1, (nchan, nbl))
    ragged[rng.random((nchan, nbl)) < 0.2] = 0
    dumps = [np.broadcast_to(per_chan[:, None], (nchan, nbl)), ragged,
             np.full((1, nbl), nspec), np.repeat(per_chan[:, None], nbl, axis=1)]
    tri = rng.integers(-1000, 1000, (nchan, nbl, 2))
    lengths = [0.024, 0.024, 0.048, 0.024]
    path = tmp_path / "r.uvh5"
    with UVH5Writer(path, make_site(nant), 150e6 + 40e3 * np.arange(nchan), 40e3, nspec) as w:
        for i, valid in enumerate(dumps):
            w.append(tri, valid, nspec, 1.7e9 + i, lengths[i])
    uv = pyuvdata.UVData.from_file(path)
    assert np.array_equal(uv.integration_time, np.repeat(lengths, uv.Nbls))  # one changed
    for a1 in range(nant):
        for a2 in range(a1, nant):
            for pol, p1, p2 in [(-5, 0, 0), (-6, 1, 1), (-7, 0, 1), (-8, 1, 0)]:
                j, k = sorted((2 * a1 + p1, 2 * a2 + p2))
                count = np.stack([np.broadcast_to(v, (nchan, nbl))[:, k * (k + 1) // 2 + j]
                                  for v in dumps])
                assert np.array_equal(uv.get_nsamples(a1, a2, pol),
                                      (count / nspec).astype(np.float32)), (a1, a2, pol)
                assert np.array_equal(uv.get_flags(a1, a2, pol), count == 0), (a1, a2, pol)
    with h5py.File(path, "r") as f:
        for name, itemsize in (("flags", 1), ("nsamples", 4)):
            ds = f["Data"][name]
            assert ds.compression == "gzip" and ds.chunks[0] == nant * (nant + 1) // 2  # a dump
            info = [ds.id.get_chunk_info(i) for i in range(ds.id.get_num_chunks())]
            raw = ds.chunks[0] * nchan * 4 * itemsize
            # the dump with every spectrum (2) stores no chunk: its rows are the fill value
            assert [c.chunk_offset[0] // ds.chunks[0] for c in info] == [0, 1, 3], name
            assert [c.filter_mask for c in info] == [0, 1, 0], name
            assert info[1].size == raw and max(info[i].size for i in (0, 2)) < raw / 4
            first, last = (ds.id.read_direct_chunk((i * ds.chunks[0], 0, 0)) for i in (0, 3))
            assert first == last  # the same counts: the same bytes
        assert f["Header"]["ant_1_array"].compression == "gzip"
        lat = np.deg2rad(make_site(nant).latitude_deg)
        for name, value in (("phase_center_id_array", 0), ("phase_center_app_dec", lat),
                            ("phase_center_frame_pa", 0.0)):  # one constant: no chunks at all
            ds = f["Header"][name]
            assert ds.id.get_num_chunks() == 0 and ds.shape == (4 * ds.chunks[0],), name
            assert np.array_equal(ds[()], np.full(ds.shape, value, ds.dtype)), name


# ------------------------------------------------------------------ the row pass
def rows_by_numpy(tri, index, flip):
    """visdata rows [nbls, C, P, 2] from the triangle, by numpy fancy indexing (independent of
    the pass under test)."""
    v = np.moveaxis(tri[:, index], 0, 1).astype(np.float64 if tri.dtype.kind == "f" else np.int64)
    v[..., 1] = np.where(flip[:, None, :], -v[..., 1], v[..., 1])
    return v


@pytest.mark.parametrize("tri_dtype,vis_spectra", [
    (np.int32, 960), (np.int64, 960), (np.int64, 10**6), (np.float64, 10**6)],
    ids=["int32-int32", "int64-int32", "int64-float64", "float64-float64"])
def test_row_pass_equals_numpy(tri_dtype, vis_spectra):
    """The C extension's row pass gives numpy's rows bit for bit: int32 rows from int32 and
    int64 triangles with values out to the int32 bound (-2^31 negated wraps as int32 does),
    float64 rows (integrations past the int32 bound) from int64 and float64 ones, every flip;
    any number of polarisations; rows made in the writer's order (the triangle's) or in file
    order alike; bad input refused by name."""
    from xengine_block.native_extension import native
    nant, nchan = 5, 3
    rows = DumpRows(baseline_map(np.arange(nant)), nchan, visdata_dtype(vis_spectra))
    wide = rows._pairs.dtype == np.float64
    assert wide == (vis_spectra > max_spectra_int32(8))
    nbl = 2 * nant * (2 * nant + 1) // 2
    rng = np.random.default_rng(5)
    top = 2**40 if wide else 2**31
    tri = rng.integers(-top + 1, top, (nchan, nbl, 2)).astype(tri_dtype)
    tri[0, rows.index[rows.flip.astype(bool)][0], 1] = -top + (0 if wide else 1)
    want = rows_by_numpy(tri, rows.index, rows.flip.astype(bool))
    assert rows.flip.any() and not rows.flip.all()
    assert not np.array_equal(rows.order, np.arange(rows.order.size))  # not file order
    rows.fill(tri, np.zeros((1, nbl), np.int64), 960, counts=False)
    assert np.array_equal(rows._pairs, want)
    out = np.zeros((rows.index.shape[0], nchan, 3, 2), rows._pairs.dtype)
    index3, flip3 = np.ascontiguousarray(rows.index[:, :3]), np.ascontiguousarray(rows.flip[:, :3])
    native().uvh5_rows(tri, index3, flip3, out)
    assert np.array_equal(out, want[:, :, :3])
    bad = rows.index.copy()
    bad[2, 1] = nbl
    with pytest.raises(ValueError, match=f"index.*outside the triangle's {nbl} baselines"):
        native().uvh5_rows(tri, bad, rows.flip, rows._pairs)
    with pytest.raises(ValueError, match="tri must be int32, int64 or float64"):
        native().uvh5_rows(tri.astype(np.float32), rows.index, rows.flip, rows._pairs)
    with pytest.raises(ValueError, match="vis must be"):
        native().uvh5_rows(tri, rows.index, rows.flip, out)
    bad_order = rows.order.copy()
    bad_order[-1] = rows.index.shape[0]
    with pytest.raises(ValueError, match=f"order: a row outside the {rows.index.shape[0]} rows"):
        native().uvh5_rows(tri, rows.index, rows.flip, rows._pairs, bad_order)


@pytest.mark.parametrize("per_chan", [False, True], ids=["one-row", "per-channel"])
def test_count_pass_equals_numpy(per_chan):
    """flags and nsamples from the valid counts, as numpy computes them (float32 of the
    float64 fraction), for one row of counts shared by every channel and for one per
    channel; a count array of the wrong number of rows refused by name."""
    from xengine_block.native_extension import native
    nant, nchan, nspectra = 4, 3, 3840
    rows = DumpRows(baseline_map(np.arange(nant)), nchan, visdata_dtype(nspectra))
    nbl = 2 * nant * (2 * nant + 1) // 2
    valid = np.random.default_rng(2).integers(0, nspectra + 1, (nchan if per_chan else 1, nbl))
    valid[:, ::5] = 0
    rows.fill(np.zeros((nchan, nbl, 2), np.int32), valid, nspectra)
    v = valid[:, rows.index] if per_chan else np.broadcast_to(valid[:, rows.index],
                                                              (nchan, *rows.index.shape))
    want_n = np.moveaxis(v, 0, 1)  # [nbls, C, P]
    assert np.array_equal(rows.flags, want_n == 0) and rows.flags.any()
    assert np.array_equal(rows.nsamples, (want_n / float(nspectra)).astype(np.float32))
    with pytest.raises(ValueError, match="valid has 2 rows of counts for 3 channels"):
        native().uvh5_counts(valid[:1].repeat(2, 0), rows.index, 1.0, rows.flags,
                             rows.nsamples)
