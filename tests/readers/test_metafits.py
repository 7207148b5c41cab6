"""``--array OBSID_metafits.fits``: an MWA metafits as MWA ships it is the array of an MWAX
recording. Real metafits from mwalib's test files (tests/data/mwa): names are mwalib's
``tile_name`` (Phase II ``LBxx``), numbers the tile ids, positions the metafits', a flagged tile's
baselines flagged with their data kept, the recording's inputs matched by tile id; subfiles
written to mwax_udp2sub's layout read back by mwalib itself give the same samples, and the
UVH5 holds their exact int64 correlation at mwalib's frequencies and times. Hostile metafits
get a one-line error."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.conftest import import_or_require
from tests.helpers.mwax import METAFITS_16, METAFITS_LBG4, METAFITS_TILE011, NTIME
from tests.helpers.recordings import check_file, expected, write_array
from xengine_block.array import ArrayDescription, ArrayError
from xengine_block.cli import main
from xengine_block.readers import open_recording
from xengine_block.readers.arrays import load_array
from xengine_block.readers.metafits import MWA_ALTITUDE_M
from xengine_block.readers.mwax import write_subfile
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")
fits = pytest.importorskip("astropy.io.fits", reason="astropy (pyuvdata's) writes FITS")


def jd(unix):
    return np.asarray(unix) / 86400 + 2440587.5


def mwalib_or_skip():
    return import_or_require("mwalib", "mwalib")


def tile_blocks(ntile, nblock, seed, ntime=NTIME):
    """Random int8 blocks ``[input, sample, 2]`` of ``ntile`` tiles (inputs tile * 2 + pol)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(-128, 128, (2 * ntile, ntime, 2), dtype=np.int8)
            for _ in range(nblock)]


def natural(blocks, ntile):
    """x[tile, chan = 1, time, pol, 2] from a file's blocks."""
    return np.concatenate(blocks, axis=1).reshape(ntile, 2, -1, 2).transpose(0, 2, 1, 3)[:, None]


# ---------------------------------------------------------------------------- the array
@pytest.mark.parametrize("path", [METAFITS_16, METAFITS_LBG4, METAFITS_TILE011],
                         ids=lambda p: p.name)
def test_metafits_array_is_mwalibs(path):
    """Names, tile ids, order, positions and flags as mwalib's MetafitsContext reports them."""
    mwalib = mwalib_or_skip()
    ctx = mwalib.MetafitsContext(str(path))
    arr = load_array(path)
    ants = ctx.antennas
    assert list(arr.antenna_names) == [a.tile_name for a in ants]
    assert list(arr.antenna_numbers) == [a.tile_id for a in ants]
    assert [a.ant for a in ants] == sorted(a.ant for a in ants)  # the subfile order
    want = np.array([[a.east_m, a.north_m, a.height_m - MWA_ALTITUDE_M] for a in ants])
    assert np.array_equal(arr.enu_m, want)
    assert arr.flagged == tuple(a.tile_name for a in ants
                                if a.rfinput_x.flagged or a.rfinput_y.flagged)
    assert (arr.latitude_deg, arr.longitude_deg) == (
        math.degrees(-0.4660608448386394), math.degrees(2.0362898668561042))


def test_sixteen_phase2_tiles():
    arr = load_array(METAFITS_16)
    assert arr.antenna_names[:3] == ("LBF1", "LBF2", "LBF3")
    assert arr.antenna_numbers[:3] == (2041, 2042, 2043)
    assert arr.flagged == ("LBG1",)  # tile 2049's Flag is 1
    assert load_array(METAFITS_LBG4).antenna_names == ("LBG4",)  # tile 2052


def test_flagged_survives_toml_and_headers(tmp_path):
    arr = load_array(METAFITS_16)
    path = tmp_path / "from_metafits.toml"
    arr.write_toml(path)
    assert "flagged = true" in path.read_text()
    again = ArrayDescription.from_toml(path)
    assert again == arr and again.flagged == ("LBG1",)
    assert ArrayDescription.from_dict(arr.to_dict()).flagged == ("LBG1",)
    assert arr.select([8, 0]).flagged == ("LBG1",) and arr.subset(8).flagged == ()
    with pytest.raises(ArrayError, match="flagged must be true or false"):
        ArrayDescription.from_dict({**arr.to_dict(), "antenna": [
            {**arr.to_dict()["antenna"][0], "flagged": "yes"}]})


