"""Measurement Set writer: the rows it writes (exact integers phased), hostile cases (an output
that exists, a bad phase centre, a centre below the horizon, a full disk), and what a SIGKILL
leaves."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import import_or_require, mounted_tmpfs
from tests.outputs.test_uvh5 import make_site
from xengine_block.geometry import Geometry
from xengine_block.outputs.errors import OutputWriteError
from xengine_block.outputs.phasing import PhaseCentre

tables = import_or_require("casacore.tables", "casacore")
from xengine_block.outputs.ms import POL_ORDER, MSWriter  # noqa: E402 (needs casacore)

NANT, NCHAN = 4, 9
FREQS = 150e6 + np.arange(NCHAN) * 40e3
T0 = 1.75e9


def dumps(n: int, seed: int = 0):
    g = Geometry(nstream=2 * NANT, nchan=NCHAN, npacket=2)
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield (rng.integers(-3000, 3000, (NCHAN, g.nbaseline, 2)).astype(np.int32),
               np.full((1, g.nbaseline), 960))


def write(path: Path, n: int = 2, **kw) -> MSWriter:
    w = MSWriter(path, make_site(NANT), FREQS, 40e3, 960, **kw)
    for d, (tri, valid) in enumerate(dumps(n)):
        w.append(tri, valid, 960, T0 + d, 1.0)
    w.close()
    return w


def test_rows_are_the_exact_integers_phased_and_conjugated(tmp_path):
    """DATA is conj(UVH5 row x exp(-2 pi i w nu / c)) in complex64, from the exact integers
    (checked against the row pass's own rows and the writer's UVW), and UVW the negated
    phased uvw; one row per baseline and dump, ANTENNA1 <= ANTENNA2."""
    w = write(tmp_path / "a.ms", 1, phase_centre="30,-20")
    tri, valid = next(dumps(1))
    rows = w._rows
    rows.fill(tri, valid, 960)
    vis = rows.visdata["r"].astype(float) + 1j * rows.visdata["i"].astype(float)
    with tables.table(str(w.path), ack=False) as t:
        uvw = -t.getcol("UVW")
        phased = vis * np.exp(-2j * np.pi * uvw[:, 2:3] * FREQS / 299792458.0)[:, :, None]
        assert np.array_equal(t.getcol("DATA"), np.conj(phased[:, :, POL_ORDER]).astype(
            np.complex64))
        assert (t.getcol("ANTENNA1") <= t.getcol("ANTENNA2")).all()
        assert t.nrows() == w.bmap.nbls
        assert not t.getcol("FLAG").any()
        assert np.array_equal(t.getcol("WEIGHT_SPECTRUM"), np.ones((w.bmap.nbls, NCHAN, 4)))
        autos = t.getcol("ANTENNA1") == t.getcol("ANTENNA2")
        assert np.allclose(uvw[autos], 0, atol=1e-9)
    with tables.table(f"{w.path}::DATA_DESCRIPTION", ack=False) as dd:
        assert dd.nrows() == 1


def test_an_existing_output_is_never_overwritten_silently(tmp_path):
    write(tmp_path / "a.ms", 1)
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        write(tmp_path / "a.ms", 1)
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="is no table"):
        write(tmp_path / "notes", 1, overwrite=True)
    assert (tmp_path / "notes" / "keep.txt").read_text() == "mine"
    write(tmp_path / "a.ms", 3, overwrite=True)  # a table, asked to: replaced
    with tables.table(str(tmp_path / "a.ms"), ack=False) as t:
        assert t.nrows() == 3 * NANT * (NANT + 1) // 2


@pytest.mark.parametrize("text", ["", "north", "1,2,3", "10,95", "nan,3", "a,b", "10,-91"])
def test_bad_phase_centres_are_refused_by_name(text):
    with pytest.raises(ValueError, match="phase centre"):
        PhaseCentre.parse(text)


def test_phase_centre_text_round_trips():
    for text in ("zenith", "ZENITH", "290.2638,-41.7951", "-10,5", "359.99999999999,89.5"):
        pc = PhaseCentre.parse(text)
        assert PhaseCentre.parse(str(pc)) == pc
    assert PhaseCentre.parse("-10,5").ra_deg == 350.0


def test_a_centre_below_the_horizon_is_allowed_and_logged(tmp_path, caplog):
    """The site is at latitude -26.7: declination +80 never rises there."""
    with caplog.at_level(logging.WARNING, logger="xengine_block.outputs.ms"):
        w = write(tmp_path / "low.ms", 1, phase_centre="0,80")
    assert "below the horizon" in caplog.text
    with tables.table(str(w.path), ack=False) as t:
        assert t.nrows() == w.bmap.nbls


KILL_SCRIPT = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from tests.outputs.test_ms import write, dumps, make_site, NANT, FREQS, T0
from xengine_block.outputs.ms import MSWriter
w = MSWriter(sys.argv[1], make_site(NANT), FREQS, 40e3, 960)
d = 0
while True:
    for tri, valid in dumps(1, seed=d):
        w.append(tri, valid, 960, T0 + d, 1.0)
    print(d, flush=True)
    d += 1
    sys.stdin.readline()  # between dumps: the parent kills here, or lets the next one go
"""


