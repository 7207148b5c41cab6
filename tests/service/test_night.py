"""``xengine correlate`` through an observatory's night, over loopback UDP: F-engines that
restart (timestamps falling back) or jump forward, a disk that fills and frees (a real tmpfs
where the test runs as root; EIO and EDQUOT, and ENOSPC elsewhere, injected into the
service's writer), and SIGHUP re-reading the configuration. Every dump written is compared
bit for bit with the int64 reference of the frames sent."""

from __future__ import annotations

import errno
import io
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import pyuvdata

from tests.conftest import mounted_tmpfs, random_frames
from tests.helpers.service import (
    BASE,
    Instance,
    merged,
    send,
    write_config,
    write_latin1_config,
)
from xengine_block.array import default_array
from xengine_block.frames import frames_to_natural
from xengine_block.geometry import Geometry
from xengine_block.outputs.baselines import POLARIZATIONS
from xengine_block.outputs.staged_file import StagedFile
from xengine_block.reference import reference_full
from xengine_block.service.config import load_config
from xengine_block.service.instances import scrape
from xengine_block.service.live import CorrelatorService

NANT, NPACKET = 16, 4
G = Geometry(nstream=2 * NANT, nchan=9, npacket=NPACKET)
#: 32 streams, 9 channels, P = 4, one X-engine frame (4 packet times) per dump.
NIGHT = merged(BASE, nant=NANT, capture={"npacket": NPACKET}, correlator={"ninteg": 1})
SYNC, FS = BASE["band"]["sync_time"], BASE["band"]["fs_hz"]
DUMP_S = NPACKET * 480 / FS
#: Dumps sent in the nights of write errors: 8 before the disk fails, 6 while, 6 after.
NDUMP = 20


def wait_for(read: Callable[[], dict[str, float]], ok: Callable[[dict[str, float]], bool],
             what: str, timeout: float = 30) -> dict[str, float]:
    """Scrape (``read``) until ``ok`` holds; fails naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        m = read()
        if ok(m):
            return m
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {m}")
        time.sleep(0.05)


def assert_dumps_exact(path: str | Path, frames: np.ndarray, first_frame: int,
                       sync_time: float = SYNC) -> list[int]:
    """The file reads with pyuvdata's checks and each of its dumps equals the reference of the
    frames it covers (found from its time: ``frames[0]`` is frame ``first_frame`` since
    ``sync_time``) on the baselines of two antennas (their cross and autocorrelations, every
    polarisation); returns the dumps' first frames."""
    uv = pyuvdata.UVData.from_file(path)
    uv.check(strict_uvw_antpos_check=True)
    numbers = default_array(NANT).antenna_numbers
    ants = (3, 11)
    streams = [2 * a + p for a in ants for p in (0, 1)]  # the reference of these 4 streams
    pols = {int(p): i for i, p in enumerate(uv.polarization_array)}
    starts = []
    for t in np.unique(uv.time_array):
        mid = (t - 2440587.5) * 86400.0 - sync_time
        start = round(mid / DUMP_S - 0.5) * NPACKET
        f = start - first_frame
        assert 0 <= f and f + NPACKET <= len(frames), (path, start)
        x = frames_to_natural(frames[f:f + NPACKET], G)[streams]
        re, im = reference_full(x)  # K[c, j, k] over the 4 streams
        for i1, i2 in ((0, 0), (0, 1), (1, 1)):
            blt = np.flatnonzero((uv.time_array == t) & (uv.ant_1_array == numbers[ants[i1]])
                                 & (uv.ant_2_array == numbers[ants[i2]]))[0]
            for code, p1, p2 in POLARIZATIONS:  # conj(x[ant_1, p1]) x[ant_2, p2]: K[s2, s1]
                s1, s2 = 2 * i1 + p1, 2 * i2 + p2
                np.testing.assert_array_equal(uv.data_array[blt, :, pols[code]],
                                              re[:, s2, s1] + 1j * im[:, s2, s1])
        starts.append(start)
    assert not uv.flag_array.any() and (uv.nsample_array == 1).all()
    return starts