# ---------------------------------------------------------------------------- reprocessing
def test_reprocess_sixteen_tiles_with_metafits(tmp_path):
    """A 16-tile subfile (inputs in the metafits' Antenna order, rf_input from the tile ids):
    names TileName, numbers tile ids, exact visibilities, uvw from the metafits positions,
    tile 2049's baselines flagged with their data and nsamples kept."""
    arr = load_array(METAFITS_16)
    blocks = tile_blocks(16, 2, seed=5)
    obs = 1370752512
    f = write_subfile(tmp_path / f"{obs}_{obs + 8}_121.sub", blocks, coarse_channel=121,
                      tile_ids=arr.antenna_numbers, obs_id=obs)
    rc = main(["reprocess", str(f), "-o", str(tmp_path / "out"), "--array", str(METAFITS_16),
               "--integration-spectra", str(NTIME)])
    assert rc == 0
    out = tmp_path / "out" / f"{f.stem}.uvh5"
    names = list(arr.antenna_names)
    numbers = dict(zip(names, arr.antenna_numbers, strict=True))
    x = natural(blocks, 16)
    check_file(out, x, [(0, NTIME), (NTIME, 2 * NTIME)], numbers, names,
               freqs=np.array([121 * 1.28e6]))
    uv = pyuvdata.UVData.from_file(out)
    assert list(uv.telescope.antenna_names) == names
    assert list(uv.telescope.antenna_numbers) == list(arr.antenna_numbers)
    pos = dict(zip(arr.antenna_numbers, arr.enu_m, strict=True))
    want_uvw = np.array([pos[b] - pos[a] for a, b in zip(uv.ant_1_array, uv.ant_2_array,
                                                         strict=True)])
    assert np.allclose(uv.uvw_array, want_uvw, rtol=0, atol=1e-9)
    assert np.allclose(uv.telescope.get_enu_antpos(), arr.enu_m, rtol=0, atol=1e-6)
    bad = (uv.ant_1_array == 2049) | (uv.ant_2_array == 2049)
    assert 0 < bad.sum() < uv.Nblts
    assert uv.flag_array[bad].all() and not uv.flag_array[~bad].any()
    assert (uv.nsample_array == 1.0).all()  # the flagged tile's data kept
    assert np.abs(uv.data_array[bad]).sum() > 0


def test_inputs_matched_by_tile_id(tmp_path):
    """A recording of 4 of the 16 tiles in another order: each input is the metafits' tile of
    its rf_input, whatever its place; names and numbers from the metafits."""
    arr = load_array(METAFITS_16)
    tiles = [2052, 2041, 2049, 2046]
    blocks = tile_blocks(4, 2, seed=6)
    f = write_subfile(tmp_path / "sub_121.sub", blocks, coarse_channel=121, tile_ids=tiles)
    rec = open_recording([f], "mwax")
    assert rec.meta.antenna_numbers == tuple(tiles)
    (r,) = reprocess([f], tmp_path / "out", ReprocessOptions(
        array=str(METAFITS_16), integration_spectra=2 * NTIME), progress=None)
    assert r.ok, r.error
    name_of = dict(zip(arr.antenna_numbers, arr.antenna_names, strict=True))
    names = [name_of[t] for t in tiles]
    assert names == ["LBG4", "LBF1", "LBG1", "LBF6"]
    check_file(r.task.output, natural(blocks, 4), [(0, 2 * NTIME)],
               dict(zip(names, tiles, strict=True)), names)
    uv = pyuvdata.UVData.from_file(r.task.output)
    bad = (uv.ant_1_array == 2049) | (uv.ant_2_array == 2049)
    assert uv.flag_array[bad].all() and not uv.flag_array[~bad].any()