@pytest.mark.parametrize("ndump", [1, 3])
def test_sigkill_between_dumps_leaves_every_flushed_dump_readable(tmp_path, ndump):
    """A writer killed between dumps (after an append returned) leaves a table casacore
    opens, holding every dump, each equal to what a writer of those dumps alone writes. (Killed
    while casacore flushes a dump, the table may not open: docs/design.md, "Measurement Set
    conventions".)"""
    root = str(Path(__file__).resolve().parents[2])
    path = tmp_path / "k.ms"
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT.format(root=root), str(path)],
                            stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    for d in range(ndump):
        assert proc.stdout.readline().strip() == str(d)
        if d + 1 < ndump:
            proc.stdin.write("\n")
            proc.stdin.flush()
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    returned = ndump
    nbls = 2 * NANT * (NANT + 1) // 2 // 2  # antenna pairs with autocorrelations
    with tables.table(str(path), ack=False) as t:
        n = t.nrows() // nbls
        assert n >= returned
        data = t.getcol("DATA", 0, returned * nbls)
        assert np.isfinite(data).all()
    ref = MSWriter(tmp_path / "ref.ms", make_site(NANT), FREQS, 40e3, 960)
    for d in range(returned):
        for tri, valid in dumps(1, seed=d):
            ref.append(tri, valid, 960, T0 + d, 1.0)
    ref.close()
    with tables.table(str(tmp_path / "ref.ms"), ack=False) as t:
        assert np.array_equal(t.getcol("DATA"), data)


def test_a_full_disk_raises_the_writers_error_and_keeps_the_dumps(tmp_path):
    """On a small tmpfs: OutputWriteError (ENOSPC) when a dump does not fit; the dumps flushed
    before read back."""
    with mounted_tmpfs(tmp_path / "disk", "16m") as disk:
        w = MSWriter(disk / "full.ms", make_site(NANT), FREQS, 40e3, 960)
        written = 0
        with pytest.raises(OutputWriteError) as info:
            for d in range(100):
                for tri, valid in dumps(1, seed=d):
                    w.append(tri, valid, 960, T0 + d, 1.0)
                written += 1
                if d == 0:  # fill the disk up to a little over what one more dump needs
                    st = os.statvfs(disk)
                    free = st.f_bavail * st.f_frsize
                    (disk / "filler").write_bytes(bytes(max(free - (4 << 20) - 8192, 0)))
        assert info.value.errno_symbol == "ENOSPC", info.value
        assert written > 0 and info.value.ndump == written
        with pytest.raises(OutputWriteError):  # a failed writer refuses more
            w.append(tri, valid, 960, T0, 1.0)
        w.abandon()
        with tables.table(str(disk / "full.ms"), ack=False) as t:
            assert t.nrows() == written * w.bmap.nbls
            assert np.isfinite(t.getcol("DATA")).all()
