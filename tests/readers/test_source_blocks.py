"""The readers as pipeline source blocks, in our runtime and in real Bifrost: recording ->
X-engine -> integrate -> UVH5 writer gives the same file as ``xengine reprocess`` (exact
against the samples), missing blocks as zero frames with a zero mask (flagged), the header
contract (sample_layout, time_tag, sync_time, fs_hz, freq0_hz, chan_bw_hz, array)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.guppi import NAMES, NTIME, blocks, cards, samples
from tests.helpers.mwax import NTIME as MWAX_NTIME
from tests.helpers.mwax import TILES, mwax_blocks
from tests.helpers.recordings import check_file, write_array
from xengine_block.readers import open_recording
from xengine_block.readers.arrays import load_array
from xengine_block.readers.guppi import write_guppi
from xengine_block.readers.mwax import write_subfile
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess
from xengine_block.sample_layout import SampleLayout

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")


def source_for(rt, recs, array):
    if rt.name == "bifrost":
        from xengine_block.bifrost.recording_source import RecordingSource
    else:
        from xengine_block.readers.source import RecordingSource
    return RecordingSource(recs, array=array)


def run_chain(rt, recs, array, nspec, directory, name="pipe.uvh5"):
    from xengine_block.blocks.chain import correlator_chain

    with rt.Pipeline() as p:
        src = source_for(rt, recs, array)
        chain = correlator_chain(src, directory=directory, xengine_spectra=nspec, ninteg=1,
                                 quicklook=False, filename=name, runtime_name=rt.name)
        p.run()
    return src, chain.writer


def same_as_reprocess(piped, path, out, options):
    """The chain's file ``piped`` holds what ``xengine reprocess`` of ``path`` writes (data,
    flags, nsamples, times, frequencies, baselines, uvw); returns it read by pyuvdata."""
    (r,) = reprocess([path], out, options, progress=None)
    assert r.ok, r.error
    a = pyuvdata.UVData.from_file(piped)
    b = pyuvdata.UVData.from_file(r.task.output)
    for attr in ("data_array", "flag_array", "nsample_array", "time_array", "freq_array",
                 "ant_1_array", "ant_2_array", "integration_time", "uvw_array"):
        assert np.array_equal(getattr(a, attr), getattr(b, attr)), attr
    return a


def test_guppi_with_gap_through_the_chain_equals_reprocess(rt, tmp_path):
    x = samples(5, seed=21)
    path = write_guppi(tmp_path / "g.raw", blocks(x), cards(),
                       pktidx=[k * NTIME for k in (0, 1, 3, 4, 5)])  # block 2 of 6 missing
    arr = tmp_path / "a.toml"
    write_array(arr, NAMES[::-1])
    rec = open_recording([path], "guppi")
    src, w = run_chain(rt, [rec], load_array(arr), 2 * NTIME, tmp_path / "pipe")
    hdr = src.headers(0)[0]
    layout = SampleLayout.from_dict(hdr["sample_layout"])
    assert (layout.nstream, layout.nchan, layout.nspectra) == (6, 5, NTIME)
    assert hdr["time_tag"] == 0 and hdr["fs_hz"] == pytest.approx(1 / 4e-6)
    assert [a["name"] for a in hdr["array"]["antenna"]] == NAMES[::-1]
    assert (src.frames_written, src.gap_frames) == (6, 1)  # the missing block: zeros
    a = same_as_reprocess(w.files[0], path, tmp_path / "direct", ReprocessOptions(
        array=str(arr), integration_spectra=2 * NTIME, allow_damaged=True))
    assert np.all(a.nsample_array.reshape(3, a.Nbls, -1)[1] == 0.5)  # half of it missing
    y = np.concatenate([x[:, :, :2 * NTIME], np.zeros_like(x[:, :, :NTIME]),
                        x[:, :, 2 * NTIME:]], axis=2)
    check_file(w.files[0], y, [(k * 2 * NTIME, (k + 1) * 2 * NTIME) for k in range(3)],
               {n: i for i, n in enumerate(NAMES[::-1])}, NAMES)


def test_mwax_channels_in_one_frame(rt, tmp_path):
    bl = {ch: mwax_blocks(ch, nblock=2) for ch in (120, 121)}
    # the first sub-observation (OBS_OFFSET 0): its blocks lie on the X-engine's frame grid
    files = [write_subfile(tmp_path / f"1_9_{ch}.sub", b, coarse_channel=ch, tile_ids=TILES,
                           subobs=0) for ch, b in bl.items()]
    rec = open_recording(files, "mwax")
    names = list(rec.meta.antenna_names)
    arr = tmp_path / "m.toml"
    write_array(arr, names, telescope="MWA", lat=-26.703, lon=116.671, alt=377.8)
    src, w = run_chain(rt, [rec], load_array(arr), MWAX_NTIME, tmp_path / "pipe")
    layout = SampleLayout.from_dict(src.headers(0)[0]["sample_layout"])
    assert (layout.nchan, layout.nspectra) == (2, MWAX_NTIME)
    x = np.stack([np.concatenate(b, axis=1).reshape(4, 2, -1, 2).transpose(0, 2, 1, 3)
                  for b in bl.values()], axis=1)
    check_file(w.files[0], x, [(0, MWAX_NTIME), (MWAX_NTIME, 2 * MWAX_NTIME)],
               {n: i for i, n in enumerate(names)}, names, freqs=np.array([120, 121]) * 1.28e6)


def test_mwax_with_metafits_through_the_chain_equals_reprocess(rt, tmp_path):
    """The metafits' names, tile ids and flags travel in the header's array: the chain's file
    is the direct reprocess's, tile 2049 (LBG1) flagged in both."""
    from tests.helpers.mwax import METAFITS_16

    tiles = [2049, 2041, 2052]
    rng = np.random.default_rng(4)
    bl = [rng.integers(-128, 128, (6, MWAX_NTIME, 2), dtype=np.int8) for _ in range(2)]
    f = write_subfile(tmp_path / "1_9_121.sub", bl, coarse_channel=121, tile_ids=tiles,
                      subobs=0)
    src, w = run_chain(rt, [open_recording([f], "mwax")], load_array(METAFITS_16), MWAX_NTIME,
                       tmp_path / "pipe")
    ants = src.headers(0)[0]["array"]["antenna"]
    assert [(a["name"], a["number"], a.get("flagged", False)) for a in ants] == [
        ("LBF1", 2041, False), ("LBG1", 2049, True), ("LBG4", 2052, False)]
    a = same_as_reprocess(w.files[0], f, tmp_path / "direct", ReprocessOptions(
        array=str(METAFITS_16), integration_spectra=MWAX_NTIME))
    bad = (a.ant_1_array == 2049) | (a.ant_2_array == 2049)
    assert a.flag_array[bad].all() and not a.flag_array[~bad].any()
    assert list(a.telescope.antenna_names) == ["LBF1", "LBG1", "LBG4"]


