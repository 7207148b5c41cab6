"""Reprocessing recordings: local vs dask LocalCluster bit for bit, per-file failures,
resumption after an interrupt, and live recording with ``xengine record``."""

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.helpers.pcap_recordings import SKY, make_recording, simulator
from xengine_block.capture.record import Recorder
from xengine_block.capture.recording import write_metadata
from xengine_block.capture.spead import pcap_sender, udp_sender
from xengine_block.frames import frames_to_natural
from xengine_block.reference import reference_full
from xengine_block.reprocess import jobs
from xengine_block.reprocess.jobs import ReprocessOptions, parse_channels, reprocess
from xengine_block.reprocess.tasks import summarise

pytest.importorskip("pyuvdata", reason="pyuvdata (test extra) reads the outputs")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    d = tmp_path_factory.mktemp("rec")
    paths, frames = [], []
    for i in range(4):
        paths.append(d / f"obs{i}.pcap")
        frames.append(make_recording(paths[-1], simulator(seed=i), 8))
    return paths, frames


def read_vis(path):
    """The file's arrays; visdata as int64 [..., 2] (re, im)."""
    with h5py.File(path) as f:
        out = {k: f[k][()] for k in ("Data/flags", "Data/nsamples", "Header/time_array",
                                      "Header/ant_1_array")}
        v = f["Data/visdata"][()]
        out["Data/visdata"] = np.stack([v["r"], v["i"]], axis=-1).astype(np.int64)
        return out


def test_local_cluster_equals_single_process(recordings, tmp_path):
    paths, frames = recordings
    opts = ReprocessOptions(ninteg=2)
    local = reprocess(paths, tmp_path / "local", opts, progress=None)
    dist = reprocess(paths, tmp_path / "dask", opts, workers=2, progress=None)
    assert all(r.ok and not r.skipped for r in local + dist), [r.error for r in local + dist]
    for r1, r2 in zip(local, dist, strict=True):
        a, b = read_vis(r1.task.output), read_vis(r2.task.output)
        for k in a:
            assert np.array_equal(a[k], b[k]), k
    # and the data are the exact correlation of what was recorded (dump 0 = frames 0..7)
    import pyuvdata
    uv = pyuvdata.UVData.from_file(local[1].task.output)
    re, im = reference_full(frames_to_natural(frames[1], simulator().geometry))
    assert np.array_equal(uv.get_data(0, 1, "xx")[0], (re - 1j * im)[:, 0, 2])  # K[2, 0]


def test_channel_selection_and_integration_length(recordings, tmp_path):
    paths, _ = recordings
    full = reprocess(paths[:1], tmp_path / "a", ReprocessOptions(npacket=2), progress=None)[0]
    sub = reprocess(paths[:1], tmp_path / "b",
                    ReprocessOptions(npacket=2, ninteg=2, channels=parse_channels("2:5")),
                    progress=None)[0]
    a, b = read_vis(full.task.output), read_vis(sub.task.output)
    assert a["Data/visdata"].shape[1] == 9 and b["Data/visdata"].shape[1] == 3
    nbl = 10
    summed = a["Data/visdata"][:nbl] + a["Data/visdata"][nbl:2 * nbl]  # P=2, 2 frames per dump
    assert np.array_equal(b["Data/visdata"][:nbl], summed[:, 2:5])
    with pytest.raises(ValueError, match="expected A:B"):
        parse_channels("x:y")


def test_corrupt_and_truncated_recordings_fail_alone(recordings, tmp_path):
    paths, _ = recordings
    d = tmp_path / "in"
    d.mkdir()
    good = d / "good.pcap"
    good.write_bytes(paths[0].read_bytes())
    trunc = d / "trunc.pcap"
    trunc.write_bytes(paths[1].read_bytes()[:5000])  # a few packets: no complete integration
    junk = d / "junk.pcap"
    junk.write_bytes(os.urandom(4096))
    nometa = d / "nometa.pcap"
    nometa.write_bytes(paths[2].read_bytes())
    for p, src in ((good, paths[0]), (trunc, paths[1]), (junk, paths[2])):
        Path(str(p) + ".json").write_bytes(Path(str(src) + ".json").read_bytes())
    results = reprocess([good, trunc, junk, nometa], tmp_path / "out", ReprocessOptions(),
                        progress=None)
    assert [r.ok for r in results] == [True, False, False, False]
    assert "no complete integration" in results[1].error
    assert results[2].error  # spead2's pcap reader refuses it
    assert "no metadata sidecar" in results[3].error
    import io
    out = io.StringIO()
    assert summarise(results, out) is False
    text = out.getvalue()
    assert text.count("FAILED") == 3 and "trunc.pcap" in text and "junk.pcap" in text


