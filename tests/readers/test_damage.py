"""Damaged recordings through ``xengine reprocess``: cut files, garbage between blocks, a PKTIDX
gap, headers that lie about sizes. Each is reported as the pcap path does: a FAILED line naming
the file and the counts per file, exit status 1, unless ``--allow-damaged`` (written, exit 0,
the line still says what is wrong); never a traceback. Intact data around the damage is exact.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.guppi import NAMES, NTIME, PKT0, blocks, cards, samples
from tests.helpers.recordings import check_file, write_array
from xengine_block.cli import main
from xengine_block.readers.guppi import GuppiRecording, write_guppi

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")


@pytest.fixture
def intact(tmp_path):
    x = samples(4, seed=11)
    path = write_guppi(tmp_path / "intact.raw", blocks(x), cards(),
                       pktidx=[PKT0 + i * NTIME for i in range(4)])
    arr = tmp_path / "a.toml"
    write_array(arr, NAMES)
    return x, path, arr


def block_offsets(path):
    rec = GuppiRecording([path])
    return [r.offset + k * r.layout.frame_bytes for r in rec.runs for k in range(r.nframe)]


def reprocess_cli(capsys, *args):
    rc = main(["reprocess", *map(str, args)])
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
    return rc, out.out


def damaged_files(tmp_path, x, path):
    data = path.read_bytes()
    offs = block_offsets(path)
    hdr = offs[1] - offs[0] - x[:, :, :NTIME].nbytes  # header bytes per block
    made = {}
    made["cut.raw"] = data[:offs[3] + 1000]  # the last block cut short
    garbage = os.urandom(777)
    made["garbage.raw"] = data[:offs[2] - hdr] + garbage + data[offs[2] - hdr:]
    # a header that lies: block 1 says BLOCSIZE is 4 bytes more
    size = x[:, :, :NTIME].nbytes
    lie = data[offs[1] - hdr:offs[1]].replace(f"BLOCSIZE= {size:>20}".encode(),
                                              f"BLOCSIZE= {size + 4:>20}".encode())
    assert lie != data[offs[1] - hdr:offs[1]]
    made["lying.raw"] = data[:offs[1] - hdr] + lie + data[offs[1]:]
    for name, content in made.items():
        (tmp_path / name).write_bytes(content)
    gap = write_guppi(tmp_path / "gap.raw", blocks(x), cards(),
                      pktidx=[PKT0, PKT0 + NTIME, PKT0 + 3 * NTIME, PKT0 + 4 * NTIME])
    return [tmp_path / n for n in made] + [gap]


EXPECT = {"cut.raw": "truncated_bytes=", "garbage.raw": "garbage_bytes=777",
          "lying.raw": "bad_headers=1", "gap.raw": f"gap_blocks=1,gap_spectra={NTIME}"}


def test_damaged_guppi_files_fail_with_counts_per_file(tmp_path, intact, capsys):
    x, path, arr = intact
    files = damaged_files(tmp_path, x, path)
    rc, out = reprocess_cli(capsys, *files, path, "-o", tmp_path / "out", "--array", arr,
                            "--integration-spectra", NTIME)
    assert rc == 1
    lines = {ln.split()[1].split("/")[-1].rstrip(":"): ln for ln in out.splitlines()}
    assert lines["intact.raw"].startswith("ok")
    for name, says in EXPECT.items():
        line = lines[name]
        assert line.startswith("FAILED") and f"damaged recording: {name}: " in line, line
        if name == "cut.raw":  # the header and the part of the block that is there
            hdr = block_offsets(path)[1] - block_offsets(path)[0] - x[:, :, :NTIME].nbytes
            says = f"truncated_bytes={hdr + 1000}"
        assert says in line, line
        assert not (tmp_path / "out" / f"{name[:-4]}.uvh5").exists()


def test_allowed_damage_is_written_and_exact_where_intact(tmp_path, intact, capsys):
    x, path, arr = intact
    files = damaged_files(tmp_path, x, path)
    rc, out = reprocess_cli(capsys, *files, "-o", tmp_path / "out", "--array", arr,
                            "--integration-spectra", NTIME, "--allow-damaged")
    assert rc == 0, out
    assert out.count("damaged=") == 4
    numbers = {n: i for i, n in enumerate(NAMES)}
    o = tmp_path / "out"
    check_file(o / "cut.uvh5", x, [(k * NTIME, (k + 1) * NTIME) for k in range(3)], numbers,
               NAMES)
    check_file(o / "garbage.uvh5", x, [(k * NTIME, (k + 1) * NTIME) for k in range(4)],
               numbers, NAMES)
    # the lying block is skipped: its spectra are a gap (flagged, nsamples 0), the rest exact
    uv = pyuvdata.UVData.from_file(o / "lying.uvh5")
    assert uv.Ntimes == 4
    ns = uv.nsample_array.reshape(4, uv.Nbls, -1)
    assert np.all(ns[1] == 0) and np.all(uv.flag_array.reshape(4, uv.Nbls, -1)[1])
    assert np.all(ns[[0, 2, 3]] == 1)
    # the PKTIDX gap: block 2 missing, so the file's block 2 is spectra 144..191
    uv = pyuvdata.UVData.from_file(o / "gap.uvh5")
    assert uv.Ntimes == 5
    ns = uv.nsample_array.reshape(5, uv.Nbls, -1)
    assert np.all(ns[2] == 0) and np.all(ns[[0, 1, 3, 4]] == 1)
    got = uv.get_data(0, 1, "xy")
    from tests.helpers.recordings import expected
    assert np.array_equal(got[3], expected(x[:, :, 2 * NTIME:3 * NTIME], 0, 1, "xy"))
    assert np.array_equal(got[2], np.zeros_like(got[2]))


def test_unreadable_inputs_are_one_line_each(tmp_path, intact, capsys):
    x, path, arr = intact
    junk = tmp_path / "junk.bin"
    junk.write_bytes(os.urandom(5000))
    empty = tmp_path / "empty.raw"
    empty.write_bytes(b"")
    inconsistent = write_guppi(tmp_path / "odd.raw", blocks(x[:, :, :NTIME]),
                               {**cards(), "OBSNCHAN": 7})  # OBSNCHAN not a multiple of NANTS
    rc, out = reprocess_cli(capsys, junk, inconsistent, "-o", tmp_path / "out", "--array", arr)
    assert rc == 1
    assert "junk.bin: not a recording of a known format" in out
    assert "odd.raw: OBSNCHAN = 7 is not a multiple of NANTS = 3" in out
    rc, out = reprocess_cli(capsys, junk, empty, "-o", tmp_path / "out", "--format", "guppi")
    assert rc == 1 and out.count("FAILED") == 2 and "no GUPPI header at byte 0" in out
    assert len(out.splitlines()) == 2