def test_without_delay_table_inputs_are_the_metafits_order(tmp_path):
    """Block 0 without a delay table (zeros): the inputs are the metafits' antennas in its
    Antenna order, the subfile order udp2sub writes; a count that differs is one line."""
    arr = load_array(METAFITS_16)
    blocks = tile_blocks(16, 1, seed=11)
    f = write_subfile(tmp_path / "z_121.sub", blocks, coarse_channel=121,
                      tile_ids=arr.antenna_numbers)
    data = bytearray(f.read_bytes())
    data[4096:4096 + blocks[0].nbytes] = bytes(blocks[0].nbytes)
    f.write_bytes(bytes(data))
    assert open_recording([f], "mwax").meta.antenna_numbers is None
    (r,) = reprocess([f], tmp_path / "out", ReprocessOptions(
        array=str(METAFITS_16), integration_spectra=NTIME), progress=None)
    assert r.ok, r.error
    names = list(arr.antenna_names)
    check_file(r.task.output, natural(blocks, 16), [(0, NTIME)],
               dict(zip(names, arr.antenna_numbers, strict=True)), names)
    (r,) = reprocess([f], tmp_path / "out1", ReprocessOptions(
        array=str(METAFITS_LBG4), integration_spectra=NTIME), progress=None)
    assert not r.ok and "names none of its 16 antennas" in str(r.error)
    assert "lists 1" in str(r.error)


def test_toml_written_from_metafits_matches_by_tile_id(tmp_path):
    """An array TOML named by TileName and numbered by tile id (what a user writes from the
    metafits) is accepted: matched by number where the Tile%03d names are not its."""
    arr = load_array(METAFITS_16)
    toml = tmp_path / "mwa.toml"
    arr.write_toml(toml)
    blocks = tile_blocks(2, 1, seed=7)
    f = write_subfile(tmp_path / "s_121.sub", blocks, coarse_channel=121, tile_ids=[2050, 2042])
    (r,) = reprocess([f], tmp_path / "out", ReprocessOptions(
        array=str(toml), integration_spectra=NTIME), progress=None)
    assert r.ok, r.error
    check_file(r.task.output, natural(blocks, 2), [(0, NTIME)], {"LBG2": 2050, "LBF2": 2042},
               ["LBG2", "LBF2"])
    # neither the names nor the numbers: one line naming both
    other = tmp_path / "other.toml"
    write_array(other, ["Tile001", "Tile002"], numbers=[1, 2])
    (r,) = reprocess([f], tmp_path / "out2", ReprocessOptions(
        array=str(other), integration_spectra=NTIME), progress=None)
    assert not r.ok
    msg = str(r.error)
    assert "lacks recorded antenna(s) Tile2050, Tile2042" in msg and "2050, 2042" in msg
    assert "\n" not in msg


def test_mwax_subfile_read_back_by_mwalib(tmp_path):
    """A full-size oversampled MWAX VCS subfile for the LBG4 metafits (mwalib's own voltage test
    metafits), read by mwalib's VoltageContext: the same samples; reprocessed with the
    metafits, names, frequencies and times are mwalib's and every visibility is the int64
    correlation of mwalib's samples."""
    mwalib = mwalib_or_skip()
    obs, ntime, rate = 1370755832, 81920, 1_638_400
    arr = load_array(METAFITS_LBG4)
    blocks = tile_blocks(1, 160, seed=8, ntime=ntime)
    f = write_subfile(tmp_path / f"{obs}_{obs + 8}_110.sub", blocks, coarse_channel=110,
                      tile_ids=arr.antenna_numbers, obs_id=obs, sample_rate=rate)
    ctx = mwalib.VoltageContext(str(METAFITS_LBG4), [str(f)])
    ti, ci = ctx.provided_timestep_indices[0], ctx.provided_coarse_chan_indices[0]
    got = ctx.read_file(ti, ci)  # [second][block][antenna][pol][sample][re, im]
    assert got.shape == (8, 20, 1, 2, ntime, 2)
    x = got.transpose(2, 0, 1, 4, 3, 5).reshape(1, 1, -1, 2, 2)  # [ant, chan, time, pol, 2]
    assert np.array_equal(x, natural(blocks, 1))
    nspec = 20 * ntime  # one second
    (r,) = reprocess([f], tmp_path / "out", ReprocessOptions(
        array=str(METAFITS_LBG4), integration_spectra=nspec), progress=None)
    assert r.ok, r.error
    names = [a.tile_name for a in ctx.metafits_context.antennas]
    assert names == ["LBG4"]
    check_file(r.task.output, x, [(k * nspec, (k + 1) * nspec) for k in range(8)],
               {"LBG4": 2052}, names, freqs=np.array([ctx.coarse_chans[ci].chan_centre_hz]))
    uv = pyuvdata.UVData.from_file(r.task.output)
    start = ctx.timesteps[ti].unix_time_ms / 1000
    assert np.allclose(np.unique(uv.time_array), jd(start + np.arange(8) + 0.5), rtol=0,
                       atol=2e-9)
    assert list(uv.telescope.antenna_numbers) == [2052]


