"""Full disk and other write failures: the UVH5 writer raises one error naming
the file and errno, the file keeps every dump completed before and reads with pyuvdata, the
pipeline and ``fx.py`` stop with one line and a non-zero exit (no segfault), and reprocessing
never gives a failed output its final name.

Three ways to fail writes, none needing root except the last:
- in process, a disk of ``limit`` bytes: ``StagedFile``'s writes past it fail with ENOSPC;
  or the creation of a file or of the output directory refused (``os.open``, ``mkdir``);
- a subprocess with ``RLIMIT_FSIZE``: the kernel refuses writes past N bytes (EFBIG), the same
  for the old code, which lost data and segfaulted;
- a real tmpfs of a few hundred KiB (``mount -t tmpfs``), where root and mount are available.
Expected visibilities come from the int64 reference of the recorded frames.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import mounted_tmpfs, random_frames
from xengine_block.array import default_array
from xengine_block.blocks.chain import correlator_chain
from xengine_block.blocks.writer import UVH5WriterBlock
from xengine_block.capture.receive import CaptureBlock
from xengine_block.capture.recording import read_metadata, write_metadata
from xengine_block.capture.spead import pcap_sender
from xengine_block.capture.transports import PcapSource
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry
from xengine_block.outputs.errors import OutputWriteError
from xengine_block.outputs.site import site_info
from xengine_block.outputs.staged_file import StagedFile
from xengine_block.outputs.uvh5 import UVH5Writer
from xengine_block.reference import reference_full, reference_triangle
from xengine_block.reprocess.jobs import ReprocessOptions, reprocess
from xengine_block.reprocess.tasks import summarise
from xengine_block.runtime.pipeline import Pipeline, PipelineError
from xengine_block.sim.fengine import FEngineSimulator, PointSource

pyuvdata = pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the files")
ROOT = Path(__file__).resolve().parents[2]
SKY = {"sync_time": 1780272000.0, "fs_hz": 40e3, "freq0_hz": 150e6, "chan_bw_hz": 40e3}
NANT, NPACKET, NDUMP = 4, 4, 6


# ---------------------------------------------------------------------------- fault injection
def full_disk(monkeypatch, limit: int) -> None:
    """Every StagedFile lives on a disk of ``limit`` bytes: writes past it fail with ENOSPC
    after writing what fits (as write(2) does), growing truncations too."""
    pwrite, ftruncate = StagedFile._pwrite, StagedFile._ftruncate

    def limited_pwrite(self, data, offset):
        if offset + len(data) > limit:
            if offset < limit:
                pwrite(self, data[:limit - offset], offset)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        pwrite(self, data, offset)

    def limited_ftruncate(self, size):
        if size > limit:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        ftruncate(self, size)

    monkeypatch.setattr(StagedFile, "_pwrite", limited_pwrite)
    monkeypatch.setattr(StagedFile, "_ftruncate", limited_ftruncate)


def refusing_creation(monkeypatch, code: int) -> dict[str, int]:
    """While ``state["refusing"]`` is set, creating a UVH5 file (``StagedFile``'s
    ``os.open``) fails with ``code``, as on a read-only filesystem (EROFS), with no inode left
    (ENOSPC, EDQUOT) or a failing disk (EIO); ``state["refused"]`` counts the refusals."""
    state = {"refusing": 1, "refused": 0}
    os_open = os.open

    def flaky(path, flags, *args, **kwargs):
        if state["refusing"] and flags & os.O_CREAT and str(path).endswith(".uvh5"):
            state["refused"] += 1
            raise OSError(code, os.strerror(code), str(path))
        return os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", flaky)
    return state


def fsize_limit(nbytes: int):
    """preexec_fn: the child may not write files past ``nbytes`` (EFBIG, SIGXFSZ ignored)."""
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, resource.RLIM_INFINITY))
    return apply


def assert_clean_failure(proc: subprocess.CompletedProcess, path_part: str, code: str) -> None:
    """Non-zero exit without a signal, one line naming the file and errno, no tracebacks."""
    text = proc.stdout + proc.stderr
    assert proc.returncode > 0, (proc.returncode, text[-3000:])
    assert "Traceback" not in text and "Exception ignored" not in text, text[-3000:]
    lines = [ln for ln in text.splitlines() if code in ln]
    assert len(lines) == 1 and path_part in lines[0], text[-3000:]


# ---------------------------------------------------------------------------- the writer
def writer_inputs(nant: int = NANT):
    array = default_array(nant)
    g = Geometry(nstream=array.nstream, nchan=9, npacket=2)
    x = frames_to_natural(random_frames(g, 2, seed=5), g)
    return site_info(array), g, x


def write_dumps(path: Path, n: int) -> tuple[UVH5Writer, list[int]]:
    """Append up to ``n`` dumps (dump i = the reference triangle times i + 1) until one fails;
    returns the writer and the committed file size after creation and after each dump."""
    site, g, x = writer_inputs()
    tri = reference_triangle(x)
    w = UVH5Writer(path, site, 1e8 + 1e4 * np.arange(9), 1e4, 960)
    sizes = [w._io.size]
    for i in range(n):
        w.append(tri * (i + 1), np.full((1, g.nbaseline), 960), 960, 1.8e9 + i, 1.0)
        sizes.append(w._io.size)
    return w, sizes


def assert_file_holds(path: Path, ndump: int) -> None:
    """pyuvdata reads it (strict checks) with exactly ``ndump`` dumps of the right values."""
    _, _, x = writer_inputs()
    re, im = reference_full(x)
    uv = pyuvdata.UVData.from_file(path)
    uv.check(strict_uvw_antpos_check=True)
    assert uv.Ntimes == ndump and uv.Nblts == ndump * uv.Nbls
    for d in range(ndump):
        assert np.array_equal(uv.get_data(0, 1, "xx")[d], (d + 1) * (re - 1j * im)[:, 0, 2])
        assert np.array_equal(uv.get_data(1, 3, "yx")[d], (d + 1) * (re - 1j * im)[:, 3, 6])


@pytest.fixture(scope="module")
def sizes(tmp_path_factory) -> list[int]:
    w, sizes = write_dumps(tmp_path_factory.mktemp("ok") / "ok.uvh5", 4)
    w.close()
    return sizes


def test_writer_on_a_full_disk_raises_and_keeps_every_completed_dump(tmp_path, monkeypatch,
                                                                      sizes, capfd):
    # disks ending inside each dump's growth (and just before/after a dump's end)
    limits = []
    for j in range(3):
        a, b = sizes[j], sizes[j + 1]
        limits += [(j, a + 1), (j, (a + b) // 2), (j, b - 1)]
    for keep, limit in limits:
        path = tmp_path / f"f{limit}.uvh5"
        with monkeypatch.context() as m:
            full_disk(m, limit)
            with pytest.raises(OutputWriteError) as info:
                write_dumps(path, 4)
        err = info.value
        assert err.errno == errno.ENOSPC and err.filename == str(path)
        assert str(path) in str(err) and "ENOSPC" in str(err)
        if keep == 0:  # no complete dump: no file
            assert err.ndump is None and not path.exists()
            continue
        assert err.ndump == keep
        assert path.stat().st_size == sizes[keep]  # cut back to the last complete dump
        assert_file_holds(path, keep)
    assert capfd.readouterr().err == ""  # nothing ignored or printed by h5py


def test_writer_refuses_appends_after_a_failure_and_closes_quietly(tmp_path, monkeypatch,
                                                                   sizes, capfd):
    site, g, x = writer_inputs()
    path = tmp_path / "f.uvh5"
    full_disk(monkeypatch, (sizes[1] + sizes[2]) // 2)
    w = UVH5Writer(path, site, 1e8 + 1e4 * np.arange(9), 1e4, 960)
    tri, valid = reference_triangle(x), np.full((1, g.nbaseline), 960)
    w.append(tri, valid, 960, 1.8e9, 1.0)
    with pytest.raises(OutputWriteError, match="keeps the 1 dumps"):
        w.append(tri * 2, valid, 960, 1.8e9 + 1, 1.0)
    with pytest.raises(OutputWriteError, match="ENOSPC") as info:
        w.append(tri * 2, valid, 960, 1.8e9 + 1, 1.0)
    import pickle  # e.g. a dask worker's error travelling back
    assert str(pickle.loads(pickle.dumps(info.value))) == str(info.value)
    w.close()
    w.close()
    assert_file_holds(path, 1)
    assert capfd.readouterr().err == ""


def test_writer_that_cannot_create_the_file_removes_it(tmp_path, monkeypatch, sizes):
    path = tmp_path / "f.uvh5"
    full_disk(monkeypatch, sizes[0] // 2)
    site, _, _ = writer_inputs()
    with pytest.raises(OutputWriteError, match="no file left") as info:
        UVH5Writer(path, site, 1e8 + 1e4 * np.arange(9), 1e4, 960)
    assert info.value.errno == errno.ENOSPC and not path.exists()


CREATE_ERRORS = [errno.EROFS, errno.EDQUOT, errno.ENOSPC, errno.EIO]


@pytest.mark.parametrize("code", CREATE_ERRORS, ids=errno.errorcode.get)
def test_writer_that_cannot_open_a_new_file_raises_the_write_error(tmp_path, monkeypatch, code):
    """The file cannot even be created: the same :class:`OutputWriteError` (errno, the path,
    no dump kept) as a failed write, not a bare OSError that no caller handles; nothing left.
    An existing file stays ``FileExistsError`` (the writer block then picks another name)."""
    state = refusing_creation(monkeypatch, code)
    site, _, _ = writer_inputs()
    path = tmp_path / "f.uvh5"
    with pytest.raises(OutputWriteError) as info:
        UVH5Writer(path, site, 1e8 + 1e4 * np.arange(9), 1e4, 960)
    err = info.value
    assert state["refused"] == 1
    assert (err.errno, err.filename, err.ndump) == (code, str(path), None)
    assert f"[Errno {code} {errno.errorcode[code]}]" in str(err) and "no file left" in str(err)
    assert not path.exists() and not list(tmp_path.iterdir())
    state["refusing"] = 0
    UVH5Writer(path, site, 1e8 + 1e4 * np.arange(9), 1e4, 960).close()
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        UVH5Writer(path, site, 1e8 + 1e4 * np.arange(9), 1e4, 960)


@pytest.mark.parametrize("which", ["superblock", "publishing"])
def test_failed_in_place_write_is_undone(tmp_path, monkeypatch, sizes, which):
    """An in-place metadata write that fails (EIO) is rolled back: the file is the previous
    dump's (the path a copy-on-write filesystem would take). The superblock is the first one,
    the object headers that publish the dump the last (after the chunk B-tree nodes)."""
    pwrite = StagedFile._pwrite
    state = {"armed": False}

    def hit(self, offset) -> bool:
        return offset == 0 if which == "superblock" else 0 < offset < self.atomic_below

    def flaky(self, data, offset):
        if state["armed"] and offset < self.size and hit(self, offset):
            state["armed"] = False
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        pwrite(self, data, offset)

    monkeypatch.setattr(StagedFile, "_pwrite", flaky)
    site, g, x = writer_inputs()
    path = tmp_path / "f.uvh5"
    w = UVH5Writer(path, site, 1e8 + 1e4 * np.arange(9), 1e4, 960)
    tri, valid = reference_triangle(x), np.full((1, g.nbaseline), 960)
    for i in range(2):
        w.append(tri * (i + 1), valid, 960, 1.8e9 + i, 1.0)
    committed = path.read_bytes()
    state["armed"] = True
    with pytest.raises(OutputWriteError, match="EIO"):
        w.append(tri * 3, valid, 960, 1.8e9 + 2, 1.0)
    assert not state["armed"]  # the chosen write was reached, and failed
    assert path.read_bytes() == committed  # every in-place byte written before it put back
    w.close()
    assert path.stat().st_size == sizes[2]
    assert_file_holds(path, 2)


WRITER_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[2])
from tests.outputs.test_full_disk import write_dumps
from pathlib import Path
try:
    write_dumps(Path(sys.argv[1]), 40)
except OSError as exc:
    print("error:", exc)
"""