class InProcess:
    """A :class:`CorrelatorService` run in a thread of this process (faults can be injected
    into it; no signals: :meth:`finish` stops it as SIGTERM does)."""

    def __init__(self, config: dict, directory: Path) -> None:
        cfg = load_config(write_config(directory / "c.toml", config))
        self.service = CorrelatorService(cfg, stdout=io.StringIO())
        self._result: list[dict] = []
        self._runner = threading.Thread(target=lambda: self._result.append(self.service.run()))
        self._runner.start()
        self.port = self.service.endpoints[0].port
        wait_for(lambda: {"ready": self.service.capture.receiving.is_set()},
                 lambda m: m["ready"], "the capture")

    def scrape(self) -> dict[str, float]:
        return scrape(self.service.metrics.port)

    def finish(self) -> dict:
        self.service.stop()
        self._runner.join(60)
        [summary] = self._result
        return summary


# ---------------------------------------------------------------------------- restarts
def test_fengines_restart_back_then_jump_forward(tmp_path, caplog):
    """40 packet times, then the F-engines re-arm and fall back to 0 (sync time unchanged),
    44 packet times, then jump far forward for 44 more. Each jump is a new sequence and file
    after the two frames the vote needs (the alignment to P takes the rest of the first dump):
    10 dumps each, exact, one restart counted and logged; nothing after a restart is dropped
    as before_start or late."""
    a, b, c = (random_frames(G, n, seed=s) for n, s in ((40, 1), (44, 2), (44, 3)))
    far = 10 ** 6
    with caplog.at_level("WARNING"):
        inst = InProcess(NIGHT, tmp_path)
        try:
            sent = send(a, G, inst.port, time_tag=0)
            sent += send(b, G, inst.port, time_tag=0)  # re-armed: timestamps, heap counters
            m = wait_for(inst.scrape, lambda m: m["xengine_capture_restarts_total"] == 1,
                         "the restart")
            assert m["xengine_capture_sequences_total"] == 2
            sent += send(c, G, inst.port, time_tag=far * 480)
            wait_for(inst.scrape, lambda m: m["xengine_capture_packets_total"] == sent,
                     "every packet")
        finally:
            summary = inst.finish()
    cap = summary["capture"]
    assert (cap["packets"], cap["restarts"], cap["sequences"]) == (sent, 1, 3)
    assert (cap["missing"], cap["socket_drops"]) == (0, 0)
    assert summary["dumps_written"] == 30 and summary["dumps_not_written"] == 0
    files = summary["files"]
    assert len(files) == 3  # one per sequence
    assert assert_dumps_exact(files[0], a, 0) == list(range(0, 40, NPACKET))
    assert assert_dumps_exact(files[1], b, 0) == list(range(4, 44, NPACKET))
    assert assert_dumps_exact(files[2], c, far) == list(range(far + 4, far + 44, NPACKET))
    lines = [r.getMessage() for r in caplog.records if "resynchronised" in r.getMessage()]
    assert len(lines) == 2, lines
    assert lines[0] == "capture resynchronised back: frame 39 to frame 4 (the F-engines restarted)"
    assert lines[1] == f"capture resynchronised forward: frame 43 to frame {far + 4}"


# ---------------------------------------------------------------------------- write errors
class Phases:
    """Drive a running service over loopback: consecutive frames sent a few dumps at a time,
    the metrics read in between."""

    def __init__(self, port: int, read: Callable[[], dict[str, float]], ndump: int) -> None:
        self.port, self.read = port, read
        self.frames = random_frames(G, ndump * NPACKET, seed=11)
        self.sent = 0  # frames sent so far

    def send(self, ndump: int) -> None:
        part = self.frames[self.sent:self.sent + ndump * NPACKET]
        send(part, G, self.port, time_tag=self.sent * 480)
        self.sent += len(part)

    def wait(self, what: str, ok: Callable[[dict[str, float]], bool]) -> dict[str, float]:
        return wait_for(self.read, ok, what)