class _Blocks:
    """160 blocks of a full subfile: ``head`` given, the rest zeros (made once)."""

    def __init__(self, head, nblock=160):
        self.head, self.nblock, self.zero = head, nblock, np.zeros_like(head[0])

    def __len__(self):
        return self.nblock

    def __getitem__(self, k):
        if not 0 <= k < self.nblock:
            raise IndexError(k)
        return self.head[k] if k < len(self.head) else self.zero


@pytest.mark.slow
def test_sixteen_tile_subfile_read_back_by_mwalib(tmp_path):
    """A full-size (844 MB) oversampled subfile for the 16 Phase II tiles, read by mwalib: its
    samples are ours, and the UVH5 made with ``--array`` the metafits holds mwalib's names and
    tile ids, the int64 correlation of mwalib's samples (the first second; zeros after),
    tile 2049 flagged."""
    mwalib = mwalib_or_skip()
    obs, ntime, rate = 1370752512, 81920, 1_638_400
    arr = load_array(METAFITS_16)
    head = tile_blocks(16, 2, seed=10, ntime=ntime)
    f = write_subfile(tmp_path / f"{obs}_{obs + 8}_121.sub", _Blocks(head), coarse_channel=121,
                      tile_ids=arr.antenna_numbers, obs_id=obs, sample_rate=rate)
    ctx = mwalib.VoltageContext(str(METAFITS_16), [str(f)])
    got = ctx.read_file(ctx.provided_timestep_indices[0], ctx.provided_coarse_chan_indices[0])
    x = got[0, :2].transpose(1, 0, 3, 2, 4).reshape(16, 1, -1, 2, 2)  # the first 2 blocks
    assert np.array_equal(x, natural(head, 16)) and not got[0, 2:].any() and not got[1:].any()
    del got
    nspec = 20 * ntime
    (r,) = reprocess([f], tmp_path / "out", ReprocessOptions(
        array=str(METAFITS_16), integration_spectra=nspec), progress=None)
    assert r.ok, r.error
    names = [a.tile_name for a in ctx.metafits_context.antennas]
    ids = [a.tile_id for a in ctx.metafits_context.antennas]
    uv = pyuvdata.UVData.from_file(r.task.output)
    assert list(uv.telescope.antenna_names) == names
    assert list(uv.telescope.antenna_numbers) == ids and uv.Ntimes == 8
    for i in range(16):
        for j in range(i, 16):
            for pol in ("xx", "yy", "xy", "yx"):
                d = uv.get_data(ids[i], ids[j], pol)
                assert np.array_equal(d[0], expected(x, i, j, pol)), (names[i], names[j], pol)
                assert not d[1:].any()
    bad = (uv.ant_1_array == 2049) | (uv.ant_2_array == 2049)
    assert uv.flag_array[bad].all() and not uv.flag_array[~bad].any()


# ---------------------------------------------------------------------------- hostile
def hdus(table_cols=None, *, ninputs=None, name="TILEDATA"):
    """A metafits-like HDU list: the 16-tile metafits' primary and TILEDATA, columns changed."""
    with fits.open(METAFITS_16) as real:
        primary = real[0].copy()
        cols = {c.name: (c.format, real["TILEDATA"].data[c.name]) for c in
                real["TILEDATA"].columns}
    for key, value in (table_cols or {}).items():
        if value is None:
            cols.pop(key)
        else:
            cols[key] = value
    if ninputs is not None:
        primary.header["NINPUTS"] = ninputs
    table = fits.BinTableHDU.from_columns([fits.Column(name=k, format=f, array=a)
                                          for k, (f, a) in cols.items()], name=name)
    return fits.HDUList([primary, table])