def test_writer_past_a_file_size_limit_subprocess(tmp_path, sizes):
    """Kernel-refused writes (RLIMIT_FSIZE, EFBIG): old code printed hundreds of "Exception
    ignored" lines, left rows of zeros and counters ahead of the data, then segfaulted."""
    path = tmp_path / "f.uvh5"
    proc = subprocess.run([sys.executable, "-c", WRITER_SCRIPT, str(path), str(ROOT)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          preexec_fn=fsize_limit((sizes[2] + sizes[3]) // 2))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == "", proc.stderr
    assert proc.stdout.count("EFBIG") == 1 and str(path) in proc.stdout
    assert_file_holds(path, 2)


# ---------------------------------------------------------------------------- pipelines
@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> tuple[Path, np.ndarray, Geometry]:
    array = default_array(NANT)
    g = Geometry(nstream=array.nstream, nchan=9, npacket=NPACKET)
    sim = FEngineSimulator(array, g, **SKY, sources=[PointSource.altaz(60, 10, 1.0)], seed=4)
    frames = sim.frames(0, NDUMP * NPACKET)
    pcap = tmp_path_factory.mktemp("rec") / "obs.pcap"
    write_metadata(pcap, array, g, **SKY)
    with pcap_sender(g, pcap) as s:
        s.send_frames(frames, 0)
    return pcap, frames, g


def assert_pipeline_file(path: Path, frames: np.ndarray, g: Geometry, ndump: int,
                         first: int = 0) -> None:
    """The file holds exactly the ``ndump`` dumps from dump ``first`` of the recording."""
    uv = pyuvdata.UVData.from_file(path, file_type="uvh5")  # also NAME.uvh5.partial
    uv.check(strict_uvw_antpos_check=True)
    assert uv.Ntimes == ndump
    for d in range(first, first + ndump):
        re, im = reference_full(frames_to_natural(frames[d * NPACKET:(d + 1) * NPACKET], g))
        assert np.array_equal(uv.get_data(0, 2, "xy")[d - first], (re - 1j * im)[:, 0, 5])


def run_chain(pcap: Path, out: Path, retry_s: float | None = None,
              **chain_kw) -> tuple[Pipeline, object]:
    """The recording through the chain into ``out`` (quick-looks, ``obs.uvh5`` unless
    ``chain_kw`` says otherwise; ``retry_s``: the writer's)."""
    info = read_metadata(pcap)
    chain_kw = {"quicklook": True, "filename": "obs.uvh5", **chain_kw}
    with Pipeline() as p:
        capture = CaptureBlock(PcapSource(str(pcap)), info.geometry, info.array, **info.sky)
        chain = correlator_chain(capture, directory=out, backend="cpu", geometry=info.geometry,
                                 **chain_kw)
        if retry_s is not None:
            chain.writer.retry_s = retry_s
        p.run()
    return p, chain


@pytest.fixture(scope="module")
def chain_sizes(recording, tmp_path_factory) -> list[int]:
    """File size after creation and after each dump of an unconstrained chain run."""
    sizes = []
    orig = UVH5Writer.append

    def spy(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        sizes.append(self._io.size)

    mp = pytest.MonkeyPatch()
    mp.setattr(UVH5Writer, "append", spy)
    try:
        run_chain(recording[0], tmp_path_factory.mktemp("full"))
    finally:
        mp.undo()
    assert len(sizes) == NDUMP
    return sizes


def test_pipeline_stops_with_the_writer_error(recording, chain_sizes, tmp_path, monkeypatch,
                                              caplog):
    pcap, frames, g = recording
    full_disk(monkeypatch, (chain_sizes[2] + chain_sizes[3]) // 2)
    # the quick-look PNG cannot be written either (same full disk)
    import matplotlib.figure

    def no_space(self, fname, **kwargs):
        Path(fname).write_bytes(b"")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", no_space)
    with caplog.at_level(logging.WARNING), pytest.raises(PipelineError) as info:
        run_chain(pcap, tmp_path)
    msg = str(info.value)
    assert info.value.block_name.startswith("UVH5WriterBlock"), msg
    assert str(tmp_path / "obs.uvh5") in msg and "ENOSPC" in msg and "keeps the 3 dumps" in msg
    assert_pipeline_file(tmp_path / "obs.uvh5", frames, g, 3)
    assert not list(tmp_path.glob("*.png"))  # no empty PNG left behind
    # the quick-look failure is one logged line, not the error reported, and no traceback
    assert [r.levelno for r in caplog.records if "quick-look" in r.getMessage()] == [
        logging.ERROR]
    assert not [r for r in caplog.records if r.exc_info]


def test_quicklook_failure_alone_is_one_clear_error(recording, tmp_path, monkeypatch):
    pcap, frames, g = recording
    import matplotlib.figure

    def no_space(self, fname, **kwargs):
        Path(fname).write_bytes(b"")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", no_space)
    _, chain = run_chain(pcap, tmp_path)  # the PNG failing does not stop the pipeline
    [msg] = chain.quicklook.failures
    assert "cannot write quick-look" in msg and str(tmp_path) in msg and "No space left" in msg
    assert not list(tmp_path.glob("*.png"))
    assert_pipeline_file(tmp_path / "obs.uvh5", frames, g, NDUMP)  # the writer finished


def failing_for_a_while(monkeypatch, code: int, dumps: range,
                        create_code: int | None = None) -> dict[str, int]:
    """The disk refuses writes (errno ``code``) while the writer block handles the dumps in
    ``dumps`` (by their order, from 0), and with ``create_code`` the creation of new files too
    (:func:`refusing_creation`); returns the number of dumps handled and of writes and
    creations refused so far."""
    seen = {"dumps": 0, "refused": 0}
    pwrite, write = StagedFile._pwrite, UVH5WriterBlock._write
    creating = refusing_creation(monkeypatch, create_code) if create_code else {"refused": 0}

    def refusing(self, data, offset):
        if seen["dumps"] - 1 in dumps:
            seen["refused"] += 1
            raise OSError(code, os.strerror(code))
        pwrite(self, data, offset)

    def counting(self, *args):
        seen["dumps"] += 1
        creating["refusing"] = seen["dumps"] - 1 in dumps
        write(self, *args)
        seen["refused"] += creating["refused"]
        creating["refused"] = 0

    monkeypatch.setattr(StagedFile, "_pwrite", refusing)
    monkeypatch.setattr(UVH5WriterBlock, "_write", counting)
    return seen


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EIO, errno.EDQUOT],
                         ids=errno.errorcode.get)
def test_writer_that_skips_counts_dumps_and_resumes_into_a_new_file(recording, tmp_path,
                                                                    monkeypatch, caplog, code):
    """``on_write_error="skip"`` (the live service's): dumps 2 and 3 cannot be written; the
    first file keeps dumps 0-1, the failures are counted and logged once, and dump 4 goes into
    a new file with everything after it, exact. (``"stop"``, the default, is what fx.py and
    reprocessing keep: test_pipeline_stops_with_the_writer_error and the tests after it.)"""
    pcap, frames, g = recording
    seen = failing_for_a_while(monkeypatch, code, range(2, 4))
    with caplog.at_level(logging.WARNING):  # every dump tries (the service: once a second)
        _, chain = run_chain(pcap, tmp_path, retry_s=0.0, quicklook=False, filename=None,
                             on_write_error="skip")
    w = chain.writer
    assert w.writer_counters() == {"dumps_written": 4, "dumps_not_written": 2,
                                   "write_failures": 1}
    assert w.write_error is None and seen["refused"] == 2  # one attempt per failing dump
    first, second = w.files
    assert sorted(tmp_path.glob("*.uvh5")) == sorted(w.files)  # no file of the failed tries
    assert_pipeline_file(first, frames, g, 2)
    assert_pipeline_file(second, frames, g, 2, first=4)
    name = errno.errorcode[code]
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("blocks.writer")]
    assert len(lines) == 2, lines  # one line as the episode begins, one as it ends
    assert name in lines[0] and str(first) in lines[0] and "keeps the 2 dumps" in lines[0]
    assert str(second) in lines[1] and "after 2 dumps not written" in lines[1]


@pytest.mark.parametrize("code", CREATE_ERRORS, ids=errno.errorcode.get)
def test_writer_that_skips_counts_the_new_files_it_cannot_create(recording, tmp_path,
                                                                 monkeypatch, caplog, code):
    """``"skip"``: the disk refuses dump 2 (ENOSPC), and dump 3's try, into a new file, finds
    no file can be created (``code``: a filesystem gone read-only, no inode left, EIO). That
    is one more dump counted, not the end of the pipeline (before: a bare OSError stopped it);
    dump 4 goes into a new file. One attempt per dump, two log lines for the episode."""
    pcap, frames, g = recording
    seen = failing_for_a_while(monkeypatch, errno.ENOSPC, range(2, 4), create_code=code)
    with caplog.at_level(logging.WARNING):
        _, chain = run_chain(pcap, tmp_path, retry_s=0.0, quicklook=False, filename=None,
                             on_write_error="skip")
    w = chain.writer
    assert w.writer_counters() == {"dumps_written": 4, "dumps_not_written": 2,
                                   "write_failures": 1}
    assert w.write_error is None and seen["refused"] == 2  # dump 2's write, dump 3's file
    first, second = w.files
    assert sorted(tmp_path.glob("*.uvh5")) == sorted(w.files)
    assert_pipeline_file(first, frames, g, 2)
    assert_pipeline_file(second, frames, g, 2, first=4)
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("blocks.writer")]
    assert len(lines) == 2 and "ENOSPC" in lines[0] and str(second) in lines[1], lines


@pytest.mark.parametrize("policy", ["skip", "stop"])
def test_output_directory_that_cannot_be_made(recording, tmp_path, monkeypatch, caplog, policy):
    """The output directory cannot be created when the sequence starts (EROFS): with
    ``"skip"`` the dumps are counted and tried again, each try making the directory first, and
    once it can be made the dumps go in (before: the sequence start raised and the pipeline
    stopped); with ``"stop"`` the pipeline stops with the one write error naming it."""
    pcap, frames, g = recording
    out = tmp_path / "out" / "x0"
    refused = []
    mkdir = Path.mkdir

    def flaky(self, *args, **kwargs):
        if self == out and len(refused) < 2:
            refused.append(self)
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", flaky)
    if policy == "stop":
        with pytest.raises(PipelineError) as info:
            run_chain(pcap, out, quicklook=False)
        msg = str(info.value)
        assert info.value.block_name.startswith("UVH5WriterBlock"), msg
        assert f"writing {out} failed: [Errno {errno.EROFS} EROFS]" in msg, msg
        assert not out.exists() and len(refused) == 1
        return
    with caplog.at_level(logging.WARNING):
        _, chain = run_chain(pcap, out, retry_s=0.0, quicklook=False, on_write_error="skip")
    w = chain.writer
    assert w.writer_counters() == {"dumps_written": NDUMP - 2, "dumps_not_written": 2,
                                   "write_failures": 1}
    assert len(refused) == 2 and w.files == [out / "obs.uvh5"]
    assert_pipeline_file(w.files[0], frames, g, NDUMP - 2, first=2)
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("blocks.writer")]
    assert len(lines) == 2 and str(out) in lines[0] and "EROFS" in lines[0], lines