SCRIPT = """
import sys, time
from dataclasses import replace
from pathlib import Path
import xengine_block.reprocess.jobs as r
orig = r.reprocess_file
def slow(task, options):
    out = orig(task, options)
    print("done", task.input.name, flush=True)
    time.sleep(30 if task.input.name == "obs1.pcap" else 0)  # killed while "obs1" finishes
    return out
r.reprocess_file = slow
r.reprocess([Path(p) for p in sys.argv[2:]], Path(sys.argv[1]), r.ReprocessOptions(),
            progress=None)
"""


def test_interrupted_run_resumes(recordings, tmp_path):
    paths, _ = recordings
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(out), *map(str, paths)],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    seen = [proc.stdout.readline().split()[-1] for _ in range(2)]
    assert seen == ["obs0.pcap", "obs1.pcap"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (out / "obs0.uvh5").exists() and (out / "obs1.uvh5.partial").exists()
    mtime = (out / "obs0.uvh5").stat().st_mtime_ns
    results = reprocess(paths, out, ReprocessOptions(), progress=None)
    assert [r.skipped for r in results] == [True, False, False, False]
    assert all(r.ok for r in results)
    assert (out / "obs0.uvh5").stat().st_mtime_ns == mtime
    assert not list(out.glob("*.partial"))


def test_record_live_udp_then_reprocess(tmp_path):
    sim = simulator(npacket=2, seed=9)
    g = sim.geometry
    rec = Recorder(tmp_path / "rec", sim.array, g, sky=SKY, port=0, max_bytes=30_000)
    t = threading.Thread(target=rec.run, kwargs={"idle_timeout": 1.0})
    t.start()
    frames = sim.frames(0, 8)
    with udp_sender(g, port=rec.port, rate_gbps=0.2) as s:
        s.send_frames(frames, 0)
    t.join(timeout=30)
    assert not t.is_alive() and rec.packets == 8 * g.npackets_per_frame + 2
    assert len(rec.files) > 1  # rotated at X-engine frame boundaries
    results = reprocess(rec.files, tmp_path / "out", ReprocessOptions(), progress=None)
    assert all(r.ok for r in results), [r.error for r in results]
    # what `xengine record` keeps of one sender is clean: each file correlated in place
    assert [r.summary["read"] for r in results] == ["in place"] * len(results)
    total = 0
    import pyuvdata
    for r in results:
        uv = pyuvdata.UVData.from_file(r.task.output)
        total += uv.Ntimes
        assert np.all(uv.nsample_array == 1.0)  # every file holds whole frames
    assert total == 8 // g.npacket
    assert time.time() > 0


def test_a_recording_with_a_time_jump_gives_one_readable_file_per_sequence(tmp_path):
    """F-engines restarted mid-recording: the capture resynchronises, the writer opens a file
    per sequence; each ends as ``.uvh5`` (was ``NAME.uvh5.partial.1``, kept under that name)
    and holds the exact correlation of its own frames."""
    import pyuvdata

    sim = simulator(seed=7)
    g = sim.geometry
    jump = 480 * 2000
    a, b = sim.frames(0, 8), sim.frames(jump, 8)
    path = tmp_path / "jumpy.pcap"
    write_metadata(path, sim.array, g, **SKY)
    with pcap_sender(g, path) as s:
        s.send_frames(a, 0)
        s.send_frames(b, jump)
    # the frames that voted for the jump are not delivered: damaged, accepted here
    (r,) = reprocess([path], tmp_path / "out", ReprocessOptions(allow_damaged=True),
                     progress=None)
    assert r.ok, r.error
    assert r.summary["damaged"].startswith("out_of_window=")
    second = tmp_path / "out" / "jumpy.1.uvh5"
    assert r.summary["extra_files"] == [str(second)]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["jumpy.1.uvh5", "jumpy.uvh5"]

    def xx01(frames):  # K[2, 0]: x of antenna 0 with x of antenna 1, as the file stores it
        re, im = reference_full(frames_to_natural(frames, g))
        return (re - 1j * im)[:, 0, 2]

    first = pyuvdata.UVData.from_file(r.task.output)
    assert first.Ntimes == 2
    assert np.array_equal(first.get_data(0, 1, "xx")[0], xx01(a[:4]))
    assert np.array_equal(first.get_data(0, 1, "xx")[1], xx01(a[4:]))
    later = pyuvdata.UVData.from_file(second)
    assert later.Ntimes == 1  # the new sequence starts a few frames into the jump
    starts = [k for k in range(5)
              if np.array_equal(later.get_data(0, 1, "xx")[0], xx01(b[k:k + 4]))]
    assert len(starts) == 1 and starts[0] > 0, starts


def test_pcap_tasks_leave_the_garbage_collector_as_they_found_it(recordings, tmp_path,
                                                                  monkeypatch):
    """With freeze_gc (``xengine reprocess``'s choice) each pcap task freezes what was there
    before its pipeline (so the collection that frees the pipeline looks only at what came
    since) and thaws it after; a freeze of the caller's is left in place; without freeze_gc
    the collector is never frozen. The ring memory still goes back to the pool for the next
    file."""
    import gc

    from xengine_block.runtime.memory import HOST_POOL

    paths, _ = recordings
    assert gc.get_freeze_count() == 0
    reused = HOST_POOL.reused
    # the capture pipeline, not the clean files' path
    replay = ReprocessOptions(in_place=False, freeze_gc=True)
    seen = []
    real = jobs.reprocess_file
    monkeypatch.setattr(jobs, "reprocess_file",
                        lambda *a: seen.append(gc.get_freeze_count()) or real(*a))
    results = reprocess(paths[:2], tmp_path / "a", replay, progress=None)
    assert all(r.ok for r in results) and gc.get_freeze_count() == 0
    assert len(seen) == 2 and min(seen) > 1000
    assert HOST_POOL.reused > reused  # the second file's rings came from the first's
    seen.clear()
    (r,) = reprocess(paths[:1], tmp_path / "c", replace(replay, freeze_gc=False), progress=None)
    assert r.ok and seen == [0] and gc.get_freeze_count() == 0
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        (r,) = reprocess(paths[2:3], tmp_path / "b", replay, progress=None)
        # still frozen, nothing added (frozen objects freed by their refcounts leave the count)
        assert r.ok and 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("formats", [("ms",), ("uvh5", "ms")], ids=["ms", "uvh5,ms"])
def test_output_formats_write_measurement_sets(recordings, tmp_path, formats):
    """``--output-format ms`` writes NAME.ms per task (no UVH5 left beside it); ``uvh5,ms``
    both, the Measurement Set the UVH5 file phased (what ``xengine convert`` makes of it);
    a rerun skips the finished Measurement Set."""
    tables = pytest.importorskip("casacore.tables", reason="python-casacore (ms extra)")
    from xengine_block.outputs.convert import convert

    paths, _ = recordings
    opts = ReprocessOptions(ninteg=2, output_formats=formats)
    (res,) = reprocess(paths[:1], tmp_path / "out", opts, progress=None)
    assert res.ok, res.error
    ms = tmp_path / "out" / "obs0.ms"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        ["obs0.ms"] + (["obs0.uvh5"] if "uvh5" in formats else []))
    ref = reprocess(paths[:1], tmp_path / "ref", ReprocessOptions(ninteg=2), progress=None)[0]
    conv = convert([ref.task.output], tmp_path / "conv.ms")
    with tables.table(str(ms), ack=False) as a, tables.table(str(conv), ack=False) as b:
        assert a.nrows() == b.nrows() > 0
        for col in ("DATA", "UVW", "FLAG", "ANTENNA1"):
            assert np.array_equal(a.getcol(col), b.getcol(col)), col
    again = reprocess(paths[:1], tmp_path / "out", opts, progress=None)[0]
    assert again.skipped
