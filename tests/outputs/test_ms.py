"""Measurement Set writer: the rows it writes (exact integers phased), hostile cases (an output
that exists, a bad phase centre, a centre below the horizon, a full disk), and what a SIGKILL
leaves."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import time
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


def test_a_killed_writers_leftovers_are_refused_or_replaced_when_asked(tmp_path):
    """A killed writer leaves ``NAME.ms`` (a link) and ``NAME.ms.writing``: a new writer of
    the same name refuses them, replaces both when asked; the closed output is the table
    itself, no link, no working directory."""
    path = tmp_path / "k.ms"
    killed_writer(path, 1, 0.0, pause=True)
    assert path.is_symlink() and (tmp_path / "k.ms.writing").is_dir()
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        write(path, 1)
    (tmp_path / "k.ms.writing" / "mine.txt").write_text("not a table")
    with pytest.raises(FileExistsError, match="holds something else than tables"):
        write(path, 1, overwrite=True)
    (tmp_path / "k.ms.writing" / "mine.txt").unlink()
    write(path, 2, overwrite=True)
    assert path.is_dir() and not path.is_symlink()
    assert not (tmp_path / "k.ms.writing").exists()
    with tables.table(str(path), ack=False) as t:
        assert t.nrows() == 2 * NANT * (NANT + 1) // 2


def test_a_copy_that_fails_to_follow_stops_the_writer_and_the_output_keeps_the_dump(
        tmp_path, monkeypatch):
    """The second copy fails to take a dump the first shows: OutputWriteError naming every
    dump kept, the shown copy's rows of that dump written again over whatever the failed
    copy's flush left in the shared tile files, and the closed output equal to an unfailed
    writer's."""
    w = MSWriter(tmp_path / "f.ms", make_site(NANT), FREQS, 40e3, 960)
    put = MSWriter._put
    calls = []

    def flaky(self, k, n0, columns, jd):
        calls.append(k)
        if len(calls) == 4:  # the second dump's second copy: half its columns, then EIO
            self._tabs[k].addrows(self.bmap.nbls)
            self._tabs[k].putcol("DATA", np.zeros_like(columns[0][1]), startrow=n0)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        put(self, k, n0, columns, jd)

    monkeypatch.setattr(MSWriter, "_put", flaky)
    for d in range(2):
        for tri, valid in dumps(1, seed=d):
            if d == 0:
                w.append(tri, valid, 960, T0 + d, 1.0)
            else:
                with pytest.raises(OutputWriteError) as info:
                    w.append(tri, valid, 960, T0 + d, 1.0)
    assert info.value.errno_symbol == "EIO" and info.value.ndump == 2
    with pytest.raises(OutputWriteError):
        w.append(tri, valid, 960, T0 + 2, 1.0)
    w.close()
    assert w.path.is_dir() and not w.path.is_symlink()
    monkeypatch.setattr(MSWriter, "_put", put)
    ref = MSWriter(tmp_path / "ref.ms", make_site(NANT), FREQS, 40e3, 960, kill_safe=False)
    for d in range(2):
        for tri, valid in dumps(1, seed=d):
            ref.append(tri, valid, 960, T0 + d, 1.0)
    ref.close()
    with tables.table(str(w.path), ack=False) as t, \
            tables.table(str(ref.path), ack=False) as r:
        for col in ("DATA", "FLAG", "WEIGHT_SPECTRUM", "UVW", "ANTENNA2", "TIME"):
            assert np.array_equal(t.getcol(col), r.getcol(col)), col


def test_a_writer_without_a_complete_dump_leaves_nothing(tmp_path):
    w = MSWriter(tmp_path / "e.ms", make_site(NANT), FREQS, 40e3, 960)
    w.abandon()
    assert list(tmp_path.iterdir()) == []


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
import sys
sys.path.insert(0, {root!r})
from tests.outputs.test_ms import dumps, make_site, NANT, FREQS, T0
from xengine_block.outputs.ms import MSWriter
w = MSWriter(sys.argv[1], make_site(NANT), FREQS, 40e3, 960, kill_safe=sys.argv[2] == "1")
d = 0
while True:
    for tri, valid in dumps(1, seed=d):
        w.append(tri, valid, 960, T0 + d, 1.0)
    print(d, flush=True)  # dump d's append returned
    d += 1
    if sys.argv[3] == "pause":
        sys.stdin.readline()  # between dumps: the parent kills here