def test_a_reader_task_runs_frozen_into_a_file_not_kill_safe(tmp_path, monkeypatch):
    """With freeze_gc (``xengine reprocess``'s choice) a GUPPI file's task runs frozen (a full
    collection of astropy's, h5py's and numba's objects stops the writer and the backend for
    tens of milliseconds) and thaws after it; without it the collector is left alone. Either
    way its writer is not kill-safe (its output is the task's .partial file) and the file holds
    every dump."""
    import gc

    from xengine_block.reprocess import jobs as rp

    path = write_guppi(tmp_path / "g.raw", blocks(samples(2, seed=3)), cards())
    arr = tmp_path / "a.toml"
    write_array(arr, NAMES)
    from xengine_block.outputs.staged_file import StagedFile

    seen, safe = [], []
    real = rp.reprocess_recording
    monkeypatch.setattr(rp, "reprocess_recording",
                        lambda *a: seen.append(gc.get_freeze_count()) or real(*a))
    staged = StagedFile.__init__
    monkeypatch.setattr(StagedFile, "__init__", lambda self, *a, **k: safe.append(
        k.get("kill_safe", True)) or staged(self, *a, **k))
    assert gc.get_freeze_count() == 0
    for freeze in (True, False):
        seen.clear()
        safe.clear()
        (r,) = reprocess([path], tmp_path / f"out{freeze}", ReprocessOptions(
            array=str(arr), integration_spectra=NTIME, freeze_gc=freeze), progress=None)
        assert r.ok, r.error
        assert len(seen) == 1 and (seen[0] > 1000 if freeze else seen[0] == 0)
        assert gc.get_freeze_count() == 0
        assert safe == [False]  # the task's .partial file: a rerun removes it, no direct writes
        assert pyuvdata.UVData.from_file(r.task.output).Ntimes == 2