def night_of_write_errors(phases: Phases, fail: Callable[[], None], free: Callable[[], None]
                          ) -> tuple[dict[str, float], dict[str, float]]:
    """Three dumps written, then ``fail()``: the service stays up, counts dumps not written,
    and keeps sending its SPEAD stream; ``free()``: a new file takes the dumps after it.
    Returns the metrics while failing and after the recovery. (The capture holds the last
    window + max_ahead frames, four dumps here, until later frames push them out.)"""
    phases.send(8)
    phases.wait("three dumps written", lambda m: m["xengine_dumps_written_total"] >= 3)
    fail()
    phases.send(6)
    failing = phases.wait("dumps not written",
                          lambda m: m["xengine_dumps_not_written_total"] >= 4)
    assert failing["xengine_output_write_failing"] == 1
    assert failing["xengine_write_failures_total"] == 1
    sent = failing['xengine_spead_dumps_total{outcome=sent}']
    assert sent >= failing["xengine_dumps_written_total"] + 4  # the stream went on
    free()
    time.sleep(1.2)  # the writer tries again once a second: the next dump is a try
    phases.send(6)
    after = phases.wait("a dump written again", lambda m: m["xengine_output_write_failing"] == 0)
    assert after["xengine_write_failures_total"] == 1
    return failing, after


def check_recovered(summary: dict, frames: np.ndarray, directory: Path) -> None:
    """Two files: the first with the dumps before the failure, the second from the recovery to
    the end, all exact; every dump delivered was written or counted."""
    files = summary["files"]
    assert len(files) == 2 and sorted(map(str, directory.glob("*.uvh5"))) == sorted(files)
    before = assert_dumps_exact(files[0], frames, 0)
    after = assert_dumps_exact(files[1], frames, 0)
    assert before == list(range(0, len(before) * NPACKET, NPACKET)) and len(before) >= 3
    assert after == list(range(after[0], NDUMP * NPACKET, NPACKET))  # to the last dump sent
    assert summary["dumps_written"] == len(before) + len(after)
    assert summary["dumps_written"] + summary["dumps_not_written"] == NDUMP
    assert summary["write_failures"] == 1


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs on tmp_path/disk (root and a working mount needed; without them the
    injected-failure tests below cover the same path)."""
    with mounted_tmpfs(tmp_path / "disk", "1m") as disk:
        yield disk


def fill(disk: Path) -> Path:
    """Write a file until the filesystem refuses (ENOSPC); returns it."""
    filler = disk / "filler"
    chunk = b"\xa5" * 4096
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    return filler


def test_a_real_disk_fills_and_frees_the_service_rides_through(tmp_path, small_tmpfs):
    """UVH5 files on a 1 MiB tmpfs, the SPEAD stream to a local port. The disk fills after
    three dumps: the service stays up (the endpoint answers, the SPEAD stream goes on), dumps
    are counted not written, one log line says so; the disk is freed: a new file takes the
    dumps, exact. ENOSPC never stops the service."""
    sink = SpeadSink()
    out = small_tmpfs / "out"
    cfg = write_config(tmp_path / "c.toml", merged(
        NIGHT, output={"directory": str(out), "spead": f"udp://127.0.0.1:{sink.port}",
                       "spead_rate_factor": 0}))
    inst = Instance(cfg)
    filler: list[Path] = []
    try:
        phases = Phases(inst.port, inst.scrape, NDUMP)
        night_of_write_errors(phases, lambda: filler.append(fill(small_tmpfs)),
                              lambda: filler.pop().unlink())
    finally:
        summary = inst.finish()
        sink.close()
    assert inst.proc.returncode == 0
    check_recovered(summary, phases.frames, out)
    log = "".join(inst.stderr)
    assert log.count("[Errno 28 ENOSPC] No space left") == 1, log  # one line per episode
    assert log.count("writing again") == 1
    assert sink.datagrams > 0


def fill_inodes(disk: Path) -> list[Path]:
    """Create empty files until the filesystem has no inode left (ENOSPC); returns them."""
    made: list[Path] = []
    while True:
        path = disk / f"inode-{len(made)}"
        try:
            path.touch(exist_ok=False)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
            return made
        made.append(path)


def test_no_inode_left_new_files_are_counted_and_sighup_still_applies(tmp_path):
    """A file per dump on a tmpfs whose inodes run out: no new file can be created (ENOSPC
    from open(2), not from a write), so each dump is counted, not written, and the service
    stays up (before: the bare OSError stopped it). Meanwhile SIGHUP changes output.prefix:
    applied, though the output directory takes no file (before: the re-read probed the
    directory, as at start, and refused the whole file). Inodes freed: new files, under the
    new prefix, take the dumps, exact."""
    with mounted_tmpfs(tmp_path / "disk", "4m", inodes=64) as disk:
        out = disk / "out"
        config = merged(NIGHT, output={"directory": str(out), "dumps_per_file": 1})
        cfg_path = write_config(tmp_path / "c.toml", config)
        inst = Instance(cfg_path)
        try:
            phases = Phases(inst.port, inst.scrape, NDUMP)
            phases.send(8)
            phases.wait("three dumps written", lambda m: m["xengine_dumps_written_total"] >= 3)
            fillers = fill_inodes(disk)
            write_config(cfg_path, merged(config, output={"prefix": "later_"}))
            inst.proc.send_signal(signal.SIGHUP)
            phases.wait("the reload", lambda m: m["xengine_config_reloads_total{result=applied}"]
                        + m["xengine_config_reloads_total{result=invalid}"] == 1)
            phases.send(6)
            failing = phases.wait("dumps not written",
                                  lambda m: m["xengine_dumps_not_written_total"] >= 4)
            assert failing["xengine_output_write_failing"] == 1
            for f in fillers:
                f.unlink()
            time.sleep(1.2)  # the writer tries again once a second: the next dump is a try
            phases.send(6)
            phases.wait("a dump written again", lambda m: m["xengine_output_write_failing"] == 0)
        finally:
            summary = inst.finish()
        files = [Path(f) for f in summary["files"]]
        assert sorted(out.glob("*.uvh5")) == sorted(files)
        starts = [s for f in files for s in assert_dumps_exact(f, phases.frames, 0)]
    assert inst.proc.returncode == 0
    assert summary["reloads"] == {"applied": 1, "refused": 0, "invalid": 0}
    assert summary["write_failures"] == 1 and summary["dumps_not_written"] >= 4
    assert summary["dumps_written"] == len(files) == len(starts)  # a file per dump
    assert summary["dumps_written"] + summary["dumps_not_written"] == NDUMP
    assert starts == sorted(starts) and starts[-1] == (NDUMP - 1) * NPACKET
    renamed = [f.name.startswith("later_") for f in files]
    assert renamed == sorted(renamed) and renamed[-1] and not renamed[0]  # from a new file on
    log = "".join(inst.stderr)
    assert log.count("[Errno 28 ENOSPC] No space left") == 1, log  # one line per episode
    assert log.count("writing again") == 1 and "output.prefix = later_" in log


class SpeadSink:
    """A UDP socket on 127.0.0.1 that counts what arrives (the SPEAD visibility stream)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.datagrams = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sock.recv(65536)
                self.datagrams += 1
            except TimeoutError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.mark.parametrize("code", [errno.EIO, errno.EDQUOT, errno.ENOSPC],
                         ids=errno.errorcode.get)