def test_writer_that_skips_tries_again_at_most_every_retry_s(recording, tmp_path, monkeypatch):
    """While failing, a dump is only tried again ``retry_s`` after the last try (cheap: a
    disk that stays full costs one refused write per second, not one per dump)."""
    pcap, _, _ = recording
    seen = failing_for_a_while(monkeypatch, errno.ENOSPC, range(1, NDUMP))
    _, chain = run_chain(pcap, tmp_path, retry_s=3600.0, quicklook=False,
                         on_write_error="skip")
    assert chain.writer.writer_counters() == {"dumps_written": 1,
                                              "dumps_not_written": NDUMP - 1,
                                              "write_failures": 1}
    assert seen["refused"] == 1 and chain.writer.write_error.errno == errno.ENOSPC
    assert len(chain.writer.files) == 1


@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "replayed"])
def test_reprocess_onto_a_full_disk_reports_the_file_failed(recording, chain_sizes, tmp_path,
                                                            monkeypatch, in_place):
    """Either way of reading a clean recording (in place, or replayed through the capture)."""
    pcap, frames, g = recording
    full_disk(monkeypatch, (chain_sizes[1] + chain_sizes[2]) // 2)
    [result] = reprocess([pcap], tmp_path, ReprocessOptions(backend="cpu", in_place=in_place),
                         progress=None)
    assert not result.ok
    partial = tmp_path / "obs.uvh5.partial"
    assert str(partial) in result.error and "ENOSPC" in result.error
    assert not (tmp_path / "obs.uvh5").exists()  # never the final name
    assert_pipeline_file(partial, frames, g, 2)
    import io
    out = io.StringIO()
    assert summarise([result], out) is False
    assert out.getvalue().startswith("FAILED") and str(partial) in out.getvalue()


def test_fx_past_a_file_size_limit_exits_cleanly(tmp_path):
    """fx.py in a subprocess whose writes stop at 160 kB (EFBIG): one line, exit 1, the file
    keeps its complete dumps (old code: "Exception ignored" lines, then exit 139)."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "fx.py"), "--nant", "8",
                           "--npacket", "2", "--dumps", "12", "--transport", "inproc",
                           "--backend", "cpu", "--monitor", "0", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          preexec_fn=fsize_limit(160_000))
    [uvh5] = out.glob("*.uvh5")
    assert_clean_failure(proc, str(uvh5), "EFBIG")
    uv = pyuvdata.UVData.from_file(uvh5)
    uv.check(strict_uvw_antpos_check=True)
    assert 1 <= uv.Ntimes < 12 and f"keeps the {uv.Ntimes} dumps" in proc.stderr


# ---------------------------------------------------------------------------- real tmpfs
@pytest.fixture
def tmpfs(tmp_path):
    """A 128 KiB tmpfs mounted on tmp_path/disk (root and a working mount needed)."""
    with mounted_tmpfs(tmp_path / "disk", "128k") as disk:
        yield disk


@pytest.mark.slow  # ~20 s; the fx.py path runs by default under RLIMIT_FSIZE above
def test_fx_onto_a_full_tmpfs(tmpfs):
    out = tmpfs / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "fx.py"), "--nant", "8",
                           "--npacket", "2", "--dumps", "16", "--transport", "inproc",
                           "--backend", "cpu", "--monitor", "0", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    [uvh5] = out.glob("*.uvh5")
    assert_clean_failure(proc, str(uvh5), "ENOSPC")
    uv = pyuvdata.UVData.from_file(uvh5)
    uv.check(strict_uvw_antpos_check=True)
    assert 1 <= uv.Ntimes < 16 and f"keeps the {uv.Ntimes} dumps" in proc.stderr


def test_reprocess_onto_a_full_tmpfs(tmpfs, tmp_path):
    array = default_array(8)
    g = Geometry(nstream=array.nstream, nchan=9, npacket=2)
    sim = FEngineSimulator(array, g, **SKY, seed=1)
    frames = sim.frames(0, 16 * 2)
    pcap = tmp_path / "big.pcap"
    write_metadata(pcap, array, g, **SKY)
    with pcap_sender(g, pcap) as s:
        s.send_frames(frames, 0)
    out = tmpfs / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "pipelines" / "reprocess.py"), str(pcap),
                           "-o", str(out), "--backend", "cpu"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    partial = out / "big.uvh5.partial"
    assert_clean_failure(proc, str(partial), "ENOSPC")
    assert "FAILED" in proc.stdout and "ok " not in proc.stdout
    assert not (out / "big.uvh5").exists()
    uv = pyuvdata.UVData.from_file(partial, file_type="uvh5")
    uv.check(strict_uvw_antpos_check=True)
    assert 1 <= uv.Ntimes < 16
    for d in range(uv.Ntimes):
        re, im = reference_full(frames_to_natural(frames[d * 2:(d + 1) * 2], g))
        assert np.array_equal(uv.get_data(2, 5, "yy")[d], (re - 1j * im)[:, 5, 11])


def every_name_taken(pcap: Path, tmp_path: Path) -> tuple[str, Path]:
    """A directory where the chain's first file name and its 999 numbered ones exist (empty
    files), and that name's stem (learnt from a run into another directory)."""
    _, probe = run_chain(pcap, tmp_path / "probe", quicklook=False, filename=None)
    stem = probe.writer.files[0].stem
    taken = tmp_path / "out"
    taken.mkdir()
    for name in [f"{stem}.uvh5"] + [f"{stem}-{n}.uvh5" for n in range(1, 1000)]:
        (taken / name).touch()
    return stem, taken