"""


def killed_writer(path: Path, after: int, delay_s: float, kill_safe: bool = True,
                  pause: bool = False) -> int:
    """Run a writer of endless dumps at ``path`` in a child process and SIGKILL it
    ``delay_s`` after its ``after``-th append returned (or, ``pause``, while it waits after
    that append); the number of appends that returned."""
    root = str(Path(__file__).resolve().parents[2])
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT.format(root=root), str(path),
                             "1" if kill_safe else "0", "pause" if pause else "run"],
                            stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
    for d in range(after):
        assert proc.stdout.readline().strip() == str(d)
        if pause and d + 1 < after:
            proc.stdin.write("\n")
            proc.stdin.flush()
    time.sleep(delay_s)
    proc.send_signal(signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    return after + len(out.split())


def check_complete_dumps(path: Path, returned: int, tmp_path: Path) -> None:
    """``path`` opens; it holds every dump whose append returned, and at most the one being
    written then, each whole: every column read, equal to an unkilled writer's rows."""
    nbls = 2 * NANT * (NANT + 1) // 2 // 2  # antenna pairs with autocorrelations
    with tables.table(str(path), ack=False) as t:
        assert t.nrows() % nbls == 0
        n = t.nrows() // nbls
        assert returned <= n <= returned + 1
        got = {c: t.getcol(c) for c in t.colnames() if c != "FLAG_CATEGORY"}
        assert tables.table(str(path) + "::FIELD", ack=False).nrows() == (1 if n else 0)
    ref = MSWriter(tmp_path / "ref.ms", make_site(NANT), FREQS, 40e3, 960, kill_safe=False)
    for d in range(n):
        for tri, valid in dumps(1, seed=d):
            ref.append(tri, valid, 960, T0 + d, 1.0)
    ref.close()
    with tables.table(str(tmp_path / "ref.ms"), ack=False) as t:
        for col, value in got.items():
            assert np.array_equal(t.getcol(col), value), col


@pytest.mark.parametrize("ndump", [1, 3])
def test_sigkill_between_dumps_leaves_every_flushed_dump_readable(tmp_path, ndump):
    """A writer killed between dumps (after an append returned) leaves a table casacore
    opens, holding every dump, each equal to what a writer of those dumps alone writes."""
    path = tmp_path / "k.ms"
    returned = killed_writer(path, ndump, 0.0, pause=True)
    assert returned == ndump
    check_complete_dumps(path, returned, tmp_path)


@pytest.mark.parametrize("trial", range(6))
def test_sigkill_at_any_moment_leaves_a_table_of_complete_dumps(tmp_path, trial):
    """Killed at a random moment of a run of back-to-back dumps (mostly inside casacore's
    flushes: this small array's appends are little else), ``path`` still opens as a table of
    whole dumps: every dump whose append returned, at most one more, each equal to an
    unkilled writer's; a copy only ever shows what it flushed whole (the module docstring)."""
    path = tmp_path / "k.ms"
    rng = np.random.default_rng(trial)
    returned = killed_writer(path, 1 + trial % 3, float(rng.uniform(0.0, 0.05)))
    check_complete_dumps(path, returned, tmp_path)


def test_a_single_table_killed_in_a_flush_is_what_the_copies_prevent(tmp_path):
    """The same kills on a writer of one table in place (``kill_safe=False``): some leave a
    table casacore refuses (storage-manager headers ahead of ``table.dat``), which is why the
    kill-safe writer keeps two copies. Trials until one is refused."""
    refused = 0
    for trial in range(12):
        path = tmp_path / f"k{trial}.ms"
        rng = np.random.default_rng(100 + trial)
        killed_writer(path, 2, float(rng.uniform(0.0, 0.05)), kill_safe=False)
        try:
            tables.table(str(path), ack=False).close()
        except RuntimeError:
            refused += 1
            break
    assert refused, "no kill of a single table landed inside a flush in 12 trials"


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
