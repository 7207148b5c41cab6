"""LWA TBF/TBX and OVRO-LWA voltage dumps: LSL's own test files read as LSL reads them, files of
our writer (frames out of order, repeated, missing, two tunings, cut, garbage, lying headers),
and reprocessing exact against an int64 correlation of the samples."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import import_or_require, require
from tests.helpers.lwa import LSL_DATA, check_uvh5, ci4_values, recorded
from tests.helpers.recordings import write_array
from xengine_block.readers import RecordingError, detect_format, open_recording
from xengine_block.readers.lwa import (
    ADP_TICKS,
    FS_HZ,
    NDP_TICKS,
    TBF,
    TBX,
    TbfRecording,
    write_frames,
)
from xengine_block.readers.ovro_lwa import HEADER_BLOCK, write_dump
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess

NDP_FC = FS_HZ / NDP_TICKS
TT0 = 337_023_871_211_995_136  # LSL's tbx-test.dat time tag (a multiple of 8192)


def run(files, tmp_path, **options):
    (r,) = reprocess(list(files), tmp_path / "out", ReprocessOptions(**options), progress=None)
    return r


def numbered_array(tmp_path, n, name="lwa.toml"):
    path = tmp_path / name
    write_array(path, [f"S{k:03d}" for k in range(1, n + 1)], numbers=list(range(1, n + 1)),
                telescope="LWA", lat=34.25, lon=-107.6, alt=2133.6)
    return path


# ---------------------------------------------------------------------------- LSL's files
def test_lsl_files_are_recognised_and_described():
    tbf, mini, tbx = (LSL_DATA / n for n in ("tbf-test.dat", "tbf-mini-test.dat",
                                             "tbx-test.dat"))
    assert [detect_format(p) for p in (tbf, mini, tbx)] == ["tbf", "tbf", "tbx"]
    with open_recording([tbf], "tbf") as r:  # ADP: 256 stands, 25 kHz, 5 whole frames
        assert (r.meta.nant, r.meta.nchan, r.meta.fs_hz) == (256, 60, 25e3)
        assert np.array_equal(r.meta.freqs_hz, np.arange(2348, 2408) * 25e3)
        assert r.damage.by_file == {"tbf-test.dat": {"truncated_bytes": 36000 - 5 * 6168}}
        assert r.meta.antenna_numbers == tuple(range(1, 257))
        assert r.meta.sync_time == 283685766952000000 / FS_HZ
    with open_recording([mini], "tbf") as r:  # NDP: two tunings, 84 channels
        assert (r.meta.nant, r.meta.nchan, r.end - r.start) == (64, 84, 1)
        chans = np.r_[640:688, 2176:2212]
        assert np.array_equal(r.meta.freqs_hz, chans * NDP_FC)
        assert not r.damage
    with open_recording([tbx], "tbx") as r:
        assert (r.meta.nant, r.meta.nchan) == (64, 312)
        assert np.array_equal(r.meta.freqs_hz, np.arange(2176, 2488) * NDP_FC)
        assert r.damage.by_file == {"tbx-test.dat": {"truncated_bytes": 40960 - 26 * 1564}}


def lsl_tbx_samples(path):
    """LSL 4's TBXFile read of ``path``: ci8 ``[antenna, chan, time]`` -> our x."""
    ldp = import_or_require("lsl.reader.ldp", "lsl")
    from lsl.misc import telemetry

    telemetry.ignore()
    f = ldp.TBXFile(str(path))
    _, _, data = f.read(return_ci8=True)
    f.close()
    return np.stack([data["re"], data["im"]], axis=-1).reshape(
        data.shape[0] // 2, 2, *data.shape[1:], 2).transpose(0, 2, 3, 1, 4), f


# LSL's reader warns of its own statistics over an empty array: not ours
@pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:invalid value encountered")
def test_tbx_samples_are_lsls(tmp_path):
    x, f = lsl_tbx_samples(LSL_DATA / "tbx-test.dat")
    with open_recording([LSL_DATA / "tbx-test.dat"], "tbx") as rec:
        ours, present = recorded(rec)
        assert np.array_equal(rec.meta.freqs_hz, f.description["freq1"])
    assert present.all()
    assert np.array_equal(ours, x)
    # and a file of our writer, three spectra, read by LSL the same way
    y = ci4_values((3, 4, 12, 64, 2, 2), seed=3)
    path = write_frames(tmp_path / "w.tbx", TBX, y, chans=[100, 112, 124, 136], time_tag=TT0)
    x, f = lsl_tbx_samples(path)
    with open_recording([path], "tbx") as rec:
        ours, present = recorded(rec)
    assert present.all() and np.array_equal(ours, x)
    assert np.array_equal(ours, y.transpose(3, 1, 2, 0, 4, 5).reshape(64, 48, 3, 2, 2))


LSL3_ENV = "XENGINE_LSL3_PYTHON"
LSL3_SCRIPT = """
import sys, numpy as np
from lsl.misc import telemetry
telemetry.ignore()
from lsl.reader import tbf, errors
out = []
with open(sys.argv[1], 'rb') as fh:
    while True:
        try:
            fr = tbf.read_frame_ci8(fh)
        except errors.EOFError:
            break
        d = fr.payload.data
        out.append((fr.header.first_chan, fr.payload.timetag,
                    np.stack([d['re'], d['im']], -1)))
np.savez(sys.argv[2], chans=[o[0] for o in out], tt=[o[1] for o in out],
         data=np.array([o[2] for o in out]))
"""


def lsl3_frames(path, tmp_path):
    """LSL 3.0.x's TBF frames of ``path`` (the last release with a TBF reader: it needs
    numpy < 2, so it runs in its own Python, ``$XENGINE_LSL3_PYTHON``)."""
    py = os.environ.get(LSL3_ENV)
    require("lsl3", None if py else f"${LSL3_ENV} names no Python with LSL 3.0.x (TBF's "
            f"reader; .ci/run makes one)")
    out = tmp_path / "lsl3.npz"
    subprocess.run([py, "-c", LSL3_SCRIPT, str(path), str(out)], check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": ""})
    return np.load(out)


@pytest.mark.parametrize("name", ["tbf-test.dat", "tbf-mini-test.dat"])
def test_tbf_samples_are_lsl3s(name, tmp_path):
    got = lsl3_frames(LSL_DATA / name, tmp_path)
    with open_recording([LSL_DATA / name], "tbf") as rec:
        ours, present = recorded(rec)
        assert present.all()
        chans = np.concatenate([np.arange(c, c + 12) for c in sorted(got["chans"])])
        fc = rec.meta.fs_hz
        assert np.array_equal(rec.meta.freqs_hz, chans * fc)
        for c, d in zip(got["chans"], got["data"], strict=True):  # [chan, stand, pol, 2]
            k = int(np.flatnonzero(chans == c)[0])
            assert np.array_equal(ours[:, k:k + 12, 0], d.transpose(1, 0, 2, 3))


LSL3_FILE_SCRIPT = """
import sys, warnings, numpy as np
warnings.simplefilter('ignore')
from lsl.misc import telemetry
telemetry.ignore()
from lsl.reader.ldp import TBFFile
f = TBFFile(sys.argv[1])
_, _, d = f.read(return_ci8=True)
np.savez(sys.argv[2], data=np.stack([d['re'], d['im']], -1), freqs=f.description['freq1'])
"""


def test_tbf_file_of_our_writer_is_lsl3s(tmp_path):
    """LSL 3.0.8's TBFFile (frames gathered by time, tunings concatenated) reads a file of our
    writer, three spectra of two tunings, as our reader does."""
    py = os.environ.get(LSL3_ENV)
    require("lsl3", None if py else f"${LSL3_ENV} names no Python with LSL 3.0.x")
    y = ci4_values((3, 2, 12, 64, 2, 2), seed=21)
    path = write_frames(tmp_path / "w.tbf", TBF, y, chans=[640, 2176],
                        time_tag=336027835079999488)
    out = tmp_path / "lsl3.npz"
    subprocess.run([py, "-c", LSL3_FILE_SCRIPT, str(path), str(out)], check=True, timeout=120,
                   env={**os.environ, "PYTHONPATH": ""})
    got = np.load(out)
    with open_recording([path], "tbf") as rec:
        ours, present = recorded(rec)
        assert np.array_equal(rec.meta.freqs_hz, got["freqs"])
    assert present.all()
    theirs = got["data"].reshape(64, 2, 24, 3, 2).transpose(0, 2, 3, 1, 4)
    assert np.array_equal(ours, theirs)


@pytest.mark.parametrize("name,fmt", [("tbf-mini-test.dat", "tbf"), ("tbx-test.dat", "tbx")])
def test_lsl_files_reprocess_exactly(name, fmt, tmp_path):
    """One-spectrum files (a trigger's snapshot): an integration of one spectrum, stands
    numbered 1..64, positions from --array (or from LSL's LWA-NA where LSL is here)."""
    path = LSL_DATA / name
    arr = numbered_array(tmp_path, 64)
    r = run([path], tmp_path, array=str(arr), integration_spectra=1, allow_damaged=True)
    assert r.ok, r.error
    with open_recording([path], fmt) as rec:
        x, present = recorded(rec)
        freqs = rec.meta.freqs_hz
    check_uvh5(r.task.output, x, present, [(0, 1)], list(range(1, 65)), freqs)


def test_lsl_station_positions(tmp_path):
    import_or_require("lsl.common.stations", "lsl")
    from lsl.common.stations import lwana

    r = run([LSL_DATA / "tbf-mini-test.dat"], tmp_path, integration_spectra=1)
    assert r.ok, r.error
    import pyuvdata

    uv = pyuvdata.UVData.from_file(r.task.output)
    assert uv.telescope.name == "LWANA"
    assert list(uv.telescope.antenna_numbers) == list(range(1, 65))
    enu = uv.telescope.get_enu_antpos()
    want = np.array([[a.stand.x, a.stand.y, a.stand.z] for a in lwana.antennas[:128:2]])
    assert np.allclose(enu, want, atol=1e-3)


def test_missing_positions_is_one_line(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "lsl" or m.startswith("lsl.")] + ["lsl"]:
        monkeypatch.setitem(sys.modules, name, None)  # LSL absent
    r = run([LSL_DATA / "tbf-mini-test.dat"], tmp_path, integration_spectra=1)
    assert not r.ok and "pass --array" in r.error and "\n" not in r.error
    dump = write_dump(tmp_path / "d.tbf.0", ci4_values((2, 3, 4, 2, 2)), chan0=10, seq=5)
    r = run([dump], tmp_path / "o")
    assert not r.ok and "--array" in r.error and "stand numbers" in r.error


# ---------------------------------------------------------------------------- our writer
def test_disorder_repeats_and_missing_frames_are_placed_by_time(tmp_path):
    """Frames shuffled, one repeated, two missing: every recorded frame where its time tag
    and channel say, the missing ones' channels flagged for that spectrum (never zeros
    counted), the rest exact."""
    y = ci4_values((6, 3, 12, 8, 2, 2), seed=5)
    order = [(t, b) for t in range(6) for b in range(3)]
    rng = np.random.default_rng(0)
    rng.shuffle(order)
    order.remove((2, 1))
    order.remove((4, 0))
    order.remove((0, 2))  # the dump's first spectrum without its last block: not damage
    order.append(order[3])  # a repeat
    path = write_frames(tmp_path / "d.tbf", TBF, y, chans=[500, 512, 524], time_tag=TT0,
                        order=order)
    with open_recording([path], "tbf") as rec:
        assert rec.damage.by_file == {"d.tbf": {"gap_blocks": 2, "gap_spectra": 2,
                                                "time_disorder": 1}}
        x, present = rec_x = recorded(rec)
        freqs = rec.meta.freqs_hz
    want = y.transpose(3, 1, 2, 0, 4, 5).reshape(8, 36, 6, 2, 2)
    assert np.array_equal(present.sum(), 36 * 6 - 36)
    assert not present[12:24, 2].any() and not present[0:12, 4].any()
    assert not present[24:36, 0].any()
    assert np.array_equal(x[:, present], want[:, present])
    arr = numbered_array(tmp_path, 8)
    r = run([path], tmp_path, array=str(arr), integration_spectra=3)
    assert not r.ok and "--allow-damaged" in r.error
    r = run([path], tmp_path, array=str(arr), integration_spectra=3, allow_damaged=True)
    assert r.ok, r.error
    assert r.summary["dumps_with_gaps"] == 2
    check_uvh5(r.task.output, *rec_x, [(0, 3), (3, 6)], list(range(1, 9)), freqs)


def test_two_tunings_far_apart_and_adp_timing(tmp_path):
    """An ADP file (25 kHz, spectra 7840 ticks apart) of two tunings: both written, the
    frequencies each channel's own, nothing between them."""
    y = ci4_values((4, 3, 12, 4, 2, 2), seed=7)
    tt = 283685766952000000
    path = write_frames(tmp_path / "a.tbf", TBF, y, chans=[100, 112, 3000], time_tag=tt,
                        frame_id=0x01)
    with open_recording([path], "tbf") as rec:
        assert rec.meta.fs_hz == 25e3 and rec.meta.nchan == 36
        assert np.array_equal(rec.meta.freqs_hz, np.r_[100:124, 3000:3012] * 25e3)
        x, present = recorded(rec)
        assert present.all()
    arr = numbered_array(tmp_path, 4)
    r = run([path], tmp_path, array=str(arr), integration_spectra=2)
    assert r.ok, r.error
    check_uvh5(r.task.output, x, present, [(0, 2), (2, 4)], list(range(1, 5)),
               np.r_[100:124, 3000:3012] * 25e3)
    import pyuvdata

    uv = pyuvdata.UVData.from_file(r.task.output)
    t0 = tt / FS_HZ + 1 / 25e3  # the first integration's middle (two spectra)
    assert np.allclose(np.unique(uv.time_array)[0], 2440587.5 + t0 / 86400, rtol=0,
                       atol=1e-9)


def test_one_spectrum_file_default_integration(tmp_path):
    y = ci4_values((1, 2, 12, 4, 2, 2), seed=9)
    path = write_frames(tmp_path / "one.tbx", TBX, y, chans=[40, 52], time_tag=TT0)
    arr = numbered_array(tmp_path, 4)
    r = run([path], tmp_path, array=str(arr))
    assert r.ok, r.error
    assert r.summary["dumps"] == 1 and r.summary["integration_spectra"] == 1
    with open_recording([path], "tbx") as rec:
        x, present = recorded(rec)
    check_uvh5(r.task.output, x, present, [(0, 1)], list(range(1, 5)),
               np.arange(40, 64) * NDP_FC)


def test_ovro_lwa_dump(tmp_path):
    """A dump of 5 spectra, 6 channels, 352 stands' worth cut to 10: [time][chan][stand]
    [pol] in place; time tags seq * 8192; stands matched to the array by number."""
    y = ci4_values((5, 6, 10, 2, 2), seed=11)
    seq = 40_700_000_000_000
    path = write_dump(tmp_path / "lwa-dump-1607434049.77.tbf.0", y, chan0=1234, seq=seq)
    assert detect_format(path) == "ovro-lwa"
    rec = open_recording([path], "ovro-lwa")
    x, present = recorded(rec)
    rec.close()
    assert np.array_equal(x, y.transpose(2, 1, 0, 3, 4)) and present.all()
    arr = tmp_path / "ovro.toml"
    numbers = list(range(10, 0, -1)) + [11, 12]  # other order, more stands: matched by number
    write_array(arr, [f"LWA-{n:03d}" for n in numbers], numbers=numbers, telescope="OVRO-LWA",
                lat=37.24, lon=-118.28, alt=1183.0)
    r = run([path], tmp_path, array=str(arr), integration_spectra=2)
    assert r.ok, r.error
    assert r.summary["dropped_spectra"] == 1
    check_uvh5(r.task.output, x, present, [(0, 2), (2, 4)], list(range(1, 11)),
               np.arange(1234, 1240) * NDP_FC)
    import pyuvdata

    uv = pyuvdata.UVData.from_file(r.task.output)
    t0 = (seq + 1) * NDP_TICKS / FS_HZ  # the first integration's middle
    assert np.allclose(np.unique(uv.time_array)[0], 2440587.5 + t0 / 86400, rtol=0,
                       atol=1e-9)


def test_ovro_lwa_files_of_one_trigger_and_a_cut_one(tmp_path):
    y = ci4_values((6, 3, 4, 2, 2), seed=12)
    files = [write_dump(tmp_path / f"lwa-dump-1.00.tbf.{k}", y[3 * k:3 * k + 3], chan0=50,
                        seq=700 + 3 * k) for k in range(2)]
    with open(files[1], "ab") as f:
        f.write(b"\x11" * 5)  # a last spectrum cut short
    rec = open_recording(files, "ovro-lwa")
    assert (rec.start, rec.end) == (0, 6)
    assert rec.damage.by_file == {files[1].name: {"truncated_bytes": 5}}
    x, present = recorded(rec)
    rec.close()
    assert np.array_equal(x, y.transpose(2, 1, 0, 3, 4))


# ---------------------------------------------------------------------------- hostile files
def frame_file(tmp_path, name="h.tbf", ntime=3, seed=1):
    y = ci4_values((ntime, 2, 12, 4, 2, 2), seed=seed)
    return write_frames(tmp_path / name, TBF, y, chans=[300, 312], time_tag=TT0), y


def test_cut_and_garbage_and_wrong_sync(tmp_path):
    path, y = frame_file(tmp_path)
    data = bytearray(path.read_bytes())
    size = 24 + 12 * 4 * 2
    # a frame's sync word broken, garbage between frames, the last frame cut
    data[2 * size:2 * size + 4] = b"\x00\x11\x22\x33"
    data = data[:4 * size] + b"junk" * 7 + data[4 * size:-10]
    path.write_bytes(bytes(data))
    with open_recording([path], "tbf") as rec:
        d = rec.damage.by_file["h.tbf"]
        assert d["truncated_bytes"] == size - 10 and d["garbage_bytes"] == size + 28
        assert d["gap_blocks"] == 1  # the broken frame; the cut one is the last spectrum's
        x, present = recorded(rec)
        assert present.sum() == 12 * 4
        want = y.transpose(3, 1, 2, 0, 4, 5).reshape(4, 24, 3, 2, 2)
        assert np.array_equal(x[:, present], want[:, present])


def test_lying_headers_are_counted(tmp_path):
    path, y = frame_file(tmp_path, ntime=4)
    data = bytearray(path.read_bytes())
    size = 24 + 12 * 4 * 2
    data[1 * size + 14:1 * size + 16] = (7).to_bytes(2, "big")  # stand count
    data[2 * size + 12:2 * size + 14] = (305).to_bytes(2, "big")  # overlapping block
    data[3 * size + 16:3 * size + 24] = (TT0 + 10**15).to_bytes(8, "big")  # far in time
    data[4 * size + 16:4 * size + 24] = (TT0 + 5).to_bytes(8, "big")  # off the grid
    data[5 * size + 4] = 0x77  # frame id
    path.write_bytes(bytes(data))
    with open_recording([path], "tbf") as rec:
        d = rec.damage.by_file["h.tbf"]
        assert d["bad_headers"] == 3 and d["time_disorder"] == 2
        assert rec.end - rec.start == 4 and rec.meta.nchan == 24


@pytest.mark.parametrize("content", [b"", b"\xde\xc0\xde\x5c", b"\xde\xc0\xde\x5c\x05" + b"\0" * 40,
                                     bytes(range(256)) * 40,
                                     b"\xde\xc0\xde\x5c\x05" + b"\xff" * 30000])
def test_garbage_is_a_clear_error(tmp_path, content):
    path = tmp_path / "g.tbf"
    path.write_bytes(content)
    with pytest.raises(RecordingError) as e:
        TbfRecording([path])
    assert "\n" not in str(e.value) and "g.tbf" in str(e.value)


@pytest.mark.parametrize("header", [
    {"nchan": -1}, {"npol": 1}, {"nbit": 8}, {"seq": "x"}, {"nstand": 10**9}, {"chan0": 5000}])
def test_ovro_lying_headers(tmp_path, header):
    path = write_dump(tmp_path / "d.tbf.0", ci4_values((1, 2, 3, 2, 2)), chan0=1, seq=1,
                      extra=header)
    with pytest.raises(RecordingError) as e:
        open_recording([path], "ovro-lwa")
    assert "\n" not in str(e.value)


def test_ovro_cut_header_block(tmp_path):
    path = write_dump(tmp_path / "d.tbf.0", ci4_values((1, 2, 3, 2, 2)), chan0=1, seq=1)
    path.write_bytes(path.read_bytes()[:HEADER_BLOCK // 2])
    with pytest.raises(RecordingError, match="no complete block"):
        open_recording([path], "ovro-lwa")


def test_ticks(tmp_path):
    assert (ADP_TICKS, NDP_TICKS) == (7840, 8192) and FS_HZ / ADP_TICKS == 25e3


# LSL's reader warns of its own statistics over an empty array: not ours
@pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:invalid value encountered")
def test_lsl_xengine_second_opinion(tmp_path):
    """LSL's own X-engine (``lsl.correlator._core.XEngine2``, what ``lsl.correlator.fx``
    runs after its F-engine; float32, ``sum conj(x_2) x_1 / n``) on LSL's samples of its TBX
    test file agrees with our XX visibilities: conjugated, times n, to float32 precision."""
    core = import_or_require("lsl.correlator._core", "lsl")
    import pyuvdata

    x, _ = lsl_tbx_samples(LSL_DATA / "tbx-test.dat")  # [stand, chan, t, pol, 2]
    z = (x[..., 0, 0] + 1j * x[..., 0, 1]).astype(np.complex64)  # X pol: [stand, chan, t]
    valid = np.ones((z.shape[0], z.shape[2]), np.uint8)
    theirs = core.XEngine2(z, z, valid, valid)  # [baseline s1 <= s2, chan]
    arr = numbered_array(tmp_path, 64)
    r = run([LSL_DATA / "tbx-test.dat"], tmp_path, array=str(arr), integration_spectra=1,
            allow_damaged=True)
    assert r.ok, r.error
    uv = pyuvdata.UVData.from_file(r.task.output)
    s1, s2 = np.triu_indices(64)
    for k in range(0, s1.size, 97):
        ours = uv.get_data(int(s1[k]) + 1, int(s2[k]) + 1, "xx")[0]
        assert np.allclose(ours, np.conj(theirs[k]) * z.shape[2], rtol=1e-6, atol=1e-4), k


def test_hostile_files_through_the_command_are_one_line_each(tmp_path, capsys):
    """Through ``xengine reprocess --format``: garbage, a sync word alone, a header block with
    no JSON, a TBF frame whose stand count lies on the first frame (the rest read): one line
    each, no traceback."""
    from xengine_block.cli import main

    bad = {"junk.tbf": os.urandom(7000), "sync.tbx": b"\xde\xc0\xde\x5c" * 3,
           "nojson.tbf.0": (40).to_bytes(4, "little") + (1 << 20).to_bytes(4, "little")
           + b"x" * 100}
    for name, content in bad.items():
        (tmp_path / name).write_bytes(content)
    path, y = frame_file(tmp_path, "lie.tbf", ntime=2)
    data = bytearray(path.read_bytes())
    data[14:16] = (7).to_bytes(2, "big")  # the first frame's stand count
    path.write_bytes(bytes(data))
    arr = numbered_array(tmp_path, 4)
    for fmt, name in (("tbf", "junk.tbf"), ("tbx", "sync.tbx"), ("ovro-lwa", "nojson.tbf.0")):
        rc = main(["reprocess", str(tmp_path / name), "-o", str(tmp_path / "out"), "--format",
                   fmt, "--array", str(arr)])
        out = capsys.readouterr()
        assert rc == 1 and "Traceback" not in out.out + out.err
        assert out.out.count("FAILED") == 1 and name in out.out
    rc = main(["reprocess", str(path), "-o", str(tmp_path / "out"), "--array", str(arr),
               "--integration-spectra", "2", "--allow-damaged"])
    out = capsys.readouterr()
    assert rc == 0 and "garbage_bytes=" in out.out, out.out
    with open_recording([path], "tbf") as rec:
        x, present = recorded(rec)
    assert present[:, 0].sum() == 12 and present[:, 1].all()  # frame 0 lost, the rest kept


def test_many_breaks_index_quickly(tmp_path):
    """Garbage after every tenth frame of 40,000: indexed in well under a second's order, the
    garbage counted, every frame kept (no rescan of the whole file per break)."""
    import time

    y = ci4_values((20000, 2, 12, 4, 2, 2), seed=2)
    path = write_frames(tmp_path / "b.tbf", TBF, y, chans=[10, 22], time_tag=TT0)
    raw, size = path.read_bytes(), 24 + 12 * 4 * 2
    path.write_bytes(b"".join(raw[i * size:(i + 1) * size] + (b"xyz" if i % 10 == 9 else b"")
                              for i in range(40000)))
    t = time.perf_counter()
    rec = TbfRecording([path])
    assert time.perf_counter() - t < 10
    assert rec.damage.by_file == {"b.tbf": {"garbage_bytes": 3 * 4000}}
    assert sum(c.nframe for c in rec.chunks(rec.start, rec.end)) == 40000


@pytest.mark.parametrize("backend", ["cpu", "emulator"])
def test_other_backends_take_the_ci4_frames(tmp_path, backend):
    """The numpy backend and the NPU design's emulation (which takes ci4 as ci4) give the
    same exact file from the frames in place, a frame missing."""
    y = ci4_values((4, 2, 12, 4, 2, 2), seed=13)
    order = [(t, b) for t in range(4) for b in range(2) if (t, b) != (1, 1)]
    path = write_frames(tmp_path / "e.tbx", TBX, y, chans=[700, 712], time_tag=TT0,
                        order=order)
    arr = numbered_array(tmp_path, 4)
    r = run([path], tmp_path, array=str(arr), integration_spectra=2, backend=backend,
            allow_damaged=True)
    assert r.ok, r.error
    assert r.summary["damaged"] == "e.tbx:gap_blocks=1,gap_spectra=1"
    assert r.summary["backend"] == backend
    with open_recording([path], "tbx") as rec:
        x, present = recorded(rec)
    check_uvh5(r.task.output, x, present, [(0, 2), (2, 4)], list(range(1, 5)),
               np.arange(700, 724) * NDP_FC)


def test_pipeline_source_refuses_channel_blocks_in_one_line():
    """The pipeline source puts a time's channels in one ring frame (MWAX: a file each); a TBF
    time spread over channel-block frames is refused, not misread."""
    from xengine_block.readers.source import frame_layout

    with open_recording([LSL_DATA / "tbf-mini-test.dat"], "tbf") as rec:
        with pytest.raises(RecordingError, match="xengine reprocess reads it") as e:
            frame_layout(rec)
    assert "\n" not in str(e.value)