def test_writer_that_skips_counts_a_dump_whose_every_file_name_is_taken(recording, tmp_path):
    """``"skip"`` with ``new_name_if_exists`` (the live service): when the first file's name
    and all 999 numbered ones after it exist, that dump is a failed write (EEXIST), counted,
    not the end of the pipeline; the next dump's file has a later time and takes it."""
    pcap, frames, g = recording
    stem, taken = every_name_taken(pcap, tmp_path)
    _, chain = run_chain(pcap, taken, retry_s=0.0, quicklook=False, filename=None,
                         on_write_error="skip", new_name_if_exists=True)
    w = chain.writer
    assert w.writer_counters() == {"dumps_written": NDUMP - 1, "dumps_not_written": 1,
                                   "write_failures": 1}
    assert w.write_error is None and len(w.files) == 1 and w.files[0].stem != stem
    assert_pipeline_file(w.files[0], frames, g, NDUMP - 1, first=1)
    assert (taken / f"{stem}.uvh5").stat().st_size == 0  # nothing overwritten


def test_job_writer_whose_every_file_name_is_taken_stops_with_file_exists(recording, tmp_path):
    """A job (``"stop"``) keeps failing clearly: FileExistsError names the file."""
    pcap, _, _ = recording
    stem, taken = every_name_taken(pcap, tmp_path)
    with pytest.raises(PipelineError, match="refusing to overwrite"):
        run_chain(pcap, taken, quicklook=False, filename=None, new_name_if_exists=True)