def test_injected_write_errors_the_service_rides_through(tmp_path, monkeypatch, caplog, code):
    """The same night in process, the disk's writes refused with ``code`` for a while (no root
    needed): the service's writer counts, logs once, and resumes into a new file."""
    refusing = threading.Event()
    pwrite = StagedFile._pwrite

    def flaky(self, data, offset):
        if refusing.is_set():
            raise OSError(code, os.strerror(code))
        pwrite(self, data, offset)

    monkeypatch.setattr(StagedFile, "_pwrite", flaky)
    sink = SpeadSink()
    with caplog.at_level("WARNING"):
        inst = InProcess(merged(NIGHT, output={"spead": f"udp://127.0.0.1:{sink.port}",
                                               "spead_rate_factor": 0}), tmp_path)
        try:
            phases = Phases(inst.port, inst.scrape, NDUMP)
            night_of_write_errors(phases, refusing.set, refusing.clear)
        finally:
            summary = inst.finish()
            sink.close()
    check_recovered(summary, phases.frames, tmp_path / "out")
    name = errno.errorcode[code]
    lines = [r.getMessage() for r in caplog.records if r.name.endswith("blocks.writer")]
    assert len(lines) == 2 and name in lines[0] and "writing again" in lines[1], lines
    assert sink.datagrams > 0


