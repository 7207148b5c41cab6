"""Scale-out by frequency: ``pipelines/fx.py --xengines N`` (N ``xengine correlate`` processes
on loopback, files joined by ``xengine combine``) equals one X-engine for the whole band, bit
for bit; the combine and split rules on their own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from xengine_block.service.combine import CombineError, combine
from xengine_block.service.instances import channel_split

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")
ROOT = Path(__file__).resolve().parents[2]
FX = ROOT / "pipelines" / "fx.py"
# 8 antennas x 27 channels (3 packets of 9), P = 4, 2 frames per dump, 3 dumps.
ARGS = ["--nant", "8", "--nchan", "27", "--npacket", "4", "--ninteg", "2", "--dumps", "3",
        "--backend", "cpu", "--sync-time", "1700000000", "--monitor", "0", "--rate-gbps", "0.2"]


def run_fx(out: Path, *extra: str) -> None:
    p = subprocess.run([sys.executable, str(FX), *ARGS, "--out", str(out), *extra], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def run_single(out: Path, *extra: str) -> Path:
    """One X-engine for the whole band, in fx's own process (no combine involved)."""
    run_fx(out, *extra)
    (f,) = sorted(out.glob("xengine_*.uvh5"))
    return f


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    return run_single(tmp_path_factory.mktemp("single"))




def test_ci4_two_instances_combined_equal_one_instance_bit_for_bit(tmp_path):
    """4-bit F-engines (the less common nibble order, so the instances must be told it):
    the instances' config carries sample_bits and nibble_order."""
    ci4 = ("--bits", "4", "--nibble-order", "re_low")
    single = run_single(tmp_path / "single", *ci4)
    assert_combined_equals_single(tmp_path / "scaleout", single, 2, *ci4)
    for i in range(2):
        cfg = (tmp_path / "scaleout" / f"xengine-{i}" / "correlate.toml").read_text()
        assert "sample_bits = 4" in cfg and 'nibble_order = "re_low"' in cfg


@pytest.mark.parametrize("n", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_n_instances_combined_equal_one_instance_and_their_recording(tmp_path, single, n):
    """N instances combined equal one X-engine bit for bit; with --record their packets are
    one full-band recording, and ``xengine reprocess`` of it gives the live run's combined
    visibilities bit for bit too."""
    from xengine_block.capture.recording import read_metadata
    from xengine_block.cli import main

    rec = tmp_path / "rec" / "band.pcap"
    combined = assert_combined_equals_single(tmp_path / "live", single, n, "--record", str(rec))
    info = read_metadata(rec)
    assert info.geometry.nchan == 27 and info.chan0 == 0 and info.pcap_bytes == rec.stat().st_size
    assert main(["reprocess", str(rec), "-o", str(tmp_path / "again"), "--ninteg", "2"]) == 0
    (again,) = sorted((tmp_path / "again").glob("*.uvh5"))
    assert_same_visibilities(combined, again)


def assert_combined_equals_single(tmp_path: Path, single: Path, n: int, *extra: str) -> Path:
    run_fx(tmp_path, "--xengines", str(n), *extra)
    parts = [sorted((tmp_path / f"xengine-{i}" / "data").glob("*.uvh5")) for i in range(n)]
    assert all(len(p) == 1 for p in parts)
    nchan = [h5py.File(p[0], "r")["Header/Nfreqs"][()] for p in parts]
    assert nchan == [c for _, c in channel_split(27, 9, n)]
    (combined,) = sorted((tmp_path / "combined").glob("*.uvh5"))
    assert_same_visibilities(single, combined)
    return combined


def assert_same_visibilities(single: Path, combined: Path) -> None:
    """The data bit for bit (raw HDF5 and through pyuvdata) and the axes that place them."""
    with h5py.File(single, "r") as a, h5py.File(combined, "r") as b:
        for name in ("visdata", "flags", "nsamples"):
            da, db = a[f"Data/{name}"], b[f"Data/{name}"]
            assert da.dtype == db.dtype and da.shape == db.shape, name
            assert np.array_equal(da[()], db[()]), name  # compound int32 pairs: exact
    one, many = pyuvdata.UVData.from_file(single), pyuvdata.UVData.from_file(combined)
    many.check()
    for attr in ("data_array", "flag_array", "nsample_array", "freq_array", "time_array",
                 "ant_1_array", "ant_2_array", "polarization_array", "uvw_array",
                 "channel_width", "integration_time"):
        assert np.array_equal(getattr(one, attr), getattr(many, attr)), attr
    assert not many.flag_array.any() and many.Ntimes == 3


def test_channel_split_whole_packets_as_even_as_possible():
    assert channel_split(27, 9, 2) == [(0, 18), (18, 9)]
    assert channel_split(36, 9, 3) == [(0, 18), (18, 9), (27, 9)]
    with pytest.raises(ValueError, match="cannot be split among 4"):
        channel_split(27, 9, 4)


def test_combine_refuses_overlapping_channels_and_overwrites_only_when_asked(tmp_path, single):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in "ab":
        (tmp_path / d / single.name).write_bytes(single.read_bytes())
    with pytest.raises(CombineError, match="hold the same channels"):
        combine([tmp_path / "a", tmp_path / "b"], tmp_path / "out")
    (out,) = combine([tmp_path / "a"], tmp_path / "out")  # one instance: a copy
    with pytest.raises(CombineError, match="refusing to overwrite"):
        combine([tmp_path / "a"], tmp_path / "out")
    combine([tmp_path / "a"], tmp_path / "out", overwrite=True)
    assert np.array_equal(pyuvdata.UVData.from_file(out).data_array,
                          pyuvdata.UVData.from_file(single).data_array)


def test_combine_command_line(tmp_path, single, capsys):
    from xengine_block.cli import main

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / single.name).write_bytes(single.read_bytes())
    assert main(["combine", str(tmp_path / "a"), "-o", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / single.name).exists()
    assert main(["combine", str(tmp_path / "a"), str(tmp_path / "a"), "-o",
                 str(tmp_path / "o2")]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("xengine combine: ") and "hold the same channels" in err


def test_an_instance_config_named_by_a_relative_path_is_found(tmp_path, monkeypatch):
    """``fx.py --xengines N --out DIR`` with a relative DIR: each instance runs in its own
    directory, so its config is handed over by absolute path (it was not found before)."""
    from xengine_block.geometry import Geometry
    from xengine_block.service.instances import CorrelateProcess, toml_text
    from xengine_block.service.scaleout import instance_config

    monkeypatch.chdir(tmp_path)
    cfg = Path("out") / "xengine-0" / "correlate.toml"
    cfg.parent.mkdir(parents=True)
    sky = {"sync_time": 1.7e9, "fs_hz": 40e3, "freq0_hz": 150e6, "chan_bw_hz": 40e3}
    cfg.write_text(toml_text(instance_config(
        chan0=0, nchan=9, g=Geometry(nstream=8, nchan=9, npacket=2), sky=sky, array=None,
        nant=4, backend="cpu", ninteg=1, like_top_s=0.0)))
    proc = CorrelateProcess(cfg)
    try:
        assert proc.port > 0
    finally:
        proc.finish()
