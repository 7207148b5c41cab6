"""GUPPI RAW multi-antenna reprocessing: files written by our own writer (8- and 4-bit,
DIRECTIO, ATA names with LO letters, sequences) reprocess exactly, every baseline and pol,
with the right frequencies, times and antenna names; integrations cut blocks anywhere."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.guppi import NAMES, NTIME, PKT0, SYNC, TBIN, blocks, cards, samples
from tests.helpers.recordings import check_file, write_array
from xengine_block.readers import detect_format
from xengine_block.readers.guppi import GuppiRecording, header_bytes, parse_header, write_guppi
from xengine_block.reprocess.jobs import ReprocessOptions, plan_tasks, reprocess

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")

ARRAY_NAMES = ["1c", "4j", "5e", "2b"]  # another order, one antenna not recorded


@pytest.fixture
def array_file(tmp_path):
    path = tmp_path / "ata.toml"
    arr = write_array(path, ARRAY_NAMES, numbers=[11, 14, 15, 7])
    return path, dict(zip(arr.antenna_names, arr.antenna_numbers, strict=True))


def freqs(nchan=5):
    bw = 1.25e6 / nchan
    return 1400e6 - 1.25e6 / 2 + bw / 2 + bw * np.arange(nchan)


@pytest.mark.parametrize("bits", [8, 4])
def test_multi_antenna_file_reprocesses_exactly(tmp_path, array_file, bits):
    x = samples(4, bits=bits)
    path = write_guppi(tmp_path / f"obs{bits}.0000.raw", blocks(x), cards(), nbits=bits,
                       directio=True, pktidx=[PKT0 + i * NTIME for i in range(4)])
    assert detect_format(path) == "guppi"
    arr_path, numbers = array_file
    (r,) = reprocess([path], tmp_path / "out", ReprocessOptions(
        array=str(arr_path), integration_spectra=40), progress=None)
    assert r.ok, r.error
    assert r.summary["dumps"] == 4 and r.summary["dropped_spectra"] == 32
    wins = [(k * 40, (k + 1) * 40) for k in range(4)]  # cut blocks anywhere
    check_file(r.task.output, x, wins, numbers, NAMES, freqs=freqs())
    uv = pyuvdata.UVData.from_file(r.task.output)
    t0 = SYNC + PKT0 * TBIN  # PKTIDX * NTIME / PIPERBLK spectra after SYNCTIME
    jd = (t0 + (np.arange(4) * 40 + 20) * TBIN) / 86400 + 2440587.5
    assert np.allclose(np.unique(uv.time_array), jd, rtol=0, atol=1e-9)  # ~0.1 ms
    assert np.allclose(uv.integration_time, 40 * TBIN)
    assert uv.telescope.name == "TEST" and uv.Nants_data == 3


def test_channel_selection_and_sequence_across_files_local_and_dask(tmp_path, array_file):
    """A .0000/.0001 sequence: one output per file, integrations crossing the boundary belong
    to the file they start in; dask workers give the same files as a local run."""
    x = samples(5, seed=3)
    bl = blocks(x)
    c = cards()
    write_guppi(tmp_path / "seq.0000.raw", bl[:3], c, pktidx=[PKT0 + i * NTIME for i in range(3)])
    write_guppi(tmp_path / "seq.0001.raw", bl[3:], c,
                pktidx=[PKT0 + i * NTIME for i in range(3, 5)])
    files = [tmp_path / "seq.0001.raw", tmp_path / "seq.0000.raw"]  # any order given
    arr_path, numbers = array_file
    opts = ReprocessOptions(array=str(arr_path), integration_spectra=60, channels=(1, 2, 3))
    local = reprocess(files, tmp_path / "local", opts, progress=None)
    assert [r.ok for r in local] == [True, True], [r.error for r in local]
    out = {r.task.output.name: r for r in local}
    assert set(out) == {"seq.0000.uvh5", "seq.0001.uvh5"}
    # 240 spectra: windows start at 0, 60 (file 0: blocks 0-2 = spectra 0..143), 120 (file 0,
    # reads on into file 1), 180 (file 1)
    check_file(out["seq.0000.uvh5"].task.output, x[:, 1:4], [(0, 60), (60, 120), (120, 180)],
               numbers, NAMES, freqs=freqs()[1:4])
    check_file(out["seq.0001.uvh5"].task.output, x[:, 1:4], [(180, 240)], numbers, NAMES)
    dist = reprocess(files, tmp_path / "dask", opts, workers=2, progress=None)
    assert all(r.ok for r in dist), [r.error for r in dist]
    for r in dist:
        a = pyuvdata.UVData.from_file(r.task.output)
        b = pyuvdata.UVData.from_file(tmp_path / "local" / r.task.output.name)
        assert a == b


def test_split_s_cuts_a_file_into_time_ranges_of_whole_integrations(tmp_path, array_file):
    """--split-s: one file as tasks of whole integrations (here 2 of 40 spectra = 320 us per
    task for 0.0003 s), each its own NAME.tNNNN.uvh5, exact, together the unsplit file's
    dumps; local and on dask workers alike; the incomplete tail reported by the last range
    only; pcap inputs are refused."""
    x = samples(4)  # 192 spectra: windows at 0, 40, 80, 120 (the last 32 dropped)
    path = write_guppi(tmp_path / "long.0000.raw", blocks(x), cards(),
                       pktidx=[PKT0 + i * NTIME for i in range(4)])
    arr_path, numbers = array_file
    opts = ReprocessOptions(array=str(arr_path), integration_spectra=40, split_s=0.0003)
    res = reprocess([path], tmp_path / "split", opts, progress=None)
    assert all(r.ok for r in res), [r.error for r in res]
    out = {r.task.output.name: r for r in res}
    assert sorted(out) == ["long.0000.t0000.uvh5", "long.0000.t0001.uvh5"]
    check_file(out["long.0000.t0000.uvh5"].task.output, x, [(0, 40), (40, 80)], numbers,
               NAMES, freqs=freqs())
    check_file(out["long.0000.t0001.uvh5"].task.output, x, [(80, 120), (120, 160)], numbers,
               NAMES, freqs=freqs())
    assert "dropped_spectra" not in out["long.0000.t0000.uvh5"].summary
    assert out["long.0000.t0001.uvh5"].summary["dropped_spectra"] == 32
    (whole,) = reprocess([path], tmp_path / "whole", ReprocessOptions(
        array=str(arr_path), integration_spectra=40), progress=None)
    a = pyuvdata.UVData.from_file(whole.task.output)
    parts = [pyuvdata.UVData.from_file(out[n].task.output) for n in sorted(out)]
    assert np.array_equal(a.data_array, np.concatenate([p.data_array for p in parts]))
    dist = reprocess([path], tmp_path / "dask", opts, workers=2, progress=None)
    assert sorted(r.task.output.name for r in dist if r.ok) == sorted(out)
    with pytest.raises(ValueError, match="--split-s cuts recordings of the readers' formats"):
        plan_tasks([tmp_path / "x.pcap"], tmp_path / "o", "pcap", opts)


def test_header_parsing_variants():
    """``KEY=value`` without a space (BLRI's writer), quoted numbers (BL's DIRECTIO = '1  '),
    comments; a non-header is refused."""
    text = (b"NANTS   =2" + b" " * 70 + b"DIRECTIO= '1       '".ljust(80)
            + b"OBSFREQ =               1420.5 / MHz".ljust(80) + b"END".ljust(80))
    hdr, n = parse_header(text, 0)
    assert hdr == {"NANTS": 2, "DIRECTIO": "1", "OBSFREQ": 1420.5} and n == 320
    assert header_bytes({"A": 1, "B": "x"}).endswith(b"END" + b" " * 77)
    from xengine_block.readers.guppi import NotAHeader
    with pytest.raises(NotAHeader):
        parse_header(b"\0" * 400, 0)


def test_antenna_names_and_single_antenna_site(tmp_path):
    """A single-antenna ATA file without --array: ATA's site from pyuvdata, one antenna;
    an unknown telescope or several antennas without positions are refused in one line."""
    x = samples(2, nant=1, seed=5)
    path = write_guppi(tmp_path / "one.raw", blocks(x), {**cards(), "ANTNMS00": "1aB"})
    rec = GuppiRecording([path])
    assert rec.meta.antenna_names == ("1a",) and rec.meta.telescope == "ATA"
    (r,) = reprocess([path], tmp_path / "out", ReprocessOptions(integration_spectra=96),
                     progress=None)
    assert r.ok, r.error
    uv = pyuvdata.UVData.from_file(r.task.output)
    assert uv.telescope.name == "ATA" and uv.Nbls == 1 and list(uv.telescope.antenna_names) == [
        "1a"]
    assert abs(uv.telescope.location.lat.deg - 40.817) < 0.01  # Hat Creek
    check_file(r.task.output, x, [(0, 96)], {"1a": 0}, ["1a"])
    other = write_guppi(tmp_path / "two.raw", blocks(x), {**cards(), "TELESCOP": "Nowhere",
                                                          "ANTNMS00": "a"})
    multi = write_guppi(tmp_path / "three.raw", blocks(samples(2)), cards())
    res = sorted(reprocess([other, multi], tmp_path / "out2", ReprocessOptions(), progress=None),
                 key=lambda r: r.task.input.name != "two.raw")
    assert not res[0].ok and "'Nowhere' has no site known here" in res[0].error
    assert "pass --array" in res[0].error and "\n" not in res[0].error
    assert not res[1].ok and "3 antennas and no positions: pass --array" in res[1].error


def test_array_must_cover_the_recorded_antennas(tmp_path):
    path = write_guppi(tmp_path / "a.raw", blocks(samples(1)), cards())
    arr = tmp_path / "small.toml"
    write_array(arr, ["1c", "9z"])
    (r,) = reprocess([path], tmp_path / "out", ReprocessOptions(array=str(arr)), progress=None)
    assert not r.ok and "--array lacks recorded antenna(s) 2b, 4j" in r.error


def test_integration_past_the_int32_bound_sums_in_int64(tmp_path, array_file):
    """An integration of more spectra than int32 can hold for ci8 (65,535): summed in int64
    (the narrower windows are added in place in int32); all -128 makes every autocorrelation
    2 x 128^2 per spectrum, so 65,568 spectra overflow int32 if summed there."""
    n = 1366 * NTIME  # 65,568 spectra: past the bound
    x = np.full((3, 1, n, 2, 2), -128, np.int8)
    x[1, 0, ::3] = 127
    path = write_guppi(tmp_path / "long.0000.raw", blocks(x), cards(OBSBW=0.25), nbits=8,
                       pktidx=[PKT0 + i * NTIME for i in range(n // NTIME)])
    arr_path, numbers = array_file
    (r,) = reprocess([path], tmp_path / "out", ReprocessOptions(
        array=str(arr_path), integration_spectra=n), progress=None)
    assert r.ok, r.error
    assert r.summary["dumps"] == 1
    check_file(r.task.output, x, [(0, n)], numbers, NAMES, freqs=freqs(1))
    auto = pyuvdata.UVData.from_file(r.task.output).get_data(7, 7, "xx")  # "2b": all -128
    assert auto.real.max() == n * 2 * 128 ** 2 > 2 ** 31


def test_reused_buffers_hold_each_window_alone(tmp_path):
    """``integrations(reuse=True)``: two int32 buffers in turn, each window's first chunk
    written over whatever a buffer held (here: garbage), channels no chunk reaches zeroed.
    Checked against numpy sums of the samples, with a PKTIDX gap that leaves one window
    without data and cuts another in half."""
    from xengine_block.reprocess.recording_correlator import RecordingCorrelator, windows
    from xengine_block.triangle import baseline_index

    x = samples(6, seed=5)
    present = [0, 1, 5, 6, 7, 8]  # blocks 2, 3, 4 missing
    pkt = [PKT0 + i * NTIME for i in present]
    path = write_guppi(tmp_path / "gap.raw", blocks(x), cards(), pktidx=pkt)
    rec = GuppiRecording([path])
    corr = RecordingCorrelator(rec, [0, 1, 2], (0, 5))
    try:
        wins, _ = windows(rec.start, rec.end, 2 * NTIME)  # blocks [0,2) [2,4) [4,6) [6,8)
        assert len(wins) == 4
        got, bufs = [], set()
        for c in corr.integrations(wins, reuse=True):
            bufs.add(c.vis.ctypes.data)
            got.append((c.vis.copy(), c.valid.copy()))
            c.vis[...] = 0x5A5A5A5A  # garbage for the window after next
        assert len(bufs) == 2
        # stream s = 2 * antenna + pol; spectra of block b at [b * NTIME, (b + 1) * NTIME)
        v = x[..., 0].astype(np.int64) + 1j * x[..., 1]  # [ant, chan, time, pol]
        v = v.transpose(1, 2, 0, 3).reshape(5, 6 * NTIME, 6)  # [chan, time, stream]
        where = np.repeat(present, NTIME)  # the block each recorded spectrum is
        j, k = np.triu_indices(6)
        for w, (vis, valid) in enumerate(got):
            sel = (where >= 2 * w) & (where < 2 * w + 2)
            assert valid.tolist() == [sel.sum()] * 5
            kk = np.einsum("ctj,ctk->cjk", v[:, sel], v[:, sel].conj())[:, j, k]
            want = np.zeros_like(vis)
            want[:, baseline_index(j, k), 0], want[:, baseline_index(j, k), 1] = kk.real, kk.imag
            np.testing.assert_array_equal(vis, want)
        assert not got[1][0].any() and got[2][1][0] == NTIME  # the gap, half a window
    finally:
        corr.close()
        rec.close()


def test_chunks_over_channels_unevenly_sum_exactly():
    """Chunks whose channel ranges overlap unevenly (channels [0, 2) then [1, 3) of four):
    channel 1 sums both, channels 0 and 2 one each, channel 3 none (zero, flagged by a valid
    count of 0); the int32 buffer's garbage never leaks into a sum. Against numpy."""
    from xengine_block.readers.base import Chunk
    from xengine_block.reprocess.recording_correlator import RecordingCorrelator
    from xengine_block.sample_layout import SampleLayout
    from xengine_block.triangle import baseline_index

    rng = np.random.default_rng(11)
    nstream, nt = 4, 96
    a = rng.integers(-128, 128, (1, nt, 2, nstream, 2), dtype=np.int8)  # [frame][time][chan][s]
    b = rng.integers(-128, 128, (1, nt, 2, nstream, 2), dtype=np.int8)

    def layout():
        return SampleLayout.from_axes([("fine_time", nt), ("chan", 2), ("stream", nstream)])

    class Rec:  # what RecordingCorrelator asks of a recording
        def chunks(self, t0, t1, antennas=None, channels=None):
            yield Chunk(a.reshape(-1), layout(), 1, t0, chan0=0)
            yield Chunk(b.reshape(-1), layout(), 1, t0, chan0=1)

    corr = RecordingCorrelator(Rec(), [0, 1], (0, 4))
    out = np.full((4, corr.nbaseline, 2), 0x5A5A5A5A, np.int32)
    got = corr.correlate(0, nt, out)
    assert got.valid.tolist() == [nt, 2 * nt, nt, 0]
    j, k = np.triu_indices(nstream)

    def tri(x, c):  # [time, stream] of channel c -> packed triangle (re, im)
        v = x[0, :, c, :, 0].astype(np.int64) + 1j * x[0, :, c, :, 1]
        kk = np.einsum("tj,tk->jk", v, v.conj())[j, k]
        t = np.zeros((corr.nbaseline, 2), np.int64)
        t[baseline_index(j, k), 0], t[baseline_index(j, k), 1] = kk.real, kk.imag
        return t

    want = np.stack([tri(a, 0), tri(a, 1) + tri(b, 0), tri(b, 1), np.zeros_like(tri(a, 0))])
    np.testing.assert_array_equal(got.vis, want)