# ---------------------------------------------------------------------------- SIGHUP
@pytest.mark.parametrize("before", [4, 24])
def test_sighup_applies_a_new_sync_time_from_the_next_sequence(tmp_path, before):
    """The F-engines re-arm with a new sync time: the operator edits band.sync_time (and, by
    mistake, capture.window) and sends SIGHUP; the new sync time applies from the sequence
    their restart begins (its file's times count from it), capture.window is refused in one
    line naming it; a file that does not parse is refused too, and so is one that is not
    UTF-8 (a Latin-1 byte; before, its UnicodeDecodeError ended the process); the service runs
    on. The SIGHUP comes ``before`` frames into the running sequence: after 4 (every packet
    received, no dump written: none of its frames has left the capture yet) its dumps keep
    the sync time they started with all the same, as after 24 (a dump written)."""
    cfg_path = tmp_path / "c.toml"
    write_config(cfg_path, NIGHT)
    a, b = random_frames(G, 24, seed=21), random_frames(G, 16, seed=22)
    new_sync = SYNC + 3600.0
    inst = Instance(cfg_path)
    try:
        port = inst.port
        sent = send(a[:before], G, port, time_tag=0)
        inst.wait_packets(sent)
        if before == len(a):  # its header made, with the sync time then in force
            wait_for(inst.scrape, lambda m: m["xengine_dumps_written_total"] >= 1, "a dump")
        else:
            assert inst.scrape()["xengine_dumps_written_total"] == 0
        write_config(cfg_path, merged(NIGHT, band={"sync_time": new_sync},
                                      capture={"window": 16}, output={"prefix": "rearmed_"}))
        inst.proc.send_signal(signal.SIGHUP)
        m = wait_for(inst.scrape, lambda m: m["xengine_config_reloads_total{result=refused}"],
                     "the reload")
        assert m["xengine_sync_time_seconds"] == new_sync
        sent += send(a[before:], G, port, time_tag=before * G.nspectra_pkt)  # the old time base
        inst.wait_packets(sent)
        sent += send(b, G, port, time_tag=0)  # re-armed: from 0 again, under the new sync time
        cfg_path.write_text("[band\nsync_time = ")
        inst.proc.send_signal(signal.SIGHUP)
        m = wait_for(inst.scrape, lambda m: m["xengine_config_reloads_total{result=invalid}"],
                     "the refused reload")
        assert m["xengine_sync_time_seconds"] == new_sync and inst.proc.poll() is None
        latin1_line = write_latin1_config(cfg_path, merged(NIGHT, band={"sync_time": new_sync}))
        inst.proc.send_signal(signal.SIGHUP)
        m = wait_for(inst.scrape, lambda m: m["xengine_config_reloads_total{result=invalid}"] == 2,
                     "the reload of a file not UTF-8")
        assert inst.proc.poll() is None
        inst.wait_packets(sent)
    finally:
        summary = inst.finish()
    assert summary["reloads"] == {"applied": 0, "refused": 1, "invalid": 2}
    assert summary["capture"]["restarts"] == 1
    first, second = (Path(f) for f in summary["files"])
    # output.prefix applies from the next file begun: after 4 frames that is the first one
    assert first.name == f"{'xengine_' if before == len(a) else 'rearmed_'}{SYNC:.3f}.uvh5"
    assert second.name.startswith("rearmed_")
    assert assert_dumps_exact(first, a, 0) == list(range(0, 24, NPACKET))
    assert assert_dumps_exact(second, b, 0, sync_time=new_sync) == list(range(4, 16, NPACKET))
    assert second.name == f"rearmed_{new_sync + 4 * 480 / FS:.3f}.uvh5"
    log = "".join(inst.stderr).splitlines()
    [refused] = [ln for ln in log if "cannot change while running" in ln]
    assert "capture.window" in refused and "sync_time" not in refused
    [applied] = [ln for ln in log if "re-read:" in ln]
    assert f"band.sync_time = {new_sync}" in applied and "output.prefix = rearmed_" in applied
    [invalid] = [ln for ln in log if "not valid TOML" in ln]
    assert "the running configuration stays" in invalid
    [latin] = [ln for ln in log if "not UTF-8" in ln]
    assert f"byte 0xe9 on line {latin1_line}" in latin
    assert "the running configuration stays" in latin
