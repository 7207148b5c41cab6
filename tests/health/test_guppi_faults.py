"""A GUPPI RAW recording (another writer's format) of a sky with injected faults, reprocessed
with ``xengine reprocess --flag-inputs --rfi aoflagger``: every fault found in the dumps where
it is and named in ``OUT/summary.json``, all its baselines flagged there and nowhere else, the
RFI channel flagged where the RFI is, few other visibilities flagged, and every unflagged
visibility bit for bit the one of the same recording reprocessed without flags (nsamples too).
ci8 and ci4."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import import_or_require
from xengine_block.array import default_array
from xengine_block.cli import main
from xengine_block.geometry import Geometry
from xengine_block.readers.guppi import antenna_cards, write_guppi
from xengine_block.sim.faults import InputFault, RfiSignal
from xengine_block.sim.fengine import FEngineSimulator, PointSource

pyuvdata = import_or_require("pyuvdata")
import_or_require("aoflagger")

SYNC, FS, FREQ0, BW = 1780272000.0, 48000.0, 150e6, 40e3
NANT, NCHAN, NDUMP, NSPEC = 6, 16, 24, 480
NUMBERS = [11, 3, 27, 5, 8, 40]  # telinfo antenna numbers: not the indices
RFI_CHAN, RFI_DUMPS = 9, range(6, 14)
#: (fault, the dumps it is in)
FAULTS = [(InputFault("dead", 1, 0), range(NDUMP)),
          (InputFault("saturated", 3, 1, 4 * NSPEC, 12 * NSPEC), range(4, 12)),
          (InputFault("stuck", 4, 0, 16 * NSPEC), range(16, NDUMP)),
          (InputFault("decorrelated", 0, 1), range(NDUMP))]
REASON = {"dead": "dead", "saturated": "saturated", "stuck": "stuck",
          "decorrelated": "decorrelated"}


def telinfo(array) -> str:
    ants = "\n".join(f"- {{name: {n}, number: {k}, position: [{e:.3f}, {nn:.3f}, {u:.3f}]}}"
                     for n, k, (e, nn, u) in zip(array.antenna_names, NUMBERS, array.enu_m,
                                                 strict=True))
    return (f"telescope_name: TEST\nlongitude: {array.longitude_deg}\nlatitude: "
            f"{array.latitude_deg}\naltitude: {array.altitude_m}\nantenna_position_frame: enu\n"
            f"antennas:\n{ants}\n")


@pytest.fixture(scope="module", params=[8, 4], ids=["ci8", "ci4"])
def recording(request, tmp_path_factory):
    bits = request.param
    d = tmp_path_factory.mktemp(f"guppi{bits}")
    array = default_array(NANT)
    g = Geometry(nstream=2 * NANT, nchan=NCHAN, nchan_pkt=8, npacket=2, sample_bits=bits)
    sim = FEngineSimulator(array, g, sync_time=SYNC, fs_hz=FS, freq0_hz=FREQ0, chan_bw_hz=BW,
                           sources=[PointSource.altaz(80, 30, amplitude=0.7)], seed=3,
                           faults=[f for f, _ in FAULTS],
                           rfi=[RfiSignal("narrowband", 3.0, RFI_CHAN, RFI_DUMPS[0] * NSPEC,
                                          RFI_DUMPS[-1] * NSPEC + NSPEC)])
    nat = sim.samples(0, NDUMP * NSPEC)  # [S, C, T, 2]
    x = np.ascontiguousarray(nat.reshape(NANT, 2, NCHAN, -1, 2).transpose(0, 2, 3, 1, 4))
    centre = (FREQ0 + BW * (NCHAN - 1) / 2) / 1e6
    cards = {"TELESCOP": "TEST", "OBSFREQ": centre, "OBSBW": BW * NCHAN / 1e6, "TBIN": 1 / FS,
             "SYNCTIME": int(SYNC), **antenna_cards(array.antenna_names)}
    raw = write_guppi(d / "rec.0000.raw", [x[:, :, i:i + NSPEC]
                                           for i in range(0, x.shape[2], NSPEC)], cards,
                      nbits=bits)
    (d / "tel.yaml").write_text(telinfo(array))
    outs = {}
    for name, extra in (("plain", []), ("flagged", ["--flag-inputs", "--rfi", "aoflagger"])):
        out = d / name
        assert main(["reprocess", str(raw), "--array", str(d / "tel.yaml"),
                     "--integration-spectra", str(NSPEC), "-o", str(out), *extra]) == 0
        uv = pyuvdata.UVData.from_file(out / "rec.0000.uvh5")
        outs[name] = (uv, json.loads((out / "summary.json").read_text()))
    return array, outs


def bad_mask(uv, fault_dumps) -> np.ndarray:
    """bool [Nblts, Npols]: the visibilities of the faulty inputs in their dumps."""
    times = np.unique(uv.time_array)
    dump = np.searchsorted(times, uv.time_array)
    pols = [(0, 0), (1, 1), (0, 1), (1, 0)]  # XX YY XY YX feeds of (ant_1, ant_2)
    order = list(uv.polarization_array)
    codes = {-5: (0, 0), -6: (1, 1), -7: (0, 1), -8: (1, 0)}
    mask = np.zeros((uv.Nblts, uv.Npols), bool)
    for f, dumps in fault_dumps:
        num = NUMBERS[f.antenna]
        in_dumps = np.isin(dump, list(dumps))
        for p, code in enumerate(order):
            f1, f2 = codes[code]
            hit = ((uv.ant_1_array == num) & (f1 == f.pol)) | ((uv.ant_2_array == num)
                                                               & (f2 == f.pol))
            mask[:, p] |= hit & in_dumps
    assert pols  # the feeds above are those pyuvdata's codes name
    return mask


def test_every_fault_named_with_its_dumps(recording):
    _, outs = recording
    summary = outs["flagged"][1]
    got = {(b["antenna"], b["pol"], b["reason"]): b["dumps"] for b in summary["bad_inputs"]}
    want = {(NUMBERS[f.antenna], "xy"[f.pol], REASON[f.kind]): list(d) for f, d in FAULTS}
    assert got == want
    assert summary["files"][0]["bad_inputs"] and summary["files"][0]["status"] == "ok"
    assert outs["plain"][1]["bad_inputs"] == []  # no flagging asked, none judged


def test_flags_where_the_faults_and_the_rfi_are(recording):
    _, outs = recording
    uv, summary = outs["flagged"]
    flags = uv.flag_array  # [Nblts, Nfreqs, Npols]
    bad = bad_mask(uv, FAULTS)
    assert flags.transpose(0, 2, 1)[bad].all()  # every baseline of a bad input, in its dumps
    times = np.unique(uv.time_array)
    dump = np.searchsorted(times, uv.time_array)
    rfi_rows = np.isin(dump, list(RFI_DUMPS))
    assert flags[rfi_rows, RFI_CHAN][~bad[rfi_rows]].all()  # the RFI, where it is
    rfi = rfi_rows[:, None, None] & (np.arange(NCHAN) == RFI_CHAN)[None, :, None]
    other = np.broadcast_to(~bad[:, None, :] & ~rfi, flags.shape)
    assert flags[other].mean() < 0.02
    # the bad inputs' baselines are flagged only in their dumps (or where RFI is)
    healthy = bad_mask(uv, [(f, [d for d in range(NDUMP) if d not in dumps])
                            for f, dumps in FAULTS]) & ~bad
    healthy = np.broadcast_to(healthy[:, None, :], flags.shape) & ~rfi
    assert flags[healthy].mean() < 0.02
    per_chan = summary["files"][0]["rfi"]["per_channel"]
    assert per_chan[RFI_CHAN] == max(per_chan) and per_chan[RFI_CHAN] > 0.3
    assert f"Tile{2:03d}x (antenna {NUMBERS[1]}) dead in dumps 0-{NDUMP - 1}" in uv.history


def test_unflagged_visibilities_unchanged(recording):
    _, outs = recording
    plain, flagged = outs["plain"][0], outs["flagged"][0]
    keep = ~flagged.flag_array
    assert keep.mean() > 0.5
    assert np.array_equal(plain.data_array[keep], flagged.data_array[keep])
    assert np.array_equal(plain.data_array, flagged.data_array)  # data kept, only flagged
    assert np.array_equal(plain.nsample_array, flagged.nsample_array)
    assert not plain.flag_array.any()


@pytest.mark.parametrize("value", ["sumthreshold", "aoflagger:", "aoflagger:/no/such.lua"])
def test_bad_rfi_option_is_one_line(tmp_path, capsys, value):
    from tests.helpers.cli import assert_usage_error

    raw = tmp_path / "a.raw"
    raw.write_bytes(b"x")
    assert_usage_error(main, ["reprocess", str(raw), "--rfi", value, "-o",
                              str(tmp_path / "out")], "--rfi", capsys, tmp_path)


def test_summary_json_names_a_failed_file(tmp_path):
    raw = tmp_path / "junk.raw"
    raw.write_bytes(b"not a recording" * 100)
    assert main(["reprocess", str(raw), "--flag-inputs", "-o", str(tmp_path / "out")]) == 1
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["files"][0]["status"] == "failed" and summary["files"][0]["error"]
    assert summary["bad_inputs"] == []