def hostile_metafits(tmp_path):
    real = METAFITS_16.read_bytes()
    made = {}
    made["no_tiledata.fits"] = hdus(name="OTHER")
    made["missing_columns.fits"] = hdus({"TileName": None, "Flag": None})
    made["lying_ninputs.fits"] = hdus(ninputs=1_000_000)
    with fits.open(METAFITS_16) as m:
        pol = np.array(m["TILEDATA"].data["Pol"])
        ant = np.array(m["TILEDATA"].data["Antenna"])
        tile = np.array(m["TILEDATA"].data["Tile"])
    pol[3] = "Z"
    made["bad_pol.fits"] = hdus({"Pol": ("A", pol)})
    ant[0] = ant[2]
    made["twice.fits"] = hdus({"Antenna": ("I", ant)})
    tile[1] = 7
    made["split_tile.fits"] = hdus({"Tile": ("I", tile)})
    made["text_pos.fits"] = hdus({"East": ("8A", np.array(["x"] * len(pol)))})
    made["nan_pos.fits"] = hdus({"North": ("E", np.full(len(pol), np.nan, np.float32))})
    image = fits.HDUList([fits.PrimaryHDU(), fits.ImageHDU(np.zeros(4), name="TILEDATA")])
    made["image.fits"] = image
    for name, h in made.items():
        h.writeto(tmp_path / name)
    (tmp_path / "garbage.fits").write_bytes(b"SIMPLE  =" + np.random.default_rng(1).bytes(9000))
    (tmp_path / "cut_metafits.fits").write_bytes(real[:len(real) // 2 + 100])
    (tmp_path / "cut_table.fits").write_bytes(real[:-1000])
    (tmp_path / "text.metafits").write_bytes(b"not a metafits\n")
    (tmp_path / "empty.fits").write_bytes(b"")
    return sorted(tmp_path.glob("*.*fits"))


EXPECTED = {"no_tiledata.fits": "no TILEDATA table (HDUs: PRIMARY, OTHER)",
            "missing_columns.fits": "TILEDATA lacks column(s) TileName, Flag",
            "lying_ninputs.fits": "NINPUTS = 1000000 but TILEDATA has 32 rows",
            "bad_pol.fits": "Pol 'Z' is neither X nor Y",
            "twice.fits": "has two",
            "split_tile.fits": "X and Y inputs name different tiles",
            "text_pos.fits": "East, North and Height must be numbers",
            "nan_pos.fits": "East, North and Height must be finite",
            "image.fits": "TILEDATA is not a binary table (an ImageHDU)",
            "garbage.fits": "not a readable FITS file",
            "cut_metafits.fits": "no TILEDATA table (HDUs: PRIMARY)",
            "cut_table.fits": "not a readable FITS file",
            "text.metafits": "not a FITS file",
            "empty.fits": "not a FITS file"}


def test_hostile_metafits_one_line(tmp_path, capsys):
    files = hostile_metafits(tmp_path)
    assert {f.name for f in files} == set(EXPECTED)
    for f in files:
        with pytest.raises(ArrayError) as err:
            load_array(f)
        msg = str(err.value)
        assert msg.startswith(f"{f}: ") and "\n" not in msg, msg
        assert EXPECTED[f.name] in msg, msg
    # through the command line: a usage error naming the file, no traceback
    sub = write_subfile(tmp_path / "s_121.sub", tile_blocks(1, 1, 9), coarse_channel=121,
                        tile_ids=[2041])
    with pytest.raises(SystemExit) as stop:
        main(["reprocess", str(sub), "-o", str(tmp_path / "out"), "--array",
              str(tmp_path / "missing_columns.fits")])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "TILEDATA lacks column(s) TileName, Flag" in err and "Traceback" not in err
